//! [`Queue`]: the engine's public face. It checks input against the
//! [`Limits`], chooses retry policies, counts metrics and parks waiting
//! pops; every change it makes is one script call in `crate::store`. The
//! HTTP layers are thin shells over these methods. A job's whole life, state
//! by state, is in docs/DESIGN.md.
//!
//! The methods are grouped by concept: `config` (what a queue is built
//! from), `push` (admission and pushes), `pop` (reservations and waiting
//! pops), `settle` (what a consumer or an operator does to one job: finish,
//! release, nack, touch, delete, reschedule), `read` (one job, pages of
//! jobs, dead letters), `recurring` (schedules), `admin` (dead-letter
//! requeue and purge, pause, rate limits, sessions, health and gauges).

mod admin;
mod batches;
mod config;
mod events;
mod flows;
mod groups;
mod instances;
mod layout;
mod outcomes;
mod pop;
mod push;
mod read;
mod recurring;
mod running;
// A consumer's handler's result, and a webhook receiver's reply body.
pub(crate) use running::check_result;
mod settle;
mod stats;
mod tags;

use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::job::Limits;
use crate::loops::{Handles, Loops, Retries, Wake};
use crate::metrics::Metrics;
use crate::redis::clock::RedisClock;
use crate::retry::RetryPolicy;
use crate::store::layout::validate_prefix;
use crate::store::nack::Retention;
use crate::store::Store;

pub use crate::store::events::{
    check_kept as check_events_kept, DEFAULT_EVENTS_KEPT, MAX_EVENTS_KEPT,
};
pub use config::Config;
pub use events::{EventRead, EVENTS_OFF};
pub use layout::{PartitionLayout, LAYOUT};
pub use stats::Resolution;
pub use tags::{TagChange, TagMove, MAX_TAG_PAGE, TAG_PAGE};

/// A handle to one delay queue in Redis. Cheap to clone; all clones share
/// one multiplexed connection, the waiting consumers and the background
/// loops, which stop when the last clone is dropped.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    /// What the queue shares with its background loops: the store, the
    /// waiting pops, the metrics, the sweeps' wake-up (a push that is the
    /// new earliest job), the recurring loop's (a schedule put here), the
    /// retry policies, and the stop signal (it fires on close, on drop of
    /// the loops with the last clone, or with the caller's shutdown).
    h: Handles,
    /// The last reading of `maxmemory-policy`, and when it was taken.
    policy: Mutex<Option<(Instant, String)>>,
    /// Callers waiting for a job's outcome.
    outcomes: outcomes::Outcomes,
    /// A reading of the policy is being taken in the background.
    policy_reading: std::sync::atomic::AtomicBool,
    /// Every background loop of the queue, started and stopped together.
    loops: Loops,
}

impl Queue {
    /// Creates the queue and starts its background work: the subscriber
    /// (it wakes waiting pops) and, if `config.dispatch`, the sweep. Redis
    /// need not be up yet: the connection is made lazily and re-made after
    /// every failure, so a queue outlives Redis restarts.
    pub fn connect(config: Config) -> Result<Queue> {
        validate_prefix(&config.prefix).map_err(Error::Invalid)?;
        if config.redis_timeout.is_zero() {
            return Err(Error::Invalid("redis_timeout must be above 0".into()));
        }
        if config.wait_backstop.is_zero() {
            return Err(Error::Invalid("wait_backstop must be above 0".into()));
        }
        if config.dispatch_batch == 0 {
            return Err(Error::Invalid("dispatch_batch must be at least 1".into()));
        }
        if config.trigger_horizon < std::time::Duration::from_secs(1)
            || config.trigger_horizon > crate::defaults::MAX_TRIGGER_HORIZON
        {
            return Err(Error::Invalid(format!(
                "trigger_horizon must be from 1s to 1d, got {:?}",
                config.trigger_horizon
            )));
        }
        if let Some(keep) = config.keep_finished {
            crate::job::check_keep_finished(keep).map_err(Error::Invalid)?;
        }
        for (topic, keep) in &config.topic_keep_finished {
            config.limits.check_topic(topic).map_err(Error::Invalid)?;
            crate::job::check_keep_finished(*keep)
                .map_err(|e| Error::Invalid(format!("topic {topic:?}: {e}")))?;
        }
        crate::job::check_keep_finished(config.result_retention)
            .map_err(|e| Error::Invalid(e.replace("keep_finished", "result_retention")))?;
        crate::store::events::check_kept(config.events_kept).map_err(Error::Invalid)?;
        let metrics = Arc::new(Metrics::default());
        let options = crate::store::Options {
            redis: &config.redis,
            tls: &config.tls,
            prefix: &config.prefix,
            partitions: config.partitions,
            redis_timeout: config.redis_timeout,
            replica_acks: config.replica_acks,
            degraded_pushes: config.degraded_pushes,
            keep_finished: config.keep_finished,
            topic_keep_finished: &config.topic_keep_finished,
            result_retention: config.result_retention,
            events: if config.events { config.events_kept } else { 0 },
        };
        let store = Arc::new(Store::new(options, metrics.clone())?);
        let parts = store.parts().len();
        let handles = Handles {
            store,
            waiters: Arc::default(),
            metrics,
            wake: Arc::new(Wake::new(parts)),
            expired: Arc::new(crate::loops::subscriber::Expired::new(parts)),
            subscriber_up: Arc::default(),
            canary: Arc::default(),
            stop: config.shutdown.child(),
            dispatch: config.dispatch,
            leader: Arc::new(crate::loops::leader::Leadership::new(parts)),
            batch: config.dispatch_batch,
            trigger_horizon: config.trigger_horizon,
            retention: Retention {
                max_per_topic: config.dead_max_per_topic,
                max_age: config.dead_max_age,
            },
            retries: Arc::new(Retries {
                topics: config.topic_retry.clone(),
                default: config.default_retry.clone(),
            }),
            recurring_ready: Default::default(),
            recurring_changed: Default::default(),
            notes: Default::default(),
        };
        Ok(Queue {
            inner: Arc::new(Inner {
                policy: Mutex::new(None),
                outcomes: Default::default(),
                policy_reading: Default::default(),
                loops: Loops::start(handles.clone()),
                h: handles,
                config,
            }),
        })
    }

    /// Stops the background work and answers waiting pops with "nothing".
    /// Jobs are untouched: they wait in Redis for the next start.
    pub async fn close(&self) {
        self.inner.h.stop.trigger();
        self.inner.h.waiters.wake_all();
        self.inner.loops.stop().await;
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.config.limits
    }

    /// Counters and histograms for `/metrics` (and tests).
    pub fn metrics(&self) -> &Metrics {
        &self.inner.h.metrics
    }

    fn store(&self) -> &Arc<Store> {
        &self.inner.h.store
    }

    /// Redis time as this process knows it.
    pub(crate) fn clock(&self) -> RedisClock<'_> {
        self.store().redis.clock()
    }

    /// True while the expired/ready subscriber is connected.
    pub fn subscriber_connected(&self) -> bool {
        self.inner
            .h
            .subscriber_up
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether expired events reach this instance, as its canary key found
    /// (after every reconnect of its expired-events connections and every
    /// few minutes): None before the first answer, and where no such
    /// connection is open (a standby, or `dispatch` off).
    pub fn expired_events_heard(&self) -> Option<bool> {
        self.inner.h.canary.answer()
    }

    /// Why expired events cannot be heard here: the ACL refused their
    /// subscription (what it refused, and what to add to the user's ACL);
    /// None otherwise. The sweep fires jobs meanwhile.
    pub fn expired_events_refused(&self) -> Option<String> {
        self.inner.h.canary.refused()
    }

    /// The partitions this instance dispatches now (their expired events
    /// and sweeps): those it leads. Empty on a
    /// standby, and where `dispatch` is off.
    pub fn dispatching_partitions(&self) -> Vec<usize> {
        self.inner.h.leader.held()
    }

    /// Pops waiting for a job in this process right now.
    pub fn waiting_pops(&self) -> usize {
        self.inner.h.waiters.waiting()
    }

    /// Of [`waiting_pops`](Self::waiting_pops), those of delayq's own
    /// webhook deliveries.
    pub fn waiting_webhook_pops(&self) -> usize {
        self.inner.h.waiters.own()
    }

    /// The retry policy a job pushed to `topic` without one gets.
    pub fn retry_policy_for(&self, topic: &str) -> &RetryPolicy {
        self.inner.h.retries.for_topic(topic)
    }
}
