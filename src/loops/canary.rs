//! Whether expired events reach delayq, found out rather than read from
//! `CONFIG GET notify-keyspace-events` (which managed services rename
//! away). A canary key of this instance's own, one in a partition of each
//! master, is set with a short PX and touched after it has expired (a read
//! of an expired key deletes it and publishes `expired` at once, whatever
//! the server's expiry cycle); the expired-events connections the
//! subscriber already runs ([`super::subscriber`]) hear it, or not, within
//! [`WAIT`].
//!
//! Checked whenever an expired-events connection (re)connects and every
//! [`EVERY`]; it runs only while such a connection is open (a dispatching
//! instance holding a term), else the answer is not known. The answer is
//! reported (`/readyz`, `/metrics`, the dashboard); it changes nothing:
//! the sweep is the clock either way.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tracing::{debug, info, warn};

use super::Handles;

/// How often the canary flies without a reconnect.
pub const EVERY: Duration = Duration::from_secs(300);
/// The canary's life (PX).
const LIFE: Duration = Duration::from_millis(50);
/// How long its event may take after the touch.
pub const WAIT: Duration = Duration::from_secs(3);
/// After a connection comes up, the others (a cluster's masters) get this
/// long to come up too before the canary flies.
const SETTLE: Duration = Duration::from_millis(200);

const UNKNOWN: u8 = 0;
const HEARD: u8 = 1;
const NOT_HEARD: u8 = 2;
/// The ACL refuses the subscription: no event can be heard.
const REFUSED: u8 = 3;

/// The canary's state, shared by the check and the connections that listen.
#[derive(Default)]
pub(crate) struct Canary {
    answer: AtomicU8,
    /// Expired-events connections subscribed now.
    listening: AtomicUsize,
    /// A connection came up: check again.
    recheck: Notify,
    /// The canary keys in flight, removed as their events arrive.
    flying: Mutex<HashSet<String>>,
    landed: Notify,
    /// What the ACL refused, and what to add, while REFUSED.
    refused: Mutex<Option<String>>,
}

impl Canary {
    /// Heard (true), not heard (false) in the last check; None before the
    /// first, or while no expired-events connection is open here.
    pub fn answer(&self) -> Option<bool> {
        match self.answer.load(Ordering::Relaxed) {
            HEARD => Some(true),
            NOT_HEARD | REFUSED => Some(false),
            _ => None,
        }
    }

    /// Why no event can be heard: the ACL refused the subscription
    /// (what it refused and what to add); None otherwise.
    pub fn refused(&self) -> Option<String> {
        self.refused.lock().unwrap().clone()
    }

    /// The ACL refused the subscription (`why`); false when it was
    /// refused already (the refusal is said once, not every retry).
    pub fn refuse(&self, why: String) -> bool {
        *self.refused.lock().unwrap() = Some(why);
        self.set(REFUSED) != REFUSED
    }

    /// An expired-events connection subscribed: the canary flies again.
    pub fn connected(&self) {
        if self.refused.lock().unwrap().take().is_some() {
            self.set(UNKNOWN);
            info!("the expired-events subscription is allowed again");
        }
        self.listening.fetch_add(1, Ordering::Relaxed);
        self.recheck.notify_one();
    }

    /// The last connection gone: not known until one is back and checked.
    pub fn disconnected(&self) {
        if self.listening.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.set(UNKNOWN);
        }
    }

    /// An expired event for `key`: true when it was a canary's.
    pub fn heard(&self, key: &str) -> bool {
        let mut flying = self.flying.lock().unwrap();
        if flying.remove(key) {
            if flying.is_empty() {
                self.landed.notify_one();
            }
            return true;
        }
        false
    }

    fn set(&self, answer: u8) -> u8 {
        self.answer.swap(answer, Ordering::Relaxed)
    }
}

/// Counts one open expired-events connection for as long as it lives.
pub(crate) struct Listening<'a>(&'a Canary);

impl<'a> Listening<'a> {
    pub fn new(c: &'a Canary) -> Self {
        c.connected();
        Listening(c)
    }
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.0.disconnected();
    }
}

/// In a dispatching process, for the life of the queue.
pub(crate) async fn run(h: Handles, instance: String) {
    loop {
        tokio::select! {
            _ = h.canary.recheck.notified() => {
                tokio::select! {
                    _ = tokio::time::sleep(SETTLE) => {}
                    _ = h.stop.wait() => return,
                }
            }
            _ = tokio::time::sleep(EVERY) => {}
            _ = h.stop.wait() => return,
        }
        if h.canary.listening.load(Ordering::Relaxed) == 0 {
            // A refusal stays reported until a subscription is allowed.
            if h.canary.refused().is_none() {
                h.canary.set(UNKNOWN);
            }
            continue;
        }
        match fly(&h, &instance).await {
            Ok(heard) => {
                let was = h.canary.set(if heard { HEARD } else { NOT_HEARD });
                match (was, heard) {
                    (HEARD, true) | (NOT_HEARD, false) => {}
                    (_, true) => info!("expired events are heard (a canary key's arrived)"),
                    (_, false) => warn!(
                        wait_ms = WAIT.as_millis() as u64,
                        "no expired event heard for a canary key: redis does not publish them \
                         (notify-keyspace-events Ex); only the sweep fires jobs (still on time)"
                    ),
                }
            }
            // Redis is away: the reconnect that follows checks again.
            Err(e) => debug!(error = %e, "the expired-events canary could not fly"),
        }
    }
}

/// The canary keys: one in a partition of each master (every partition is
/// on the one server outside a cluster).
fn keys(h: &Handles, instance: &str) -> Vec<String> {
    let parts = h.store.parts();
    let mut chosen: Vec<usize> = h
        .store
        .redis
        .health
        .shards()
        .iter()
        .filter_map(|s| s.partitions.first().copied())
        .collect();
    if chosen.is_empty() {
        // Not a cluster, or the masters not known yet: every partition's
        // slot, at most the partition count.
        chosen = if h.store.redis.cluster.is_some() {
            (0..parts.len()).collect()
        } else {
            vec![0]
        };
    }
    chosen
        .into_iter()
        .map(|p| parts[p].canary(instance))
        .collect()
}

/// Sets the canaries, touches them once expired, and waits for their
/// events. Err: a call failed.
async fn fly(h: &Handles, instance: &str) -> crate::Result<bool> {
    let keys = keys(h, instance);
    *h.canary.flying.lock().unwrap() = keys.iter().cloned().collect();
    for key in &keys {
        // Cost: one key of a few bytes written, O(1).
        let mut set = redis::cmd("SET");
        set.arg(key).arg(1).arg("PX").arg(LIFE.as_millis() as u64);
        h.store
            .redis
            .call::<()>("set the canary", set.query_async(&mut h.store.redis.conn()))
            .await?;
    }
    tokio::time::sleep(LIFE * 2).await;
    for key in &keys {
        // Cost: O(1); the key has expired, so the read deletes it and
        // Redis publishes its `expired` event (none if it is still alive:
        // then the expiry cycle publishes it a little later).
        let mut exists = redis::cmd("EXISTS");
        exists.arg(key);
        h.store
            .redis
            .call::<i64>(
                "touch the canary",
                exists.query_async(&mut h.store.redis.conn()),
            )
            .await?;
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let landed = h.canary.landed.notified();
        tokio::pin!(landed);
        landed.as_mut().enable();
        if h.canary.flying.lock().unwrap().is_empty() {
            return Ok(true);
        }
        if tokio::time::timeout_at(deadline, landed).await.is_err() {
            h.canary.flying.lock().unwrap().clear();
            return Ok(false);
        }
    }
}
