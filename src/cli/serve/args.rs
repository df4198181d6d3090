//! `delayq serve`'s flags: each with its environment variable and its
//! default (from `delayq::defaults`), and their checks.

use super::*;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Binds to loopback unless told otherwise.
    #[arg(long, env = "DELAYQ_LISTEN", default_value = defaults::LISTEN)]
    pub(super) listen: String,

    /// Not a flag of delayq: caught to point at --listen (clap would
    /// suggest a flag that merely looks alike).
    #[arg(long, hide = true)]
    pub(super) port: Option<String>,

    /// Redis to use (redis://HOST:PORT/DB, rediss://... for TLS,
    /// redis+unix:///PATH).
    /// Without it, delayq starts a private redis-server in --data-dir.
    #[arg(long, env = "DELAYQ_REDIS")]
    pub(super) redis: Option<String>,

    /// Reach Redis through Sentinel: the sentinels' URLs, comma-separated
    /// (redis://HOST:PORT,...; a user and password in them are used for the
    /// master too). Needs --sentinel-master.
    #[arg(
        long,
        env = "DELAYQ_REDIS_SENTINEL",
        value_name = "URLS",
        conflicts_with = "redis",
        requires = "sentinel_master"
    )]
    pub(super) redis_sentinel: Option<String>,

    /// Use a Redis Cluster: seed nodes' URLs, comma-separated
    /// (redis://HOST:PORT,...; rediss:// for TLS; a user and password in
    /// the first are used for every node). The queue is split into
    /// --partitions partitions spread over the masters.
    #[arg(
        long,
        env = "DELAYQ_REDIS_CLUSTER",
        value_name = "URLS",
        conflicts_with_all = ["redis", "redis_sentinel"]
    )]
    pub(super) redis_cluster: Option<String>,

    // The help states the defaults from the consts, so it is not a doc
    // comment.
    #[arg(long, env = "DELAYQ_PARTITIONS", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=delayq::MAX_PARTITIONS as i64),
        help = format!(
            "Split the queue into this many partitions, each in a hash slot of its own (on a cluster: \
             spread evenly over the masters; more partitions than masters lets masters added later \
             take a share). Fixed when the queue is first used: a different count later is refused. \
             Default: {} on a single Redis, {} on a cluster.",
            defaults::PARTITIONS,
            defaults::CLUSTER_PARTITIONS
        ))]
    pub(super) partitions: Option<u16>,

    /// The master's name in the sentinels' configuration.
    #[arg(
        long,
        env = "DELAYQ_SENTINEL_MASTER",
        value_name = "NAME",
        requires = "redis_sentinel"
    )]
    pub(super) sentinel_master: Option<String>,

    /// Database on the master found through Sentinel.
    #[arg(
        long,
        env = "DELAYQ_SENTINEL_DB",
        default_value_t = 0,
        requires = "redis_sentinel"
    )]
    pub(super) sentinel_db: i64,

    /// Acknowledge a change (push, finish, nack, cancel, delete,
    /// reschedule) only once this many replicas have it (Redis WAIT), and
    /// hand out a popped job only once they have its lease. One they do not
    /// confirm in time is not acknowledged: a finish or cancel answers 504
    /// (written on the master, outcome unknown), a push 503 (push it again),
    /// a pop 503 (nothing handed out; the lease given back). A failover to
    /// a replica that has them (Sentinel and Cluster promote the most
    /// up-to-date one they reach; with more replicas than this, ask for all
    /// of them to rule out promoting one without), also after a network
    /// split, then loses no acknowledged job, hands none out again after
    /// its finish was acknowledged and delivers none after its cancel was.
    /// 0: do not wait (a failover or split may lose acknowledged pushes and
    /// repeat finished jobs; never early, never unexpected).
    #[arg(long, env = "DELAYQ_REPLICA_ACKS", default_value_t = defaults::REPLICA_ACKS)]
    pub(super) replica_acks: usize,

    /// With --replica-acks: what pushes, pops, finishes, nacks and cancels
    /// do when their shard has fewer connected replicas than that (its
    /// replica died or is cut off, or it was promoted and has none yet).
    /// "refuse" (503 naming the shard; nothing written, nothing handed out,
    /// until a replica is back; a WAIT that comes back short fails the
    /// call) or "accept" (they go on unreplicated, with a warning: a second
    /// failure or a split before a replica is back can lose pushes and
    /// hand out again jobs whose finish was acknowledged).
    #[arg(
        long,
        env = "DELAYQ_DEGRADED_PUSHES",
        value_name = "refuse|accept",
        default_value = "refuse"
    )]
    pub(super) degraded_pushes: DegradedPushes,

    #[command(flatten)]
    pub(super) tls: RedisTlsArgs,

    /// Data directory of the private redis-server (when --redis is not set),
    /// relative to the working directory (the packaged service: /var/lib/delayq).
    #[arg(long, env = "DELAYQ_DATA_DIR", default_value = defaults::DATA_DIR)]
    pub(super) data_dir: PathBuf,

    /// Key prefix; every key delayq writes is "{PREFIX}:...".
    #[arg(long, env = "DELAYQ_PREFIX", default_value = defaults::PREFIX)]
    pub(super) prefix: String,

    /// How long /pop holds a request when nothing is ready.
    /// (The compatible /pop only: /v1/pop says how long it waits in its
    /// own `wait_ms`.)
    #[arg(long, env = "DELAYQ_POP_TIMEOUT", default_value = defaults::POP_TIMEOUT.text, value_parser = positive_duration)]
    pub(super) pop_timeout: Duration,

    /// How long one Redis call may take before the request fails.
    #[arg(long, env = "DELAYQ_REDIS_TIMEOUT", default_value = defaults::REDIS_TIMEOUT.text, value_parser = positive_duration)]
    pub(super) redis_timeout: Duration,

    /// Retry intervals for jobs pushed without a policy, e.g. "2m,10m,1h".
    /// Without it (and without --default-max-attempts) a failed job is
    /// tried for ever: again at once after its lease runs out, as
    /// ouqiang/delay-queue does; after a nack without a delay, after 1s,
    /// 5s, 30s, 2m, 10m, 30m, 1h, 2h, 4h, then 8h each time.
    #[arg(long, env = "DELAYQ_DEFAULT_RETRY", default_value = "")]
    pub(super) default_retry: String,

    /// Most attempts for jobs pushed without a policy.
    #[arg(long, env = "DELAYQ_DEFAULT_MAX_ATTEMPTS")]
    pub(super) default_max_attempts: Option<u32>,

    /// A topic's default policy: TOPIC=INTERVALS[;max=N], e.g.
    /// "notify=2m,10m,10m,1h,2h,6h,15h" or "sms=30s;max=3". Repeatable
    /// (the env var takes several separated by spaces).
    #[arg(
        long = "topic-retry",
        env = "DELAYQ_TOPIC_RETRY",
        value_name = "TOPIC=POLICY"
    )]
    pub(super) topic_retry: Vec<String>,

    /// Topic configuration file (TOML): webhooks, retry policies.
    #[arg(long, env = "DELAYQ_CONFIG")]
    pub(super) config: Option<PathBuf>,

    /// Deliver a topic's jobs by POST to a URL: TOPIC=URL. Repeatable
    /// (the env var takes several separated by spaces).
    #[arg(long, env = "DELAYQ_WEBHOOK", value_name = "TOPIC=URL")]
    pub(super) webhook: Vec<String>,

    /// HMAC-SHA256 key for webhook signatures (topics without their own).
    #[arg(long, env = "DELAYQ_WEBHOOK_SECRET", hide_env_values = true)]
    pub(super) webhook_secret: Option<String>,

    /// Require `Authorization: Bearer <TOKEN>` on every endpoint but
    /// /healthz.
    #[arg(long, env = "DELAYQ_AUTH_TOKEN", hide_env_values = true)]
    pub(super) auth_token: Option<String>,

    /// The dashboard at /ui/: on, read-only (it shows but changes
    /// nothing), or off. With --auth-token it asks for the token once and
    /// keeps an HttpOnly cookie.
    #[arg(long, env = "DELAYQ_UI", value_enum, default_value = "on")]
    pub(super) ui: http::ui::UiMode,

    /// A name browsers may reach this server by (repeatable; the env var
    /// takes a comma-separated list; `*.example.com` allows every name
    /// under it). Addresses, localhost and the --listen name need no entry;
    /// behind a proxy, list the public name. Requests from browsers that
    /// name another host (DNS rebinding) or come from another site are
    /// refused; clients that are not browsers may use any name.
    #[arg(
        long = "allowed-host",
        env = "DELAYQ_ALLOWED_HOSTS",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub(super) allowed_hosts: Vec<String>,

    /// Most open client connections (each waiting /pop holds one).
    #[arg(long, env = "DELAYQ_MAX_CONNECTIONS", default_value_t = defaults::MAX_CONNECTIONS, value_parser = at_least_one)]
    pub(super) max_connections: usize,

    /// Log format: text or json.
    #[arg(long, env = "DELAYQ_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,

    /// Export delayq's spans of traced jobs (push, pop, webhook) to an
    /// OpenTelemetry collector: OTLP over HTTP/JSON, POST URL/v1/traces
    /// (e.g. http://127.0.0.1:4318). Off when not set.
    /// (The config file's `otlp_endpoint` too; this wins.)
    #[arg(long, env = "DELAYQ_OTLP_ENDPOINT", value_name = "URL")]
    pub(super) otlp_endpoint: Option<String>,

    /// Dead letters kept per topic (the oldest beyond are dropped).
    #[arg(long, env = "DELAYQ_DEAD_MAX", default_value_t = defaults::DEAD_MAX)]
    pub(super) dead_max: usize,

    /// Start even though Redis's maxmemory-policy lets it delete keys that
    /// hold jobs (pushes are still refused until it is fixed).
    #[arg(long, env = "DELAYQ_ALLOW_EVICTING_REDIS")]
    pub(super) allow_evicting_redis: bool,

    /// Dead letters older than this are dropped.
    #[arg(long, env = "DELAYQ_DEAD_MAX_AGE", default_value = defaults::DEAD_MAX_AGE.text, value_parser = positive_duration)]
    pub(super) dead_max_age: Duration,

    /// A delayed job due further ahead than this gets its trigger key (a
    /// key with a TTL) only once the sweep arms it, half of this to all of
    /// it before its due time: 1s to 1d.
    #[arg(long, env = "DELAYQ_TRIGGER_HORIZON", default_value = defaults::TRIGGER_HORIZON.text, value_parser = trigger_horizon)]
    pub(super) trigger_horizon: Duration,

    /// Keep a finished job's record (state finished: when, by which
    /// attempt, the last error; not the body) for this long, e.g. 7d; the
    /// config file's keep_finished sets it per topic. Without it a finished
    /// job is gone at once.
    #[arg(long, env = "DELAYQ_KEEP_FINISHED", value_name = "DURATION", value_parser = config::parse_keep_finished, allow_hyphen_values = true)]
    pub(super) keep_finished: Option<Duration>,

    /// How long a job finished with a result keeps it in a topic that
    /// keeps no finished records (GET /v1/jobs/{id} reads it; not listed
    /// nor counted), and how long a batch that fired or was cancelled
    /// stays readable (then its id is free): 1ms to 365d.
    #[arg(long, env = "DELAYQ_RESULT_RETENTION", default_value = defaults::RESULT_RETENTION.text, value_parser = result_retention)]
    pub(super) result_retention: Duration,

    /// Write the event stream (GET /v1/events, `delayq events`): pushed,
    /// fired, delivered, finished, failed, retried, dead. Off by default
    /// (the config file's `events = true` turns it on too).
    #[arg(long, env = "DELAYQ_EVENTS")]
    pub(super) events: bool,

    // Not a default_value: the config file's events_kept applies when the
    // flag is not given.
    #[arg(long, env = "DELAYQ_EVENTS_KEPT", value_name = "N", value_parser = events_kept,
        help = format!(
            "About how many events each partition's stream keeps (the newest); a reader may resume \
             within them. Default {} (config file: events_kept).",
            defaults::EVENTS_KEPT
        ))]
    pub(super) events_kept: Option<u64>,
}

/// How many events a partition keeps: 1 to the library's maximum.
fn events_kept(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number"))?;
    delayq::queue::check_events_kept(n)?;
    Ok(n)
}

impl ServeArgs {
    /// Where to export spans: the flag, else the config file's key.
    pub fn otlp_endpoint(&self) -> Result<Option<String>> {
        match &self.otlp_endpoint {
            Some(url) => Ok(Some(url.clone())),
            None => config::otlp_endpoint(self.config.as_deref()),
        }
    }
}

/// A duration above zero: a zero timeout or age makes no sense.
fn positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be above 0 (e.g. 500ms, 2s, 1m)".into()),
        d => Ok(d),
    }
}

/// A trigger horizon: 1s to 1d.
fn trigger_horizon(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d < Duration::from_secs(1) || d > defaults::MAX_TRIGGER_HORIZON => {
            Err("must be from 1s to 1d (e.g. 10m, 1h)".into())
        }
        d => Ok(d),
    }
}

/// A result retention: as keep_finished, 1ms to 365d.
fn result_retention(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    delayq::job::check_keep_finished(d).map_err(|e| e.replace("keep_finished", "the retention"))?;
    Ok(d)
}

/// A count of at least one.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

impl ServeArgs {
    pub(super) fn topics(&self) -> Result<Topics> {
        config::load(
            self.config.as_deref(),
            &config::Flags {
                default_retry: &self.default_retry,
                default_max_attempts: self.default_max_attempts,
                topic_retry: &entries(&self.topic_retry, "DELAYQ_TOPIC_RETRY"),
                webhooks: &entries(&self.webhook, "DELAYQ_WEBHOOK"),
                webhook_secret: self.webhook_secret.as_deref(),
            },
        )
    }
}

/// A repeatable flag's values. Without the flag, clap takes its variable
/// as one value: there, entries are separated by white space (neither a
/// policy written without spaces nor a URL holds any).
fn entries(given: &[String], var: &str) -> Vec<String> {
    match (given, std::env::var(var)) {
        ([one], Ok(all)) if *one == all => all.split_whitespace().map(String::from).collect(),
        _ => given.to_vec(),
    }
}
