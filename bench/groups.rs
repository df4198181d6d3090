//! Groups: one tenant's flash sale beside many small tenants. A burst of N
//! jobs due at one instant over 1,000 groups, the first group holding 90%
//! of them and pushed first, the other 999 sharing the rest evenly; a
//! `Consumer` at concurrency 64 spends a few ms on each. Each group's
//! lateness is when its last job was done, from the due instant: without
//! fairness the small groups wait behind the big one's backlog.
//!
//! Ways, each on a fresh redis-server (`redis-conf/redis.conf`): delayq
//! with the jobs in groups (pops rotate over the groups), delayq with the
//! same jobs and no groups (what a plain job costs), and plain BullMQ (its
//! groups are in the paid edition, not open to run here: no fairness).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delayq::{Consumer, Delivery, NewJob, Queue, Shutdown};
use serde_json::{json, Value};

use crate::burst::{lead_ms, push_burst};
use crate::common::{bullmq, cpu, id, new_job, percentile, queue};
use crate::Redis;

const TOPIC: &str = "t";
const GROUPS: usize = 1000;
/// The big group's share of the burst.
const BIG_SHARE: f64 = 0.9;
const CONCURRENCY: usize = 64;
/// What each job's handler spends.
const WORK_MS: u64 = 2;
const BATCH: usize = 1000;
const DRAIN_BOUND: Duration = Duration::from_secs(300);

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// Job `i`'s group: the first BIG_SHARE of the burst is group 0.
fn group_of(i: usize, n: usize) -> usize {
    let big = (n as f64 * BIG_SHARE).round() as usize;
    if i < big {
        0
    } else {
        1 + (i - big) % (GROUPS - 1)
    }
}

/// One way's figures.
struct Run {
    way: &'static str,
    drain_s: f64,
    cpu_us_per_job: f64,
    /// When the big group's last job was done, from the due instant (ms).
    big_done_ms: f64,
    /// The same for each small group, sorted.
    small_done_ms: Vec<f64>,
    early: usize,
    lost: usize,
    twice: usize,
}

/// What the handler saw: per job its first lateness and deliveries, per
/// group when its last job was done (Unix ms).
#[derive(Default)]
struct Seen {
    jobs: HashMap<String, (f64, u32)>,
    done: HashMap<usize, f64>,
}

async fn delayq_way(n: usize, grouped: bool) -> Run {
    let redis = Redis::start_tcp(&[]);
    let q = queue(&redis);
    let group_by_id: Arc<HashMap<String, usize>> =
        Arc::new((0..n).map(|i| (id("group", i), group_of(i, n))).collect());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shutdown = Shutdown::new();
    let (s, g) = (seen.clone(), group_by_id.clone());
    let consumer = tokio::spawn(
        Consumer::new(q.clone(), &[TOPIC])
            .concurrency(CONCURRENCY)
            .run(
                move |d: Delivery| {
                    let (s, g) = (s.clone(), g.clone());
                    async move {
                        let late = (d.popped_at_us - d.due_ms * 1000) as f64 / 1000.0;
                        s.lock()
                            .unwrap()
                            .jobs
                            .entry(d.id.clone())
                            .or_insert((late, 0))
                            .1 += 1;
                        tokio::time::sleep(Duration::from_millis(WORK_MS)).await;
                        s.lock().unwrap().done.insert(g[&d.id], now_ms());
                        Ok::<(), String>(())
                    }
                },
                shutdown.clone(),
            ),
    );
    let due = load(&q, n, grouped).await;
    let (c0, t0) = (cpu(&redis), std::time::Instant::now());
    let left = due as f64 - 5.0 - now_ms();
    if left > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(left / 1000.0)).await;
    }
    let c1 = cpu(&redis);
    let idle = (c1 - c0) / t0.elapsed().as_secs_f64();
    let metrics = q.metrics();
    let before = metrics.finished.get([TOPIC]);
    while metrics.finished.get([TOPIC]) < before + n as u64 {
        assert!(
            now_ms() - (due as f64) < DRAIN_BOUND.as_secs_f64() * 1000.0,
            "the groups burst did not drain within {DRAIN_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let drain_s = (now_ms() - due as f64) / 1000.0;
    let used = cpu(&redis) - c1 - idle * drain_s;
    shutdown.trigger();
    let _ = consumer.await;
    q.close().await;
    let seen = seen.lock().unwrap();
    let mut small: Vec<f64> = (1..GROUPS)
        .filter_map(|g| seen.done.get(&g).map(|at| at - due as f64))
        .collect();
    small.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Run {
        way: if grouped {
            "delayq, grouped (pops rotate over groups)"
        } else {
            "delayq, no groups"
        },
        drain_s,
        cpu_us_per_job: used * 1e6 / n as f64,
        big_done_ms: seen.done.get(&0).map_or(f64::NAN, |at| at - due as f64),
        small_done_ms: small,
        early: seen.jobs.values().filter(|v| v.0 < 0.0).count(),
        lost: n - seen.jobs.len(),
        twice: seen.jobs.values().map(|v| v.1 as usize - 1).sum(),
    }
}

/// Pushes the burst, big group first, due at one instant; returns it.
async fn load(q: &Queue, n: usize, grouped: bool) -> i64 {
    push_burst(q, n, |i| {
        let job = new_job(id("group", i), TOPIC, Duration::ZERO);
        if grouped {
            with_group(job, group_of(i, n))
        } else {
            job
        }
    })
    .await
}

/// `job` in group `g`.
fn with_group(job: NewJob, g: usize) -> NewJob {
    NewJob {
        group: Some(format!("tenant-{g}")),
        ..job
    }
}

fn bullmq_way(n: usize) -> Run {
    let redis = Redis::start_tcp(&[]);
    let r: Value = bullmq(
        "groups",
        &redis,
        json!({"jobs": n, "groups": GROUPS, "big_share": BIG_SHARE, "lead_ms": lead_ms(n),
               "concurrency": CONCURRENCY, "work_ms": WORK_MS, "batch": BATCH}),
    );
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    let c = |k: &str| r[k].as_u64().unwrap_or(0) as usize;
    let mut small: Vec<f64> = r["small_done_ms"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    small.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Run {
        way: "BullMQ, plain (no groups)",
        drain_s: f("drain_s"),
        cpu_us_per_job: f("cpu_us_per_job"),
        big_done_ms: f("big_done_ms"),
        small_done_ms: small,
        early: c("early"),
        lost: c("lost"),
        twice: c("twice"),
    }
}

pub(crate) async fn run(n: usize, with_bullmq: bool) {
    println!();
    println!(
        "groups: {n} jobs due at one instant over {GROUPS} groups, the first holding {:.0}% and pushed first, the rest spread evenly; a consumer at concurrency {CONCURRENCY} spending {WORK_MS} ms a job; each on a fresh redis-server (redis-conf/redis.conf); a group is done when its last job is; Redis CPU from the due instant to the last finish, idle subtracted",
        BIG_SHARE * 100.0
    );
    let mut runs = Vec::new();
    for grouped in [true, false] {
        eprintln!("groups: delayq, grouped: {grouped}");
        runs.push(delayq_way(n, grouped).await);
    }
    if with_bullmq {
        eprintln!("groups: BullMQ");
        runs.push(bullmq_way(n));
    }
    println!("| way | due -> last finished (s) | Redis CPU us/job | big group done (ms) | small groups done p50 / p99 / max (ms) | small groups seen | early | lost / twice |");
    println!("|---|---:|---:|---:|---|---:|---:|---|");
    for r in &runs {
        let s = &r.small_done_ms;
        println!(
            "| {} | {:.2} | {:.1} | {:.0} | {:.0} / {:.0} / {:.0} | {} | {} | {} / {} |",
            r.way,
            r.drain_s,
            r.cpu_us_per_job,
            r.big_done_ms,
            percentile(s, 0.5),
            percentile(s, 0.99),
            s.last().copied().unwrap_or(f64::NAN),
            s.len(),
            r.early,
            r.lost,
            r.twice,
        );
    }
}
