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

use crate::clock::RedisClock;
use crate::error::{Error, Result};
use crate::job::{
    check_due_at, Delivery, FailedAttempt, IfExists, Job, JobState, Limits, Nacked, NewJob,
    PushOutcome, Pushed, Removal,
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

/// How long a call that this process stopped waiting for may still bring
/// its reply: a pop's late reply is still read, so the jobs it reserved for
/// nobody go back to ready at once instead of after their ttr.
const LATE_REPLY_GRACE: Duration = Duration::from_secs(30);

/// How long a reading of Redis's memory settings is trusted.
const MEMORY_RECHECK: Duration = Duration::from_secs(1);

/// Redis's memory, as `INFO memory` reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Memory {
    pub used_bytes: u64,
    /// `maxmemory`; 0 means no limit.
    pub max_bytes: u64,
    /// `maxmemory-policy`.
    pub policy: String,
}

impl Memory {
    /// At `maxmemory`: with `noeviction`, calls that grow memory are refused.
    pub fn full(&self) -> bool {
        self.max_bytes > 0 && self.used_bytes >= self.max_bytes
    }
    /// The policy lets Redis delete keys that carry no TTL, such as jobs.
    /// (`volatile-*` policies evict only keys with a TTL: trigger keys,
    /// which the sweep does without.)
    pub fn evicting(&self) -> bool {
        self.policy.starts_with("allkeys-")
    }

    fn parse(info: &str) -> Option<Memory> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
        };
        Some(Memory {
            used_bytes: field("used_memory")?.parse().ok()?,
            max_bytes: field("maxmemory")?.parse().ok()?,
            policy: field("maxmemory_policy")?.to_owned(),
        })
    }
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
    clock: RedisClock,
    /// The last reading of `maxmemory-policy`, and when it was taken.
    policy: Mutex<Option<(Instant, String)>>,
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
        if config.redis_timeout.is_zero() {
            return Err(Error::Invalid("redis_timeout must be above 0".into()));
        }
        if config.dispatch_batch == 0 {
            return Err(Error::Invalid("dispatch_batch must be at least 1".into()));
        }
        let client = redis::Client::open(config.redis_url.as_str())?;
        let manager_config = ConnectionManagerConfig::new()
            // Retry for ever, at most a second apart: an outage of any length
            // ends with a working connection. Callers are not kept waiting
            // meanwhile: every call is bounded by `redis_timeout`.
            .set_number_of_retries(usize::MAX)
            .set_max_delay(Duration::from_secs(1))
            .set_connection_timeout(Some(config.redis_timeout))
            // Callers are bounded by `redis_timeout` (see `call`); the
            // connection waits longer, so that a reply that comes late is
            // still read (and acted on) rather than lost with a reconnect.
            .set_response_timeout(Some(config.redis_timeout + LATE_REPLY_GRACE));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager_config)?;
        let queue = Queue {
            inner: Arc::new(Inner {
                keys: Keys::new(&config.prefix),
                waiters: Waiters::default(),
                sweep_wake: Notify::new(),
                subscriber_connected: AtomicBool::new(false),
                clock: RedisClock::default(),
                policy: Mutex::new(None),
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
            tasks.push(tokio::spawn(scheduler::retention(queue.clone())));
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
        self.call_within(self.inner.config.redis_timeout, f).await
    }

    /// Runs one Redis call for at most `limit`; Redis's refusals that
    /// delayq's scripts and settings produce become their own errors.
    async fn call_within<T>(
        &self,
        limit: Duration,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let result = match tokio::time::timeout(limit, f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) if scripts::is_late(&e) => Err(Error::Late(self.inner.config.redis_timeout)),
            Ok(Err(e)) if scripts::is_oom(&e) => Err(Error::Full),
            Ok(Err(e)) => match scripts::invalid_message(&e) {
                Some(m) => Err(Error::Invalid(m)),
                None => Err(Error::from(e)),
            },
            Err(_) => Err(Error::Timeout(self.inner.config.redis_timeout)),
        };
        if matches!(&result, Err(e) if e.is_unavailable()) {
            self.inner.metrics.inc("delayq_redis_errors_total", &[], 1);
        }
        result
    }

    /// The FCALL of `t` with its deadline: the Redis time at which this
    /// process stops waiting for the reply. A call Redis runs later than
    /// that changes nothing (see `clock`).
    fn script(&self, t: Transition) -> redis::Cmd {
        let deadline = self
            .inner
            .clock
            .at(Instant::now() + self.inner.config.redis_timeout)
            .unwrap_or(0);
        scripts::fcall(t, self.keys(), deadline)
    }

    /// Runs a script call (an FCALL); loads the function library first
    /// when Redis does not have it (a new or flushed server).
    async fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.run_within(self.inner.config.redis_timeout, cmd).await
    }

    async fn run_within<T: redis::FromRedisValue>(
        &self,
        limit: Duration,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        if self.inner.clock.now_us().is_none() {
            // Without a reading this call goes without a deadline; the
            // next one will have it.
            let _ = self.read_clock().await;
        }
        match self
            .call_within(limit, cmd.query_async(&mut self.conn()))
            .await
        {
            Err(Error::Redis(e)) if scripts::is_missing(&e) => {
                self.load_functions().await?;
                self.call_within(limit, cmd.query_async(&mut self.conn()))
                    .await
            }
            r => r,
        }
    }

    /// Reads Redis time once, so that deadlines can be given from the first
    /// call on (later readings come with dispatch and pop replies).
    async fn read_clock(&self) -> Result<()> {
        let sent = Instant::now();
        let (s, us): (i64, i64) = self
            .call(redis::cmd("TIME").query_async(&mut self.conn()))
            .await?;
        self.inner
            .clock
            .observe(sent, Instant::now(), s * 1_000_000 + us);
        Ok(())
    }

    /// Redis's memory settings and use, read now.
    pub async fn memory(&self) -> Result<Memory> {
        let info: String = self
            .call(
                redis::cmd("INFO")
                    .arg("memory")
                    .query_async(&mut self.conn()),
            )
            .await?;
        let m = Memory::parse(&info)
            .ok_or_else(|| Error::Protocol("INFO memory without maxmemory fields".into()))?;
        *self.inner.policy.lock().unwrap() = Some((Instant::now(), m.policy.clone()));
        if m.evicting() {
            tracing::error!(policy = %m.policy, "redis may evict delayq's jobs: set maxmemory-policy to noeviction; pushes are refused until then");
        }
        Ok(m)
    }

    /// Refuses new jobs while Redis is set to evict them. Reads the policy
    /// at most once a second; a server that does not let delayq read it
    /// (INFO denied by an ACL) is taken at its word.
    async fn check_policy(&self) -> Result<()> {
        let cached = self.inner.policy.lock().unwrap().clone();
        let policy = match cached {
            Some((at, p)) if at.elapsed() < MEMORY_RECHECK => p,
            _ => match self.memory().await {
                Ok(m) => m.policy,
                Err(e)
                    if e.is_unavailable()
                        && !matches!(e, Error::Redis(ref r) if r.code() == Some("NOPERM")) =>
                {
                    return Err(e)
                }
                Err(_) => return Ok(()),
            },
        };
        if policy.starts_with("allkeys-") {
            return Err(Error::Evicting(policy));
        }
        Ok(())
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
        let mut cmd = self.script(Transition::Push);
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
        self.check_policy().await?;
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
        if !valid.is_empty() {
            self.check_policy().await?;
        }
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
        let mut cmd = self.script(Transition::Remove);
        cmd.arg(id);
        match token {
            Some(t) => cmd.arg("lease").arg(t),
            None => cmd.arg("any"),
        };
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
        self.limits().check_token(token).map_err(Error::Invalid)?;
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
        let (dead_max, dead_age) = self.dead_retention();
        let mut cmd = self.script(Transition::Nack);
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
        self.limits().check_token(token).map_err(Error::Invalid)?;
        if let Some(t) = ttr {
            self.limits().check_ttr(t).map_err(Error::Invalid)?;
        }
        let mut cmd = self.script(Transition::Touch);
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
        l.check_delay("delay", delay).map_err(Error::Invalid)?;
        if let Some(at) = due_at_ms {
            check_due_at(at).map_err(Error::Invalid)?;
        }
        if body.is_some_and(|b| b.len() > l.max_body_bytes) {
            return Err(Error::Invalid(format!(
                "body is longer than the limit of {} bytes",
                l.max_body_bytes
            )));
        }
        let mut cmd = self.script(Transition::Reschedule);
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
        let last = offset
            .checked_add(limit - 1)
            .filter(|&n| i64::try_from(n).is_ok())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "offset {offset} is out of range: 0 to {}",
                    i64::MAX as usize - limit
                ))
            })?;
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(self.keys().dead(topic)).arg(offset).arg(last);
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
        let mut cmd = self.script(Transition::Requeue);
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
            let mut cmd = self.script(Transition::Purge);
            cmd.arg(topic).arg(500);
            let n: u64 = self.run(&cmd).await?;
            total += n;
            if n == 0 {
                return Ok(total);
            }
        }
    }

    /// Applies dead-letter retention (count and age) to every topic that
    /// has dead jobs. Returns how many were dropped.
    pub async fn trim_dead_letters(&self) -> Result<u64> {
        let (dead_max, dead_age) = self.dead_retention();
        let mut total = 0;
        for (topic, counts) in self.topics().await?.topics {
            if counts.dead == 0 {
                continue;
            }
            loop {
                let mut cmd = self.script(Transition::Trim);
                cmd.arg(&topic).arg(dead_max).arg(dead_age);
                let n: u64 = self.run(&cmd).await?;
                total += n;
                if n == 0 {
                    break;
                }
            }
        }
        Ok(total)
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
        let (counts, head): (HashMap<String, i64>, Vec<(String, f64)>) =
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
            next_due_ms: head.first().map(|(_, due)| *due as i64),
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
        self.pop_script(topics, max, self.inner.config.redis_timeout)
            .await
    }

    /// The pop script, waiting at most `limit` for its reply; records the
    /// Redis time the reply carries.
    async fn pop_script(
        &self,
        topics: &[String],
        max: usize,
        limit: Duration,
    ) -> Result<Vec<Delivery>> {
        let mut cmd = self.script(Transition::Pop);
        cmd.arg(max).arg(self.limits().max_pop_bytes);
        for t in topics {
            cmd.arg(t);
        }
        let sent = Instant::now();
        let reply: Vec<String> = self.run_within(limit, &cmd).await?;
        let (now_us, deliveries) = parse_pop(&reply)?;
        self.inner.clock.observe(sent, Instant::now(), now_us);
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
    /// caller goes away or stops waiting: a reservation nobody received is
    /// released at once, uncounted. So is one whose lease had already ended
    /// when its reply got here (this process stalled): the job goes back to
    /// ready instead of to a consumer whose finish would be refused.
    async fn pop_guarded(&self, topics: &[String], max: usize) -> Result<Vec<Delivery>> {
        let (tx, rx) = oneshot::channel();
        let queue = self.clone();
        let topics = topics.to_vec();
        let limit = self.inner.config.redis_timeout + LATE_REPLY_GRACE;
        tokio::spawn(async move {
            let result = queue.pop_script(&topics, max, limit).await;
            if let Err(Ok(unclaimed)) = tx.send(result) {
                queue
                    .release_all(unclaimed, "its pop's caller had gone")
                    .await;
            }
        });
        let got = match tokio::time::timeout(self.inner.config.redis_timeout, rx).await {
            Ok(Ok(result)) => result?,
            Ok(Err(_)) => return Err(Error::Protocol("pop task ended without a result".into())),
            // The task goes on: if the reply comes after all, its jobs are
            // released.
            Err(_) => return Err(Error::Timeout(self.inner.config.redis_timeout)),
        };
        let now = self.inner.clock.now_us();
        let (live, ended): (Vec<_>, Vec<_>) = got
            .into_iter()
            .partition(|d| now.is_none_or(|now| now < d.lease_until_ms.saturating_mul(1000)));
        if !ended.is_empty() {
            let queue = self.clone();
            tokio::spawn(async move {
                queue
                    .release_all(ended, "its lease ended before the reply arrived")
                    .await
            });
        }
        Ok(live)
    }

    async fn release_all(&self, deliveries: Vec<Delivery>, why: &str) {
        for d in deliveries {
            match self.release(&d).await {
                Ok(_) => debug!(id = %d.id, why, "released a job nobody received"),
                Err(e) => {
                    warn!(id = %d.id, error = %e, why, "could not release a job nobody received; it returns after its ttr")
                }
            }
        }
    }

    /// Undoes a reservation that never reached its consumer.
    async fn release(&self, d: &Delivery) -> Result<bool> {
        let mut cmd = self.script(Transition::Release);
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
        let (dead_max, dead_age) = self.dead_retention();
        let mut cmd = self.script(Transition::Dispatch);
        cmd.arg(self.inner.config.dispatch_batch)
            .arg(dead_max)
            .arg(dead_age);
        for id in ids {
            cmd.arg(id);
        }
        let sent = Instant::now();
        let reply: Vec<String> = self.run(&cmd).await?;
        let bad = || Error::Protocol(format!("dispatch reply {reply:?}"));
        let int =
            |i: usize| -> Result<i64> { reply.get(i).and_then(|s| s.parse().ok()).ok_or_else(bad) };
        let now_us = int(0)?;
        self.inner.clock.observe(sent, Instant::now(), now_us);
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
            let (retried, died) = (int(at + 2)?, int(at + 3)?);
            m.inc("delayq_jobs_retried_total", &labels, retried as u64);
            m.inc("delayq_jobs_dead_total", &labels, died as u64);
            if retried > 0 {
                warn!(%topic, jobs = retried, "leases ran out: attempts failed, jobs retried");
            }
            if died > 0 {
                tracing::error!(%topic, jobs = died, "leases ran out on last attempts: jobs are dead");
            }
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

/// The pop script's reply: Redis time (us), then the deliveries.
fn parse_pop(reply: &[String]) -> Result<(i64, Vec<Delivery>)> {
    let bad = || Error::Protocol(format!("pop reply {reply:?}"));
    let (now, rest) = reply.split_first().ok_or_else(bad)?;
    let popped_at_us: i64 = now.parse().map_err(|_| bad())?;
    if rest.len() % 7 != 0 {
        return Err(bad());
    }
    let deliveries = rest
        .chunks(7)
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
        .collect::<Result<_>>()?;
    Ok((popped_at_us, deliveries))
}
