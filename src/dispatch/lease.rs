//! One dispatcher per partition: a lease in Redis (`{p}:dispatcher`, see
//! `store/lease.lua`) names the instance that acts on the partition's
//! expired events and runs its sweep; the other instances stand by.
//!
//! The holder extends its lease every [`RENEW_EVERY`]; a standby asks again
//! when the holder's lease would end (at most [`RENEW_EVERY`] apart), so a
//! holder killed outright hands its partitions over within [`LENGTH`] and a
//! few ms. One that stops gracefully gives them up at once. An instance
//! counts a lease as its own only until `LENGTH` after it *sent* the call
//! that took or extended it, so it stops acting no later than Redis lets
//! the lease lapse. Nothing rests on the lease: the dispatch script moves
//! each due job once however many instances run it, so two holders for a
//! moment (a stalled holder resuming) do no harm.
//!
//! What it costs Redis: one small script call per partition per
//! `RENEW_EVERY` per instance (the holder's writes one key; a standby's only
//! reads), whatever the load.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info};

use super::Handles;
use crate::store::lease::Lease;

/// How long a lease lasts from each take or extension.
pub const LENGTH: Duration = Duration::from_millis(2000);
/// How often the holder extends it, and a standby asks at most this far
/// apart.
pub const RENEW_EVERY: Duration = Duration::from_millis(500);
/// After a failed call, the next one.
const RETRY: Duration = Duration::from_millis(100);

/// This instance's leases.
pub(crate) struct Leases {
    /// The instance id written into the lease keys: the process id (so an
    /// operator who reads the key knows whom to look at) and a random part.
    id: String,
    /// Per partition: until when this instance holds its lease.
    held_until: Vec<Mutex<Option<Instant>>>,
    /// Whether this instance holds any partition's lease (the expired-events
    /// connection runs only then).
    any: watch::Sender<bool>,
}

impl Leases {
    pub fn new(partitions: usize) -> Leases {
        Leases {
            id: format!(
                "pid-{}-{}",
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..12]
            ),
            held_until: (0..partitions).map(|_| Mutex::new(None)).collect(),
            any: watch::Sender::new(false),
        }
    }

    /// The instance id written into the lease keys.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether this instance dispatches partition `part` now.
    pub fn holds(&self, part: usize) -> bool {
        self.held_until[part]
            .lock()
            .unwrap()
            .is_some_and(|until| Instant::now() < until)
    }

    /// The partitions this instance dispatches now.
    pub fn held(&self) -> Vec<usize> {
        (0..self.held_until.len())
            .filter(|&p| self.holds(p))
            .collect()
    }

    /// Watches whether this instance holds any lease.
    pub fn any(&self) -> watch::Receiver<bool> {
        self.any.subscribe()
    }

    fn set(&self, part: usize, until: Option<Instant>) {
        *self.held_until[part].lock().unwrap() = until;
        self.note_any();
    }

    fn note_any(&self) {
        let any = !self.held().is_empty();
        self.any
            .send_if_modified(|v| std::mem::replace(v, any) != any);
    }
}

/// Takes, keeps and (on stop) gives up this instance's leases.
pub(crate) async fn run(h: Handles) {
    let leases = h.leases.clone();
    let parts = h.store.parts().len();
    let mut next = vec![Instant::now(); parts];
    loop {
        for (part, next) in next.iter_mut().enumerate() {
            if *next > Instant::now() {
                continue;
            }
            let had = leases.holds(part);
            let sent = Instant::now();
            *next = match h.store.lease(part, &leases.id, LENGTH).await {
                Ok(Lease::Held) => {
                    leases.set(part, Some(sent + LENGTH));
                    if !had {
                        info!(
                            partition = part,
                            "this instance dispatches the partition now"
                        );
                        // Its events went unheard until now: sweep at once.
                        h.wake.one(part);
                    }
                    sent + RENEW_EVERY
                }
                Ok(Lease::Other(left)) => {
                    leases.set(part, None);
                    if had {
                        info!(
                            partition = part,
                            "another instance dispatches the partition now"
                        );
                    }
                    // Ask again as the holder's lease would end.
                    Instant::now() + (left + Duration::from_millis(1)).min(RENEW_EVERY)
                }
                Err(e) => {
                    // A lease held runs out by itself (held_until).
                    debug!(partition = part, error = %e, "dispatcher lease call failed");
                    Instant::now() + RETRY
                }
            };
        }
        // Lapsed without an answer: no longer ours.
        leases.note_any();
        let until = next.iter().min().copied().unwrap_or_else(Instant::now);
        let lapse = (0..parts)
            .filter_map(|p| *leases.held_until[p].lock().unwrap())
            .filter(|&u| u > Instant::now())
            .min()
            .unwrap_or(until);
        tokio::select! {
            _ = tokio::time::sleep_until(until.min(lapse)) => {}
            _ = h.stop.wait() => break,
        }
    }
    // Stopping gracefully: the standbys take over at once.
    for part in leases.held() {
        leases.set(part, None);
        if let Err(e) = h.store.lease(part, &leases.id, Duration::ZERO).await {
            debug!(partition = part, error = %e, "dispatcher lease not given up; it lapses");
        }
    }
}
