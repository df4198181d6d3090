//! `delayq serve`: the HTTP server over one [`Queue`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use delayq::duration::parse_duration;
use delayq::http::{self, AppState, ServerConfig};
use delayq::{Config, Queue, RetryPolicy, Shutdown};
use tokio::net::TcpListener;

use super::private_redis::PrivateRedis;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Binds to loopback unless told otherwise.
    #[arg(long, env = "DELAYQ_LISTEN", default_value = "127.0.0.1:9277")]
    listen: String,

    /// Redis to use (redis://HOST:PORT/DB, rediss://..., redis+unix:///PATH).
    /// Without it, delayq starts a private redis-server in --data-dir.
    #[arg(long, env = "DELAYQ_REDIS")]
    redis: Option<String>,

    /// Data directory of the private redis-server (when --redis is not set).
    #[arg(long, env = "DELAYQ_DATA_DIR", default_value = ".delayq")]
    data_dir: PathBuf,

    /// Key prefix; every key delayq writes is "{PREFIX}:...".
    #[arg(long, env = "DELAYQ_PREFIX", default_value = "dq")]
    prefix: String,

    /// How long /pop holds a request when nothing is ready.
    #[arg(long, env = "DELAYQ_POP_TIMEOUT", default_value = "178s", value_parser = parse_duration)]
    pop_timeout: Duration,

    /// How long one Redis call may take before the request fails.
    #[arg(long, env = "DELAYQ_REDIS_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    redis_timeout: Duration,

    /// Retry intervals for jobs pushed without a policy, e.g. "2m,10m,1h".
    /// Without it (and without --default-max-attempts) a failed job is
    /// delivered again at once, for ever, as ouqiang/delay-queue does.
    #[arg(long, env = "DELAYQ_DEFAULT_RETRY", default_value = "")]
    default_retry: String,

    /// Most attempts for jobs pushed without a policy.
    #[arg(long, env = "DELAYQ_DEFAULT_MAX_ATTEMPTS")]
    default_max_attempts: Option<u32>,

    /// A topic's default policy: TOPIC=INTERVALS[;max=N], e.g.
    /// "notify=2m,10m,10m,1h,2h,6h,15h" or "sms=30s;max=3". Repeatable.
    #[arg(long = "topic-retry", value_name = "TOPIC=POLICY")]
    topic_retry: Vec<String>,

    /// Dead letters kept per topic (the oldest beyond are dropped).
    #[arg(long, env = "DELAYQ_DEAD_MAX", default_value_t = 10_000)]
    dead_max: usize,

    /// Dead letters older than this are dropped.
    #[arg(long, env = "DELAYQ_DEAD_MAX_AGE", default_value = "7d", value_parser = parse_duration)]
    dead_max_age: Duration,
}

/// Parses "INTERVALS[;max=N]".
fn parse_policy(text: &str) -> Result<RetryPolicy> {
    let (intervals, max) = match text.split_once(";max=") {
        Some((i, m)) => (
            i,
            Some(
                m.trim()
                    .parse::<u32>()
                    .with_context(|| format!("invalid max attempts in {text:?}"))?,
            ),
        ),
        None => (text, None),
    };
    RetryPolicy::parse(intervals, max).map_err(anyhow::Error::msg)
}

fn retry_config(args: &ServeArgs) -> Result<(RetryPolicy, HashMap<String, RetryPolicy>)> {
    let default = RetryPolicy::parse(&args.default_retry, args.default_max_attempts)
        .map_err(anyhow::Error::msg)
        .context("--default-retry")?;
    let mut topics = HashMap::new();
    for spec in &args.topic_retry {
        let (topic, policy) = spec
            .split_once('=')
            .with_context(|| format!("--topic-retry {spec:?}: expected TOPIC=INTERVALS[;max=N]"))?;
        let policy = parse_policy(policy).with_context(|| format!("--topic-retry {spec:?}"))?;
        topics.insert(topic.trim().to_owned(), policy);
    }
    Ok((default, topics))
}

pub async fn run(args: ServeArgs) -> Result<()> {
    // Check the whole configuration before starting anything.
    retry_config(&args)?;
    let private = match &args.redis {
        Some(_) => None,
        None => Some(PrivateRedis::start(&args.data_dir).await?),
    };
    let redis_url = args
        .redis
        .clone()
        .or_else(|| private.as_ref().map(|p| p.url().to_owned()))
        .expect("either --redis or a private redis-server");

    let (default_retry, topic_retry) = retry_config(&args)?;
    let queue = Queue::connect(Config {
        redis_url,
        prefix: args.prefix.clone(),
        redis_timeout: args.redis_timeout,
        default_retry,
        topic_retry,
        dead_max_per_topic: args.dead_max,
        dead_max_age: args.dead_max_age,
        ..Config::default()
    })
    .context("invalid configuration")?;

    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    // On stdout, for scripts and tests that start delayq on port 0.
    println!("delayq listening on {addr}");
    tracing::info!(%addr, prefix = %args.prefix, "delayq serving");

    let shutdown = Shutdown::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let state = AppState {
        queue,
        server: ServerConfig {
            pop_timeout: args.pop_timeout,
            ..ServerConfig::default()
        },
    };
    http::serve(listener, state, shutdown).await?;
    tracing::info!("delayq stopped");
    if let Some(p) = private {
        p.stop().await;
    }
    Ok(())
}

async fn stop_on_signal(shutdown: Shutdown) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("stopping: answering waiting pops, finishing requests in flight");
    shutdown.trigger();
}
