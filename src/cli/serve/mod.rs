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
use delayq::{Config, DegradedPushes, Queue, Redis, Sentinel, Shutdown};
use tokio::net::TcpListener;

use super::config::{self, Topics};
use super::private_redis::PrivateRedis;
use super::redis_checks;
use super::redis_tls::RedisTlsArgs;
use super::signals::Signals;

mod acl;
mod args;

pub use args::ServeArgs;

/// Refuses to start beside a running instance of the queue with another
/// events setting: whichever led a partition without the stream
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
    if args.tls.redis_insecure {
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
        tls: args.tls.tls(),
        prefix: args.prefix.clone(),
        redis_timeout: args.redis_timeout,
        default_retry: topics.default_retry,
        topic_retry: topics.topic_retry,
        dead_max_per_topic: args.dead_max,
        dead_max_age: args.dead_max_age,
        trigger_horizon: args.trigger_horizon,
        keep_finished: args.keep_finished.or(topics.keep_finished),
        topic_keep_finished: topics.topic_keep_finished,
        result_retention: args.result_retention,
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
        super::doctor::refuse_unscriptable(&redis_url, &args.tls.tls()).await?;
        acl::refuse_unpermitted(&redis_url, &args.tls.tls(), &args.prefix, args.replica_acks)
            .await?;
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

    tokio::spawn(signals.stop(
        shutdown.clone(),
        "answering waiting pops, finishing requests in flight",
    ));
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
            tracing::info!(topic = %hook.topic, url = %hook.url, retry = %queue.retry_policy_for(&hook.topic), "delivering topic by webhook");
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
