//! The loops that live with a queue, in its background: those that hand
//! due jobs over (dispatch) on every [`Queue`](crate::Queue) that
//! dispatches, and the upkeep every queue needs.
//!
//! - [`sweep`]: the clock. Sleeps until the earliest due time and fires;
//!   also dead-letter retention for quiet topics.
//! - [`subscriber`]: the pub/sub connection: expired events (the low-cost
//!   path), ready notices that wake waiting pops, wake notices that re-arm
//!   the sweep; reconnect and catch-up.
//! - `canary`: whether expired events reach delayq, tried with a key of
//!   its own on each master after every reconnect and every few minutes.
//! - [`leader`]: one leader per partition. Of all the instances on one
//!   Redis, only the partition's leader (the holder of its term in Redis)
//!   acts on its expired events and sweeps it; the others stand by and take
//!   over when the term lapses.
//! - `upkeep`: the stats flush, the Sentinel follower, the health watch,
//!   history trimming.
//! - [`recurring`]: fires the recurring schedules' ticks.
//! - `notes`: the relay that carries batch jobs' outcomes to their
//!   batches' homes (and settles reservations whose pusher died).
//!
//! The loops get narrow `Handles` (the store, the waiters, the metrics, a
//! wake signal, a stop signal), never the `Queue` itself: nothing here calls
//! back into the engine, and no task keeps a queue alive. `Loops`
//! owns the tasks and stops them when it is dropped (with the last clone of
//! its queue), when the queue is closed, or when the caller's shutdown
//! fires.

pub(crate) mod canary;
pub mod leader;
pub(crate) mod notes;
pub mod recurring;
pub mod subscriber;
pub mod sweep;
mod upkeep;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::error::Result;
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
use crate::store::dispatch::Dispatched;
use crate::store::nack::Retention;
use crate::store::Store;
use crate::waiters::Waiters;

/// The longest wait between two passes of the upkeep that follows time
/// rather than a change (dead letters and finished records older than
/// their window): each pass reads every partition's counts, so an idle
/// queue pays it once per this.
pub(crate) const UPKEEP_MAX_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// Most topics whose idle waiters one dispatch call is told about.
const MAX_LOCAL_TOPICS: usize = 64;

/// Which path dispatched a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchPath {
    /// An `expired` event for the job's trigger key.
    Event,
    /// The sweep, which fires at the earliest due time by itself.
    Sweep,
}

impl DispatchPath {
    fn label(self) -> &'static str {
        match self {
            DispatchPath::Event => "event",
            DispatchPath::Sweep => "sweep",
        }
    }
}

/// One wake-up signal per partition's sweep, and whether that sweep is
/// catching up.
pub(crate) struct Wake {
    notify: Vec<Notify>,
    /// Set while the partition's sweep moves a backlog: its last call left
    /// jobs due, and it calls again at once. Expired events are then left
    /// to it (see `subscriber::call_expired`).
    catching_up: Vec<AtomicBool>,
}

impl Wake {
    pub fn new(partitions: usize) -> Wake {
        Wake {
            notify: (0..partitions).map(|_| Notify::new()).collect(),
            catching_up: (0..partitions).map(|_| AtomicBool::new(false)).collect(),
        }
    }
    /// Partition `part`'s sweep looks again.
    pub fn one(&self, part: usize) {
        self.notify[part].notify_one();
    }
    /// Every sweep looks again.
    pub fn all(&self) {
        self.notify.iter().for_each(Notify::notify_one);
    }
    fn of(&self, part: usize) -> &Notify {
        &self.notify[part]
    }
    /// Whether partition `part`'s sweep is moving a backlog now.
    pub fn catching_up(&self, part: usize) -> bool {
        self.catching_up[part].load(Ordering::Relaxed)
    }
    fn set_catching_up(&self, part: usize, on: bool) {
        self.catching_up[part].store(on, Ordering::Relaxed);
    }
}

/// What the loops may use.
#[derive(Clone)]
pub(crate) struct Handles {
    pub store: Arc<Store>,
    pub waiters: Arc<Waiters>,
    pub metrics: Arc<Metrics>,
    /// Pokes a partition's sweep to look at the schedule again (a new
    /// earliest job, or a reconnect after which events may have been lost).
    pub wake: Arc<Wake>,
    /// Expired trigger keys heard, waiting for their dispatch call.
    pub expired: Arc<subscriber::Expired>,
    /// True while the subscriber is connected.
    pub subscriber_up: Arc<AtomicBool>,
    /// Whether expired events are heard, as the canary found.
    pub canary: Arc<canary::Canary>,
    /// Fires when the loops must stop.
    pub stop: Shutdown,
    /// Dispatch here (sweep, and dispatch on expired events); off, only
    /// ready notices are heard.
    pub dispatch: bool,
    /// Which partitions this instance dispatches now (with `dispatch` on).
    pub leader: Arc<leader::Leadership>,
    /// Most jobs one dispatch call moves.
    pub batch: usize,
    pub trigger_horizon: std::time::Duration,
    pub retention: Retention,
    /// Retry policies of jobs pushed without one (recurring ticks).
    pub retries: Arc<Retries>,
    /// Fires once the recurring loop has looked at every schedule.
    pub recurring_ready: tokio_util::sync::CancellationToken,
    /// A schedule was put or deleted through this process.
    pub recurring_changed: Arc<Notify>,
    /// A call wrote batch notes (heard on a wake channel): the relay looks.
    pub notes: Arc<Notify>,
}

impl Handles {
    /// Books a push into partition `part` of `topic`: the pushed counter
    /// (not for a job kept or deduplicated: nothing was added), and a
    /// wake of the partition's sweep when the job is the new earliest
    /// (other instances hear of it on the wake channel; this one needs no
    /// round trip through Redis).
    pub(crate) fn pushed(&self, topic: &str, part: usize, p: &crate::store::push::PushReply) {
        if !matches!(
            p.outcome,
            crate::PushOutcome::Kept | crate::PushOutcome::Deduplicated
        ) {
            self.metrics.pushed.inc([topic], 1);
        }
        if p.new_head {
            self.wake.one(part);
        }
    }
}

/// Retry policies by topic, and for every other topic.
#[derive(Default)]
pub(crate) struct Retries {
    pub topics: std::collections::HashMap<String, crate::RetryPolicy>,
    pub default: crate::RetryPolicy,
}

impl Retries {
    /// The retry policy of a job pushed to `topic` without one.
    pub fn for_topic(&self, topic: &str) -> &crate::RetryPolicy {
        self.topics.get(topic).unwrap_or(&self.default)
    }
}

impl Handles {
    /// Runs partition `part`'s dispatch script for `ids` (from expired
    /// events), or for everything due when `ids` is empty (the sweep),
    /// moving at most `limit` jobs, and counts what it did.
    #[tracing::instrument(name = "dispatch", skip_all, fields(part, path = ?path, ids = ids.len()))]
    pub async fn dispatch(
        &self,
        part: usize,
        ids: &[String],
        path: DispatchPath,
        limit: usize,
    ) -> Result<Dispatched> {
        // Local first: the jobs this instance's idle waiters can take are
        // theirs, woken here without a notice that would wake every
        // instance's (bounded: at most MAX_LOCAL_TOPICS pairs).
        let waiting = self.waiters.available(MAX_LOCAL_TOPICS);
        let d = match (self.store)
            .dispatch(
                part,
                ids,
                limit,
                self.retention,
                self.trigger_horizon,
                &waiting,
            )
            .await
        {
            Ok(d) => d,
            Err(e) => {
                // The script may have run and left jobs to these waiters
                // without a notice (its reply lost or late): they look now,
                // not at their next recheck.
                if e.may_have_run() {
                    for (topic, n) in &waiting {
                        self.waiters.wake_local(topic, *n);
                    }
                }
                return Err(e);
            }
        };
        let m = &self.metrics;
        for t in &d.topics {
            if t.local > 0 {
                self.store.note_ready(&t.topic, part);
                let woken = self.waiters.wake_local(&t.topic, t.local as usize) as u64;
                if woken < t.local {
                    // Some left while the script ran: announce the rest.
                    self.store
                        .notify_ready(part, &t.topic, t.local - woken)
                        .await;
                }
            }
            m.dispatched.inc([path.label(), &t.topic], t.moved);
            m.retried.inc([&t.topic], t.retried);
            m.dead.inc([&t.topic], t.died);
            if t.retried > 0 {
                warn!(topic = %t.topic, jobs = t.retried, "leases ran out: attempts failed, jobs retried");
            }
            if t.died > 0 {
                tracing::error!(topic = %t.topic, jobs = t.died, "leases ran out on last attempts: jobs are dead");
            }
        }
        for (topic, ls) in d.lateness_by_topic() {
            for l in ls {
                let s = (*l).max(0) as f64 / 1e6;
                m.fire_lateness.observe([], s);
                m.stats.lateness(topic, s);
            }
        }
        if d.moved > 0 {
            debug!(moved = d.moved, "dispatched");
        }
        Ok(d)
    }
}

/// The running loops of one queue. Dropping it stops them.
pub(crate) struct Loops {
    stop: Shutdown,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

impl Loops {
    /// Starts the subscriber (always: it wakes waiting pops), the stats
    /// flush (always), the Sentinel follower and the health watch where
    /// the store needs them and, where
    /// `handles.dispatch` is on, the term keeper, the expired-events
    /// connection, the sweeps (each acts while its partition's term is
    /// held here) and dead-letter retention.
    pub fn start(handles: Handles) -> Loops {
        let mut tasks = vec![
            tokio::spawn(subscriber::run(handles.clone())),
            tokio::spawn(upkeep::flush_stats(
                handles.store.clone(),
                handles.metrics.stats.clone(),
                handles.stop.clone(),
            )),
        ];
        if handles.store.redis.behind_sentinel() {
            // Not a dispatch loop, but like them it runs with the queue: it
            // keeps the store pointed at the current master.
            tasks.push(tokio::spawn(upkeep::follow_sentinels(
                handles.store.clone(),
                handles.stop.clone(),
            )));
        }
        if handles.store.redis.watches_health() {
            let waiters = handles.waiters.clone();
            let wake = handles.wake.clone();
            tasks.push(tokio::spawn(upkeep::watch_health(
                handles.store.clone(),
                handles.stop.clone(),
                move || {
                    // A partition answers again: its jobs wait for pops
                    // and sweeps that passed it by.
                    waiters.wake_all();
                    wake.all();
                },
            )));
        }
        if handles.dispatch && handles.store.redis.cluster.is_some() {
            tasks.push(tokio::spawn(subscriber::follow_masters(handles.clone())));
        }
        if handles.dispatch {
            tasks.push(tokio::spawn(leader::run(handles.clone())));
            let instance = handles.leader.id().to_owned();
            tasks.push(tokio::spawn(canary::run(handles.clone(), instance)));
            if handles.store.redis.cluster.is_none() {
                tasks.push(tokio::spawn(subscriber::events(handles.clone())));
            }
            tasks.push(tokio::spawn(recurring::run(handles.clone())));
            for part in 0..handles.store.parts().len() {
                tasks.push(tokio::spawn(sweep::run(handles.clone(), part)));
            }
            tasks.push(tokio::spawn(sweep::retention(handles.clone())));
            let (store, stop) = (handles.store.clone(), handles.stop.clone());
            tasks.push(tokio::spawn(upkeep::trim_history(store, stop)));
            tasks.push(tokio::spawn(upkeep::index_topics(handles.clone())));
            tasks.push(tokio::spawn(notes::run(handles.clone())));
        }
        Loops {
            stop: handles.stop,
            tasks: std::sync::Mutex::new(tasks),
        }
    }

    /// Stops the loops and waits until they have.
    pub async fn stop(&self) {
        self.stop.trigger();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap());
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl Drop for Loops {
    fn drop(&mut self) {
        self.stop.trigger();
    }
}
