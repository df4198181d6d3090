//! Sidecars: K delayq instances on one Redis, as K `delayq serve`
//! processes beside K application hosts would be (each its own `Queue`:
//! connections, subscriber, lease keeper), against BullMQ with K `Worker`s.
//!
//! A paced flow: `jobs` pushed over `secs` round-robin through the
//! instances, one at a time (no batch shares a call), each due 2 s after its
//! push; 8 consumers per instance pop up to 10 and finish each. A fresh
//! redis-server without persistence per run (the conditions). Per
//! run: Redis CPU per job (idle subtracted), commands per job by kind
//! (`INFO commandstats`, commands called by scripts included), lateness
//! (pop minus due, Redis time), lost / early / twice. Then 64 instances:
//! the same flow, their idle Redis CPU and connection count.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayq::Queue;
use serde_json::json;

use crate::common::{bullmq, cpu, finish, new_job, percentile, push, queue, redis_sync};
use crate::Redis;

const DELAY: Duration = Duration::from_secs(2);
const CONSUMERS: usize = 8;
const POP_MAX: usize = 10;
/// How long the idle Redis CPU is read, with every instance up and waiting.
const IDLE_FOR: Duration = Duration::from_secs(3);

/// The flow's size.
#[derive(Clone, Copy)]
pub(crate) struct Flow {
    pub(crate) jobs: usize,
    pub(crate) secs: u64,
}

/// One run's figures.
struct Run {
    cpu_us_per_job: f64,
    idle_cpu_pct: f64,
    connections: f64,
    per_job: BTreeMap<String, f64>,
    p50: f64,
    p99: f64,
    max: f64,
    lost: usize,
    early: usize,
    twice: usize,
}

fn no_persistence() -> Redis {
    Redis::start_tcp(&["--appendonly", "no", "--save", ""])
}

/// `INFO commandstats`: calls per command.
pub(crate) fn commandstats(redis: &Redis) -> BTreeMap<String, f64> {
    let mut c = redis.client().get_connection().unwrap();
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    parse_commandstats(&text)
}

pub(crate) fn parse_commandstats(text: &str) -> BTreeMap<String, f64> {
    commandstats_field(text, "calls=")
}

/// One field (`calls=`, `usec=`, ...) of each command in `INFO
/// commandstats` text.
pub(crate) fn commandstats_field(text: &str, key: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let v = rest
                .split(',')
                .find_map(|f| f.strip_prefix(key))?
                .parse()
                .ok()?;
            Some((name.to_owned(), v))
        })
        .collect()
}

async fn delayq_run(k: usize, flow: Flow) -> Run {
    let redis = no_persistence();
    let queues: Vec<Queue> = (0..k).map(|_| queue(&redis)).collect();
    // Every instance connected and one of them dispatching.
    let start = Instant::now();
    while !(queues.iter().all(|q| q.subscriber_connected())
        && queues
            .iter()
            .any(|q| !q.dispatching_partitions().is_empty()))
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "instances not up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen: Arc<Mutex<HashMap<String, Vec<f64>>>> = Arc::default();
    let topic = vec!["t".to_owned()];
    let mut consumers = Vec::new();
    for q in &queues {
        for _ in 0..CONSUMERS {
            let (q, seen, topic) = (q.clone(), seen.clone(), topic.clone());
            consumers.push(tokio::spawn(async move {
                loop {
                    let got = match q.pop_many(&topic, POP_MAX, Duration::from_secs(1)).await {
                        Ok(got) => got,
                        Err(e) if e.is_unavailable() => continue,
                        Err(_) => return,
                    };
                    for d in got {
                        let late = (d.popped_at_us - d.due_ms * 1000) as f64 / 1000.0;
                        seen.lock()
                            .unwrap()
                            .entry(d.id.clone())
                            .or_default()
                            .push(late);
                        finish(&q, &d).await;
                    }
                }
            }));
        }
    }
    // Idle: every instance up, every consumer waiting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (c0, t0) = (cpu(&redis), Instant::now());
    tokio::time::sleep(IDLE_FOR).await;
    let idle = (cpu(&redis) - c0) / t0.elapsed().as_secs_f64();
    let connections = redis.info("clients", "connected_clients");
    redis_sync(&redis, &["CONFIG", "RESETSTAT"]);

    let (c0, t0) = (cpu(&redis), Instant::now());
    let every = Duration::from_secs(flow.secs).as_secs_f64() / flow.jobs as f64;
    let mut pushes = Vec::with_capacity(flow.jobs);
    for i in 0..flow.jobs {
        let at = t0 + Duration::from_secs_f64(every * i as f64);
        tokio::time::sleep_until(at.into()).await;
        let q = queues[i % k].clone();
        let job = new_job(crate::common::id("side", i), "t", DELAY);
        pushes.push(tokio::spawn(async move { push(&q, &job).await }));
    }
    for p in pushes {
        p.await.unwrap();
    }
    let deadline = Instant::now() + DELAY + Duration::from_secs(30);
    while seen.lock().unwrap().len() < flow.jobs && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let wall = t0.elapsed().as_secs_f64();
    let used = cpu(&redis) - c0 - idle * wall;
    let stats = commandstats(&redis);
    // Anything fired twice comes within a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for c in consumers {
        c.abort();
    }
    for q in &queues {
        q.close().await;
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let mut late: Vec<f64> = seen.values().map(|l| l[0]).collect();
    late.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Run {
        cpu_us_per_job: used * 1e6 / flow.jobs as f64,
        idle_cpu_pct: idle * 100.0,
        connections,
        per_job: stats
            .into_iter()
            .map(|(c, n)| (c, n / flow.jobs as f64))
            .collect(),
        p50: percentile(&late, 0.5),
        p99: percentile(&late, 0.99),
        max: late.last().copied().unwrap_or(f64::NAN),
        lost: flow.jobs - seen.len(),
        early: late.iter().filter(|&&l| l < 0.0).count(),
        twice: seen.values().map(|l| l.len() - 1).sum(),
    }
}

fn bullmq_run(k: usize, flow: Flow) -> Run {
    let redis = no_persistence();
    let r = bullmq(
        "sidecars",
        &redis,
        json!({"instances": k, "jobs": flow.jobs, "secs": flow.secs, "delay_ms": DELAY.as_millis() as u64,
               "concurrency": CONSUMERS, "idle_ms": IDLE_FOR.as_millis() as u64}),
    );
    let stats = parse_commandstats(r["commandstats"].as_str().unwrap_or(""));
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    let n = |k: &str| r[k].as_u64().unwrap_or(0) as usize;
    Run {
        cpu_us_per_job: f("cpu_us_per_job"),
        idle_cpu_pct: f("idle_cpu_pct"),
        connections: f("connections"),
        per_job: stats
            .into_iter()
            .map(|(c, n)| (c, n / flow.jobs as f64))
            .collect(),
        p50: f("p50"),
        p99: f("p99"),
        max: f("max"),
        lost: n("lost"),
        early: n("early"),
        twice: n("twice"),
    }
}

/// Commands per job, the kinds that reach 0.05 a job.
fn kinds(r: &Run) -> String {
    let mut v: Vec<_> = r.per_job.iter().filter(|(_, n)| **n >= 0.05).collect();
    v.sort_by(|a, b| b.1.partial_cmp(a.1).unwrap());
    v.iter()
        .map(|(c, n)| format!("{c} {n:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) async fn run(flow: Flow, repeats: usize, with_bullmq: bool) {
    println!();
    println!(
        "sidecars: K instances on one Redis (no persistence, fresh per run); {} jobs paced over {} s round-robin, each due {} s after its push; {CONSUMERS} consumers per instance popping up to {POP_MAX}; medians of {repeats} run(s) for CPU, the last run for commands and lateness",
        flow.jobs,
        flow.secs,
        DELAY.as_secs()
    );
    println!("| K | system | Redis CPU us/job | idle Redis CPU % | connections | lateness p50 / p99 / max ms | lost / early / twice | commands per job |");
    println!("|---:|---|---:|---:|---:|---|---|---|");
    let mut systems = vec!["delayq"];
    if with_bullmq {
        systems.push("bullmq");
    }
    for k in [1, 4, 16, 64] {
        for &system in &systems {
            if k == 64 && system == "bullmq" {
                continue;
            }
            let mut cpus = Vec::new();
            let mut last = None;
            for _ in 0..repeats {
                eprintln!("sidecars: {system}, {k} instance(s)");
                let r = if system == "delayq" {
                    delayq_run(k, flow).await
                } else {
                    bullmq_run(k, flow)
                };
                cpus.push(r.cpu_us_per_job);
                last = Some(r);
            }
            let r = last.unwrap();
            cpus.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "| {k} | {system} | {:.0} ({}) | {:.2} | {:.0} | {:.1} / {:.1} / {:.1} | {} / {} / {} | {} |",
                cpus[cpus.len() / 2],
                cpus.iter().map(|c| format!("{c:.0}")).collect::<Vec<_>>().join(", "),
                r.idle_cpu_pct,
                r.connections,
                r.p50,
                r.p99,
                r.max,
                r.lost,
                r.early,
                r.twice,
                kinds(&r),
            );
        }
    }
}
