//! One dispatcher per partition: a lease in Redis (`{p}:dispatcher`, see
//! `store/lease.lua`) names the instance that acts on the partition's
//! expired events and runs its sweep; the other instances stand by.
//!
//! A lease needs to be short only while something is due soon: the
//! holder takes it up to the partition's earliest due time as its sweep last
//! saw it (at least [`LENGTH`], at most [`IDLE_LENGTH`]; lease.lua also ends
//! it by the earliest due time in the schedule, one the sweep has not seen
//! yet), and extends it
//! [`LENGTH`] - [`RENEW_EVERY`] before its end; with a job due within
//! `LENGTH`, that is every `RENEW_EVERY`. A push (from any instance) that
//! makes a job the new earliest ends the lease in Redis by that job's due
//! time (see `new_head` in store/lib/schedule.lua) and publishes the wake
//! notice, on which a standby asks again. A standby asks when the holder's
//! lease ends (its PTTL), when a wake notice comes and after every
//! subscriber reconnect. So a holder killed outright hands its partitions
//! over by the earliest due time it knew of, or within `LENGTH` and a few ms
//! of a job that was due soon: due jobs fire at most ~`LENGTH` late. One
//! that stops gracefully gives them up at once (the give-up publishes a
//! wake notice). An instance counts a lease as its own only until the
//! length it asked for after it *sent* the call that took or extended it, so
//! it stops acting no later than Redis lets the lease lapse. Nothing rests
//! on the lease: the dispatch script moves each due job once however many
//! instances run it, so two holders for a moment (a stalled holder resuming,
//! or one that missed the wake notice of a shortened lease) do no harm.
//!
//! What it costs Redis: while jobs are due soon, one small script call per
//! partition per `RENEW_EVERY` by the holder; idle, one per `IDLE_LENGTH`,
//! and one per standby as each lease ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{debug, info};

use super::Handles;
use crate::store::lease::Lease;

/// The shortest lease, taken while a job is due within it: how late a due
/// job may fire when its dispatcher is killed (LEASE_FLOOR_MS in
/// store/lib/schedule.lua, the same).
pub const LENGTH: Duration = Duration::from_millis(2000);
/// How often the holder extends a lease of `LENGTH`.
pub const RENEW_EVERY: Duration = Duration::from_millis(500);
/// The longest lease, taken while nothing is due sooner (also how long
/// an idle sweep sleeps at most).
pub const IDLE_LENGTH: Duration = Duration::from_secs(60);
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
    /// Per partition: the earliest due time its sweep last saw here.
    due: Vec<Mutex<Due>>,
    /// Per partition: ask Redis again now (see [`Leases::ask`]).
    asked: Vec<AtomicBool>,
    ask: Notify,
}

/// What a partition's sweep last saw of its schedule.
#[derive(Clone, Copy)]
enum Due {
    /// Not swept here yet.
    Unknown,
    /// Nothing scheduled.
    Nothing,
    At(Instant),
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
            due: (0..partitions).map(|_| Mutex::new(Due::Unknown)).collect(),
            asked: (0..partitions).map(|_| AtomicBool::new(false)).collect(),
            ask: Notify::new(),
        }
    }

    /// The lease keeper asks Redis about partition `part` now: a wake notice
    /// came (the lease may have been shortened or given up), or the sweep
    /// saw an earlier due time than the lease was taken for.
    pub fn ask(&self, part: usize) {
        self.asked[part].store(true, Ordering::Relaxed);
        self.ask.notify_one();
    }

    /// [`ask`](Self::ask) for every partition (after a subscriber
    /// reconnect: wake notices may have been missed).
    pub fn ask_all(&self) {
        (0..self.asked.len()).for_each(|p| self.ask(p));
    }

    /// Partition `part`'s sweep saw its earliest due time at `at` (`None`:
    /// nothing scheduled). If the lease held reaches past it, it is taken
    /// again for the shorter length now.
    pub fn note_due(&self, part: usize, at: Option<Instant>) {
        *self.due[part].lock().unwrap() = at.map_or(Due::Nothing, Due::At);
        let until = *self.held_until[part].lock().unwrap();
        if let Some(until) = until {
            if Instant::now() + self.length(part) + RENEW_EVERY < until {
                self.ask(part);
            }
        }
    }

    /// How long a lease on `part` is taken for now.
    fn length(&self, part: usize) -> Duration {
        match *self.due[part].lock().unwrap() {
            Due::Unknown => LENGTH,
            Due::Nothing => IDLE_LENGTH,
            Due::At(at) => at
                .saturating_duration_since(Instant::now())
                .clamp(LENGTH, IDLE_LENGTH),
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
            if leases.asked[part].swap(false, Ordering::Relaxed) {
                *next = Instant::now();
            }
            if *next > Instant::now() {
                continue;
            }
            let had = leases.holds(part);
            let sent = Instant::now();
            let length = leases.length(part);
            *next = match h.store.lease(part, &leases.id, length).await {
                Ok(Lease::Held(length)) => {
                    leases.set(part, Some(sent + length));
                    if !had {
                        info!(
                            partition = part,
                            "this instance dispatches the partition now"
                        );
                        // Its events went unheard until now: sweep at once.
                        h.wake.one(part);
                    }
                    sent + length - (LENGTH - RENEW_EVERY)
                }
                Ok(Lease::Other(left)) => {
                    leases.set(part, None);
                    if had {
                        info!(
                            partition = part,
                            "another instance dispatches the partition now"
                        );
                    }
                    // Ask again as the holder's lease would end (sooner if
                    // a wake notice says it was shortened or given up).
                    Instant::now() + left + Duration::from_millis(1)
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
            _ = leases.ask.notified() => {}
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
