//! Webhooks: delayq consumes a topic itself and POSTs each due job to a URL.
//!
//! 2xx to the POST finishes the job. Anything else (another status, a
//! redirect, which is never followed, a timeout, a connection error) is a
//! failed attempt, nacked with what happened, so the
//! topic's retry schedule decides when to try again and when the job is
//! dead. Each webhook topic runs its own [`Consumer`](crate::Consumer) with its own
//! concurrency limit: a slow or dead endpoint fills only its own slots and
//! never holds up other topics. A delivery in flight when delayq dies is
//! leased, so it is delivered again after its lease: nothing is lost.
//!
//! ## The request
//!
//! `POST <url>` with `Content-Type: application/json` and the body
//! `{"id":..,"topic":..,"body":..,"attempt":1,"due_at_ms":..}`. Headers:
//! `X-Delayq-Id`, `X-Delayq-Topic`, `X-Delayq-Attempt`, and, when the topic
//! has a secret, `X-Delayq-Timestamp` (Unix seconds) and
//! `X-Delayq-Signature: sha256=<hex>`, the HMAC-SHA256 with the secret as
//! key over `"<timestamp>.<request body>"`. A receiver recomputes it, compares
//! in constant time, and rejects old timestamps to stop replays. A job
//! pushed with W3C trace context carries it in `traceparent` and
//! `tracestate` (see [`crate::trace`]).
//!
//! ## Status
//!
//! Each delivering instance keeps the last delivery's status and the
//! minute's counts in memory and writes them to Redis at most once a second
//! per topic (`GET /v1/webhooks` reads them, the same from every instance).

use std::fmt;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

// Delivery is the server's (it needs an HTTP client); signing and
// verifying are for everyone.
#[cfg(feature = "server")]
mod ahead;
#[cfg(feature = "server")]
mod client;
#[cfg(feature = "server")]
mod delivery;
#[cfg(feature = "server")]
mod plain;
#[cfg(feature = "server")]
mod request;

#[cfg(feature = "server")]
pub use delivery::{host_of, run, Webhook, ERROR_BODY_BYTES, ERROR_BODY_CHARS};
#[cfg(feature = "server")]
pub(crate) use delivery::{note, Seen};

/// A secret that never shows in logs or debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The signature header value for `body` sent at `timestamp`.
pub fn sign(secret: &str, timestamp: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// How far a request's timestamp may be from the receiver's clock, either
/// way, before [`verify`] refuses it (as docs/webhooks.md's Python does): a
/// captured request replayed later is refused, and so is one stamped far
/// ahead.
pub const REPLAY_TOLERANCE: Duration = Duration::from_secs(300);

/// Why [`verify`] refused a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the signature does not match the body and timestamp (or is not sha256=<hex>)")]
    BadSignature,
    #[error(
        "timestamp {timestamp} is {age_s} s old, more than the {tolerance_s} s allowed: a replay"
    )]
    Stale {
        timestamp: u64,
        age_s: u64,
        tolerance_s: u64,
    },
    #[error("timestamp {timestamp} is {ahead_s} s ahead, more than the {tolerance_s} s allowed")]
    Future {
        timestamp: u64,
        ahead_s: u64,
        tolerance_s: u64,
    },
}

/// Checks a request from delayq, for receivers written in Rust: the
/// signature in constant time, and the timestamp within
/// [`REPLAY_TOLERANCE`] of this machine's clock.
pub fn verify(
    secret: &str,
    timestamp: u64,
    body: &[u8],
    signature: &str,
) -> Result<(), VerifyError> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    verify_at(secret, timestamp, body, signature, now, REPLAY_TOLERANCE)
}

/// [`verify`] at `now` (Unix seconds) with `tolerance`.
pub fn verify_at(
    secret: &str,
    timestamp: u64,
    body: &[u8],
    signature: &str,
    now: u64,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    let tolerance_s = tolerance.as_secs();
    if now > timestamp && now - timestamp > tolerance_s {
        return Err(VerifyError::Stale {
            timestamp,
            age_s: now - timestamp,
            tolerance_s,
        });
    }
    if timestamp > now && timestamp - now > tolerance_s {
        return Err(VerifyError::Future {
            timestamp,
            ahead_s: timestamp - now,
            tolerance_s,
        });
    }
    let sig = signature
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
        .ok_or(VerifyError::BadSignature)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&sig)
        .map_err(|_| VerifyError::BadSignature)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "server")]
    use crate::job::Limits;

    #[cfg(feature = "server")]
    #[test]
    fn the_shown_host_has_no_credentials_path_or_query() {
        let hook = Webhook::new("t", "https://user:pw@hooks.example:8443/close?token=s3cret");
        assert_eq!(hook.shown_host(), "hooks.example:8443");
        assert_eq!(Webhook::new("t", "http://h/x").shown_host(), "h");
    }

    #[cfg(feature = "server")]
    #[test]
    fn the_shown_url_masks_the_password_and_query_values() {
        let hook = Webhook::new(
            "t",
            "https://user:pw@hooks.example:8443/close?token=s3cret&a=b",
        );
        assert_eq!(
            hook.shown_url(),
            "https://user:***@hooks.example:8443/close?token=***&a=***"
        );
        assert_eq!(Webhook::new("t", "http://h/x").shown_url(), "http://h/x");
    }

    #[test]
    fn a_replayed_or_far_future_timestamp_is_refused() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let body = b"{\"id\":\"1\"}";
        for ts in [now - 301, now + 301, 1_700_000_000] {
            assert!(
                verify("k", ts, body, &sign("k", ts, body)).is_err(),
                "{ts} accepted at {now}"
            );
        }
        assert_eq!(
            verify("k", now - 299, body, &sign("k", now - 299, body)),
            Ok(())
        );
        // With an explicit clock and tolerance, the error says which.
        let at = 1_700_000_000;
        let sig = sign("k", at, body);
        let tolerance = Duration::from_secs(60);
        assert_eq!(verify_at("k", at, body, &sig, at + 60, tolerance), Ok(()));
        assert_eq!(verify_at("k", at, body, &sig, at - 60, tolerance), Ok(()));
        assert_eq!(
            verify_at("k", at, body, &sig, at + 61, tolerance),
            Err(VerifyError::Stale {
                timestamp: at,
                age_s: 61,
                tolerance_s: 60
            })
        );
        assert_eq!(
            verify_at("k", at, body, &sig, at - 61, tolerance),
            Err(VerifyError::Future {
                timestamp: at,
                ahead_s: 61,
                tolerance_s: 60
            })
        );
        assert_eq!(
            verify_at("k", at, body, "sha256=zz", at, tolerance),
            Err(VerifyError::BadSignature)
        );
    }

    #[cfg(feature = "server")]
    #[test]
    fn signatures_verify_and_secrets_stay_hidden() {
        let at = 1700000000;
        let tolerance = REPLAY_TOLERANCE;
        let sig = sign("k", at, b"{\"id\":\"1\"}");
        assert!(verify_at("k", at, b"{\"id\":\"1\"}", &sig, at, tolerance).is_ok());
        assert_eq!(
            verify_at("k", at + 1, b"{\"id\":\"1\"}", &sig, at, tolerance),
            Err(VerifyError::BadSignature)
        );
        assert_eq!(
            verify_at("other", at, b"{\"id\":\"1\"}", &sig, at, tolerance),
            Err(VerifyError::BadSignature)
        );
        let hook = Webhook {
            secret: Some(Secret("hunter2".into())),
            ..Webhook::new("t", "http://127.0.0.1:1/x")
        };
        assert!(!format!("{hook:?}").contains("hunter2"));
        let limits = Limits::default();
        assert!(hook.check(&limits).is_ok());
        assert!(Webhook::new("t", "ftp://x").check(&limits).is_err());
    }
}
