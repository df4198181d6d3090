//! `delayq serve`: the HTTP server over one [`Queue`].

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use delayq::defaults;
use delayq::duration::parse_duration;
use delayq::http::{self, AppState, ServerConfig};
use delayq::webhook;
use delayq::{Config, DegradedPushes, Queue, Redis, Sentinel, Shutdown, Tls};
use tokio::net::TcpListener;

use super::config::{self, Topics};
use super::private_redis::PrivateRedis;
use super::redis_checks;
use super::signals::Signals;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Binds to loopback unless told otherwise.
    #[arg(long, env = "DELAYQ_LISTEN", default_value = defaults::LISTEN)]
    listen: String,

    /// Not a flag of delayq: caught to point at --listen (clap would
    /// suggest a flag that merely looks alike).
    #[arg(long, hide = true)]
    port: Option<String>,

    /// Redis to use (redis://HOST:PORT/DB, rediss://... for TLS,
    /// redis+unix:///PATH).
    /// Without it, delayq starts a private redis-server in --data-dir.
    #[arg(long, env = "DELAYQ_REDIS")]
    redis: Option<String>,

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
    redis_sentinel: Option<String>,

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
    redis_cluster: Option<String>,

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
    partitions: Option<u16>,

    /// The master's name in the sentinels' configuration.
    #[arg(
        long,
        env = "DELAYQ_SENTINEL_MASTER",
        value_name = "NAME",
        requires = "redis_sentinel"
    )]
    sentinel_master: Option<String>,

    /// Database on the master found through Sentinel.
    #[arg(
        long,
        env = "DELAYQ_SENTINEL_DB",
        default_value_t = 0,
        requires = "redis_sentinel"
    )]
    sentinel_db: i64,

    /// Acknowledge pushes, pops, finishes and nacks only once this many
    /// replicas have them (Redis WAIT): a failover then loses no
    /// acknowledged job and hands none out twice. 0: do not wait.
    #[arg(long, env = "DELAYQ_REPLICA_ACKS", default_value_t = defaults::REPLICA_ACKS)]
    replica_acks: usize,

    /// With --replica-acks: what pushes do when their shard has fewer
    /// connected replicas than that (its replica died, or was promoted and
    /// has none yet). "refuse" (503 naming the shard; nothing written) or
    /// "accept" (taken unreplicated, with a warning: a second failure
    /// before a replica is back loses them). Pops, finishes and nacks go on
    /// either way.
    #[arg(
        long,
        env = "DELAYQ_DEGRADED_PUSHES",
        value_name = "refuse|accept",
        default_value = "refuse"
    )]
    degraded_pushes: DegradedPushes,

    /// TLS: check Redis's certificate against this CA (PEM file) instead of
    /// the system's roots.
    #[arg(long, env = "DELAYQ_REDIS_CA", value_name = "FILE")]
    redis_ca: Option<PathBuf>,

    /// TLS: client certificate (PEM file), for a Redis that asks for one.
    #[arg(
        long,
        env = "DELAYQ_REDIS_CERT",
        value_name = "FILE",
        requires = "redis_key"
    )]
    redis_cert: Option<PathBuf>,

    /// TLS: the client certificate's key (PEM file).
    #[arg(
        long,
        env = "DELAYQ_REDIS_KEY",
        value_name = "FILE",
        requires = "redis_cert"
    )]
    redis_key: Option<PathBuf>,

    /// TLS: accept any certificate from Redis. For self-signed test setups
    /// only; delayq says so in its log.
    #[arg(long, env = "DELAYQ_REDIS_INSECURE")]
    redis_insecure: bool,

    /// Data directory of the private redis-server (when --redis is not set),
    /// relative to the working directory (the packaged service: /var/lib/delayq).
    #[arg(long, env = "DELAYQ_DATA_DIR", default_value = defaults::DATA_DIR)]
    data_dir: PathBuf,

    /// Key prefix; every key delayq writes is "{PREFIX}:...".
    #[arg(long, env = "DELAYQ_PREFIX", default_value = defaults::PREFIX)]
    prefix: String,

    /// How long /pop holds a request when nothing is ready.
    /// (The compatible /pop only: /v1/pop says how long it waits in its
    /// own `wait_ms`.)
    #[arg(long, env = "DELAYQ_POP_TIMEOUT", default_value = defaults::POP_TIMEOUT.text, value_parser = positive_duration)]
    pop_timeout: Duration,

    /// How long one Redis call may take before the request fails.
    #[arg(long, env = "DELAYQ_REDIS_TIMEOUT", default_value = defaults::REDIS_TIMEOUT.text, value_parser = positive_duration)]
    redis_timeout: Duration,

    /// Retry intervals for jobs pushed without a policy, e.g. "2m,10m,1h".
    /// Without it (and without --default-max-attempts) a failed job is
    /// tried for ever: again at once after its lease runs out, as
    /// ouqiang/delay-queue does; after a nack without a delay, after 1s,
    /// 5s, 30s, 2m, 10m, 30m, 1h, 2h, 4h, then 8h each time.
    #[arg(long, env = "DELAYQ_DEFAULT_RETRY", default_value = "")]
    default_retry: String,

    /// Most attempts for jobs pushed without a policy.
    #[arg(long, env = "DELAYQ_DEFAULT_MAX_ATTEMPTS")]
    default_max_attempts: Option<u32>,

    /// A topic's default policy: TOPIC=INTERVALS[;max=N], e.g.
    /// "notify=2m,10m,10m,1h,2h,6h,15h" or "sms=30s;max=3". Repeatable
    /// (the env var takes several separated by spaces).
    #[arg(
        long = "topic-retry",
        env = "DELAYQ_TOPIC_RETRY",
        value_name = "TOPIC=POLICY"
    )]
    topic_retry: Vec<String>,

    /// Topic configuration file (TOML): webhooks, retry policies.
    #[arg(long, env = "DELAYQ_CONFIG")]
    config: Option<PathBuf>,

    /// Deliver a topic's jobs by POST to a URL: TOPIC=URL. Repeatable
    /// (the env var takes several separated by spaces).
    #[arg(long, env = "DELAYQ_WEBHOOK", value_name = "TOPIC=URL")]
    webhook: Vec<String>,

    /// HMAC-SHA256 key for webhook signatures (topics without their own).
    #[arg(long, env = "DELAYQ_WEBHOOK_SECRET", hide_env_values = true)]
    webhook_secret: Option<String>,

    /// Require `Authorization: Bearer <TOKEN>` on every endpoint but
    /// /healthz.
    #[arg(long, env = "DELAYQ_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,

    /// The dashboard at /ui/: on, read-only (it shows but changes
    /// nothing), or off. With --auth-token it asks for the token once and
    /// keeps an HttpOnly cookie.
    #[arg(long, env = "DELAYQ_UI", value_enum, default_value = "on")]
    ui: http::ui::UiMode,

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
    allowed_hosts: Vec<String>,

    /// Most open client connections (each waiting /pop holds one).
    #[arg(long, env = "DELAYQ_MAX_CONNECTIONS", default_value_t = defaults::MAX_CONNECTIONS, value_parser = at_least_one)]
    max_connections: usize,

    /// Log format: text or json.
    #[arg(long, env = "DELAYQ_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,

    /// Export delayq's spans of traced jobs (push, pop, webhook) to an
    /// OpenTelemetry collector: OTLP over HTTP/JSON, POST URL/v1/traces
    /// (e.g. http://127.0.0.1:4318). Off when not set.
    /// (The config file's `otlp_endpoint` too; this wins.)
    #[arg(long, env = "DELAYQ_OTLP_ENDPOINT", value_name = "URL")]
    otlp_endpoint: Option<String>,

    /// Dead letters kept per topic (the oldest beyond are dropped).
    #[arg(long, env = "DELAYQ_DEAD_MAX", default_value_t = defaults::DEAD_MAX)]
    dead_max: usize,

    /// Start even though Redis's maxmemory-policy lets it delete keys that
    /// hold jobs (pushes are still refused until it is fixed).
    #[arg(long, env = "DELAYQ_ALLOW_EVICTING_REDIS")]
    allow_evicting_redis: bool,

    /// Dead letters older than this are dropped.
    #[arg(long, env = "DELAYQ_DEAD_MAX_AGE", default_value = defaults::DEAD_MAX_AGE.text, value_parser = positive_duration)]
    dead_max_age: Duration,

    /// Keep a finished job's record (state finished: when, by which
    /// attempt, the last error; not the body) for this long, e.g. 7d; the
    /// config file's keep_finished sets it per topic. Without it a finished
    /// job is gone at once.
    #[arg(long, env = "DELAYQ_KEEP_FINISHED", value_name = "DURATION", value_parser = config::parse_keep_finished, allow_hyphen_values = true)]
    keep_finished: Option<Duration>,

    /// Write the event stream (GET /v1/events, `delayq events`): pushed,
    /// fired, delivered, finished, failed, retried, dead. Off by default
    /// (the config file's `events = true` turns it on too).
    #[arg(long, env = "DELAYQ_EVENTS")]
    events: bool,

    // Not a default_value: the config file's events_kept applies when the
    // flag is not given.
    #[arg(long, env = "DELAYQ_EVENTS_KEPT", value_name = "N", value_parser = events_kept,
        help = format!(
            "About how many events each partition's stream keeps (the newest); a reader may resume \
             within them. Default {} (config file: events_kept).",
            defaults::EVENTS_KEPT
        ))]
    events_kept: Option<u64>,
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

/// A count of at least one.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

impl ServeArgs {
    fn topics(&self) -> Result<Topics> {
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

/// Refuses to start beside a running instance of the queue with another
/// events setting: whichever held the dispatcher lease without the stream
/// would leave holes in it (no `fired`, and no gap said). The setting
/// changes by stopping every instance, then starting them with the new one.
async fn same_events_setting(queue: &Queue, events: bool, prefix: &str) -> Result<()> {
    let running = queue
        .instances()
        .await
        .context("reading the running instances")?;
    let Some(other) = running
        .iter()
        .find(|i| i.events.is_some_and(|e| e != events))
    else {
        return Ok(());
    };
    let (theirs, ours) = match events {
        true => ("without", "with"),
        false => ("with", "without"),
    };
    bail!(
        "instance {} ({}) of queue {prefix:?} runs {theirs} --events and this one would run {ours}:          every instance of a queue writes the event stream or none does (one without it leaves holes in the others').          Start this one {theirs} --events (DELAYQ_EVENTS, or `events` in the config file),          or stop every instance and start them all with the new setting",
        other.id,
        other.listen,
    )
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

/// Writes the config file's rate limits and recurring schedules to Redis
/// where they differ from what it holds: an unchanged schedule keeps its
/// ticks (a restart must not reset them).
async fn apply_topic_state(
    queue: &Queue,
    rates: &[(String, delayq::RateLimit)],
    recurring: &[(String, delayq::Recurring)],
) -> Result<()> {
    let held = queue.rates().await.context("reading rate limits")?;
    for (topic, limit) in rates {
        if held.get(topic) != Some(limit) {
            queue
                .set_rate(topic, *limit)
                .await
                .with_context(|| format!("setting the rate limit of {topic}"))?;
            tracing::info!(%topic, per_second = limit.per_second, burst = limit.burst, "rate limit set from the config file");
        }
    }
    for (name, schedule) in recurring {
        let current = queue
            .recurring(name)
            .await
            .with_context(|| format!("reading recurring schedule {name}"))?;
        if current.map(|c| c.schedule).as_ref() != Some(schedule) {
            queue
                .put_recurring(name, schedule)
                .await
                .with_context(|| format!("putting recurring schedule {name}"))?;
            tracing::info!(%name, cron = %schedule.cron, timezone = %schedule.timezone, "recurring schedule put from the config file");
        }
    }
    Ok(())
}

pub async fn run(args: ServeArgs) -> Result<()> {
    raise_open_files_limit();
    // Take over SIGTERM and SIGINT first: from here on they stop delayq
    // cleanly (the private redis-server with it), even during start-up.
    let signals = Signals::install()?;
    // Check the whole configuration before starting anything.
    if let Some(port) = &args.port {
        anyhow::bail!(
            "serve has no --port: give the address and port with --listen, e.g. --listen 127.0.0.1:{port} \
             (or 0.0.0.0:{port} for every interface)"
        );
    }
    let topics = args.topics()?;
    delayq::validate_prefix(&args.prefix).map_err(anyhow::Error::msg)?;
    let private = match (&args.redis, &args.redis_sentinel, &args.redis_cluster) {
        (None, None, None) => Some(PrivateRedis::start(&args.data_dir).await?),
        _ => None,
    };
    let redis_url = match (
        &args.redis,
        &args.redis_sentinel,
        &args.redis_cluster,
        &private,
    ) {
        (Some(url), ..) => url.clone(),
        (None, Some(sentinels), ..) => format!("sentinel {sentinels}"),
        (None, None, Some(seeds), _) => format!("cluster {seeds}"),
        (None, None, None, Some(p)) => p.url().to_owned(),
        (None, None, None, None) => unreachable!("a private redis-server without --redis"),
    };
    let served = serve(&args, topics, redis_url, signals).await;
    // However serving ended (a start-up failure included), the private
    // redis-server does not outlive delayq.
    if let Some(p) = private {
        p.stop().await;
    }
    served
}

async fn serve(
    args: &ServeArgs,
    topics: Topics,
    redis_url: String,
    signals: Signals,
) -> Result<()> {
    let shutdown = Shutdown::new();
    if args.redis_insecure {
        tracing::warn!("--redis-insecure: redis's TLS certificate is NOT checked; anyone in between can read and change jobs");
    }
    if args.degraded_pushes == DegradedPushes::Accept && args.replica_acks == 0 {
        anyhow::bail!("--degraded-pushes accept needs --replica-acks N (without replica acks every push is taken)");
    }
    let sentinel = args.redis_sentinel.as_ref().map(|urls| Sentinel {
        sentinels: urls.split(',').map(|u| u.trim().to_owned()).collect(),
        master: args.sentinel_master.clone().unwrap_or_default(),
        db: args.sentinel_db,
    });
    let redis_cluster: Vec<String> = args
        .redis_cluster
        .iter()
        .flat_map(|s| s.split(','))
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    let partitions = match (args.partitions, redis_cluster.is_empty()) {
        (Some(n), _) => n as usize,
        (None, true) => defaults::PARTITIONS,
        (None, false) => defaults::CLUSTER_PARTITIONS,
    };
    // A single server is asked whether it can run delayq's scripts (a
    // Sentinel's or a cluster's masters are not, yet).
    let single = sentinel.is_none() && redis_cluster.is_empty();
    let redis = match (sentinel, redis_cluster.is_empty()) {
        (Some(s), _) => Redis::Sentinel(s),
        (None, false) => Redis::Cluster(redis_cluster),
        (None, true) => Redis::Url(redis_url.clone()),
    };
    let events = args.events || topics.events.unwrap_or(false);
    let queue = Queue::connect(Config {
        redis,
        partitions,
        replica_acks: args.replica_acks,
        degraded_pushes: args.degraded_pushes,
        tls: Tls {
            ca_file: args.redis_ca.clone(),
            cert_file: args.redis_cert.clone(),
            key_file: args.redis_key.clone(),
            insecure: args.redis_insecure,
        },
        prefix: args.prefix.clone(),
        redis_timeout: args.redis_timeout,
        default_retry: topics.default_retry,
        topic_retry: topics.topic_retry,
        dead_max_per_topic: args.dead_max,
        dead_max_age: args.dead_max_age,
        keep_finished: args.keep_finished.or(topics.keep_finished),
        topic_keep_finished: topics.topic_keep_finished,
        events,
        events_kept: args
            .events_kept
            .or(topics.events_kept)
            .unwrap_or(defaults::EVENTS_KEPT),
        shutdown: shutdown.clone(),
        ..Config::default()
    })
    .context("invalid configuration")?;
    redis_checks::connect(&queue, &redis_url).await?;
    if single {
        let tls = Tls {
            ca_file: args.redis_ca.clone(),
            cert_file: args.redis_cert.clone(),
            key_file: args.redis_key.clone(),
            insecure: args.redis_insecure,
        };
        super::doctor::refuse_unscriptable(&redis_url, &tls).await?;
    }
    redis_checks::settings_at_start(&queue, args.allow_evicting_redis).await?;
    same_events_setting(&queue, events, &args.prefix).await?;
    apply_topic_state(&queue, &topics.rates, &topics.recurring).await?;

    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    // On stdout, for scripts and tests that start delayq on port 0.
    // A closed stdout is no reason not to serve.
    let _ = writeln!(std::io::stdout(), "delayq listening on {addr}");
    if args.ui != http::ui::UiMode::Off {
        // A wildcard address is no place a browser can open.
        let mut shown = addr;
        if shown.ip().is_unspecified() {
            shown.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let _ = writeln!(std::io::stdout(), "dashboard: http://{shown}/ui/");
    }
    tracing::info!(%addr, prefix = %args.prefix, redis = %redis_checks::redact(&redis_url), "delayq serving");
    if args.auth_token.is_some() {
        tracing::info!("authentication on: every endpoint but /healthz needs the bearer token from --auth-token (DELAYQ_AUTH_TOKEN)");
    } else if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "listening beyond loopback without --auth-token: anyone who reaches this port can push, pop and delete jobs; set --auth-token (DELAYQ_AUTH_TOKEN) or listen on 127.0.0.1");
    }

    tokio::spawn(signals.stop(shutdown.clone()));
    tokio::spawn(redis_checks::settings_every_minute(
        queue.clone(),
        args.allow_evicting_redis,
        shutdown.clone(),
    ));
    let webhooks = topics
        .webhooks
        .iter()
        .map(|h| (h.topic.clone(), h.shown_host()))
        .collect();
    // This instance's heartbeat: `GET /v1/instances` lists it while it runs.
    let instance = delayq::instances::this_process(
        &hostname(),
        &addr.to_string(),
        topics.webhooks.iter().map(|h| h.consumer()).collect(),
        events,
    );
    let heartbeat = tokio::spawn(delayq::instances::run(
        queue.clone(),
        instance,
        shutdown.clone(),
    ));
    let hooks: Vec<_> = topics
        .webhooks
        .into_iter()
        .map(|hook| {
            tracing::info!(topic = %hook.topic, url = %hook.url, retry = ?queue.retry_policy_for(&hook.topic), "delivering topic by webhook");
            if hook.secret.is_none() {
                tracing::warn!(topic = %hook.topic, "webhook topic with no secret: its requests are not signed, so its receiver cannot tell delayq's requests from anyone's; set secret or secret_env in the config file, or --webhook-secret (DELAYQ_WEBHOOK_SECRET)");
            }
            tokio::spawn(webhook::run(queue.clone(), hook, shutdown.clone()))
        })
        .collect();
    let state = AppState {
        queue,
        server: ServerConfig {
            pop_timeout: args.pop_timeout,
            max_connections: args.max_connections,
            auth_token: args.auth_token.clone().map(webhook::Secret),
            ui: args.ui,
            allowed_hosts: allowed_hosts(&args.listen, &args.allowed_hosts),
            webhooks,
            ..ServerConfig::default()
        },
    };
    http::serve(listener, state, shutdown).await?;
    // Deliveries in flight end within their timeout.
    for h in hooks {
        let _ = h.await;
    }
    let _ = heartbeat.await;
    tracing::info!("delayq stopped");
    Ok(())
}

/// `--allowed-host`, and the `--listen` address's host when it is a name.
fn allowed_hosts(listen: &str, listed: &[String]) -> http::origin::AllowedHosts {
    let mut names: Vec<String> = listed
        .iter()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect();
    if let Some((host, _)) = listen.rsplit_once(':') {
        if !host.is_empty() {
            names.push(host.to_owned());
        }
    }
    http::origin::AllowedHosts(names)
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// This machine's host name ("" if unreadable).
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Every client connection is a file descriptor: raise the soft limit to the
/// hard one, so thousands of long-polls do not run out.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
