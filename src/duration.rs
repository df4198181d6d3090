//! Durations as people write them: `500ms`, `30s`, `2m`, `1h`, `15d`; a bare
//! number is seconds.

use std::time::Duration;

/// Parses a human duration, naming the problem when it cannot.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected a whole number and a unit, like 500ms, 30s, 2m, 1h or 15d"))?;
    let ms_per_unit: u64 = match unit.trim() {
        "ms" => 1,
        "" | "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => {
            return Err(format!(
                "invalid duration {text:?}: unknown unit {other:?} (use ms, s, m, h or d)"
            ))
        }
    };
    n.checked_mul(ms_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("invalid duration {text:?}: too long"))
}

/// A duration as people write it: its largest unit that divides it
/// exactly (`8d`, `90s`, `1500ms`).
pub fn show_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, per) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms > 0 && ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

/// Unix ms as RFC 3339 UTC with milliseconds (`2026-12-06T03:51:40.123Z`),
/// for logs beside the raw number; the number itself when out of range.
pub fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

/// A limit in words, in the largest unit that divides it: `7 days`,
/// `2147483647 s`, `500 ms`.
pub fn in_words(d: Duration) -> String {
    let ms = d.as_millis();
    let units = [
        (86_400_000, "day", "days"),
        (3_600_000, "hour", "hours"),
        (60_000, "minute", "minutes"),
        (1000, "s", "s"),
    ];
    for (unit, one, many) in units {
        if ms >= unit && ms.is_multiple_of(unit) {
            let n = ms / unit;
            return format!("{n} {}", if n == 1 { one } else { many });
        }
    }
    format!("{ms} ms")
}

/// The error for a duration over its limit, in milliseconds as the API
/// takes them (a sub-millisecond part is dropped), the limit also in words.
pub fn over_limit(what: &str, d: Duration, max: Duration) -> String {
    format!(
        "{what} {} ms is longer than the limit: {} ({} ms)",
        d.as_millis(),
        in_words(max),
        max.as_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_times_read_as_rfc3339() {
        assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(rfc3339_ms(i64::MAX), i64::MAX.to_string());
    }

    #[test]
    fn limits_in_words_use_the_largest_unit_that_divides_them() {
        assert_eq!(in_words(Duration::from_secs(7 * 86400)), "7 days");
        assert_eq!(in_words(Duration::from_secs(86400)), "1 day");
        assert_eq!(in_words(Duration::from_secs(90 * 60)), "90 minutes");
        assert_eq!(in_words(Duration::from_secs((1 << 31) - 1)), "2147483647 s");
        assert_eq!(in_words(Duration::from_millis(1500)), "1500 ms");
        assert_eq!(in_words(Duration::ZERO), "0 ms");
    }

    #[test]
    fn units() {
        assert_eq!(parse_duration("178"), Ok(Duration::from_secs(178)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("15d"), Ok(Duration::from_secs(15 * 86400)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5y").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn shown_in_the_largest_exact_unit() {
        for text in ["8d", "90s", "1500ms", "2h", "0ms", "604799s"] {
            assert_eq!(show_duration(parse_duration(text).unwrap()), text);
        }
    }
}
