//! Webhooks: delayq consumes a topic itself and POSTs each due job to a URL.
//!
//! 2xx to the POST finishes the job. Anything else (another status, a
//! redirect, which is never followed, a timeout, a connection error) is a
//! failed attempt, nacked with what happened, so the
//! topic's retry schedule decides when to try again and when the job is
//! dead. Each webhook topic runs its own [`Consumer`] with its own
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::{mpsc, Notify, Semaphore};

use crate::consumer::finish_batches;
use crate::duration::show_duration;
use crate::job::Limits;
use crate::queue::Queue;
use crate::retry::RetryPolicy;
use crate::shutdown::Shutdown;
use crate::store::instances::WebhookNote;

mod ahead;
mod request;

use ahead::{Lanes, AHEAD};

/// A secret that never shows in logs or debug output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Where and how to deliver one topic's jobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Webhook {
    pub topic: String,
    pub url: String,
    /// One request may take this long; then it counts as failed.
    pub timeout: Duration,
    /// Most deliveries in flight to this endpoint.
    pub concurrency: usize,
    pub secret: Option<Secret>,
}

/// Most bytes of a failed reply's body read, for its error: a receiver's
/// body can be endless. Above what [`ERROR_BODY_CHARS`] characters take in
/// UTF-8.
pub const ERROR_BODY_BYTES: usize = 2048;

/// Characters of a failed reply's body kept in its error.
pub const ERROR_BODY_CHARS: usize = 200;

impl Webhook {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
    pub const DEFAULT_CONCURRENCY: usize = 8;

    /// The longest timeout under `limits`: a delivery's lease must outlast
    /// its request by a second, and no lease is longer than the longest
    /// ttr.
    pub fn max_timeout(limits: &Limits) -> Duration {
        limits.max_ttr.saturating_sub(Duration::from_secs(1))
    }

    pub fn new(topic: &str, url: &str) -> Webhook {
        Webhook {
            topic: topic.to_owned(),
            url: url.to_owned(),
            timeout: Self::DEFAULT_TIMEOUT,
            concurrency: Self::DEFAULT_CONCURRENCY,
            secret: None,
        }
    }

    /// The retry policy of a webhook topic that has none: the built-in
    /// [`RetryPolicy::backoff`], then dead (11 attempts over about 16
    /// hours). A receiver that is down is not hammered, and one that comes
    /// back within the day still gets every job.
    pub fn default_retry() -> RetryPolicy {
        RetryPolicy::backoff()
    }

    /// Where it goes, fit to show: host and port, without credentials,
    /// path or query (which may hold a token).
    pub fn shown_host(&self) -> String {
        host_of(&self.url)
    }

    /// The URL fit to show: a password in it and the values of its query
    /// are masked (`***`), the rest as given.
    pub fn shown_url(&self) -> String {
        let Ok(mut u) = reqwest::Url::parse(&self.url) else {
            return String::new();
        };
        if u.password().is_some() {
            let _ = u.set_password(Some("***"));
        }
        if u.query().is_some() {
            let masked: Vec<String> = u.query_pairs().map(|(k, _)| format!("{k}=***")).collect();
            u.set_query(Some(&masked.join("&")));
        }
        u.to_string()
    }

    /// This webhook as an instance's heartbeat lists it.
    pub fn consumer(&self) -> crate::figures::WebhookConsumer {
        crate::figures::WebhookConsumer {
            topic: self.topic.clone(),
            concurrency: self.concurrency as u64,
            url: self.shown_url(),
            timeout_ms: self.timeout.as_millis() as u64,
        }
    }

    /// Checks the URL and bounds (the timeout's under `limits`); names the
    /// problem.
    pub fn check(&self, limits: &Limits) -> Result<(), String> {
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| format!("webhook URL {:?} of topic {:?}: {e}", self.url, self.topic))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("webhook URL {:?}: only http and https", self.url));
        }
        if self.timeout.is_zero() || self.concurrency == 0 {
            return Err(format!(
                "webhook of topic {:?}: timeout and concurrency must be above 0",
                self.topic
            ));
        }
        let max = Self::max_timeout(limits);
        if self.timeout > max {
            return Err(format!(
                "webhook of topic {:?}: timeout {} is too long: at most {} (the longest \
                 lease, ttr {}, less a second: a delivery's lease must outlast its request)",
                self.topic,
                show_duration(self.timeout),
                show_duration(max),
                show_duration(limits.max_ttr),
            ));
        }
        Ok(())
    }
}

/// A URL's host and port, without credentials, path or query; empty if it
/// is no URL.
pub fn host_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| {
            let host = u.host_str()?.to_owned();
            Some(match u.port() {
                Some(p) => format!("{host}:{p}"),
                None => host,
            })
        })
        .unwrap_or_default()
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

/// Delivers `hook.topic`'s jobs until `shutdown`.
pub async fn run(queue: Queue, hook: Webhook, shutdown: Shutdown) {
    // A redirect is not followed: only a 2xx to the POST itself finishes a
    // job (a 302 followed by a GET without body answered 200 by whatever
    // is there is no delivery).
    let client = crate::https::client_builder()
        .timeout(hook.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client with a timeout");
    let target = reqwest::Url::parse(&hook.url).ok().map(Arc::new);
    let hook = Arc::new(hook);
    let seen = Seen::default();
    let (done, finished) = tokio::sync::oneshot::channel::<()>();
    let flusher = tokio::spawn(flush(
        queue.clone(),
        hook.topic.clone(),
        seen.clone(),
        finished,
    ));
    let (finishes, to_finish) = mpsc::unbounded_channel();
    let finisher = tokio::spawn(finish_batches(queue.clone(), to_finish));
    let lanes = Lanes {
        slots: Arc::new(Semaphore::new(hook.concurrency)),
        leased: Arc::new(Semaphore::new((AHEAD + 2) * hook.concurrency)),
        ended: Arc::new(Notify::new()),
        queue,
        client,
        hook,
        target,
        seen,
        finishes,
    };
    // Its waiting pops are delayq's own, not a client's (`/v1/topics`
    // shows them apart).
    crate::waiters::as_own(lanes.run(shutdown)).await;
    // The last finishes are sent, and the last deliveries' status written.
    let _ = finisher.await;
    let _ = done.send(());
    let _ = flusher.await;
}

/// What this process saw of a topic's deliveries since it last wrote.
pub(crate) type Seen = Arc<Mutex<WebhookNote>>;

/// Notes one delivery (status: the HTTP code, or what kept it from one).
pub(crate) fn note(seen: &Seen, at_ms: i64, status: String, error: Option<String>) {
    let minute = at_ms.div_euclid(60_000);
    let ok = error.is_none();
    let mut n = seen.lock().unwrap();
    match n.counts.iter_mut().find(|c| c.0 == minute) {
        Some(c) if ok => c.1 += 1,
        Some(c) => c.2 += 1,
        None => n.counts.push((minute, ok as u64, !ok as u64)),
    }
    if n.last.as_ref().is_none_or(|l| l.1 <= at_ms) {
        n.last = Some((status, at_ms, error));
    }
}

/// Writes what was seen at most once a second, and once more when the
/// deliveries have ended.
async fn flush(
    queue: Queue,
    topic: String,
    seen: Seen,
    mut finished: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        let last = tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => false,
            _ = &mut finished => true,
        };
        let taken = std::mem::take(&mut *seen.lock().unwrap());
        if taken != WebhookNote::default() {
            if let Err(e) = queue.note_webhook(&topic, &taken).await {
                tracing::debug!(error = %e, "webhook status not written; trying again");
                // Kept for the next write (newer deliveries win).
                let mut n = seen.lock().unwrap();
                for (m, d, f) in taken.counts {
                    match n.counts.iter_mut().find(|c| c.0 == m) {
                        Some(c) => {
                            c.1 += d;
                            c.2 += f;
                        }
                        None => n.counts.push((m, d, f)),
                    }
                }
                if n.last.is_none() {
                    n.last = taken.last;
                }
            }
        }
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shown_host_has_no_credentials_path_or_query() {
        let hook = Webhook::new("t", "https://user:pw@hooks.example:8443/close?token=s3cret");
        assert_eq!(hook.shown_host(), "hooks.example:8443");
        assert_eq!(Webhook::new("t", "http://h/x").shown_host(), "h");
    }

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
