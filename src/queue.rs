//! [`Queue`]: the engine's public face. It checks input against the
//! [`Limits`], chooses retry policies, counts metrics and parks waiting
//! pops; every change it makes is one script call in [`crate::store`]. The
//! HTTP layers are thin shells over these methods. A job's whole life, state
//! by state, is in docs/DESIGN.md.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;

use crate::dispatch::{Dispatcher, Handles, Wake};
use crate::error::{Error, Result};
use crate::job::{
    check_due_at, Delivery, IfExists, Job, Limits, Nacked, NewJob, PushOutcome, Pushed,
};
use crate::metrics::{Gauges, Metrics};
use crate::recurring::{Recurring, RecurringState};
use crate::retry::RetryPolicy;
use crate::shutdown::Shutdown;
use crate::store::layout::validate_prefix;
use crate::store::nack::Retention;
use crate::store::pop::Held;
use crate::store::push::Push;
use crate::store::rate::RateLimit;
use crate::store::remove::Fence;
use crate::store::{read, Memory, Overview, Status, Store, LATE_REPLY_GRACE};
use crate::waiters::Waiters;

/// How a [`Queue`] reaches Redis and what it runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where Redis is: one server (the default: redis://127.0.0.1:6379/),
    /// Sentinel or a cluster.
    pub redis: crate::store::Redis,
    /// How many partitions the queue is split into, each in its own slot
    /// (on a cluster, spread over the masters). Fixed when the queue is
    /// first used: a queue with another count in Redis is refused. 1 keeps
    /// the keys of a queue that never had partitions.
    pub partitions: usize,
    /// Replicas that must have a push before it is acknowledged (Redis
    /// WAIT); 0 (the default) does not wait.
    pub replica_acks: usize,
    /// Pushes to a shard with fewer connected replicas than
    /// `replica_acks` (its replica died, or was promoted and has none
    /// yet): refused (the default) or taken unreplicated. Pops, finishes
    /// and nacks there go on either way.
    pub degraded_pushes: crate::store::health::DegradedPushes,
    /// TLS settings for a `rediss://` URL.
    pub tls: crate::store::Tls,
    /// Key prefix; every key is `{prefix}:...`.
    pub prefix: String,
    /// How long one Redis call may take before it fails with
    /// [`Error::Timeout`]. Bounds how long a request hangs while Redis is
    /// down; a call that reaches Redis later changes nothing there.
    pub redis_timeout: Duration,
    /// Dispatch due jobs (the sweep, and dispatch on expired events) in this
    /// process. Off, the queue still pushes, pops and hears ready notices,
    /// and relies on other delayq instances to dispatch; every server runs
    /// it.
    pub dispatch: bool,
    /// Most jobs one dispatch script call moves.
    pub dispatch_batch: usize,
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
    /// Stops the queue's background work and answers its waiting pops when
    /// triggered (as [`Queue::close`] does): the caller's own shutdown.
    pub shutdown: Shutdown,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            redis: Default::default(),
            tls: Default::default(),
            partitions: 1,
            replica_acks: 0,
            degraded_pushes: Default::default(),
            prefix: "dq".into(),
            redis_timeout: Duration::from_secs(2),
            dispatch: true,
            dispatch_batch: 1000,
            limits: Limits::default(),
            topic_retry: HashMap::new(),
            default_retry: RetryPolicy::default(),
            dead_max_per_topic: 10_000,
            dead_max_age: Duration::from_secs(7 * 86400),
            shutdown: Shutdown::new(),
        }
    }
}

/// How soon a waiting pop that could not reach Redis looks again.
const UNAVAILABLE_RETRY: Duration = Duration::from_millis(250);

/// How long a reading of Redis's `maxmemory-policy` is trusted.
const POLICY_RECHECK: Duration = Duration::from_secs(1);

/// A handle to one delay queue in Redis. Cheap to clone; all clones share
/// one multiplexed connection, the waiting consumers and the dispatcher,
/// which stops when the last clone is dropped.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    store: Arc<Store>,
    waiters: Arc<Waiters>,
    metrics: Arc<Metrics>,
    /// Pokes this process's sweep (a push that is the new earliest job).
    wake: Arc<Wake>,
    subscriber_up: Arc<AtomicBool>,
    /// Tells this process's recurring loop to look again.
    recurring_changed: Arc<tokio::sync::Notify>,
    /// Fires on close, on drop of the dispatcher, or with the caller's
    /// shutdown.
    stop: Shutdown,
    /// The last reading of `maxmemory-policy`, and when it was taken.
    policy: Mutex<Option<(Instant, String)>>,
    dispatcher: Dispatcher,
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
        if config.dispatch_batch == 0 {
            return Err(Error::Invalid("dispatch_batch must be at least 1".into()));
        }
        let metrics = Arc::new(Metrics::default());
        let store = Arc::new(Store::new(&config, metrics.clone())?);
        let handles = Handles {
            store: store.clone(),
            waiters: Arc::default(),
            metrics,
            wake: Arc::new(Wake::new(store.parts().len())),
            subscriber_up: Arc::default(),
            stop: config.shutdown.child(),
            dispatch: config.dispatch,
            batch: config.dispatch_batch,
            retention: Retention {
                max_per_topic: config.dead_max_per_topic,
                max_age: config.dead_max_age,
            },
            retries: Arc::new(crate::dispatch::Retries {
                topics: config.topic_retry.clone(),
                default: config.default_retry.clone(),
            }),
            recurring_ready: Default::default(),
            recurring_changed: Default::default(),
        };
        Ok(Queue {
            inner: Arc::new(Inner {
                store,
                waiters: handles.waiters.clone(),
                metrics: handles.metrics.clone(),
                wake: handles.wake.clone(),
                subscriber_up: handles.subscriber_up.clone(),
                recurring_changed: handles.recurring_changed.clone(),
                stop: handles.stop.clone(),
                policy: Mutex::new(None),
                dispatcher: Dispatcher::start(handles),
                config,
            }),
        })
    }

    /// Stops the background work and answers waiting pops with "nothing".
    /// Jobs are untouched: they wait in Redis for the next start.
    pub async fn close(&self) {
        self.inner.stop.trigger();
        self.inner.waiters.wake_all();
        self.inner.dispatcher.stop().await;
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }
    pub fn limits(&self) -> &Limits {
        &self.inner.config.limits
    }
    /// Counters and histograms for `/metrics` (and tests).
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }
    fn store(&self) -> &Arc<Store> {
        &self.inner.store
    }
    /// True while the expired/ready subscriber is connected.
    pub fn subscriber_connected(&self) -> bool {
        self.inner
            .subscriber_up
            .load(std::sync::atomic::Ordering::Relaxed)
    }
    /// Pops waiting for a job in this process right now.
    pub fn waiting_pops(&self) -> usize {
        self.inner.waiters.waiting()
    }

    /// The retry policy a job pushed to `topic` without one gets.
    pub fn retry_policy_for(&self, topic: &str) -> &RetryPolicy {
        let c = &self.inner.config;
        c.topic_retry.get(topic).unwrap_or(&c.default_retry)
    }

    fn retention(&self) -> Retention {
        let c = &self.inner.config;
        Retention {
            max_per_topic: c.dead_max_per_topic,
            max_age: c.dead_max_age,
        }
    }

    /// Redis's memory settings and use, read now.
    pub async fn memory(&self) -> Result<Memory> {
        let m = self.store().memory().await?;
        *self.inner.policy.lock().unwrap() = Some((Instant::now(), m.policy.clone()));
        if m.evicting() {
            tracing::error!(policy = %m.policy, "redis may evict delayq's jobs: set maxmemory-policy to noeviction; pushes are refused until then");
        }
        Ok(m)
    }

    /// The memory of each master, read now (on a single Redis, one entry
    /// named "").
    pub async fn memories(&self) -> Result<Vec<(String, Memory)>> {
        self.store().memories().await
    }

    /// The queue is on a Redis Cluster.
    pub fn on_cluster(&self) -> bool {
        self.store().cluster.is_some()
    }

    /// Refuses new jobs while Redis is set to evict them. Reads the policy
    /// at most once a second; a server that does not let delayq read it
    /// (INFO denied by an ACL) is taken at its word.
    async fn check_policy(&self) -> Result<()> {
        // The common case, on every push: a fresh reading that allows it,
        // looked at under the lock without copying it.
        let fresh = match &*self.inner.policy.lock().unwrap() {
            Some((at, p)) if at.elapsed() < POLICY_RECHECK => {
                Some(read::evicting(p).then(|| p.clone()))
            }
            _ => None,
        };
        let policy = match fresh {
            Some(None) => return Ok(()),
            Some(Some(p)) => p,
            None => match self.memory().await {
                Ok(m) => m.policy,
                Err(Error::Redis { source, .. }) if source.code() == Some("NOPERM") => {
                    return Ok(())
                }
                Err(e) if e.is_unavailable() => return Err(e),
                Err(_) => return Ok(()),
            },
        };
        if read::evicting(&policy) {
            return Err(Error::Evicting(policy));
        }
        Ok(())
    }

    /// `job` (which `check_job` has accepted) as the push script takes it.
    fn to_push(&self, job: &NewJob) -> Push {
        let policy = job
            .retry
            .as_ref()
            .unwrap_or_else(|| self.retry_policy_for(&job.topic));
        Push {
            id: job.id.clone(),
            topic: job.topic.clone(),
            body: job.body.clone(),
            ttr_ms: millis(job.ttr),
            delay_ms: millis(job.delay),
            due_at_ms: job.due_at_ms,
            intervals_ms: policy.intervals_ms(),
            max_attempts: policy.max_attempts.unwrap_or(0),
            keep: job.if_exists == IfExists::Keep,
        }
    }

    /// Books a push's outcome.
    fn pushed(&self, job: &NewJob, p: crate::store::push::Pushed) -> Pushed {
        if p.outcome != PushOutcome::Kept {
            self.inner.metrics.pushed.inc([&job.topic], 1);
        }
        if p.new_head {
            // Other instances hear of it on the wake channel; this one needs
            // no round trip through Redis.
            self.inner.wake.one(self.store().part_of(&job.id));
        }
        Pushed {
            due_ms: p.due_ms,
            outcome: p.outcome,
        }
    }

    /// Pushes a job; an existing job with the same id is replaced (or kept,
    /// with [`IfExists::Keep`]).
    #[tracing::instrument(skip_all, fields(id = %job.id, topic = %job.topic))]
    pub async fn push(&self, job: &NewJob) -> Result<Pushed> {
        self.limits().check_job(job).map_err(Error::Invalid)?;
        self.check_policy().await?;
        let reply = self.store().push(self.to_push(job)).await?;
        let pushed = self.pushed(job, reply);
        debug!(due_ms = pushed.due_ms, outcome = ?pushed.outcome, "pushed");
        Ok(pushed)
    }

    /// Pushes many jobs in one round trip (one script call per partition,
    /// of up to 128 jobs each, the calls at once; each
    /// job is still its own atomic upsert). Jobs that break a limit get
    /// their own [`Error::Invalid`] and are not sent.
    #[tracing::instrument(skip_all, fields(jobs = jobs.len()))]
    pub async fn push_many(&self, jobs: &[NewJob]) -> Result<Vec<Result<Pushed>>> {
        let checked: Vec<Result<(), String>> =
            jobs.iter().map(|j| self.limits().check_job(j)).collect();
        let valid: Vec<&NewJob> = jobs
            .iter()
            .zip(&checked)
            .filter(|(_, c)| c.is_ok())
            .map(|(j, _)| j)
            .collect();
        let replies = if valid.is_empty() {
            Vec::new()
        } else {
            self.check_policy().await?;
            let pushes: Vec<Push> = valid.iter().map(|j| self.to_push(j)).collect();
            self.store().push_many(&pushes).await?
        };
        let mut replies = valid
            .iter()
            .zip(replies)
            .map(|(j, r)| r.map(|r| self.pushed(j, r)));
        Ok(checked
            .into_iter()
            .map(|c| match c {
                Ok(()) => replies.next().unwrap_or_else(|| {
                    Err(Error::protocol("push", "fewer replies than jobs".into()))
                }),
                Err(e) => Err(Error::Invalid(e)),
            })
            .collect())
    }

    /// Reads a job, in whatever state it is.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn get(&self, id: &str) -> Result<Option<Job>> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        self.store().get(id).await
    }

    /// Finishes a delivered job: the consumer holding lease `token` is done.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn finish(&self, id: &str, token: &str) -> Result<()> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        self.limits().check_token(token).map_err(Error::Invalid)?;
        let removed = self.store().remove(id, Fence::Lease(token)).await?;
        match removed.status {
            Status::Done => {
                self.inner.metrics.finished.inc([&removed.topic], 1);
                Ok(())
            }
            Status::Stale => Err(Error::StaleLease(id.to_owned())),
            _ => Err(Error::NotFound(id.to_owned())),
        }
    }

    /// Gives a leased job back: ready again at once, the attempt not
    /// counted. A stale token changes nothing.
    pub async fn release(&self, id: &str, token: &str) -> Result<()> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        self.limits().check_token(token).map_err(Error::Invalid)?;
        if self.store().release(id, token).await? {
            return Ok(());
        }
        // Not current: say whether the job exists at all.
        match self.get(id).await? {
            Some(_) => Err(Error::StaleLease(id.to_owned())),
            None => Err(Error::NotFound(id.to_owned())),
        }
    }

    /// Finishes a job without a lease token, whatever its state: the
    /// compatible API's `/finish`. False if there was no such job.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn finish_by_id(&self, id: &str) -> Result<bool> {
        self.remove_any(id, &self.inner.metrics.finished).await
    }

    /// Cancels a job, whatever its state. False if there was none.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn delete(&self, id: &str) -> Result<bool> {
        self.remove_any(id, &self.inner.metrics.deleted).await
    }

    async fn remove_any(&self, id: &str, counter: &crate::metrics::Counter<1>) -> Result<bool> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        let removed = self.store().remove(id, Fence::Any).await?;
        if removed.status == Status::Done {
            counter.inc([&removed.topic], 1);
        }
        Ok(removed.status == Status::Done)
    }

    /// Reports a failed attempt: the job goes where its retry policy says
    /// (after `delay` instead of the schedule's interval, if given).
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn nack(
        &self,
        id: &str,
        token: &str,
        delay: Option<Duration>,
        error: &str,
    ) -> Result<Nacked> {
        let l = self.limits();
        l.check_id(id).map_err(Error::Invalid)?;
        l.check_token(token).map_err(Error::Invalid)?;
        if let Some(d) = delay {
            l.check_delay("nack delay", d).map_err(Error::Invalid)?;
        }
        // History lines are tab-separated, one per line: keep errors to one
        // line of bounded length.
        let error: String = error
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(1000)
            .collect();
        let error = if error.is_empty() { "nack" } else { &error };
        let f = self
            .store()
            .nack(id, token, delay, error, self.retention())
            .await?;
        match (f.status, f.state) {
            (Status::Done, Some(state)) => {
                let m = &self.inner.metrics;
                match state {
                    crate::JobState::Dead => m.dead.inc([&f.topic], 1),
                    _ => m.retried.inc([&f.topic], 1),
                }
                if state == crate::JobState::Delayed {
                    self.inner.wake.one(self.store().part_of(id));
                }
                Ok(Nacked {
                    state,
                    due_ms: f.due_ms,
                })
            }
            (Status::Stale, _) => Err(Error::StaleLease(id.to_owned())),
            _ => Err(Error::NotFound(id.to_owned())),
        }
    }

    /// Extends the lease `token` holds to `ttr` from now (the job's own ttr
    /// when `None`). Returns the new end of the lease (Unix ms).
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn touch(&self, id: &str, token: &str, ttr: Option<Duration>) -> Result<i64> {
        let l = self.limits();
        l.check_id(id).map_err(Error::Invalid)?;
        l.check_token(token).map_err(Error::Invalid)?;
        if let Some(t) = ttr {
            l.check_ttr(t).map_err(Error::Invalid)?;
        }
        let touched = self.store().touch(id, token, ttr).await?;
        match touched.status {
            Status::Done => Ok(touched.lease_until_ms),
            Status::Stale => Err(Error::StaleLease(id.to_owned())),
            _ => Err(Error::NotFound(id.to_owned())),
        }
    }

    /// Gives a job a new due time (`due_at_ms`, or `delay` from now) and,
    /// optionally, a new body. Returns the new due time.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn reschedule(
        &self,
        id: &str,
        delay: Duration,
        due_at_ms: Option<i64>,
        body: Option<&str>,
    ) -> Result<i64> {
        let l = self.limits();
        l.check_id(id).map_err(Error::Invalid)?;
        l.check_delay("delay", delay).map_err(Error::Invalid)?;
        if let Some(at) = due_at_ms {
            check_due_at(at).map_err(Error::Invalid)?;
        }
        if let Some(b) = body {
            l.check_body(b).map_err(Error::Invalid)?;
        }
        let r = self.store().reschedule(id, delay, due_at_ms, body).await?;
        if r.status != Status::Done {
            return Err(Error::NotFound(id.to_owned()));
        }
        if r.new_head {
            self.inner.wake.one(self.store().part_of(id));
        }
        Ok(r.due_ms)
    }

    /// Dead jobs of `topic`, oldest first: `limit` of them from `offset`.
    pub async fn dead(&self, topic: &str, offset: usize, limit: usize) -> Result<Vec<Job>> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let last = offset
            .checked_add(limit - 1)
            .filter(|&n| i64::try_from(n).is_ok())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "offset {offset} is out of range: 0 to {}",
                    i64::MAX as usize - limit
                ))
            })?;
        let ids = self.store().dead_ids(topic, offset, last).await?;
        self.store().get_many(&ids).await
    }

    /// Brings dead jobs of `topic` back to ready with fresh attempts: the
    /// given ids, or all of them when `ids` is empty. Returns how many.
    pub async fn requeue_dead(&self, topic: &str, ids: &[String]) -> Result<u64> {
        use crate::store::requeue::BATCH;
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        let store = self.store();
        let mut total = 0;
        if ids.is_empty() {
            for part in 0..store.parts().len() {
                loop {
                    match store.requeue(part, topic, &[]).await? {
                        0 => break,
                        n => total += n,
                    }
                }
            }
            return Ok(total);
        }
        let mut groups: std::collections::BTreeMap<usize, Vec<String>> = Default::default();
        for id in ids {
            groups
                .entry(store.part_of(id))
                .or_default()
                .push(id.clone());
        }
        for (part, ids) in groups {
            for batch in ids.chunks(BATCH) {
                total += store.requeue(part, topic, batch).await?;
            }
        }
        Ok(total)
    }

    /// Deletes every dead job of `topic`. Returns how many.
    pub async fn purge_dead(&self, topic: &str) -> Result<u64> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        let mut total = 0;
        for part in 0..self.store().parts().len() {
            loop {
                match self.store().purge(part, topic).await? {
                    0 => break,
                    n => total += n,
                }
            }
        }
        Ok(total)
    }

    /// Stops handing out `topic`'s jobs (pops, long-polls, webhooks, on
    /// every instance); they still fall due on time and wait in ready.
    pub async fn pause(&self, topic: &str) -> Result<()> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        self.store().set_paused(topic, true).await
    }

    /// Hands `topic`'s jobs out again, at once.
    pub async fn resume(&self, topic: &str) -> Result<()> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        self.store().set_paused(topic, false).await?;
        self.inner.waiters.wake_all();
        Ok(())
    }

    /// A page of `topic`'s jobs in `state`, and the cursor of the next page
    /// (None: no more): delayed jobs by due time, reserved ones by lease
    /// end, dead ones by time of death (oldest first), ready ones in the
    /// order they will be handed out. At most `limit` (1 to 1000) jobs;
    /// each page costs Redis time in proportion to the page.
    pub async fn list_jobs(
        &self,
        topic: &str,
        state: crate::JobState,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Job>, Option<String>)> {
        use crate::store::list::{Cursor, Sorted};
        use crate::JobState;
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        let limit = check_page(limit)?;
        let cursor = cursor
            .map(Cursor::decode)
            .transpose()
            .map_err(Error::Invalid)?;
        let s = self.store();
        let page = match state {
            JobState::Ready => s.list_ready(topic, cursor.as_ref(), limit).await?,
            JobState::Dead => {
                s.list_sorted(Sorted::Dead { topic }, cursor.as_ref(), limit)
                    .await?
            }
            JobState::Delayed | JobState::Reserved => {
                let state = if state == JobState::Delayed {
                    crate::store::layout::state::DELAYED
                } else {
                    crate::store::layout::state::RESERVED
                };
                s.list_sorted(
                    Sorted::Schedule {
                        topic: Some(topic),
                        state,
                    },
                    cursor.as_ref(),
                    limit,
                )
                .await?
            }
        };
        self.page_of(page).await
    }

    /// What falls due next, every topic: delayed jobs by due time, a page
    /// of at most `limit`, and the next page's cursor. One call looks at a
    /// bounded number of schedule entries.
    pub async fn upcoming(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Job>, Option<String>)> {
        use crate::store::list::{Cursor, Sorted};
        let limit = check_page(limit)?;
        let cursor = cursor
            .map(Cursor::decode)
            .transpose()
            .map_err(Error::Invalid)?;
        let page = self
            .store()
            .list_sorted(
                Sorted::Schedule {
                    topic: None,
                    state: crate::store::layout::state::DELAYED,
                },
                cursor.as_ref(),
                limit,
            )
            .await?;
        self.page_of(page).await
    }

    async fn page_of(&self, page: crate::store::list::Page) -> Result<(Vec<Job>, Option<String>)> {
        let ids: Vec<String> = page.ids.into_iter().map(|(id, _)| id).collect();
        let jobs = self.store().get_many(&ids).await?;
        Ok((jobs, page.next.map(|c| c.encode())))
    }

    /// Creates or replaces the recurring schedule `name`. Its ticks count
    /// from now: the tick already pushed under an older definition is
    /// dropped if it has not been handed over.
    pub async fn put_recurring(&self, name: &str, schedule: &Recurring) -> Result<()> {
        crate::recurring::check_name(name).map_err(Error::Invalid)?;
        let l = self.limits();
        l.check_topic(&schedule.topic).map_err(Error::Invalid)?;
        l.check_body(&schedule.body).map_err(Error::Invalid)?;
        l.check_ttr(Duration::from_millis(schedule.ttr_ms))
            .map_err(Error::Invalid)?;
        schedule.check().map_err(Error::Invalid)?;
        self.check_policy().await?;
        self.store().recur_put(name, &schedule.to_json()).await?;
        self.inner.recurring_changed.notify_one();
        Ok(())
    }

    /// Deletes the recurring schedule `name` and its next tick's job (if not
    /// yet handed over). False if there was none.
    pub async fn delete_recurring(&self, name: &str) -> Result<bool> {
        crate::recurring::check_name(name).map_err(Error::Invalid)?;
        self.store().recur_delete(name).await
    }

    /// The recurring schedule `name`, with its next fire time.
    pub async fn recurring(&self, name: &str) -> Result<Option<RecurringState>> {
        crate::recurring::check_name(name).map_err(Error::Invalid)?;
        Ok(self.recurring_states(Some(name)).await?.pop())
    }

    /// Every recurring schedule, by name, with its next fire time.
    pub async fn list_recurring(&self) -> Result<Vec<RecurringState>> {
        self.recurring_states(None).await
    }

    async fn recurring_states(&self, only: Option<&str>) -> Result<Vec<RecurringState>> {
        let now = self.store().redis_time_us().await? / 1000;
        Ok(self
            .store()
            .recur_all(only)
            .await?
            .into_iter()
            .filter_map(|s| {
                let schedule = Recurring::from_json(&s.def)?;
                let next_fire_ms = if s.last_ms > now && !s.pending.is_empty() {
                    Some(s.last_ms)
                } else {
                    schedule
                        .rule()
                        .ok()
                        .and_then(|r| r.next_after(s.last_ms.max(now)))
                };
                Some(RecurringState {
                    name: s.name,
                    schedule,
                    last_tick_ms: s.last_ms,
                    next_fire_ms,
                })
            })
            .collect())
    }

    /// Limits how fast `topic`'s jobs are handed out (pops, long-polls and
    /// webhook deliveries together, across every instance). Jobs still
    /// fall due on time and wait in ready.
    pub async fn set_rate(&self, topic: &str, limit: RateLimit) -> Result<()> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        limit.check().map_err(Error::Invalid)?;
        self.store().set_rate(topic, limit).await
    }

    /// Removes `topic`'s rate limit. False if it had none.
    pub async fn clear_rate(&self, topic: &str) -> Result<bool> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        let had = self.store().clear_rate(topic).await?;
        // Pops held back by the limit may go now.
        self.inner.waiters.wake_all();
        Ok(had)
    }

    /// Every topic's rate limit.
    pub async fn rates(&self) -> Result<std::collections::BTreeMap<String, RateLimit>> {
        self.store().rates().await
    }

    /// Ends the dashboard session `id` on every instance, for `ttl` (what
    /// is left of its lifetime).
    pub async fn end_dashboard_session(&self, id: &str, ttl: Duration) -> Result<()> {
        self.store().end_session(id, ttl).await
    }

    /// Whether the dashboard session `id` has been signed out.
    pub async fn dashboard_session_ended(&self, id: &str) -> Result<bool> {
        self.store().session_ended(id).await
    }

    /// Job counts per topic and state, and the earliest due time in the
    /// schedule.
    pub async fn topics(&self) -> Result<Overview> {
        self.store().overview().await
    }

    /// Connects to Redis once and says plainly what failed, if anything
    /// (`connect` itself never waits for Redis). `delayq serve` calls it at
    /// start.
    pub async fn check_connection(&self) -> Result<()> {
        self.store().probe().await
    }

    /// The Redis settings delayq depends on (see [`Settings`]).
    ///
    /// [`Settings`]: crate::store::Settings
    pub async fn redis_settings(&self) -> Result<crate::store::Settings> {
        self.store().settings().await
    }

    /// Turns on expired events in Redis; false when Redis refuses CONFIG
    /// (only the sweep fires jobs then: still on time).
    pub async fn enable_expired_events(&self) -> bool {
        self.store().enable_expired_events().await
    }

    /// Each shard with the partitions it holds and its state: "ok",
    /// "degraded" (fewer replicas than `replica_acks`: pushes there follow
    /// `degraded_pushes`) or "down" (its master does not answer: pops pass
    /// its partitions by). Empty unless replica acks are on or the queue is
    /// on a cluster.
    pub fn shards(&self) -> Vec<crate::store::health::Shard> {
        self.store().health.shards()
    }

    /// Redis answers (for readiness checks).
    pub async fn ping(&self) -> Result<()> {
        self.store().ping().await
    }

    /// The gauges `/metrics` shows, read now (queue depths are left out
    /// while Redis is away; `delayq_redis_errors_total` says so).
    pub async fn gauges(&self) -> Gauges {
        Gauges {
            jobs: self.topics().await.ok().map(|o| o.topics),
            subscriber_connected: self.subscriber_connected(),
            waiting_pops: self.waiting_pops(),
            shards: self.shards(),
        }
    }

    /// Reserves up to `max` ready jobs from `topics` (tried in order) without
    /// waiting.
    pub async fn try_pop(&self, topics: &[String], max: usize) -> Result<Vec<Delivery>> {
        self.limits().check_topics(topics).map_err(Error::Invalid)?;
        let (got, held) = self
            .store()
            .pop(
                topics,
                max,
                self.limits().max_pop_bytes,
                self.store().timeout(),
                self.store().timeout(),
            )
            .await?;
        self.count_popped(topics, &got, held);
        Ok(got)
    }

    fn count_popped(&self, topics: &[String], got: &[Delivery], held: Held) {
        for d in got {
            self.inner.metrics.popped.inc([&d.topic], 1);
        }
        if held.jobs > 0 {
            // A pop of several topics does not say which one held them.
            let topic = match topics {
                [one] => one.as_str(),
                _ => crate::metrics::OTHER_TOPICS,
            };
            self.inner.metrics.rate_held.inc([topic], held.jobs);
        }
    }

    /// Waits up to `wait` for a job on any of `topics` (tried in order) and
    /// reserves it.
    ///
    /// While waiting, this holds no Redis connection of its own. It is
    /// cancel-safe: if the future is dropped (an HTTP client went away) while
    /// the pop script is under way, the job it reserved is given back at once
    /// instead of waiting out its ttr.
    pub async fn pop(&self, topics: &[String], wait: Duration) -> Result<Option<Delivery>> {
        Ok(self.pop_many(topics, 1, wait).await?.pop())
    }

    /// Like [`pop`](Self::pop), for up to `max` jobs: returns as soon as at
    /// least one is reserved, or empty after `wait`.
    #[tracing::instrument(skip_all, fields(topics = ?topics, max))]
    pub async fn pop_many(
        &self,
        topics: &[String],
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>> {
        self.limits().check_topics(topics).map_err(Error::Invalid)?;
        let max = max.max(1);
        let deadline = Instant::now() + wait;
        let guard = self.inner.waiters.enter(topics);
        let stop = &self.inner.stop;
        loop {
            // Register for wake-ups before looking, so a job that becomes
            // ready between the look and the wait is not missed.
            let mut notified: Vec<_> = guard
                .handles()
                .iter()
                .map(|n| Box::pin(n.notified()))
                .collect();
            for n in &mut notified {
                n.as_mut().enable();
            }
            // A look may wait its turn behind a burst of others for as long
            // as the caller waits (at least the Redis timeout): a busy
            // Redis is not an error to a long-poll.
            let patience = deadline.saturating_duration_since(Instant::now()).clamp(
                self.store().timeout(),
                self.store().timeout() + LATE_REPLY_GRACE,
            );
            let (got, held) = match self.pop_guarded(topics, max, patience).await {
                Ok(r) => r,
                // Redis slow, or a failover under way: a long-poll keeps
                // waiting while it has time, and looks again shortly;
                // only one whose wait ran out hears the error.
                Err(e) if e.is_unavailable() && Instant::now() + UNAVAILABLE_RETRY < deadline => {
                    debug!(error = %e, "a waiting pop could not look; looking again");
                    tokio::select! {
                        _ = tokio::time::sleep(UNAVAILABLE_RETRY) => {}
                        _ = stop.wait() => return Ok(Vec::new()),
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !got.is_empty() || stop.is_triggered() || Instant::now() >= deadline {
                return Ok(got);
            }
            // Wake-ups arrive through the subscriber; while it is down, look
            // now and then instead. Jobs held by a rate limit are looked for
            // again when the limit lets the next one out.
            let recheck = if held.retry_ms > 0 {
                Duration::from_millis(held.retry_ms)
            } else if self.subscriber_connected() {
                Duration::from_secs(30)
            } else {
                Duration::from_millis(250)
            };
            let until = deadline.min(Instant::now() + recheck);
            tokio::select! {
                _ = futures::future::select_all(notified) => {}
                _ = tokio::time::sleep_until(until) => {}
                _ = stop.wait() => return Ok(Vec::new()),
            }
        }
    }

    /// One pop attempt, run in its own task so that it completes even if the
    /// caller goes away or stops waiting: a reservation nobody received is
    /// released at once, uncounted. So is one whose lease had already ended
    /// when its reply got here (this process stalled): the job goes back to
    /// ready instead of to a consumer whose finish would be refused.
    async fn pop_guarded(
        &self,
        topics: &[String],
        max: usize,
        patience: Duration,
    ) -> Result<(Vec<Delivery>, Held)> {
        let (tx, rx) = oneshot::channel();
        let queue = self.clone();
        let owned = topics.to_vec();
        tokio::spawn(async move {
            let result = queue
                .store()
                .pop(
                    &owned,
                    max,
                    queue.limits().max_pop_bytes,
                    patience,
                    patience + LATE_REPLY_GRACE,
                )
                .await;
            if let Err(Ok((unclaimed, _))) = tx.send(result) {
                queue
                    .store()
                    .release_all(unclaimed, "its pop's caller had gone")
                    .await;
            }
        });
        let (got, held) = match tokio::time::timeout(patience, rx).await {
            Ok(Ok(result)) => result?,
            Ok(Err(_)) => {
                return Err(Error::protocol(
                    "pop",
                    "pop task ended without a result".into(),
                ))
            }
            // The task goes on: if the reply comes after all, its jobs are
            // released.
            Err(_) => return Err(self.store().timed_out("pop")),
        };
        let now = self.store().clock.now_us();
        let (live, ended): (Vec<_>, Vec<_>) = got
            .into_iter()
            .partition(|d| now.is_none_or(|now| now < d.lease_until_ms.saturating_mul(1000)));
        if !ended.is_empty() {
            let queue = self.clone();
            tokio::spawn(async move {
                queue
                    .store()
                    .release_all(ended, "its lease ended before the reply arrived")
                    .await
            });
        }
        self.count_popped(topics, &live, held);
        Ok((live, held))
    }
}

/// Checks a page size.
fn check_page(limit: usize) -> Result<usize> {
    if (1..=1000).contains(&limit) {
        Ok(limit)
    } else {
        Err(Error::Invalid(format!(
            "limit {limit} is out of range: 1 to 1000"
        )))
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}
