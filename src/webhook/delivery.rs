//! Delivering a webhook topic's jobs: POSTing each to its URL, noting
//! what happened, and writing the status at most once a second.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify, Semaphore};

use super::ahead::{Lanes, AHEAD};
use super::client::Sender;
use super::Secret;
use crate::consumer::finish_batches;
use crate::duration::show_duration;
use crate::job::Limits;
use crate::queue::Queue;
use crate::retry::RetryPolicy;
use crate::shutdown::Shutdown;
use crate::store::instances::WebhookNote;

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
    /// A 2xx reply's body is the job's result (JSON as it is, other text
    /// a JSON string; at most 64 KiB, read within the timeout).
    pub result: bool,
}

/// Most bytes of a failed reply's body read, for its error: a receiver's
/// body can be endless. Above what [`ERROR_BODY_CHARS`] characters take in
/// UTF-8.
pub const ERROR_BODY_BYTES: usize = 2048;

/// Characters of a failed reply's body kept in its error.
pub const ERROR_BODY_CHARS: usize = 200;

impl Webhook {
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
            timeout: crate::defaults::WEBHOOK_TIMEOUT,
            concurrency: crate::defaults::WEBHOOK_CONCURRENCY,
            secret: None,
            result: false,
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

/// Delivers `hook.topic`'s jobs until `shutdown`.
pub async fn run(queue: Queue, hook: Webhook, shutdown: Shutdown) {
    let sender = Arc::new(Sender::new(&hook));
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
        sender,
        hook,
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
