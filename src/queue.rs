//! [`Queue`]: the engine's public face. Every operation is one script call
//! (or one read); the HTTP layers are thin shells over these methods.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::error::{Error, Result};
use crate::job::{Delivery, Job, JobState, Limits, NewJob, Pushed, Removed};
use crate::keys::{validate_prefix, Keys};
use crate::scripts::Scripts;
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
    /// Run the dispatcher (expired-event subscriber and sweep) in this
    /// process. A producer-only library user may turn it off; every server
    /// runs it.
    pub dispatch: bool,
    /// Most jobs one dispatch script call moves.
    pub dispatch_batch: usize,
    pub limits: Limits,
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
    scripts: Scripts,
    waiters: Waiters,
    /// Pokes the sweep to look at the schedule again (a new earliest job,
    /// or a reconnect after which events may have been lost).
    sweep_wake: Notify,
    subscriber_connected: AtomicBool,
    stats: Stats,
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
                scripts: Scripts::new(),
                waiters: Waiters::default(),
                sweep_wake: Notify::new(),
                subscriber_connected: AtomicBool::new(false),
                stats: Stats::default(),
                shutdown: Shutdown::new(),
                tasks: Mutex::new(Vec::new()),
                client,
                conn,
                config,
            }),
        };
        if queue.inner.config.dispatch {
            let tasks = vec![
                tokio::spawn(subscriber::run(queue.clone())),
                tokio::spawn(scheduler::run(queue.clone())),
            ];
            *queue.inner.tasks.lock().unwrap() = tasks;
        }
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
        match tokio::time::timeout(self.inner.config.redis_timeout, f).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(Error::Timeout(self.inner.config.redis_timeout)),
        }
    }

    fn conn(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }

    /// Pushes a job, replacing any job with the same id.
    #[tracing::instrument(skip_all, fields(id = %job.id, topic = %job.topic))]
    pub async fn push(&self, job: &NewJob) -> Result<Pushed> {
        self.limits().check_job(job).map_err(Error::Invalid)?;
        let k = self.keys();
        let mut conn = self.conn();
        let mut inv = self.inner.scripts.push.prepare_invoke();
        inv.key(k.job(&job.id))
            .key(k.schedule())
            .key(k.trigger(&job.id))
            .arg(k.base())
            .arg(&job.id)
            .arg(&job.topic)
            .arg(&job.body)
            .arg(millis(job.ttr))
            .arg(millis(job.delay));
        let (due_ms, replaced, new_head): (i64, i64, i64) =
            self.call(inv.invoke_async(&mut conn)).await?;
        self.inner.stats.pushed.fetch_add(1, Ordering::Relaxed);
        if new_head == 1 {
            // Other instances hear of it on the wake channel; this one needs
            // no round trip through Redis.
            self.wake_sweep();
        }
        debug!(due_ms, replaced = replaced == 1, "pushed");
        Ok(Pushed {
            due_ms,
            replaced: replaced == 1,
        })
    }

    /// Reads a job, in whatever state it is.
    pub async fn get(&self, id: &str) -> Result<Option<Job>> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        let mut conn = self.conn();
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.keys().job(id))
            .arg(&["topic", "body", "ttr", "due", "state", "attempts"]);
        let f: Vec<Option<String>> = self.call(cmd.query_async(&mut conn)).await?;
        let [topic, body, ttr, due, state, attempts] = <[Option<String>; 6]>::try_from(f)
            .map_err(|_| Error::Protocol("HMGET returned the wrong number of fields".into()))?;
        let (Some(topic), Some(state)) = (topic, state) else {
            return Ok(None);
        };
        let int = |v: Option<String>| v.and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
        Ok(Some(Job {
            id: id.to_owned(),
            topic,
            body: body.unwrap_or_default(),
            ttr: Duration::from_millis(int(ttr).max(0) as u64),
            due_ms: int(due),
            state: JobState::parse(&state)
                .ok_or_else(|| Error::Protocol(format!("unknown job state {state:?}")))?,
            attempts: int(attempts).max(0) as u32,
        }))
    }

    /// Removes a job from any state. With `token`, only if that is the job's
    /// current lease.
    #[tracing::instrument(skip_all, fields(id))]
    pub async fn remove(&self, id: &str, token: Option<&str>) -> Result<Removed> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        let k = self.keys();
        let mut conn = self.conn();
        let mut inv = self.inner.scripts.remove.prepare_invoke();
        inv.key(k.job(id))
            .key(k.schedule())
            .key(k.trigger(id))
            .arg(k.base())
            .arg(id)
            .arg(token.unwrap_or(""));
        let r: i64 = self.call(inv.invoke_async(&mut conn)).await?;
        Ok(match r {
            1 => {
                self.inner.stats.removed.fetch_add(1, Ordering::Relaxed);
                Removed::Removed
            }
            0 => Removed::Missing,
            _ => Removed::StaleToken,
        })
    }

    /// Finishes a delivered job (the consumer is done with it).
    pub async fn finish(&self, id: &str, token: Option<&str>) -> Result<Removed> {
        self.remove(id, token).await
    }

    /// Cancels a job, whatever its state.
    pub async fn delete(&self, id: &str) -> Result<Removed> {
        self.remove(id, None).await
    }

    /// Reserves up to `max` ready jobs from `topics` (tried in order) without
    /// waiting.
    pub async fn try_pop(&self, topics: &[String], max: usize) -> Result<Vec<Delivery>> {
        self.limits().check_topics(topics).map_err(Error::Invalid)?;
        let k = self.keys();
        let mut conn = self.conn();
        let mut inv = self.inner.scripts.pop.prepare_invoke();
        inv.key(k.schedule()).key(k.seq()).arg(k.base()).arg(max);
        for t in topics {
            inv.arg(t);
        }
        let reply: Vec<String> = self.call(inv.invoke_async(&mut conn)).await?;
        let deliveries = parse_pop(&reply)?;
        self.inner
            .stats
            .popped
            .fetch_add(deliveries.len() as u64, Ordering::Relaxed);
        Ok(deliveries)
    }

    /// Waits up to `wait` for a job on any of `topics` (tried in order) and
    /// reserves it.
    ///
    /// While waiting, this holds no Redis connection of its own. It is
    /// cancel-safe: if the future is dropped (an HTTP client went away) while
    /// the pop script is under way, the job it reserved is given back at once
    /// instead of waiting out its ttr.
    #[tracing::instrument(skip_all, fields(topics = ?topics))]
    pub async fn pop(&self, topics: &[String], wait: Duration) -> Result<Option<Delivery>> {
        self.limits().check_topics(topics).map_err(Error::Invalid)?;
        let deadline = Instant::now() + wait;
        let guard = self.waiters().enter(topics);
        self.pop_loop(topics, guard.handles(), deadline).await
    }

    /// Pops waiting for a job in this process right now.
    pub fn waiting_pops(&self) -> usize {
        self.waiters().waiting()
    }

    async fn pop_loop(
        &self,
        topics: &[String],
        handles: &[Arc<Notify>],
        deadline: Instant,
    ) -> Result<Option<Delivery>> {
        let shutdown = self.shutdown_signal();
        loop {
            // Register for wake-ups before looking, so a job that becomes
            // ready between the look and the wait is not missed.
            let mut notified: Vec<_> = handles.iter().map(|n| Box::pin(n.notified())).collect();
            for n in &mut notified {
                n.as_mut().enable();
            }
            if let Some(d) = self.pop_guarded(topics).await? {
                return Ok(Some(d));
            }
            if shutdown.is_triggered() || Instant::now() >= deadline {
                return Ok(None);
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
                _ = shutdown.wait() => return Ok(None),
            }
        }
    }

    /// One pop attempt, run in its own task so that it completes even if the
    /// caller goes away; a reservation nobody received is released.
    async fn pop_guarded(&self, topics: &[String]) -> Result<Option<Delivery>> {
        let (tx, rx) = oneshot::channel();
        let queue = self.clone();
        let topics = topics.to_vec();
        tokio::spawn(async move {
            let result = queue.try_pop(&topics, 1).await;
            if let Err(Ok(unclaimed)) = tx.send(result) {
                for d in unclaimed {
                    if let Err(e) = queue.release(&d).await {
                        warn!(id = %d.id, error = %e, "could not release an unclaimed job; it returns after its ttr");
                    }
                }
            }
        });
        match rx.await {
            Ok(r) => r.map(|mut v| v.pop()),
            Err(_) => Err(Error::Protocol("pop task ended without a result".into())),
        }
    }

    /// Undoes a reservation that never reached its consumer.
    async fn release(&self, d: &Delivery) -> Result<bool> {
        let k = self.keys();
        let mut conn = self.conn();
        let mut inv = self.inner.scripts.release.prepare_invoke();
        inv.key(k.job(&d.id))
            .key(k.schedule())
            .key(k.trigger(&d.id))
            .arg(k.base())
            .arg(&d.id)
            .arg(&d.token);
        let r: i64 = self.call(inv.invoke_async(&mut conn)).await?;
        if r == 1 {
            self.inner.stats.released.fetch_add(1, Ordering::Relaxed);
            debug!(id = %d.id, "released a job whose consumer went away");
        }
        Ok(r == 1)
    }

    /// Runs the dispatch script: for `ids` (from expired events), or for
    /// everything due when `ids` is empty (the sweep).
    #[tracing::instrument(level = "debug", skip_all, fields(path = ?path, ids = ids.len()))]
    pub(crate) async fn dispatch(
        &self,
        ids: &[String],
        path: DispatchPath,
    ) -> Result<DispatchOutcome> {
        let k = self.keys();
        let mut conn = self.conn();
        let mut inv = self.inner.scripts.dispatch.prepare_invoke();
        inv.key(k.schedule())
            .arg(k.base())
            .arg(self.inner.config.dispatch_batch);
        for id in ids {
            inv.arg(id);
        }
        let reply: Vec<String> = self.call(inv.invoke_async(&mut conn)).await?;
        let int = |i: usize| -> Result<i64> {
            reply
                .get(i)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::Protocol(format!("dispatch reply {reply:?}")))
        };
        let now_us = int(0)?;
        let moved = int(1)? as usize;
        let next = int(2)?;
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

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

fn parse_pop(reply: &[String]) -> Result<Vec<Delivery>> {
    let bad = || Error::Protocol(format!("pop reply {reply:?}"));
    let (now, rest) = reply.split_first().ok_or_else(bad)?;
    let popped_at_us: i64 = now.parse().map_err(|_| bad())?;
    if rest.len() % 6 != 0 {
        return Err(bad());
    }
    rest.chunks(6)
        .map(|f| {
            Ok(Delivery {
                id: f[0].clone(),
                topic: f[1].clone(),
                body: f[2].clone(),
                token: f[3].clone(),
                due_ms: f[4].parse().map_err(|_| bad())?,
                popped_at_us,
                attempts: f[5].parse().map_err(|_| bad())?,
            })
        })
        .collect()
}
