//! One leader per partition: a term in Redis (`{p}:dispatcher`, see
//! `store/leader.lua`) names the instance that acts on the partition's
//! expired events and runs its sweep; the other instances stand by.
//!
//! A term needs to be short only while something is due soon: the
//! holder takes it up to the partition's earliest due time as its sweep last
//! saw it (at least [`LENGTH`], at most [`IDLE_LENGTH`]; leader.lua also ends
//! it by the earliest due time in the schedule, one the sweep has not seen
//! yet), and extends it
//! [`LENGTH`] - [`RENEW_EVERY`] before its end; with a job due within
//! `LENGTH`, that is every `RENEW_EVERY`. A push (from any instance) that
//! makes a job the new earliest ends the term in Redis by that job's due
//! time (see `H.new_head` in store/lib/schedule.lua) and publishes the wake
//! notice, on which a standby asks again. A standby asks when the holder's
//! term ends (its PTTL), when a wake notice comes and after every
//! subscriber reconnect; while its subscriber is down (notices unheard),
//! at least every `LENGTH`. So a holder killed outright hands its partitions
//! over by the earliest due time it knew of, or within `LENGTH` and a few ms
//! of a job that was due soon: due jobs fire at most ~`LENGTH` late. One
//! that stops gracefully gives them up at once (the give-up publishes a
//! wake notice). An instance counts a term as its own only until the
//! length it asked for after it *sent* the call that took or extended it, so
//! it stops acting no later than Redis lets the term lapse. Nothing rests
//! on the term: the dispatch script moves each due job once however many
//! instances run it, so two holders for a moment (a stalled holder resuming,
//! or one that missed the wake notice of a shortened term) do no harm.
//!
//! What it costs Redis: while jobs are due soon, one small script call per
//! partition per `RENEW_EVERY` by the holder; idle, one per `IDLE_LENGTH`,
//! and one per standby as each term ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{debug, info};

use super::Handles;
use crate::store::leader::{Leader, Term};

/// The shortest term, taken while a job is due within it.
pub const LENGTH: Duration = crate::defaults::LEADER_TERM_MIN;
/// How often the holder extends a term of `LENGTH`.
pub const RENEW_EVERY: Duration = Duration::from_millis(500);
/// The longest term, taken while nothing is due sooner.
pub const IDLE_LENGTH: Duration = crate::defaults::LEADER_TERM_MAX;
/// After a failed call, the next one.
const RETRY: Duration = Duration::from_millis(100);
/// How much later than the schedule's head an idle sweep may aim before a
/// term renewal wakes it: the two see the head through different clocks.
const SWEEP_SLACK: Duration = Duration::from_millis(50);

/// This instance's terms.
pub(crate) struct Leadership {
    /// The instance id written into the term keys: the process id (so an
    /// operator who reads the key knows whom to look at) and a random part.
    id: String,
    /// Per partition: until when this instance holds its term.
    held_until: Vec<Mutex<Option<Instant>>>,
    /// Whether this instance holds any partition's term (the expired-events
    /// connection runs only then).
    any: watch::Sender<bool>,
    /// How many partitions' terms this instance has taken so far: it
    /// changes with each one taken, where `any` changes with the first.
    taken: watch::Sender<u64>,
    /// Per partition: the earliest due time its sweep last saw here.
    due: Vec<Mutex<Due>>,
    /// Per partition: ask Redis again now (see [`Leadership::ask`]).
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

impl Leadership {
    pub fn new(partitions: usize) -> Leadership {
        Leadership {
            id: format!(
                "pid-{}-{}",
                std::process::id(),
                &uuid::Uuid::new_v4().simple().to_string()[..12]
            ),
            held_until: (0..partitions).map(|_| Mutex::new(None)).collect(),
            any: watch::Sender::new(false),
            taken: watch::Sender::new(0),
            due: (0..partitions).map(|_| Mutex::new(Due::Unknown)).collect(),
            asked: (0..partitions).map(|_| AtomicBool::new(false)).collect(),
            ask: Notify::new(),
        }
    }

    /// The term keeper asks Redis about partition `part` now: a wake notice
    /// came (the term may have been shortened or given up), or the sweep
    /// saw an earlier due time than the term was taken for.
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
    /// nothing scheduled). If the term held reaches past it, it is taken
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

    /// Whether partition `part`'s sweep, as last seen, sleeps past `due`
    /// (by more than a timer's slack).
    fn sweep_aims_past(&self, part: usize, due: Instant) -> bool {
        match *self.due[part].lock().unwrap() {
            Due::Unknown | Due::Nothing => true,
            Due::At(at) => at > due + SWEEP_SLACK,
        }
    }

    /// How long a term on `part` is taken for now.
    fn length(&self, part: usize) -> Duration {
        match *self.due[part].lock().unwrap() {
            Due::Unknown => LENGTH,
            Due::Nothing => IDLE_LENGTH,
            Due::At(at) => at
                .saturating_duration_since(Instant::now())
                .clamp(LENGTH, IDLE_LENGTH),
        }
    }

    /// The instance id written into the term keys.
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

    /// Watches whether this instance holds any term.
    pub fn any(&self) -> watch::Receiver<bool> {
        self.any.subscribe()
    }

    /// Changes each time this instance takes a partition's term it did not
    /// hold (work per held partition starts on it).
    pub fn taken(&self) -> watch::Receiver<u64> {
        self.taken.subscribe()
    }

    fn set(&self, part: usize, until: Option<Instant>) {
        let was = self.holds(part);
        *self.held_until[part].lock().unwrap() = until;
        if !was && self.holds(part) {
            self.taken.send_modify(|n| *n += 1);
        }
        self.note_any();
    }

    fn note_any(&self) {
        let any = !self.held().is_empty();
        self.any
            .send_if_modified(|v| std::mem::replace(v, any) != any);
    }
}

/// Takes, keeps and (on stop) gives up this instance's terms.
pub(crate) async fn run(h: Handles) {
    let terms = h.leader.clone();
    let parts = h.store.parts().len();
    let mut next = vec![Instant::now(); parts];
    loop {
        for (part, next) in next.iter_mut().enumerate() {
            if terms.asked[part].swap(false, Ordering::Relaxed) {
                *next = Instant::now();
            }
            if *next > Instant::now() {
                continue;
            }
            let had = terms.holds(part);
            let sent = Instant::now();
            let length = terms.length(part);
            *next = match h
                .store
                .run::<Leader>(part, (terms.id.as_str(), length))
                .await
            {
                Ok(Term::Held(length, head)) => {
                    terms.set(part, Some(sent + length));
                    // The idle sweep's backstop: a job due sooner than it
                    // aims at (a wake notice it missed) wakes it.
                    if let Some(head) = head {
                        let due = sent + Duration::from_millis(head.max(0) as u64);
                        if had && terms.sweep_aims_past(part, due) {
                            debug!(
                                partition = part,
                                "the schedule's head is earlier than the sweep knew"
                            );
                            h.wake.one(part);
                        }
                    }
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
                Ok(Term::Other(left)) => {
                    terms.set(part, None);
                    if had {
                        info!(
                            partition = part,
                            "another instance dispatches the partition now"
                        );
                    }
                    // Ask again as the holder's term would end (sooner if
                    // a wake notice says it was shortened or given up;
                    // while the subscriber is down no notice comes, so
                    // within LENGTH).
                    let left = if h.subscriber_up.load(Ordering::Relaxed) {
                        left
                    } else {
                        left.min(LENGTH)
                    };
                    Instant::now() + left + Duration::from_millis(1)
                }
                Err(e) => {
                    // A term held runs out by itself (held_until).
                    debug!(partition = part, error = %e, "leader term call failed");
                    Instant::now() + RETRY
                }
            };
        }
        // Lapsed without an answer: no longer ours.
        terms.note_any();
        let until = next.iter().min().copied().unwrap_or_else(Instant::now);
        let lapse = (0..parts)
            .filter_map(|p| *terms.held_until[p].lock().unwrap())
            .filter(|&u| u > Instant::now())
            .min()
            .unwrap_or(until);
        tokio::select! {
            _ = tokio::time::sleep_until(until.min(lapse)) => {}
            _ = terms.ask.notified() => {}
            _ = h.stop.wait() => break,
        }
    }
    // Stopping gracefully: an older build that started meanwhile gets the
    // delayed jobs it can fire, then the standbys take over at once.
    super::upkeep::last_look(&h.store, &terms.held()).await;
    for part in terms.held() {
        terms.set(part, None);
        let give_up = (terms.id.as_str(), Duration::ZERO);
        if let Err(e) = h.store.run::<Leader>(part, give_up).await {
            debug!(partition = part, error = %e, "leader term not given up; it lapses");
        }
    }
}
