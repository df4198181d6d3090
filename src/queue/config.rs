//! [`Config`]: what a queue is built from (kept apart: its shape changes
//! on its own).

use std::collections::HashMap;
use std::time::Duration;

use crate::defaults;
use crate::job::Limits;
use crate::retry::RetryPolicy;
use crate::shutdown::Shutdown;

/// How a [`Queue`](super::Queue) reaches Redis and what it runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where Redis is: one server (the default: redis://127.0.0.1:6379/),
    /// Sentinel or a cluster.
    pub redis: crate::redis::Redis,
    /// How many partitions the queue is split into, each in its own slot
    /// (on a cluster, spread over the masters). Fixed when the queue is
    /// first used: a queue with another count in Redis is refused. 1 keeps
    /// the keys of a queue that never had partitions.
    pub partitions: usize,
    /// Replicas that must have a change (push, finish, nack, cancel,
    /// delete, reschedule) before it is acknowledged, and a pop's leases
    /// before its jobs are handed out (Redis WAIT); 0 (the default) does
    /// not wait. One not confirmed in time fails:
    /// [`Error::Unconfirmed`](crate::Error::Unconfirmed) (outcome unknown),
    /// [`Error::Unreplicated`](crate::Error::Unreplicated) (a push),
    /// [`Error::LeaseUnconfirmed`](crate::Error::LeaseUnconfirmed) (a pop).
    pub replica_acks: usize,
    /// Acknowledged calls on a shard with fewer connected replicas than
    /// `replica_acks` (its replica died or is cut off, or it was promoted
    /// and has none yet), and calls whose replicas did not confirm them:
    /// refused (the default) or taken unreplicated (the weaker promise).
    pub degraded_pushes: crate::redis::health::DegradedPushes,
    /// TLS settings for a `rediss://` URL.
    pub tls: crate::redis::Tls,
    /// Key prefix; every key is `{prefix}:...`.
    pub prefix: String,
    /// How long one Redis call may take before it fails with
    /// [`Error::Timeout`](crate::Error::Timeout). Bounds how long a request
    /// hangs while Redis is down; a call that reaches Redis later changes
    /// nothing there.
    pub redis_timeout: Duration,
    /// Dispatch due jobs (the sweep, and dispatch on expired events) in this
    /// process. Off, the queue still pushes, pops and hears ready notices,
    /// and relies on other delayq instances to dispatch; every server runs
    /// it.
    pub dispatch: bool,
    /// Most jobs one dispatch script call moves.
    pub dispatch_batch: usize,
    /// A delayed job due further ahead than this gets no trigger key (no
    /// key with a TTL for Redis to walk) until the sweep arms it, between
    /// half of it and all of it ahead of its due time; one due within it
    /// gets its key at push. 1 s to a day; default an hour.
    pub trigger_horizon: Duration,
    pub limits: Limits,
    /// Retry policy of jobs pushed without one, per topic...
    pub topic_retry: HashMap<String, RetryPolicy>,
    /// ...and for every other topic. The default (no intervals, no maximum)
    /// delivers a failed job again at once, for ever.
    pub default_retry: RetryPolicy,
    /// Dead letters kept per topic; the oldest beyond it are dropped.
    pub dead_max_per_topic: usize,
    /// Dead letters older than this are dropped.
    pub dead_max_age: Duration,
    /// How long a finished job's record is kept (state `finished`: when,
    /// by which attempt, the last error; not the body), in every topic
    /// without a window of its own. None (the default): nothing is kept, a
    /// finished job is gone. 1 ms to a year.
    pub keep_finished: Option<Duration>,
    /// ...and per topic (wins over `keep_finished`).
    pub topic_keep_finished: HashMap<String, Duration>,
    /// How long a job finished with a result keeps it in a topic that
    /// keeps no finished records (with a window, the result stays as long
    /// as the record): a record read by [`Queue::get`](super::Queue::get),
    /// not listed nor counted; also how long a batch that fired or was
    /// cancelled stays readable. 1 ms to a year; default
    /// [`RESULT_RETENTION`](defaults::RESULT_RETENTION), 24 h.
    pub result_retention: Duration,
    /// Write the event stream (pushed, fired, delivered, finished, failed,
    /// retried, dead), one Redis Stream per partition. Off by default: off,
    /// the scripts write nothing more.
    pub events: bool,
    /// About how many events each partition's stream keeps (the newest);
    /// 1 to [`MAX_EVENTS_KEPT`](crate::defaults::MAX_EVENTS_KEPT).
    pub events_kept: u64,
    /// How often a waiting pop looks at Redis on its own while ready
    /// notices reach it (a backstop for a notice whose publish failed; one
    /// empty look stands for every pop waiting on the same topics). Above
    /// 0; what an idle consumer costs Redis.
    pub wait_backstop: Duration,
    /// Stops the queue's background work and answers its waiting pops when
    /// triggered (as [`Queue::close`](super::Queue::close) does): the
    /// caller's own shutdown.
    pub shutdown: Shutdown,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            redis: Default::default(),
            tls: Default::default(),
            partitions: defaults::PARTITIONS,
            replica_acks: defaults::REPLICA_ACKS,
            degraded_pushes: Default::default(),
            prefix: defaults::PREFIX.into(),
            redis_timeout: defaults::REDIS_TIMEOUT.value,
            dispatch: true,
            dispatch_batch: defaults::DISPATCH_BATCH,
            trigger_horizon: defaults::TRIGGER_HORIZON.value,
            limits: Limits::default(),
            topic_retry: HashMap::new(),
            default_retry: RetryPolicy::default(),
            dead_max_per_topic: defaults::DEAD_MAX,
            dead_max_age: defaults::DEAD_MAX_AGE.value,
            keep_finished: None,
            topic_keep_finished: HashMap::new(),
            result_retention: defaults::RESULT_RETENTION.value,
            events: false,
            events_kept: defaults::EVENTS_KEPT,
            wait_backstop: defaults::WAIT_BACKSTOP,
            shutdown: Shutdown::new(),
        }
    }
}
