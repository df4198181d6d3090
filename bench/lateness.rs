//! Fire lateness: jobs due evenly over a few seconds while many others
//! wait an hour away, and what Redis did meanwhile (rewrites, forks,
//! latency events).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use serde_json::json;

use crate::common::{
    add_bulk, bullmq, finish, id, median, new_job, percentile, pop, push, queue, redis_sync, HOUR,
};
use crate::options::{Options, Sizes, System};
use crate::Redis;

/// Every lateness run: samples by (pending, system) over the repeats, and
/// one line about Redis per run.
#[derive(Default)]
pub(crate) struct Lateness {
    runs: BTreeMap<(usize, &'static str), Vec<Vec<f64>>>,
    stalls: Vec<String>,
}

impl Lateness {
    /// One run of `system` for each number of pending jobs.
    pub(crate) async fn run(&mut self, o: &Options, system: System) {
        if system == System::Apalis {
            // apalis's timing is in the lifecycle module's due-spread run.
            return;
        }
        let s = &o.sizes;
        for &pending in &o.pending {
            let redis = Redis::start_tcp(&[]);
            // Redis's own record of stalls during the run: the latency
            // monitor (events of 5 ms or more) and fork/rewrite counts.
            redis_sync(&redis, &["CONFIG", "SET", "latency-monitor-threshold", "5"]);
            let mut v = match system {
                System::Delayq => {
                    delayq_lateness(
                        &redis,
                        pending,
                        s.due_jobs,
                        s.due_spread_ms,
                        o.settle_rewrites,
                    )
                    .await
                }
                System::Bullmq => bullmq(
                    "lateness",
                    &redis,
                    json!({"pending": pending, "jobs": s.due_jobs, "spread_ms": s.due_spread_ms, "lead_ms": 2000, "concurrency": 16}),
                )["lateness_ms"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect(),
                System::Apalis => unreachable!(),
            };
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let col = system.column();
            self.stalls.push(format!(
                "| {pending} | {col} | {:.2} | {} | {:.1} | {} |",
                v.last().copied().unwrap_or(0.0),
                redis.info("persistence", "aof_rewrites"),
                redis.info("stats", "latest_fork_usec") / 1000.0,
                latency_events(&redis),
            ));
            self.runs.entry((pending, col)).or_default().push(v);
        }
    }

    /// The lateness table (medians over the repeats).
    pub(crate) fn print(&self, s: &Sizes) {
        println!();
        println!(
            "fire lateness, ms (hand-over minus due time; {} jobs due evenly over {} s while N others wait an hour away; 16 consumers):",
            s.due_jobs,
            s.due_spread_ms / 1000
        );
        println!("| N pending | system | p50 | p90 | p99 | p99.9 | max | early |");
        println!("|---:|---|---:|---:|---:|---:|---:|---:|");
        for ((pending, col), runs) in &self.runs {
            let stat = |f: &dyn Fn(&[f64]) -> f64| median(runs.iter().map(|r| f(r)).collect());
            println!(
                "| {pending} | {col} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
                stat(&|r| percentile(r, 0.50)),
                stat(&|r| percentile(r, 0.90)),
                stat(&|r| percentile(r, 0.99)),
                stat(&|r| percentile(r, 0.999)),
                stat(&|r| *r.last().unwrap()),
                runs.iter()
                    .map(|r| r.iter().filter(|x| **x < 0.0).count())
                    .max()
                    .unwrap_or(0),
            );
        }
    }

    /// What Redis did during each run.
    pub(crate) fn print_stalls(&self) {
        if self.stalls.is_empty() {
            return;
        }
        println!();
        println!("Redis during each lateness run (every repeat): AOF rewrites, the last fork's duration, and the latency monitor's events of 5 ms or more (event: worst ms):");
        println!(
            "| N pending | system | max lateness ms | AOF rewrites | last fork ms | Redis events |"
        );
        println!("|---:|---|---:|---:|---:|---|");
        for line in &self.stalls {
            println!("{line}");
        }
    }

    /// Raw samples for charts: one line per (N, system, repeat).
    pub(crate) fn write_samples(&self, path: &str) {
        let mut out = String::new();
        for ((pending, col), runs) in &self.runs {
            for r in runs {
                out.push_str(&format!(
                    "{pending} {col} {}\n",
                    r.iter()
                        .map(|x| format!("{x:.3}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ));
            }
        }
        std::fs::write(path, out).unwrap();
    }
}

/// Lateness samples (ms) of `jobs` jobs due evenly over `spread` while
/// `pending` others wait an hour away; 16 consumers.
pub(crate) async fn delayq_lateness(
    redis: &Redis,
    pending: usize,
    jobs: usize,
    spread_ms: u64,
    settle: bool,
) -> Vec<f64> {
    let q = queue(redis);
    add_bulk(&q, "far", pending, HOUR, 1000).await;
    while settle
        && (redis.info("persistence", "aof_rewrite_in_progress") > 0.0
            || redis.info("persistence", "aof_rewrite_scheduled") > 0.0)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lead = Duration::from_secs(2);
    let late = Arc::new(Mutex::new(Vec::with_capacity(jobs)));
    let done = Arc::new(AtomicBool::new(false));
    let mut consumers = Vec::new();
    for _ in 0..16 {
        let (q, late, done) = (q.clone(), late.clone(), done.clone());
        consumers.push(tokio::spawn(async move {
            let topic = ["due".to_string()];
            while !done.load(Ordering::Relaxed) {
                if let Some(d) = pop(&q, &topic, Duration::from_millis(200)).await {
                    late.lock()
                        .unwrap()
                        .push((d.popped_at_us - d.due_ms * 1000) as f64 / 1000.0);
                    finish(&q, &d).await;
                }
            }
        }));
    }
    let step = spread_ms * 1000 / jobs as u64;
    let t0 = Instant::now();
    stream::iter(0..jobs)
        .map(|i| {
            let q = q.clone();
            let due_in = lead + Duration::from_micros(step * i as u64);
            async move {
                let delay = due_in.saturating_sub(t0.elapsed());
                push(&q, &new_job(id("due", i), "due", delay)).await
            }
        })
        .buffer_unordered(64)
        .for_each(|_| async {})
        .await;
    let deadline =
        Instant::now() + lead + Duration::from_millis(spread_ms) + Duration::from_secs(30);
    while late.lock().unwrap().len() < jobs && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.store(true, Ordering::Relaxed);
    for c in consumers {
        let _ = c.await;
    }
    q.close().await;
    let v = late.lock().unwrap().clone();
    assert_eq!(v.len(), jobs, "not every job fired");
    v
}

/// `LATENCY LATEST` as "event: worst ms, ..." ("none" when quiet).
fn latency_events(redis: &Redis) -> String {
    let mut c = redis.client().get_connection().unwrap();
    let rows: Vec<(String, i64, i64, i64)> = redis::cmd("LATENCY")
        .arg("LATEST")
        .query(&mut c)
        .unwrap_or_default();
    if rows.is_empty() {
        return "none".into();
    }
    rows.iter()
        .map(|(event, _, _, max)| format!("{event}: {max}"))
        .collect::<Vec<_>>()
        .join(", ")
}
