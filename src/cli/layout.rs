//! `delayq layout`: which storage layout each partition's writers write
//! and which layout each running instance reads; `--hold 2` or `--hold 1`
//! goes back (delayed jobs into the shared schedule; with 1, bodies whole)
//! before an older build starts, `--release` lets the upkeep raise it
//! again.

use anyhow::{Context, Result};
use clap::Args;
use delayq::{defaults, Config, Queue, Redis};

use super::redis_checks;

#[derive(Args, Debug)]
pub struct LayoutArgs {
    /// The Redis, as for `serve`.
    #[arg(long, env = "DELAYQ_REDIS", default_value = defaults::REDIS_URL)]
    redis: String,

    /// A Redis Cluster's seed nodes, comma-separated, as for `serve`.
    #[arg(
        long,
        env = "DELAYQ_REDIS_CLUSTER",
        value_name = "URLS",
        conflicts_with = "redis"
    )]
    redis_cluster: Option<String>,

    /// The queue's partition count, as for `serve`.
    #[arg(long, env = "DELAYQ_PARTITIONS", value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..=delayq::MAX_PARTITIONS as i64))]
    partitions: Option<u16>,

    /// delayq's key prefix, as for `serve`.
    #[arg(long, env = "DELAYQ_PREFIX", default_value = defaults::PREFIX)]
    prefix: String,

    /// Hold every partition at this layout (1: bodies whole, what the
    /// oldest builds read; 2: long bodies in pieces; 3: besides, delayed
    /// jobs in their topic schedules only); holding 2 or 1 puts every
    /// delayed job back into the shared schedule, and 1 rewrites every
    /// pieced body whole. The upkeep leaves a held layout alone.
    #[arg(long, value_name = "N", conflicts_with = "release")]
    hold: Option<u8>,

    /// Let go of a held layout: the upkeep raises it once every running
    /// instance reads the next.
    #[arg(long)]
    release: bool,
}

pub async fn run(args: LayoutArgs) -> Result<()> {
    if let Some(n) = args.hold {
        if !(1..=delayq::queue::LAYOUT).contains(&n) {
            anyhow::bail!(
                "--hold {n}: no such layout; this build knows 1 (bodies whole), 2 (long bodies in pieces) and 3 (delayed jobs in their topic schedules only); nothing was changed"
            );
        }
    }
    let cluster: Vec<String> = (args.redis_cluster.iter())
        .flat_map(|s| s.split(','))
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    let partitions = match (args.partitions, cluster.is_empty()) {
        (Some(n), _) => n as usize,
        (None, true) => defaults::PARTITIONS,
        (None, false) => defaults::CLUSTER_PARTITIONS,
    };
    let redis = if cluster.is_empty() {
        Redis::Url(args.redis.clone())
    } else {
        Redis::Cluster(cluster)
    };
    let queue = Queue::connect(Config {
        redis,
        partitions,
        prefix: args.prefix.clone(),
        // It only reads and sets the layout: the servers dispatch.
        dispatch: false,
        ..Config::default()
    })
    .context("invalid configuration")?;
    redis_checks::connect(&queue, &args.redis).await?;
    if let Some(n) = args.hold {
        let rewritten = queue.hold_layout(n).await.context("holding the layout")?;
        println!(
            "layout held at {n} in every partition; {rewritten} pieced bodies rewritten whole"
        );
    } else if args.release {
        queue
            .release_layout()
            .await
            .context("releasing the layout")?;
        println!("layout released: the partition leaders raise it once every running instance reads the next");
    }
    for p in queue.layouts().await.context("reading the layout")? {
        let held = if p.held { " (held)" } else { "" };
        println!("partition {}: layout {}{held}", p.partition, p.layout);
    }
    for i in queue.instances().await.context("reading the instances")? {
        let old = if i.layout.is_none() {
            " (an older build)"
        } else {
            ""
        };
        println!(
            "instance {} ({}): reads layout {}{old}",
            i.id,
            i.version,
            i.layout_read()
        );
    }
    queue.close().await;
    Ok(())
}
