//! Trace context (W3C Trace Context): a job keeps the `traceparent` and
//! `tracestate` of its push and hands them on to whoever takes it.
//!
//! A push's context is checked here ([`check_traceparent`],
//! [`check_tracestate`]) and stored with the job (two hash fields, only when
//! present). Each hop delayq makes (the push, a pop's hand-over, a webhook
//! request) is a [`Hop`]: a span of delayq's own, a child of the push's
//! context (same trace id, new span id). Its tracing span carries the
//! trace id; with OTLP export on ([`otlp`]) the span is exported and the
//! context handed on names it as the parent. With export off, delayq takes
//! no part in the trace, so it hands on the push's context unchanged (W3C:
//! a component that does not trace propagates the headers as they came).

#[cfg(feature = "server")]
pub mod otlp;

use std::sync::atomic::{AtomicBool, Ordering};

/// Longest `tracestate` kept (W3C asks to propagate at least 512).
pub const MAX_TRACESTATE_BYTES: usize = 512;
/// Most list members in a `tracestate` (W3C's limit).
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// Set once OTLP export is installed: delayq's hops are then spans that
/// exist somewhere, fit to be named as a parent.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether delayq's spans are exported (see [`otlp`]).
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

#[cfg(feature = "server")]
pub(crate) fn set_exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

fn lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A `traceparent` checked and in the form delayq stores and sends:
/// version 00, `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`,
/// lowercase, ids not all zeros. A higher version is read as W3C says
/// (its first four parts) and kept as version 00; version ff is invalid.
pub fn check_traceparent(value: &str) -> Result<String, String> {
    let bad = |why: &str| {
        Err(format!(
            "traceparent {value:?} is not a W3C traceparent: {why}"
        ))
    };
    if value.len() < 55 || !value.is_ascii() {
        return bad("expected 00-<32 hex>-<16 hex>-<2 hex>");
    }
    let (version, rest) = value.split_at(2);
    if !lower_hex(version) || version == "ff" {
        return bad("version must be two lowercase hex digits, not ff");
    }
    if version == "00" && value.len() != 55 {
        return bad("version 00 is exactly 55 characters");
    }
    if value.len() > 55 && value.as_bytes()[55] != b'-' {
        return bad("expected 00-<32 hex>-<16 hex>-<2 hex>");
    }
    let rest = &rest[..53];
    let b = rest.as_bytes();
    if b[0] != b'-' || b[33] != b'-' || b[50] != b'-' {
        return bad("expected 00-<32 hex>-<16 hex>-<2 hex>");
    }
    let (trace_id, parent_id, flags) = (&rest[1..33], &rest[34..50], &rest[51..53]);
    if !lower_hex(trace_id) || !lower_hex(parent_id) || !lower_hex(flags) {
        return bad("ids and flags are lowercase hex");
    }
    if trace_id.bytes().all(|c| c == b'0') || parent_id.bytes().all(|c| c == b'0') {
        return bad("an all-zero id is invalid");
    }
    Ok(format!("00-{trace_id}-{parent_id}-{flags}"))
}

/// Checks a `tracestate`: at most [`MAX_TRACESTATE_BYTES`] bytes of
/// printable ASCII, at most [`MAX_TRACESTATE_MEMBERS`] comma-separated
/// members. The members' own syntax is their vendors' business: delayq
/// only carries it.
pub fn check_tracestate(value: &str) -> Result<(), String> {
    if value.len() > MAX_TRACESTATE_BYTES {
        return Err(format!(
            "tracestate is {} bytes; the limit is {MAX_TRACESTATE_BYTES}",
            value.len()
        ));
    }
    if !value
        .bytes()
        .all(|b| (0x20..=0x7e).contains(&b) || b == b'\t')
    {
        return Err("tracestate must be printable ASCII".into());
    }
    let members = value.split(',').filter(|m| !m.trim().is_empty()).count();
    if members > MAX_TRACESTATE_MEMBERS {
        return Err(format!(
            "tracestate has {members} members; the limit is {MAX_TRACESTATE_MEMBERS}"
        ));
    }
    Ok(())
}

/// The trace id of a checked `traceparent`.
pub fn trace_id(traceparent: &str) -> &str {
    traceparent.get(3..35).unwrap_or("")
}

/// A new random span id: 16 lowercase hex digits, not all zeros.
fn new_span_id() -> String {
    loop {
        let u = uuid::Uuid::new_v4();
        let b = u.as_bytes();
        // Bytes 6 and 8 carry the UUID's version and variant bits.
        let id = hex::encode([b[0], b[1], b[2], b[3], b[4], b[5], b[10], b[11]]);
        if id != "0000000000000000" {
            return id;
        }
    }
}

/// What a hop is, for its span's name and OTLP kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HopKind {
    /// The push that stored the job (a server span).
    Push,
    /// The job handed to a consumer by a pop (a producer span).
    Pop,
    /// The job POSTed to a webhook (a client span).
    Webhook,
}

/// One hop of a traced job through delayq: a span of delayq's own, a child
/// of the job's stored context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hop {
    pub trace_id: String,
    /// This hop's span id.
    pub span_id: String,
    /// The parent's span id: the push's `traceparent`'s parent id.
    pub parent_id: String,
    pub flags: String,
    /// The job's stored context, handed on when delayq does not export.
    pub stored: String,
    pub tracestate: Option<String>,
}

impl Hop {
    /// A hop under the stored context `traceparent` (as checked; None for
    /// anything else, and for a job without one).
    pub fn child_of(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Hop> {
        let tp = traceparent?;
        if tp.len() != 55 {
            return None;
        }
        Some(Hop {
            trace_id: tp[3..35].to_owned(),
            parent_id: tp[36..52].to_owned(),
            flags: tp[53..55].to_owned(),
            span_id: new_span_id(),
            stored: tp.to_owned(),
            tracestate: tracestate.map(str::to_owned),
        })
    }

    /// The `traceparent` to hand on: this hop's own when delayq exports its
    /// spans, else the stored one unchanged.
    pub fn handed_on(&self) -> String {
        if exporting() {
            format!("00-{}-{}-{}", self.trace_id, self.span_id, self.flags)
        } else {
            self.stored.clone()
        }
    }

    /// The tracing span of this hop (target `delayq::trace`, level info):
    /// it carries the trace id into the logs, and the OTLP layer exports
    /// it with the stored context as its parent.
    pub fn span(&self, kind: HopKind, job_id: &str, topic: &str) -> tracing::Span {
        let ts = self.tracestate.as_deref().unwrap_or("");
        macro_rules! hop {
            ($name:literal) => {
                tracing::info_span!(target: "delayq::trace", $name,
                    trace_id = %self.trace_id, span_id = %self.span_id,
                    parent_id = %self.parent_id, tracestate = %ts,
                    job_id = %job_id, topic = %topic)
            };
        }
        match kind {
            HopKind::Push => hop!("push"),
            HopKind::Pop => hop!("pop"),
            HopKind::Webhook => hop!("webhook"),
        }
    }
}

#[cfg(feature = "server")]
/// The trace context of a request's headers, the W3C way: a `traceparent`
/// that is missing, repeated or invalid means none (and no `tracestate`);
/// repeated `tracestate` headers are one list; an invalid `tracestate` is
/// dropped alone. Returns the traceparent as stored, and the tracestate.
pub fn from_headers(headers: &axum::http::HeaderMap) -> Option<(String, Option<String>)> {
    let mut tps = headers.get_all("traceparent").iter();
    let (Some(tp), None) = (tps.next(), tps.next()) else {
        return None;
    };
    let states: Option<Vec<&str>> = (headers.get_all("tracestate").iter())
        .map(|v| v.to_str().ok().map(str::trim))
        .collect();
    let ts = states.map(|s| {
        s.into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(",")
    });
    context(tp.to_str().ok()?, ts.as_deref())
}

/// A trace context from its two values (a request's headers, a process's
/// `TRACEPARENT` and `TRACESTATE`): an empty or invalid traceparent means
/// none (and no tracestate); an empty or invalid tracestate is dropped
/// alone.
pub fn context(traceparent: &str, tracestate: Option<&str>) -> Option<(String, Option<String>)> {
    let tp = check_traceparent(traceparent.trim()).ok()?;
    let ts = tracestate
        .map(str::trim)
        .filter(|s| !s.is_empty() && check_tracestate(s).is_ok())
        .map(str::to_owned);
    Some((tp, ts))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparents_are_read_the_w3c_way() {
        assert_eq!(check_traceparent(TP).unwrap(), TP);
        // A higher version: its first four parts, kept as version 00.
        let v1 = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
        assert_eq!(check_traceparent(v1).unwrap(), TP);
        for bad in [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            let e = check_traceparent(bad).unwrap_err();
            assert!(e.starts_with("traceparent"), "{bad}: {e}");
        }
    }

    #[test]
    fn tracestate_is_bounded_printable_ascii() {
        assert!(check_tracestate("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE").is_ok());
        assert!(check_tracestate(&"a".repeat(513))
            .unwrap_err()
            .contains("512"));
        assert!(check_tracestate("a=\u{1}").is_err());
        assert!(check_tracestate(&vec!["k=v"; 33].join(",")).is_err());
    }

    #[test]
    fn a_hop_is_a_child_with_the_same_trace_id() {
        let hop = Hop::child_of(Some(TP), None).unwrap();
        assert_eq!(hop.trace_id, trace_id(TP));
        assert_eq!(hop.parent_id, "00f067aa0ba902b7");
        assert_ne!(hop.span_id, hop.parent_id);
        assert_eq!(hop.span_id.len(), 16);
        assert!(Hop::child_of(None, None).is_none());
    }
}
