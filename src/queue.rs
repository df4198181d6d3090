//! [`Queue`]: the engine's public face. Every operation is one script call
//! (or one read); the HTTP layers are thin shells over these methods.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::error::{Error, Result};
use crate::job::{
    Delivery, FailedAttempt, IfExists, Job, JobState, Limits, Nacked, NewJob, PushOutcome, Pushed,
    Removal,
};
use crate::keys::{validate_prefix, Keys};
use crate::metrics::Metrics;
use crate::retry::RetryPolicy;
use crate::scripts::{self, Transition};
use crate::shutdown::Shutdown;
use crate::waiters::Waiters;
use crate::{scheduler, subscriber};

/// How a [`Queue`] reaches Redis and what it runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// `redis://host:port/db`, `redis+unix:///path/to/sock`, ...
    pub redis_url: String,
    /// Key prefix; every key is `{prefix}:...`.
    pub prefix: String,
    /// How long one Redis call may take before it fails with
    /// [`Error::Timeout`]. Bounds how long a request hangs while Redis is
    /// down.
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            redis_url: "redis://127.0.0.1:6379/".into(),
            prefix: "dq".into(),
            redis_timeout: Duration::from_secs(2),
            dispatch: true,
            dispatch_batch: 1000,
            limits: Limits::default(),
            topic_retry: HashMap::new(),
            default_retry: RetryPolicy::default(),
            dead_max_per_topic: 10_000,
            dead_max_age: Duration::from_secs(7 * 86400),
        }
    }
}

/// Which path dispatched a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DispatchPath {
    /// An `expired` event for the job's trigger key.
    Event,
    /// The sweep, which fires at the earliest due time by itself.
    Sweep,
}

/// Counters of what this process did, for tests, stats and metrics.
#[derive(Debug, Default)]
pub struct Stats {
    pub pushed: AtomicU64,
    pub dispatched_by_event: AtomicU64,
    pub dispatched_by_sweep: AtomicU64,
    pub popped: AtomicU64,
    pub removed: AtomicU64,
    pub released: AtomicU64,
    pub subscriber_connects: AtomicU64,
}

/// What one dispatch call did.
#[derive(Debug)]
pub(crate) struct DispatchOutcome {
    /// Redis time when the script ran, in microseconds.
    pub now_us: i64,
    pub moved: usize,
    /// Due time (ms) of the earliest job still in the schedule.
    pub next_due_ms: Option<i64>,
}

/// A handle to one delay queue in Redis. Cheap to clone; all clones share
/// one multiplexed connection, the waiting consumers and the dispatcher.
#[derive(Clone)]
pub struct Queue {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    client: redis::Client,
    conn: ConnectionManager,
    keys: Keys,
    waiters: Waiters,
    /// Pokes the sweep to look at the schedule again (a new earliest job,
    /// or a reconnect after which events may have been lost).
    sweep_wake: Notify,
    subscriber_connected: AtomicBool,
    stats: Stats,
    metrics: Metrics,
    shutdown: Shutdown,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Queue {
    /// Creates the queue and, if `config.dispatch`, starts its dispatcher.
    /// Redis need not be up yet: the connection is made lazily and re-made
    /// after every failure, so a queue outlives Redis restarts.
    pub fn connect(config: Config) -> Result<Queue> {
        validate_prefix(&config.prefix).map_err(Error::Invalid)?;
        let client = redis::Client::open(config.redis_url.as_str())?;
        let manager_config = ConnectionManagerConfig::new()
            // Retry for ever, at most a second apart: an outage of any length
            // ends with a working connection. Callers are not kept waiting
            // meanwhile: every call is bounded by `redis_timeout`.
            .set_number_of_retries(usize::MAX)
            .set_max_delay(Duration::from_secs(1))
            .set_connection_timeout(Some(config.redis_timeout))
            .set_response_timeout(Some(config.redis_timeout));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager_config)?;
        let queue = Queue {
            inner: Arc::new(Inner {
                keys: Keys::new(&config.prefix),
                waiters: Waiters::default(),
                sweep_wake: Notify::new(),
                subscriber_connected: AtomicBool::new(false),
                stats: Stats::default(),
                metrics: Metrics::default(),
                shutdown: Shutdown::new(),
                tasks: Mutex::new(Vec::new()),
                client,
                conn,
                config,
            }),
        };
        // The subscriber always runs: it wakes waiting pops. The sweep (and
        // dispatch on expired events) only where `dispatch` is on.
        let mut tasks = vec![tokio::spawn(subscriber::run(queue.clone()))];
        if queue.inner.config.dispatch {
            tasks.push(tokio::spawn(scheduler::run(queue.clone())));
        }
        *queue.inner.tasks.lock().unwrap() = tasks;
        Ok(queue)
    }

    /// Stops the dispatcher and answers waiting pops with "nothing". Jobs are
    /// untouched: they wait in Redis for the next start.
    pub async fn close(&self) {
        self.inner.shutdown.trigger();
        self.inner.waiters.wake_all();
        let tasks = std::mem::take(&mut *self.inner.tasks.lock().unwrap());
        for t in tasks {
            let _ = t.await;
        }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }
    pub fn limits(&self) -> &Limits {
        &self.inner.config.limits
    }
    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }
    /// Labelled counters and histograms for `/metrics`.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }
    pub(crate) fn keys(&self) -> &Keys {
        &self.inner.keys
    }
    pub(crate) fn client(&self) -> &redis::Client {
        &self.inner.client
    }
    pub(crate) fn waiters(&self) -> &Waiters {
        &self.inner.waiters
    }
    pub(crate) fn shutdown_signal(&self) -> &Shutdown {
        &self.inner.shutdown
    }
    /// True while the expired/ready subscriber is connected.
    pub fn subscriber_connected(&self) -> bool {
        self.inner.subscriber_connected.load(Ordering::Relaxed)
    }
    pub(crate) fn set_subscriber_connected(&self, up: bool) {
        self.inner.subscriber_connected.store(up, Ordering::Relaxed);
        if up {
            self.inner
                .stats
                .subscriber_connects
                .fetch_add(1, Ordering::Relaxed);
        }
    }
    pub(crate) fn wake_sweep(&self) {
        self.inner.sweep_wake.notify_one();
    }
    pub(crate) async fn sweep_woken(&self) {
        self.inner.sweep_wake.notified().await
    }

    /// Runs one Redis call under the configured timeout.
    async fn call<T>(
        &self,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let result = match tokio::time::timeout(self.inner.config.redis_timeout, f).await {
            Ok(r) => r.map_err(Error::from),
            Err(_) => Err(Error::Timeout(self.inner.config.redis_timeout)),
        };
        if result.is_err() {
            self.inner.metrics.inc("delayq_redis_errors_total", &[], 1);
        }
        result
    }

    /// Runs a script call (an FCALL); loads the function library first
    /// when Redis does not have it (a new or flushed server).
    async fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        match self.call(cmd.query_async(&mut self.conn())).await {
            Err(Error::Redis(e)) if scripts::is_missing(&e) => {
                self.load_functions().await?;
                self.call(cmd.query_async(&mut self.conn())).await
            }
            r => r,
        }
    }

    async fn load_functions(&self) -> Result<()> {
        let loaded: redis::RedisResult<String> =
            scripts::load_cmd().query_async(&mut self.conn()).await;
        match loaded {
            Ok(_) => {
                tracing::info!("loaded delayq's functions into redis");
                Ok(())
            }
            Err(e) if scripts::is_already_loaded(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn conn(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }

    /// The retry policy a job pushed to `topic` without one gets.
    pub fn retry_policy_for(&self, topic: &str) -> &RetryPolicy {
        let c = &self.inner.config;
        c.topic_retry.get(topic).unwrap_or(&c.default_retry)
    }

    fn dead_retention(&self) -> (usize, u64) {
        let c = &self.inner.config;
        (c.dead_max_per_topic, millis(c.dead_max_age))
    }

    /// The push script call for `job` (which `check_job` has accepted).
    fn push_cmd(&self, job: &NewJob) -> redis::Cmd {
        let policy = job
            .retry
            .as_ref()
            .unwrap_or_else(|| self.retry_policy_for(&job.topic));
        let mut cmd = scripts::fcall(Transition::Push, self.keys());
        cmd.arg(&job.id)
            .arg(&job.topic)
            .arg(&job.body)
            .arg(millis(job.ttr))
            .arg(millis(job.delay))
            .arg(job.due_at_ms.map_or(-1, |t| t.max(0)))
            .arg(policy.intervals_ms())
            .arg(policy.max_attempts.unwrap_or(0))
            .arg(match job.if_exists {
                IfExists::Replace => "replace",
                IfExists::Keep => "keep",
            });
        cmd
    }

    /// Books a push script's reply `(status, due_ms, new_head)`.
    fn pushed(&self, job: &NewJob, (status, due_ms, new_head): (i64, i64, i64)) -> Pushed {
        let outcome = match status {
            0 => PushOutcome::Created,
            1 => PushOutcome::Replaced,
            _ => PushOutcome::Kept,
        };
        if outcome != PushOutcome::Kept {
            self.inner.stats.pushed.fetch_add(1, Ordering::Relaxed);
            self.inner
                .metrics
                .inc("delayq_jobs_pushed_total", &[("topic", &job.topic)], 1);
        }
        if new_head == 1 {
            // Other instances hear of it on the wake channel; this one needs
            // no round trip through Redis.
            self.wake_sweep();
        }
        Pushed { due_ms, outcome }
    }

    /// Pushes a job; an existing job with the same id is replaced (or kept,
    /// with [`IfExists::Keep`]).
    #[tracing::instrument(skip_all, fields(id = %job.id, topic = %job.topic))]
    pub async fn push(&self, job: &NewJob) -> Result<Pushed> {
        self.limits().check_job(job).map_err(Error::Invalid)?;
        let reply = self.run(&self.push_cmd(job)).await?;
        let pushed = self.pushed(job, reply);
        debug!(due_ms = pushed.due_ms, outcome = ?pushed.outcome, "pushed");
        Ok(pushed)
    }

    /// Pushes many jobs in one round trip (a pipeline of push scripts; each
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
        let mut pipe = redis::pipe();
        for j in &valid {
            pipe.add_command(self.push_cmd(j));
        }
        let replies: Vec<(i64, i64, i64)> = if valid.is_empty() {
            Vec::new()
        } else {
            match self.call(pipe.query_async(&mut self.conn())).await {
                Err(Error::Redis(e)) if scripts::is_missing(&e) => {
                    self.load_functions().await?;
                    self.call(pipe.query_async(&mut self.conn())).await?
                }
                r => r?,
            }
        };
        let mut replies = valid.iter().zip(replies).map(|(j, r)| self.pushed(j, r));
        Ok(checked
            .into_iter()
            .map(|c| match c {
                Ok(()) => replies
                    .next()
                    .ok_or_else(|| Error::Protocol("pipeline reply too short".into())),
                Err(e) => Err(Error::Invalid(e)),
            })
            .collect())
    }

    /// Reads a job, in whatever state it is.
    pub async fn get(&self, id: &str) -> Result<Option<Job>> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        // A delayed job's due time is its score in the schedule.
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL")
            .arg(self.keys().job(id))
            .cmd("ZSCORE")
            .arg(self.keys().schedule())
            .arg(id);
        let (mut f, scheduled): (HashMap<String, String>, Option<f64>) =
            self.call(pipe.query_async(&mut self.conn())).await?;
        // Field names: see keys.rs.
        let Some(topic) = f.remove("q") else {
            return Ok(None);
        };
        let state = f.remove("s").unwrap_or_else(|| "delayed".into());
        let int = |v: Option<&String>| v.and_then(|s| s.parse::<i64>().ok());
        let history = f
            .get("h")
            .map(|h| {
                h.lines()
                    .filter_map(|line| {
                        let mut parts = line.splitn(3, '\t');
                        Some(FailedAttempt {
                            attempt: parts.next()?.parse().ok()?,
                            at_ms: parts.next()?.parse().ok()?,
                            error: parts.next().unwrap_or("").to_owned(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let state = JobState::parse(&state)
            .ok_or_else(|| Error::Protocol(format!("unknown job state {state:?}")))?;
        Ok(Some(Job {
            id: id.to_owned(),
            topic,
            body: f.remove("b").unwrap_or_default(),
            ttr: Duration::from_millis(int(f.get("r")).unwrap_or(0).max(0) as u64),
            due_ms: int(f.get("d")).or(scheduled.map(|s| s as i64)).unwrap_or(0),
            attempts: int(f.get("a")).unwrap_or(0).max(0) as u32,
            retry: RetryPolicy::from_stored(
                f.get("p").map(String::as_str),
                f.get("m").map(String::as_str),
            ),
            lease_until_ms: int(f.get("l")).filter(|_| state == JobState::Reserved),
            dead_at_ms: int(f.get("x")),
            last_error: f.remove("e"),
            history,
            state,
        }))
    }

    /// Removes a job from any state; with `token`, only if that is the job's
    /// current lease. `counter` names what the removal means.
    async fn remove(
        &self,
        id: &str,
        token: Option<&str>,
        counter: &'static str,
    ) -> Result<Removal> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        let mut cmd = scripts::fcall(Transition::Remove, self.keys());
        cmd.arg(id).arg(token.unwrap_or(""));
        let (r, topic): (i64, String) = self.run(&cmd).await?;
        Ok(match r {
            1 => {
                self.inner.stats.removed.fetch_add(1, Ordering::Relaxed);
                self.inner.metrics.inc(counter, &[("topic", &topic)], 1);
                Removal::Done
            }
            0 => Removal::Missing,
            _ => Removal::StaleToken,
        })
    }

    /// Finishes a delivered job: the consumer holding lease `token` is done.
    #[tracing::instrument(skip_all, fields(id))]
    pub async fn finish(&self, id: &str, token: &str) -> Result<()> {
        match self
            .remove(id, Some(token), "delayq_jobs_finished_total")
            .await?
        {
            Removal::Done => Ok(()),
            Removal::Missing => Err(Error::NotFound(id.to_owned())),
            Removal::StaleToken => Err(Error::StaleLease(id.to_owned())),
        }
    }

    /// Finishes a job without a lease token, whatever its state: the
    /// compatible API's `/finish`. False if there was no such job.
    pub async fn finish_by_id(&self, id: &str) -> Result<bool> {
        Ok(self.remove(id, None, "delayq_jobs_finished_total").await? == Removal::Done)
    }

    /// Cancels a job, whatever its state. False if there was none.
    #[tracing::instrument(skip_all, fields(id))]
    pub async fn delete(&self, id: &str) -> Result<bool> {
        Ok(self.remove(id, None, "delayq_jobs_deleted_total").await? == Removal::Done)
    }

    /// Reports a failed attempt: the job goes where its retry policy says
    /// (after `delay` instead of the schedule's interval, if given).
    #[tracing::instrument(skip_all, fields(id))]
    pub async fn nack(
        &self,
        id: &str,
        token: &str,
        delay: Option<Duration>,
        error: &str,
    ) -> Result<Nacked> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        // History lines are tab-separated, one per line: keep errors to one
        // line of bounded length.
        let error: String = error
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(1000)
            .collect();
        let (dead_max, dead_age) = self.dead_retention();
        let mut cmd = scripts::fcall(Transition::Nack, self.keys());
        cmd.arg(dead_max)
            .arg(dead_age)
            .arg(id)
            .arg(token)
            .arg(delay.map_or(-1, |d| millis(d) as i64))
            .arg(if error.is_empty() { "nack" } else { &error });
        let (status, state, due_ms, topic): (i64, String, i64, String) = self.run(&cmd).await?;
        match status {
            1 => {
                let counter = if state == "dead" {
                    "delayq_jobs_dead_total"
                } else {
                    "delayq_jobs_retried_total"
                };
                self.inner.metrics.inc(counter, &[("topic", &topic)], 1);
                if due_ms > 0 && state == "delayed" {
                    self.wake_sweep();
                }
                Ok(Nacked {
                    state: JobState::parse(&state)
                        .ok_or_else(|| Error::Protocol(format!("nack state {state:?}")))?,
                    due_ms,
                })
            }
            0 => Err(Error::NotFound(id.to_owned())),
            _ => Err(Error::StaleLease(id.to_owned())),
        }
    }

    /// Extends the lease `token` holds to `ttr` from now (the job's own ttr
    /// when `None`). Returns the new end of the lease (Unix ms).
    pub async fn touch(&self, id: &str, token: &str, ttr: Option<Duration>) -> Result<i64> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        if let Some(t) = ttr {
            self.limits().check_ttr(t).map_err(Error::Invalid)?;
        }
        let mut cmd = scripts::fcall(Transition::Touch, self.keys());
        cmd.arg(id)
            .arg(token)
            .arg(ttr.map_or(-1, |d| millis(d) as i64));
        let (status, until): (i64, i64) = self.run(&cmd).await?;
        match status {
            1 => Ok(until),
            0 => Err(Error::NotFound(id.to_owned())),
            _ => Err(Error::StaleLease(id.to_owned())),
        }
    }

    /// Gives a job a new due time (`due_at_ms`, or `delay` from now) and,
    /// optionally, a new body. Returns the new due time.
    pub async fn reschedule(
        &self,
        id: &str,
        delay: Duration,
        due_at_ms: Option<i64>,
        body: Option<&str>,
    ) -> Result<i64> {
        let l = self.limits();
        l.check_id(id).map_err(Error::Invalid)?;
        if delay > l.max_delay {
            return Err(Error::Invalid(format!(
                "delay {delay:?} is longer than the limit {:?}",
                l.max_delay
            )));
        }
        if body.is_some_and(|b| b.len() > l.max_body_bytes) {
            return Err(Error::Invalid(format!(
                "body is longer than the limit of {} bytes",
                l.max_body_bytes
            )));
        }
        let mut cmd = scripts::fcall(Transition::Reschedule, self.keys());
        cmd.arg(id)
            .arg(millis(delay))
            .arg(due_at_ms.map_or(-1, |t| t.max(0)))
            .arg(if body.is_some() { "1" } else { "0" })
            .arg(body.unwrap_or(""));
        let (status, due, new_head): (i64, i64, i64) = self.run(&cmd).await?;
        if status == 0 {
            return Err(Error::NotFound(id.to_owned()));
        }
        if new_head == 1 {
            self.wake_sweep();
        }
        Ok(due)
    }

    /// Dead jobs of `topic`, oldest first: `limit` of them from `offset`.
    pub async fn dead(&self, topic: &str, offset: usize, limit: usize) -> Result<Vec<Job>> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(self.keys().dead(topic))
            .arg(offset)
            .arg(offset + limit - 1);
        let ids: Vec<String> = self.call(cmd.query_async(&mut self.conn())).await?;
        let mut jobs = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(j) = self.get(&id).await? {
                jobs.push(j);
            }
        }
        Ok(jobs)
    }

    /// Brings dead jobs of `topic` back to ready with fresh attempts: the
    /// given ids, or all of them when `ids` is empty. Returns how many.
    pub async fn requeue_dead(&self, topic: &str, ids: &[String]) -> Result<u64> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        let mut total = 0;
        if ids.is_empty() {
            // All of them, 500 per script call.
            loop {
                match self.requeue_batch(topic, &[]).await? {
                    0 => return Ok(total),
                    n => total += n,
                }
            }
        }
        for batch in ids.chunks(500) {
            total += self.requeue_batch(topic, batch).await?;
        }
        Ok(total)
    }

    async fn requeue_batch(&self, topic: &str, ids: &[String]) -> Result<u64> {
        let mut cmd = scripts::fcall(Transition::Requeue, self.keys());
        cmd.arg(topic).arg(500);
        for id in ids {
            cmd.arg(id);
        }
        self.run(&cmd).await
    }

    /// Deletes every dead job of `topic`. Returns how many.
    pub async fn purge_dead(&self, topic: &str) -> Result<u64> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        let mut total = 0;
        loop {
            let mut cmd = scripts::fcall(Transition::Purge, self.keys());
            cmd.arg(topic).arg(500);
            let n: u64 = self.run(&cmd).await?;
            total += n;
            if n == 0 {
                return Ok(total);
            }
        }
    }

    /// Job counts per topic and state, and the earliest due time in the
    /// schedule.
    pub async fn topics(&self) -> Result<Overview> {
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL")
            .arg(self.keys().counts())
            .cmd("ZRANGE")
            .arg(self.keys().schedule())
            .arg(0)
            .arg(0)
            .arg("WITHSCORES");
        let (counts, head): (HashMap<String, i64>, Vec<(String, i64)>) =
            self.call(pipe.query_async(&mut self.conn())).await?;
        let mut topics: BTreeMap<String, TopicCounts> = BTreeMap::new();
        for (field, n) in counts {
            let Some((state, topic)) = field.split_once(':') else {
                continue;
            };
            let c = topics.entry(topic.to_owned()).or_default();
            let n = n.max(0) as u64;
            match state {
                "delayed" => c.delayed = n,
                "ready" => c.ready = n,
                "reserved" => c.reserved = n,
                "dead" => c.dead = n,
                _ => {}
            }
        }
        Ok(Overview {
            topics,
            next_due_ms: head.first().map(|(_, due)| *due),
        })
    }

    /// Redis answers (for readiness checks).
    pub async fn ping(&self) -> Result<()> {
        let _: String = self
            .call(redis::cmd("PING").query_async(&mut self.conn()))
            .await?;
        Ok(())
    }

    /// Reserves up to `max` ready jobs from `topics` (tried in order) without
    /// waiting.
    pub async fn try_pop(&self, topics: &[String], max: usize) -> Result<Vec<Delivery>> {
        self.limits().check_topics(topics).map_err(Error::Invalid)?;
        let k = self.keys();
        let mut cmd = scripts::fcall(Transition::Pop, k);
        cmd.arg(max);
        for t in topics {
            cmd.arg(t);
        }
        let reply: Vec<String> = self.run(&cmd).await?;
        let deliveries = parse_pop(&reply)?;
        self.inner
            .stats
            .popped
            .fetch_add(deliveries.len() as u64, Ordering::Relaxed);
        for d in &deliveries {
            self.inner
                .metrics
                .inc("delayq_jobs_popped_total", &[("topic", &d.topic)], 1);
        }
        Ok(deliveries)
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
        let guard = self.waiters().enter(topics);
        let shutdown = self.shutdown_signal();
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
            let got = self.pop_guarded(topics, max).await?;
            if !got.is_empty() || shutdown.is_triggered() || Instant::now() >= deadline {
                return Ok(got);
            }
            // Wake-ups arrive through the subscriber; while it is down, look
            // now and then instead.
            let recheck = if self.subscriber_connected() {
                Duration::from_secs(30)
            } else {
                Duration::from_millis(250)
            };
            let until = deadline.min(Instant::now() + recheck);
            tokio::select! {
                _ = futures::future::select_all(notified) => {}
                _ = tokio::time::sleep_until(until) => {}
                _ = shutdown.wait() => return Ok(Vec::new()),
            }
        }
    }

    /// Pops waiting for a job in this process right now.
    pub fn waiting_pops(&self) -> usize {
        self.waiters().waiting()
    }

    /// One pop attempt, run in its own task so that it completes even if the
    /// caller goes away; a reservation nobody received is released.
    async fn pop_guarded(&self, topics: &[String], max: usize) -> Result<Vec<Delivery>> {
        let (tx, rx) = oneshot::channel();
        let queue = self.clone();
        let topics = topics.to_vec();
        tokio::spawn(async move {
            let result = queue.try_pop(&topics, max).await;
            if let Err(Ok(unclaimed)) = tx.send(result) {
                for d in unclaimed {
                    if let Err(e) = queue.release(&d).await {
                        warn!(id = %d.id, error = %e, "could not release an unclaimed job; it returns after its ttr");
                    }
                }
            }
        });
        rx.await
            .unwrap_or_else(|_| Err(Error::Protocol("pop task ended without a result".into())))
    }

    /// Undoes a reservation that never reached its consumer.
    async fn release(&self, d: &Delivery) -> Result<bool> {
        let k = self.keys();
        let mut cmd = scripts::fcall(Transition::Release, k);
        cmd.arg(&d.id).arg(&d.token);
        let r: i64 = self.run(&cmd).await?;
        if r == 1 {
            self.inner.stats.released.fetch_add(1, Ordering::Relaxed);
            debug!(id = %d.id, "released a job whose consumer went away");
        }
        Ok(r == 1)
    }

    /// Runs the dispatch script: for `ids` (from expired events), or for
    /// everything due when `ids` is empty (the sweep).
    #[tracing::instrument(name = "dispatch", skip_all, fields(path = ?path, ids = ids.len()))]
    pub(crate) async fn dispatch(
        &self,
        ids: &[String],
        path: DispatchPath,
    ) -> Result<DispatchOutcome> {
        let k = self.keys();
        let (dead_max, dead_age) = self.dead_retention();
        let mut cmd = scripts::fcall(Transition::Dispatch, k);
        cmd.arg(self.inner.config.dispatch_batch)
            .arg(dead_max)
            .arg(dead_age);
        for id in ids {
            cmd.arg(id);
        }
        let reply: Vec<String> = self.run(&cmd).await?;
        let bad = || Error::Protocol(format!("dispatch reply {reply:?}"));
        let int =
            |i: usize| -> Result<i64> { reply.get(i).and_then(|s| s.parse().ok()).ok_or_else(bad) };
        let now_us = int(0)?;
        let moved = int(1)? as usize;
        let next = int(2)?;
        let topics = int(3)? as usize;
        let path_label = match path {
            DispatchPath::Event => "event",
            DispatchPath::Sweep => "sweep",
        };
        let m = &self.inner.metrics;
        for t in 0..topics {
            let at = 4 + t * 4;
            let topic = reply.get(at).ok_or_else(bad)?;
            let labels = [("topic", topic.as_str())];
            m.inc(
                "delayq_jobs_dispatched_total",
                &[("path", path_label), ("topic", topic)],
                int(at + 1)? as u64,
            );
            m.inc("delayq_jobs_retried_total", &labels, int(at + 2)? as u64);
            m.inc("delayq_jobs_dead_total", &labels, int(at + 3)? as u64);
        }
        for i in 4 + topics * 4..reply.len() {
            m.observe(
                "delayq_fire_lateness_seconds",
                &[],
                int(i)?.max(0) as f64 / 1e6,
            );
        }
        let counter = match path {
            DispatchPath::Event => &self.inner.stats.dispatched_by_event,
            DispatchPath::Sweep => &self.inner.stats.dispatched_by_sweep,
        };
        counter.fetch_add(moved as u64, Ordering::Relaxed);
        if moved > 0 {
            debug!(moved, "dispatched");
        }
        Ok(DispatchOutcome {
            now_us,
            moved,
            next_due_ms: (next >= 0).then_some(next),
        })
    }
}

/// Job counts of one topic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TopicCounts {
    pub delayed: u64,
    pub ready: u64,
    pub reserved: u64,
    pub dead: u64,
}

/// Counts per topic and the earliest due time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overview {
    pub topics: BTreeMap<String, TopicCounts>,
    /// The earliest due time (or lease end) in the schedule, Unix ms.
    pub next_due_ms: Option<i64>,
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

fn parse_pop(reply: &[String]) -> Result<Vec<Delivery>> {
    let bad = || Error::Protocol(format!("pop reply {reply:?}"));
    let (now, rest) = reply.split_first().ok_or_else(bad)?;
    let popped_at_us: i64 = now.parse().map_err(|_| bad())?;
    if rest.len() % 7 != 0 {
        return Err(bad());
    }
    rest.chunks(7)
        .map(|f| {
            Ok(Delivery {
                id: f[0].clone(),
                topic: f[1].clone(),
                body: f[2].clone(),
                token: f[3].clone(),
                due_ms: f[4].parse().map_err(|_| bad())?,
                popped_at_us,
                attempts: f[5].parse().map_err(|_| bad())?,
                lease_until_ms: f[6].parse().map_err(|_| bad())?,
            })
        })
        .collect()
}
