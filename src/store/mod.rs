//! The storage layer: everything delayq says to Redis.
//!
//! Each state transition is one Lua script with a Rust file beside it that
//! encodes its arguments and decodes its reply (`push.lua` and `push.rs`,
//! and so on); `lib.lua` holds the helpers they share and [`layout`] names
//! every key, field and state once. The scripts are loaded as one Redis
//! function library ([`library`]) and called by name. Plain reads (a job,
//! the counts, a dead-letter page, memory) are in [`read`].
//!
//! A queue may be split into partitions (Redis Cluster), each a full set of
//! keys in one slot; [`Store`] picks a job's partition from its id, and runs
//! the per-queue work (pops, counts, dead letters) over all of them.
//! [`cluster`] reaches the masters, [`acks`] makes writes wait for
//! replicas.
//!
//! [`Store`] owns the connection and makes every call bounded: each call
//! waits at most the Redis timeout, and each script call carries a deadline
//! in Redis time (from [`clock`]) past which the script refuses to act, so a
//! call this process gave up on never takes effect later.
//!
//! One status protocol for every script: the first element of each reply is
//! a [`Status`], declared here and handed to the scripts as Lua constants.

mod batch;
pub mod clock;
pub mod cluster;
mod coalesce;
mod conn;
pub mod health;
pub mod layout;
pub mod library;
mod link;
pub(crate) mod read;
mod reply;
pub mod sentinel;
mod sessions;
pub mod settings;

pub mod dispatch;
pub mod list;
pub mod nack;
pub mod pop;
pub mod purge;
pub mod push;
pub mod rate;
pub mod recur;
pub mod release;
pub mod remove;
pub mod requeue;
pub mod reschedule;
pub mod touch;
pub mod trim;

/// What the test suite reaches inside the store; not part of the API.
pub mod testing {
    pub use super::layout::{slot, Keys};
    pub use super::library::fcall;
    pub use super::{push, remove, Status};
}

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Cmd;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use clock::RedisClock;
use conn::Conn;
pub use layout::Keys;
pub use link::Redis;
pub use read::{Memory, Overview, TopicCounts};
use reply::Fields;
pub use settings::Settings;

/// What a script reports first, in every reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub enum Status {
    /// Done as asked (for push: created).
    Done = 0,
    /// No such job.
    Missing = 1,
    /// The lease token is not the job's current one; nothing changed.
    Stale = 2,
    /// Push in keep mode found the id: nothing changed.
    Kept = 3,
    /// Push replaced an existing job.
    Replaced = 4,
}

impl Status {
    const ALL: [Status; 5] = [
        Status::Done,
        Status::Missing,
        Status::Stale,
        Status::Kept,
        Status::Replaced,
    ];

    fn lua_name(self) -> &'static str {
        match self {
            Status::Done => "DONE",
            Status::Missing => "MISSING",
            Status::Stale => "STALE",
            Status::Kept => "KEPT",
            Status::Replaced => "REPLACED",
        }
    }

    fn from_code(code: i64) -> Option<Status> {
        Status::ALL.into_iter().find(|s| *s as i64 == code)
    }

    /// `local DONE = 0` ... for the function library.
    pub(crate) fn lua_prelude() -> String {
        Status::ALL
            .iter()
            .map(|s| format!("local {} = {}\n", s.lua_name(), *s as i64))
            .collect()
    }
}

/// One script: its name in the library, its source, and whether it may run
/// while Redis is at `maxmemory` (function flag `allow-oom`). Transitions
/// that free memory or barely grow it must keep working when Redis is
/// full: consumers finish and delete jobs to make room, and due jobs still
/// fall due. What adds jobs is refused with an OOM error.
#[derive(Debug)]
pub struct Script {
    pub name: &'static str,
    pub source: &'static str,
    pub when_full: bool,
}

/// How long a call that this process stopped waiting for may still bring
/// its reply: a pop's late reply is still read, so the jobs it reserved for
/// nobody go back to ready at once instead of after their ttr.
pub(crate) const LATE_REPLY_GRACE: Duration = Duration::from_secs(30);

/// Where the store's calls go: a client and its shared connection. Behind
/// Sentinel both are replaced when the master changes.
struct Link {
    /// One node's client: the server's, the master's behind Sentinel, the
    /// first seed's on a cluster (where the subscriber connects to each
    /// master with [`cluster::Cluster::node_client`] instead).
    client: redis::Client,
    conn: Conn,
    /// The master's address, behind Sentinel.
    master: Option<(String, u16)>,
    /// Cancelled when this link is replaced: calls still waiting on it
    /// are abandoned at once instead of at their timeout (a connection to
    /// a master that died answers nothing; their deadlines make a late
    /// arrival harmless).
    gone: tokio_util::sync::CancellationToken,
}

/// The connection to one queue's Redis, and the calls made on it.
pub(crate) struct Store {
    link: std::sync::RwLock<Link>,
    tls: Tls,
    sentinel: Option<sentinel::Sentinel>,
    pub(crate) cluster: Option<cluster::Cluster>,
    /// Replicas that must have a write before it is acknowledged (WAIT).
    replica_acks: usize,
    /// Acknowledged writes, batched per partition behind one WAIT each.
    acks: coalesce::Coalescer<coalesce::Acked>,
    /// Their connection (None: no replica acks); replaced with the master.
    ack_conn: std::sync::RwLock<Option<Conn>>,
    /// Which partitions answer, and which shards lack replicas.
    pub(crate) health: health::Health,
    /// On a cluster with replica acks, a connection to each master by
    /// address: acknowledged batches go straight to their partition's
    /// master, so one master's death holds up no other partition.
    node_conns:
        std::sync::Mutex<std::collections::HashMap<String, redis::aio::MultiplexedConnection>>,
    /// Single pushes, batched per partition while Redis is busy.
    pushes: coalesce::Coalescer<push::Pushes>,
    /// Finishes and deletes, batched the same way.
    removes: coalesce::Coalescer<remove::Removes>,
    /// Pops of a queue of one partition, batched the same way.
    pops: coalesce::Coalescer<pop::Pops>,
    prefix: String,
    /// The queue's partitions, one set of keys each; one unless the queue
    /// is split over a cluster.
    parts: Vec<Keys>,
    /// Set once the partition count stored in Redis was found to match.
    parts_checked: OnceCell<()>,
    /// Where the next pop starts looking, so partitions take turns.
    next_pop: std::sync::atomic::AtomicUsize,
    /// Per topic, the partition whose ready notice came last: a pop woken
    /// by it looks there first, one round trip instead of up to one per
    /// partition.
    ready_hint: std::sync::Mutex<std::collections::HashMap<String, usize>>,
    /// Topics seen with a rate limit: on a partitioned queue, their pops
    /// take tokens from the topic's one bucket first (see `rate.rs`).
    pub(crate) limited: std::sync::Mutex<std::collections::HashSet<String>>,
    pub(crate) clock: RedisClock,
    timeout: Duration,
    metrics: Arc<Metrics>,
    /// Why the last connection attempt failed (the subscriber connects on
    /// its own and notes it); None once one succeeds.
    connect_error: std::sync::Mutex<Option<String>>,
    /// Fires when the link moved to another master (Sentinel), so that
    /// connections of their own (the subscriber's) move too.
    pub(crate) relinked: tokio::sync::Notify,
}

/// The code and detail of the (first) error Redis answered with, also from
/// inside a pipeline.
fn server_error(e: &redis::RedisError) -> Option<(String, String)> {
    let errors = e.clone().into_server_errors()?;
    let (_, first) = errors.first()?;
    Some((
        first.code().to_owned(),
        first.details().unwrap_or_default().to_owned(),
    ))
}

/// TLS to Redis (`rediss://` URLs). By default the server's certificate is
/// checked against the system's roots.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    /// Check the server's certificate against this CA (PEM) instead.
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate and its key (PEM), for servers that ask.
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
    /// Accept any certificate: for self-signed test setups only.
    pub insecure: bool,
}

impl Tls {
    fn is_set(&self) -> bool {
        self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.insecure
    }
}

/// The client for `url`, with `tls` applied to a `rediss://` URL.
pub(crate) fn client(url: &str, tls: &Tls) -> Result<redis::Client> {
    let invalid = Error::Invalid;
    if !url.contains("://") {
        // "localhost:6379" is the usual slip; the crate only says it did not parse.
        return Err(invalid(format!(
            "redis URL {url:?} has no scheme: write redis://{url} (rediss:// for TLS, \
             redis+unix:///PATH for a socket)"
        )));
    }
    if !url.starts_with("rediss://") {
        if tls.is_set() {
            return Err(invalid(
                "TLS options (CA, client certificate, insecure) need a rediss:// URL".into(),
            ));
        }
        return redis::Client::open(url).map_err(|e| invalid(format!("redis URL: {e}")));
    }
    // The crate reads "#insecure" on a rediss:// URL as "skip verification".
    let url = if tls.insecure && !url.contains('#') {
        format!("{url}#insecure")
    } else {
        url.to_owned()
    };
    redis::Client::build_with_tls(url.as_str(), tls.certificates()?)
        .map_err(|e| invalid(format!("redis TLS setup: {e}")))
}

impl Tls {
    /// The CA and client certificate, read from their files.
    fn certificates(&self) -> Result<redis::TlsCertificates> {
        let invalid = Error::Invalid;
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(invalid(
                "a client certificate needs its key, and a key its certificate".into(),
            ));
        }
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| invalid(format!("cannot read {}: {e}", p.display())))
        };
        Ok(redis::TlsCertificates {
            client_tls: match (&self.cert_file, &self.key_file) {
                (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                    client_cert: read(c)?,
                    client_key: read(k)?,
                }),
                _ => None,
            },
            root_cert: self.ca_file.as_deref().map(read).transpose()?,
        })
    }
}

/// `template` (a Redis URL) with its host and port replaced and database
/// `db`: the URL of another node, with the same scheme and credentials.
pub(crate) fn url_at(template: &str, host: &str, port: u16, db: i64) -> String {
    let (scheme, _) = template.split_once("://").unwrap_or(("redis", ""));
    let creds = template
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .map(|(c, _)| format!("{c}@"))
        .unwrap_or_default();
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    format!("{scheme}://{creds}{host}:{port}/{db}")
}

impl Store {
    /// Redis need not be up yet: the connection is made lazily and re-made
    /// after every failure, so a store outlives Redis restarts.
    pub fn new(config: &crate::Config, metrics: Arc<Metrics>) -> Result<Store> {
        let (tls, prefix, partitions) = (&config.tls, &config.prefix, config.partitions);
        let (timeout, replica_acks) = (config.redis_timeout, config.replica_acks);
        if !(1..=cluster::MAX_PARTITIONS).contains(&partitions) {
            return Err(Error::Invalid(format!(
                "partitions {partitions} is out of range: 1 to {}",
                cluster::MAX_PARTITIONS
            )));
        }
        let mut cluster = None;
        let (client, sentinel) = match &config.redis {
            Redis::Url(url) => (client(url, tls)?, None),
            Redis::Sentinel(s) => {
                s.check()?;
                (sentinel::unresolved(), Some(s.clone()))
            }
            Redis::Cluster(seeds) => {
                let c = cluster::Cluster::new(seeds.clone(), tls, timeout + LATE_REPLY_GRACE)?;
                let first = c.seed_client()?;
                cluster = Some(c);
                (first, None)
            }
        };
        // Behind Sentinel, ask once now, so that the first calls go to the
        // master; if no sentinel answers, the follower keeps asking.
        let (client, master) = match &sentinel {
            Some(s) => match s.master_now(timeout) {
                Some((host, port)) => (
                    self::client(&s.master_url(&host, port), tls)?,
                    Some((host, port)),
                ),
                None => (client, None),
            },
            None => (client, None),
        };
        let conn = match &cluster {
            Some(c) => Conn::Cluster(c.connection()),
            None => Conn::Single(Self::manager(&client, timeout)?),
        };
        // Acknowledged writes get connections of their own: their WAITs
        // hold up nothing else.
        let ack_conn = match (&cluster, replica_acks) {
            (_, 0) => None,
            (Some(c), _) => Some(Conn::Cluster(c.connection())),
            (None, _) => Some(Conn::Single(Self::manager(&client, timeout)?)),
        };
        let parts = Keys::partitions(prefix, partitions);
        Ok(Store {
            link: std::sync::RwLock::new(Link {
                client,
                conn,
                master,
                gone: Default::default(),
            }),
            tls: tls.clone(),
            sentinel,
            cluster,
            replica_acks,
            acks: coalesce::Coalescer::new(parts.len()),
            ack_conn: std::sync::RwLock::new(ack_conn),
            health: health::Health::new(parts.len(), replica_acks, config.degraded_pushes),
            node_conns: Default::default(),
            pushes: coalesce::Coalescer::new(parts.len()),
            removes: coalesce::Coalescer::new(parts.len()),
            pops: coalesce::Coalescer::new(1),
            prefix: prefix.to_owned(),
            parts,
            parts_checked: OnceCell::new(),
            next_pop: Default::default(),
            ready_hint: Default::default(),
            limited: Default::default(),
            clock: RedisClock::default(),
            timeout,
            metrics,
            connect_error: std::sync::Mutex::new(None),
            relinked: tokio::sync::Notify::new(),
        })
    }

    /// The shared connection to `client`.
    fn manager(client: &redis::Client, timeout: Duration) -> Result<ConnectionManager> {
        let config = ConnectionManagerConfig::new()
            // Retry for ever, at most a second apart: an outage of any
            // length ends with a working connection. Callers are not kept
            // waiting meanwhile: every call is bounded by `timeout`.
            .set_number_of_retries(usize::MAX)
            .set_max_delay(Duration::from_secs(1))
            .set_connection_timeout(Some(timeout))
            // The connection waits longer than callers, so that a reply
            // that comes late is still read (and acted on) rather than lost
            // with a reconnect.
            .set_response_timeout(Some(timeout + LATE_REPLY_GRACE));
        ConnectionManager::new_lazy_with_config(client.clone(), config)
            .map_err(|e| Error::redis("connect", e))
    }

    /// Whether the shards' health is watched: replicas counted for
    /// acknowledged writes, masters of a cluster's partitions looked at.
    pub(crate) fn watches_health(&self) -> bool {
        self.replica_acks > 0 || self.cluster.is_some()
    }

    pub fn behind_sentinel(&self) -> bool {
        self.sentinel.is_some()
    }

    /// The client calls go through (the current master's, behind
    /// Sentinel); the subscriber makes its own connection with it.
    pub fn client(&self) -> redis::Client {
        self.link.read().unwrap().client.clone()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn conn(&self) -> Conn {
        self.link.read().unwrap().conn.clone()
    }

    /// The queue's partitions.
    pub fn parts(&self) -> &[Keys] {
        &self.parts
    }

    /// The partition job `id` lives in.
    pub fn part_of(&self, id: &str) -> usize {
        layout::partition_of(id, self.parts.len())
    }

    /// The keys of the partition job `id` lives in.
    pub fn part(&self, id: &str) -> &Keys {
        &self.parts[self.part_of(id)]
    }

    /// Where a pop for `topics` starts: the partition that last said it
    /// has ready jobs of one of them, or else each call one partition
    /// later than the last.
    fn pop_start(&self, topics: &[String]) -> usize {
        if self.parts.len() > 1 {
            let hints = self.ready_hint.lock().unwrap();
            if let Some(&p) = topics.iter().find_map(|t| hints.get(t)) {
                return p;
            }
        }
        self.next_pop
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            % self.parts.len()
    }

    /// Partition `part` had nothing ready for `topics`: later pops take
    /// turns again.
    pub(crate) fn drop_ready_hint(&self, topics: &[String], part: usize) {
        if self.parts.len() == 1 {
            return;
        }
        let mut hints = self.ready_hint.lock().unwrap();
        for t in topics {
            if hints.get(t) == Some(&part) {
                hints.remove(t);
            }
        }
    }

    /// Partition `part` made jobs of `topic` ready (a ready notice).
    pub(crate) fn note_ready(&self, topic: &str, part: usize) {
        if self.parts.len() == 1 {
            return;
        }
        let mut hints = self.ready_hint.lock().unwrap();
        // Bounded however many topics come and go.
        if hints.len() >= 10_000 && !hints.contains_key(topic) {
            hints.clear();
        }
        hints.insert(topic.to_owned(), part);
    }

    /// Checks the queue's partition count against the one stored in Redis
    /// when it was first split, and refuses to go on with another: jobs
    /// would be looked for in the wrong partition. A queue of one partition
    /// stores nothing (its keys are those of a queue that never had
    /// partitions); a split queue stores its count on first use, and is
    /// refused while the unsplit queue of the same prefix holds jobs.
    async fn check_partitions(&self) -> Result<()> {
        self.parts_checked
            .get_or_try_init(|| async {
                let key = Keys::partition_count(&self.prefix);
                let n = self.parts.len();
                let mut pipe = redis::pipe();
                if n > 1 {
                    pipe.cmd("SET").arg(&key).arg(n).arg("NX").ignore();
                }
                pipe.cmd("GET")
                    .arg(&key)
                    .cmd("EXISTS")
                    .arg(Keys::new(&self.prefix).counts());
                let (stored, unsplit_jobs): (Option<String>, bool) = self
                    .call("read the partition count", pipe.query_async(&mut self.conn()))
                    .await?;
                let stored_n = match stored.as_deref().map(str::parse::<usize>) {
                    None => 1,
                    Some(Ok(m)) => m,
                    Some(Err(_)) => 0,
                };
                if stored_n != n {
                    let m = stored.unwrap_or_else(|| "1".into());
                    return Err(Error::Invalid(format!(
                        "queue {:?} has {m} partitions in Redis, not {n}: start with --partitions {m}, or use another --prefix",
                        self.prefix
                    )));
                }
                if n > 1 && unsplit_jobs {
                    return Err(Error::Invalid(format!(
                        "queue {:?} holds jobs stored without partitions: start with --partitions 1 until they are done, or use another --prefix",
                        self.prefix
                    )));
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// Runs one Redis call for at most the timeout.
    pub async fn call<T>(
        &self,
        op: &'static str,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        self.call_within(op, self.timeout, f).await
    }

    /// Runs one Redis call for at most `limit`, or until the link it went
    /// on is replaced (a failover: nothing comes back on the old master's
    /// connection). Redis's refusals that delayq's scripts and settings
    /// produce become errors of their own.
    async fn call_within<T>(
        &self,
        op: &'static str,
        limit: Duration,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let gone = self.link.read().unwrap().gone.clone();
        tokio::select! {
            r = tokio::time::timeout(limit, f) => match r {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(self.error(op, e)),
                Err(_) => Err(self.timed_out(op)),
            },
            _ = gone.cancelled() => {
                self.metrics.redis_errors.inc([], 1);
                Err(Error::Moved { op })
            }
        }
    }

    /// Redis's refusals that delayq's scripts and settings produce become
    /// errors of their own; failures to reach Redis are counted.
    fn error(&self, op: &'static str, e: redis::RedisError) -> Error {
        let error = match server_error(&e) {
            Some((code, _)) if code == "DQLATE" => Error::Late { op },
            Some((code, _)) if code == "OOM" => Error::Full,
            Some((code, detail)) if code == "DQINVALID" => Error::Invalid(detail),
            _ => Error::redis(op, e),
        };
        if error.is_unavailable() {
            self.metrics.redis_errors.inc([], 1);
        }
        error
    }

    /// Notes why connecting failed (None: it worked), for the errors of
    /// calls that time out meanwhile.
    pub fn note_connect_error(&self, error: Option<String>) {
        *self.connect_error.lock().unwrap() = error;
    }

    /// The timeout error of `op`, with the last connection error if any.
    pub fn timed_out(&self, op: &'static str) -> Error {
        self.metrics.redis_errors.inc([], 1);
        Error::Timeout {
            op,
            after: self.timeout,
            cause: self.connect_error.lock().unwrap().clone(),
        }
    }

    /// The FCALL of `script` with its first key (the schedule) and first
    /// arguments (the key prefix, and the Redis time in microseconds after
    /// which the call must change nothing: when this process stops waiting
    /// for the reply; 0 before the clock is known). The caller adds the
    /// script's own arguments.
    ///
    /// On a cluster the call also declares the partition's `moving` key,
    /// which never exists: while the partition's slot is being migrated,
    /// Redis answers TRYAGAIN (or ASK, then TRYAGAIN) instead of running
    /// the script on half of its keys, and the client retries.
    pub fn fcall(&self, script: &Script, part: &Keys) -> Cmd {
        self.fcall_until(script, part, Instant::now() + self.timeout)
    }

    /// [`fcall`](Self::fcall) with the caller's own deadline.
    pub(crate) fn fcall_until(&self, script: &Script, part: &Keys, deadline: Instant) -> Cmd {
        let deadline = self.clock.at(deadline).unwrap_or(0);
        library::fcall(script, part, self.cluster.is_some(), deadline)
    }

    /// Runs a script call, waiting at most the timeout.
    pub async fn run(&self, op: &'static str, cmd: &Cmd) -> Result<(Status, Fields)> {
        self.run_within(op, self.timeout, cmd).await
    }

    /// Runs a script call, waiting at most `limit`; loads the function
    /// library first when Redis does not have it (a new or flushed server).
    pub async fn run_within(
        &self,
        op: &'static str,
        limit: Duration,
        cmd: &Cmd,
    ) -> Result<(Status, Fields)> {
        self.check_partitions().await?;
        if self.clock.now_us().is_none() {
            // Without a reading this call goes without a deadline; the
            // next one will have it.
            let _ = self.read_clock().await;
        }
        let reply: redis::Value = match self
            .call_within(op, limit, cmd.query_async(&mut self.conn()))
            .await
        {
            Err(Error::Redis { source, .. }) if library::is_missing(&source) => {
                self.load_functions().await?;
                self.call_within(op, limit, cmd.query_async(&mut self.conn()))
                    .await?
            }
            r => r?,
        };
        Fields::parse(op, reply)
    }

    /// Runs script calls in one pipeline (one round trip); each is still
    /// its own atomic call. With `then_wait`, the pipeline's last command is
    /// a WAIT, whose count of replicas comes back apart.
    pub async fn run_pipeline(
        &self,
        op: &'static str,
        pipe: &redis::Pipeline,
        then_wait: bool,
    ) -> Result<(Vec<(Status, Fields)>, Option<usize>)> {
        self.run_pipeline_on(op, pipe, then_wait, &mut self.conn())
            .await
    }

    /// [`run_pipeline`](Self::run_pipeline) on a given connection.
    async fn run_pipeline_on(
        &self,
        op: &'static str,
        pipe: &redis::Pipeline,
        then_wait: bool,
        conn: &mut Conn,
    ) -> Result<(Vec<(Status, Fields)>, Option<usize>)> {
        self.check_partitions().await?;
        let replies: Vec<redis::Value> = match self.call(op, pipe.query_async(conn)).await {
            Err(Error::Redis { source, .. }) if library::is_missing(&source) => {
                self.load_functions().await?;
                self.call(op, pipe.query_async(conn)).await?
            }
            r => r?,
        };
        let mut replies = replies;
        let acked = if then_wait {
            match replies.pop() {
                Some(redis::Value::Int(n)) => Some(n.max(0) as usize),
                other => return Err(Error::protocol(op, format!("WAIT replied {other:?}"))),
            }
        } else {
            None
        };
        let parsed = replies
            .into_iter()
            .map(|r| Fields::parse(op, r))
            .collect::<Result<_>>()?;
        Ok((parsed, acked))
    }

    /// Runs calls of `script` on partition `part`, each its own atomic
    /// call. With replica acks on, they go in the partition's next
    /// acknowledged batch ([`acks`]); otherwise in one pipeline on the
    /// shared connection.
    ///
    /// On a shard with fewer replicas than acks ask for ([`health`]), what
    /// adds jobs (a script not allowed when Redis is full: push, tick,
    /// reschedule) follows the degraded-push policy, refused before it is
    /// sent by default; everything else goes on without waiting for
    /// replicas. A write acknowledged by too few replicas fails only if it
    /// adds jobs and degraded pushes are refused (it was written: pushing
    /// again is safe); a pop, finish or nack keeps its result, so no lease
    /// is stranded and no attempt burnt.
    pub(crate) async fn run_acked(
        &self,
        script: &Script,
        part: usize,
        cmds: Vec<Cmd>,
        limit: Duration,
    ) -> Result<Vec<(Status, Fields)>> {
        let op = script.name;
        let adds_jobs = !script.when_full;
        let wanted = self.replica_acks;
        let degraded = self.health.degraded(part);
        if let (Some((shard, replicas)), true) = (&degraded, adds_jobs) {
            if self.health.policy == health::DegradedPushes::Refuse {
                return Err(Error::Degraded {
                    shard: shard.clone(),
                    replicas: *replicas,
                    wanted,
                });
            }
        }
        if wanted == 0 || degraded.is_some() {
            if let [cmd] = cmds.as_slice() {
                return Ok(vec![self.run_within(op, limit, cmd).await?]);
            }
            let mut pipe = redis::pipe();
            for c in cmds {
                pipe.add_command(c);
            }
            return Ok(self.run_pipeline(op, &pipe, false).await?.0);
        }
        self.check_partitions().await?;
        let route = coalesce::AckRoute {
            conn: self.ack_conn.read().unwrap().clone().expect("acks are on"),
            wanted,
            wait_ms: self.timeout.as_millis() as u64 / 2,
        };
        let mut reloaded = false;
        loop {
            let to = self.node_conn(part).await;
            let submits = cmds.iter().map(|cmd| {
                let write = coalesce::AckedWrite {
                    cmd: cmd.clone(),
                    conn: to.clone(),
                    deadline: Instant::now() + limit,
                };
                self.acks.submit(&route, part, write, limit)
            });
            let sent = self
                .call_within(op, limit, async {
                    Ok::<_, redis::RedisError>(futures::future::join_all(submits).await)
                })
                .await;
            let mut values = Vec::with_capacity(cmds.len());
            let mut acked = wanted;
            let replies = sent.and_then(|replies| {
                replies
                    .into_iter()
                    .map(|r| {
                        r.map_err(|e| match e {
                            Error::Redis { source, .. } => self.error(op, source),
                            e => e,
                        })
                    })
                    .collect::<Result<Vec<_>>>()
            });
            match replies {
                Ok(replies) => {
                    for (v, n) in replies {
                        acked = acked.min(n);
                        values.push(v);
                    }
                }
                Err(e) => {
                    if e.is_unavailable() {
                        self.drop_node_conn(part);
                    }
                    return Err(e);
                }
            }
            let mut out = Vec::with_capacity(values.len());
            let mut missing = false;
            for v in values {
                match v.extract_error() {
                    Ok(v) => out.push(Fields::parse(op, v)?),
                    Err(e) if library::is_missing(&e) && !reloaded => missing = true,
                    Err(e) => return Err(self.error(op, e)),
                }
            }
            if missing {
                if !out.is_empty() {
                    return Err(Error::protocol(
                        op,
                        "functions missing on part of a batch".into(),
                    ));
                }
                // Nothing ran: load the functions and send them all again.
                self.load_functions().await?;
                reloaded = true;
                continue;
            }
            if acked < wanted {
                self.health.short_of_replicas(part, acked);
                if adds_jobs && self.health.policy == health::DegradedPushes::Refuse {
                    return Err(Error::Unreplicated { acked, wanted });
                }
            }
            return Ok(out);
        }
    }

    /// Loads the function library; on a cluster, into every master (a
    /// master that is new, or a replica promoted since, may lack it).
    /// On a cluster, a connection to the master of partition `part` as the
    /// health watch last saw it (None: not a cluster, or not known yet:
    /// the cluster connection routes it then). A master that no longer
    /// owns the slot answers MOVED, and the watch corrects the map within
    /// a second.
    async fn node_conn(&self, part: usize) -> Option<conn::Conn> {
        self.cluster.as_ref()?;
        let node = self.health.node(part)?;
        if let Some(c) = self.node_conns.lock().unwrap().get(&node) {
            return Some(conn::Conn::Node(c.clone()));
        }
        let (host, port) = node.rsplit_once(':')?;
        let client = self.node_client(host, port.parse().ok()?).ok()?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout + LATE_REPLY_GRACE));
        let c = tokio::time::timeout(
            self.timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .ok()?
        .ok()?;
        self.node_conns.lock().unwrap().insert(node, c.clone());
        Some(conn::Conn::Node(c))
    }

    /// Forgets the connection to a master that failed.
    fn drop_node_conn(&self, part: usize) {
        if let Some(node) = self.health.node(part) {
            self.node_conns.lock().unwrap().remove(&node);
        }
    }

    async fn load_functions(&self) -> Result<()> {
        let loaded: redis::RedisResult<redis::Value> =
            library::load_cmd().query_async(&mut self.conn()).await;
        match loaded {
            Ok(_) => {
                tracing::info!("loaded delayq's functions into redis");
                Ok(())
            }
            Err(e) => Err(Error::redis("load functions", e)),
        }
    }

    /// Connects once, on a connection of its own, and PINGs: the real cause
    /// when that fails (refused, unknown host, wrong password, TLS), where
    /// the shared connection, which retries for ever, can only time out.
    pub async fn probe(&self) -> Result<()> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        if self.sentinel.is_some() {
            self.follow_master().await?;
        }
        if self.cluster.is_some() {
            // Each master, on a connection of its own: the first failure
            // is named with its address.
            for (host, port) in self.masters().await? {
                let client = self.node_client(&host, port)?;
                let attempt = async {
                    let mut c = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?;
                    redis::cmd("PING").query_async::<String>(&mut c).await
                };
                self.call("connect", attempt)
                    .await
                    .map_err(|e| Error::Invalid(format!("cluster master {host}:{port}: {e}")))?;
            }
            return self.check_partitions().await;
        }
        let client = self.client();
        let attempt = async {
            let mut c = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("PING").query_async::<String>(&mut c).await
        };
        self.call("connect", attempt).await?;
        self.check_partitions().await
    }

    /// Redis time now (the clock's estimate, which never runs ahead), in
    /// microseconds.
    pub(crate) async fn redis_time_us(&self) -> Result<i64> {
        if let Some(now) = self.clock.now_us() {
            return Ok(now);
        }
        self.read_clock().await?;
        self.clock
            .now_us()
            .ok_or_else(|| Error::protocol("read the clock", "no reading".into()))
    }

    /// Reads Redis time once, so that deadlines can be given from the first
    /// call on (later readings come with dispatch and pop replies).
    async fn read_clock(&self) -> Result<()> {
        let sent = Instant::now();
        let (s, us): (i64, i64) = self
            .call(
                "read the clock",
                redis::cmd("TIME").query_async(&mut self.conn()),
            )
            .await?;
        self.clock.observe(sent, Instant::now(), s * 1_000_000 + us);
        Ok(())
    }
}
