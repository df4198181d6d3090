//! JSON as ouqiang/delay-queue's Go server reads and writes it, so its
//! clients see no difference.
//!
//! Reading follows Go's `encoding/json` into a struct: field names match
//! case-insensitively (the last match wins), unknown fields are skipped,
//! `null` leaves a field empty, strings must be strings, integers must be
//! integer literals (`5.0`, `1e3` and `"5"` are errors), the top level may be
//! an object or `null`, and nothing may follow it.
//!
//! Writing escapes `<`, `>`, `&`, U+2028 and U+2029 the way Go does and
//! leaves other UTF-8 raw.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

/// The fields any compatible endpoint may carry.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub topic: Option<String>,
    pub id: Option<String>,
    pub delay: Option<i64>,
    pub ttr: Option<i64>,
    pub body: Option<String>,
}

impl Request {
    /// Parses a request body; `None` is "解析json失败".
    pub fn parse(bytes: &[u8]) -> Option<Request> {
        serde_json::from_slice(bytes).ok()
    }
}

impl<'de> Deserialize<'de> for Request {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RequestVisitor)
    }
}

struct RequestVisitor;

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = Request;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Request, E> {
        Ok(Request::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Request, A::Error> {
        let mut r = Request::default();
        while let Some(key) = map.next_key::<String>()? {
            // Go's fallback match is case-insensitive; every field name here
            // is ASCII, so ASCII folding is exact for any key that can match.
            match key.to_ascii_lowercase().as_str() {
                "topic" => r.topic = map.next_value()?,
                "id" => r.id = map.next_value()?,
                "body" => r.body = map.next_value()?,
                "delay" => r.delay = map.next_value::<Option<GoInt>>()?.map(|v| v.0),
                "ttr" => r.ttr = map.next_value::<Option<GoInt>>()?.map(|v| v.0),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(r)
    }
}

/// A Go `int64`: an integer literal in range, nothing else.
struct GoInt(i64);

impl<'de> Deserialize<'de> for GoInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = GoInt;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GoInt, E> {
                Ok(GoInt(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GoInt, E> {
                i64::try_from(v)
                    .map(GoInt)
                    .map_err(|_| E::custom("integer out of range"))
            }
        }
        // serde_json hands fractions, exponents and out-of-range integers to
        // visit_f64, which `V` does not accept: exactly Go's rule.
        d.deserialize_any(V)
    }
}

/// Serializes `value` as Go's `json.Marshal` would.
pub fn to_string<T: serde::Serialize>(value: &T) -> String {
    let plain = serde_json::to_string(value).expect("reply types always serialize");
    escape_like_go(&plain)
}

/// These characters can only occur inside JSON strings, so replacing them in
/// the encoded text is the same as escaping them in every string.
fn escape_like_go(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_like_go() {
        let r = Request::parse(br#"{"ID":"a","Topic":"t","delay":5,"TTR":7,"x":[1,{}]}"#).unwrap();
        assert_eq!(r.id.as_deref(), Some("a"));
        assert_eq!(r.topic.as_deref(), Some("t"));
        assert_eq!((r.delay, r.ttr), (Some(5), Some(7)));
        // The last matching key wins, whatever its case.
        let r = Request::parse(br#"{"id":"a","ID":"b"}"#).unwrap();
        assert_eq!(r.id.as_deref(), Some("b"));
        assert_eq!(Request::parse(b"null"), Some(Request::default()));
        assert_eq!(
            Request::parse(br#"{"delay":null}"#),
            Some(Request::default())
        );
        for bad in [
            &br#"{"delay":"5"}"#[..],
            br#"{"delay":5.5}"#,
            br#"{"delay":5.0}"#,
            br#"{"delay":1e3}"#,
            br#"{"delay":99999999999999999999}"#,
            br#"{"body":{}}"#,
            br#"{"id":1}"#,
            br#"{"id":"a"} x"#,
            br#"[]"#,
            b"",
            b"{",
        ] {
            assert_eq!(
                Request::parse(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(Request::parse(br#"{"delay":-3}"#).unwrap().delay, Some(-3));
    }

    #[test]
    fn writes_like_go() {
        assert_eq!(
            to_string(&serde_json::json!("<a&b>\u{2028}订单")),
            r#""\u003ca\u0026b\u003e\u2028订单""#
        );
    }
}
