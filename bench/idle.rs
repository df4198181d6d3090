//! What an idle queue costs Redis in commands: one job an hour away, 8
//! consumers waiting, no recurring schedule. delayq (the library's queue,
//! its instance heartbeat as `delayq serve` writes it, 8 blocking pops)
//! and BullMQ's Worker (concurrency 8, one delayed job an hour away), each
//! on a fresh redis-server, side by side in the same window; then delayq on
//! a three-master cluster with 12 partitions. Commands are `INFO
//! commandstats` deltas over the window, as Redis counts them (the
//! commands scripts call included; the harness's own INFO, one per node
//! between its two readings, left out).
//!
//! ```text
//! cargo run --release --example bench -- --only idle [--idle-secs 600]
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use delayq::{Config, Queue, Shutdown};
use serde_json::json;

use crate::common::{bullmq_on, id, new_job, push, HOUR};
use crate::Redis;

const CONSUMERS: usize = 8;
/// Before the window: connections made, scripts loaded, the first looks
/// and heartbeats done.
const WARM: Duration = Duration::from_secs(5);
const CLUSTER_PARTITIONS: usize = 12;

/// Calls per command (`cmdstat_<name>:calls=N,...`) over `nodes`.
fn commandstats(nodes: &[&Redis]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for n in nodes {
        let mut c = n.client().get_connection().unwrap();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut c)
            .unwrap();
        for line in info.lines() {
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let calls = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            *out.entry(name.to_owned()).or_default() += calls;
        }
    }
    out
}

fn delta(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    b.iter()
        .map(|(k, v)| (k.clone(), v - a.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

fn summary(d: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<_> = d.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1));
    v.iter()
        .take(8)
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An idle delayq on `q` for `window`: the commands the nodes saw.
async fn delayq_idle(q: Queue, nodes: &[&Redis], window: Duration) -> BTreeMap<String, u64> {
    push(&q, &new_job(id("idle", 0), "t", HOUR)).await;
    let stop = Shutdown::new();
    let instance = delayq::instances::this_process("bench", "", Vec::new(), false);
    let heartbeat = tokio::spawn(delayq::instances::run(q.clone(), instance, stop.clone()));
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (q, stop) = (q.clone(), stop.clone());
            tokio::spawn(async move {
                let topics = ["t".to_owned()];
                while !stop.is_triggered() {
                    tokio::select! {
                        got = q.pop(&topics, HOUR) => assert!(got.expect("pop").is_none()),
                        _ = stop.wait() => {}
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(WARM).await;
    let before = commandstats(nodes);
    tokio::time::sleep(window).await;
    let mut after = commandstats(nodes);
    // The reading before is counted in the one after.
    if let Some(info) = after.get_mut("info") {
        *info -= nodes.len() as u64;
    }
    stop.trigger();
    let _ = heartbeat.await;
    for c in consumers {
        let _ = c.await;
    }
    q.close().await;
    delta(&before, &after)
}

fn print(who: &str, d: &BTreeMap<String, u64>, window: Duration) -> f64 {
    let total: u64 = d.values().sum();
    let per_min = total as f64 * 60.0 / window.as_secs_f64();
    println!(
        "| {who} | {total} | {per_min:.1} | {:.0} | {} |",
        per_min * 60.0 * 24.0,
        summary(d)
    );
    per_min
}

pub(crate) async fn run(window: Duration, with_bullmq: bool) {
    println!(
        "\nidle: one job an hour away, {CONSUMERS} consumers waiting, no recurring schedule; \
         Redis commands over {} s after a {} s warm-up (INFO commandstats deltas, script-internal \
         commands included, the harness's own INFO left out), each system on its own fresh redis-server in the same window",
        window.as_secs(),
        WARM.as_secs()
    );
    println!("| system | commands | a minute | a day | most called |");
    println!("|---|---:|---:|---:|---|");
    let redis = Redis::start_tcp(&[]);
    let bull_redis = Redis::start_tcp(&[]);
    let bull = with_bullmq.then(|| {
        let port = bull_redis.port().unwrap();
        let secs = window.as_secs();
        std::thread::spawn(move || {
            bullmq_on(
                "idle",
                port,
                json!({ "concurrency": CONSUMERS, "warm_ms": WARM.as_millis() as u64, "window_ms": secs * 1000 }),
            )
        })
    });
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(redis.url()),
        ..Config::default()
    })
    .unwrap();
    let d = delayq_idle(q, &[&redis], window).await;
    let ours = print("delayq", &d, window);
    if let Some(bull) = bull {
        let b = bull.join().expect("BullMQ runner");
        let by: BTreeMap<String, u64> = serde_json::from_value(b["commands"].clone()).unwrap();
        let theirs = print("BullMQ 6.7 Worker", &by, window);
        println!("delayq/BullMQ: {:.2}", ours / theirs);
    }
    drop(redis);
    drop(bull_redis);

    let cluster = crate::redis_cluster::TestCluster::start_with(3, 0, &[]);
    let q = Queue::connect(Config {
        redis: delayq::Redis::Cluster(cluster.seeds()),
        partitions: CLUSTER_PARTITIONS,
        ..Config::default()
    })
    .unwrap();
    let nodes: Vec<&Redis> = cluster.nodes.iter().collect();
    let d = delayq_idle(q, &nodes, window).await;
    print(
        &format!("delayq, {CLUSTER_PARTITIONS} partitions on a 3-master cluster"),
        &d,
        window,
    );
}
