//! A burst: N jobs due at one instant (a flash sale's orders timing out
//! together), pushed in batches a few seconds ahead, drained four ways, each
//! on a fresh redis-server (`redis-conf/redis.conf`, as the main table):
//! (a) the library's `Consumer` at concurrency 64 and 8 (the webhook's
//! two, like for like), a handler that returns at once; (b) a `delayq serve` sidecar, 8 clients each popping up to 100
//! (`/v1/pop`) and finishing them in one `/v1/finish`; (c) a `delayq serve`
//! webhook at concurrency 64 and 8, to a receiver here that answers 200 at
//! once; (d) BullMQ, a `Worker` at concurrency 64 completing each.
//!
//! Per way: time from the due instant until the last job is finished, the
//! drain rate, Redis CPU for the burst per job (the idle rate measured while
//! every consumer waits before the instant is subtracted), lateness of each
//! job's first delivery (hand-over minus due time), early, lost, twice.
//! (b) and (c) run the `delayq` binary beside this one (`cargo build
//! --release --example bench --bin delayq`).

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayq::{Consumer, Delivery, NewJob, Queue, Shutdown};
use serde_json::{json, Value};

use crate::common::{
    add_bulk, bullmq, cpu, id, new_job, percentile, push, queue, redis_sync, HOUR,
};
use crate::sidecars::{commandstats, parse_commandstats};
use crate::Redis;

mod http;
mod server;

use http::{sidecar, webhook};
pub(crate) use server::{http_client, serve};

pub(crate) const TOPIC: &str = "t";
/// Jobs per push batch.
pub(crate) const BATCH: usize = 1000;
/// The sidecar's clients and what each pops at once.
const CLIENTS: usize = 8;
const POP_MAX: usize = 100;
/// Every way's drain must end within this after the due instant.
const DRAIN_BOUND: Duration = Duration::from_secs(120);

/// The burst's redis-server arguments: `redis-conf/redis.conf` as is (AOF,
/// appendfsync always), or with `--no-persistence` none.
pub(crate) fn redis_args() -> &'static [&'static str] {
    crate::common::persist().redis_args()
}

/// One way's figures.
pub(crate) struct Run {
    pub(crate) way: String,
    pub(crate) drain_s: f64,
    pub(crate) cpu_us_per_job: f64,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) early: usize,
    pub(crate) lost: usize,
    pub(crate) twice: usize,
    /// Redis commands per job from the due instant on (scripts' included),
    /// the kinds that reach 0.05 a job.
    pub(crate) commands: String,
    /// CPU outside Redis per job over the drain (µs): this process (the
    /// library, or the webhook's receiver) and the delayq process, if any.
    pub(crate) outside: Option<(f64, Option<f64>)>,
}

impl Run {
    pub(crate) fn rate(&self, n: usize) -> f64 {
        n as f64 / self.drain_s
    }
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// CPU seconds a process has used (user and system, every thread), from
/// /proc (Linux; 0 elsewhere).
pub(crate) fn process_cpu(pid: Option<u32>) -> f64 {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the command's closing parenthesis: utime and stime are
    // the 12th and 13th, in clock ticks (100 a second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0
}

/// Sleeps until Unix time `at_ms` (this host's clock, which Redis's is too).
async fn sleep_until_ms(at_ms: f64) {
    let left = at_ms - now_ms();
    if left > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(left / 1000.0)).await;
    }
}

/// First-delivery lateness per job, and how many deliveries each had.
#[derive(Default)]
struct Seen(Mutex<HashMap<String, (f64, u32)>>);

impl Seen {
    fn note(&self, id: &str, late_ms: f64) {
        let mut m = self.0.lock().unwrap();
        m.entry(id.to_owned()).or_insert((late_ms, 0)).1 += 1;
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn run(&self, way: String, n: usize, drain_s: f64, cpu_s: f64) -> Run {
        let m = self.0.lock().unwrap();
        let mut late: Vec<f64> = m.values().map(|v| v.0).collect();
        late.sort_by(|a, b| a.partial_cmp(b).unwrap());
        Run {
            way,
            drain_s,
            cpu_us_per_job: cpu_s * 1e6 / n as f64,
            p50: percentile(&late, 0.5),
            p99: percentile(&late, 0.99),
            early: late.iter().filter(|&&l| l < 0.0).count(),
            lost: n - m.len(),
            twice: m.values().map(|v| v.1 as usize - 1).sum(),
            commands: String::new(),
            outside: None,
        }
    }
}

/// How long ahead the burst falls due: time to push it, and a second of
/// every consumer waiting (the idle rate's window).
pub(crate) fn lead_ms(n: usize) -> i64 {
    // BullMQ adds ~5k/s with AOF always here.
    2000 + (n as i64) / 4
}

/// Loads `pending` jobs a day away, then pushes the burst due at one
/// instant; returns that instant (Unix ms).
async fn load(q: &Queue, pending: usize, n: usize) -> i64 {
    add_bulk(q, "far", pending, 24 * HOUR, BATCH).await;
    push_burst(q, n, |i| new_job(id("burst", i), TOPIC, Duration::ZERO)).await
}

/// Pushes `n` jobs (`job(i)`, its due time set here), in batches, all due
/// at one instant [`lead_ms`] ahead; returns that instant (Unix ms).
pub(crate) async fn push_burst(q: &Queue, n: usize, job: impl Fn(usize) -> NewJob) -> i64 {
    // This host's clock is Redis's (loopback).
    let due = now_ms() as i64 + lead_ms(n);
    for from in (0..n).step_by(BATCH) {
        let jobs: Vec<NewJob> = (from..(from + BATCH).min(n))
            .map(|i| NewJob {
                due_at_ms: Some(due),
                ..job(i)
            })
            .collect();
        for (r, job) in q.push_many(&jobs).await.unwrap().into_iter().zip(&jobs) {
            if r.is_err() {
                push(q, job).await;
            }
        }
    }
    let left = due as f64 - now_ms();
    assert!(
        left > 300.0,
        "the burst took too long to push ({left:.0} ms left before it fell due)"
    );
    due
}

/// Reads Redis CPU around the due instant: the idle rate from now (every
/// consumer waiting) until just before it, then the reading at it.
async fn idle_then_start(redis: &Redis, due: i64) -> (f64, f64) {
    let (c0, t0) = (cpu(redis), Instant::now());
    sleep_until_ms(due as f64 - 5.0).await;
    let c1 = cpu(redis);
    let idle = (c1 - c0) / t0.elapsed().as_secs_f64();
    // Commands counted from here (CPU readings are not reset).
    redis_sync(redis, &["CONFIG", "RESETSTAT"]);
    (idle, c1)
}

/// Commands per job by kind, the kinds that reach 0.05 a job.
fn per_job(stats: BTreeMap<String, f64>, n: usize) -> String {
    let mut v: Vec<(String, f64)> = stats
        .into_iter()
        .map(|(c, k)| (c, k / n as f64))
        .filter(|(_, k)| *k >= 0.05)
        .collect();
    v.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
    v.iter()
        .map(|(c, k)| format!("{c} {k:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits until `done()` holds (polled every `every`); returns the seconds
/// from the due instant.
async fn drained(due: i64, every: Duration, done: impl Fn() -> bool) -> f64 {
    while !done() {
        assert!(
            now_ms() - (due as f64) < DRAIN_BOUND.as_secs_f64() * 1000.0,
            "the burst did not drain within {DRAIN_BOUND:?}"
        );
        tokio::time::sleep(every).await;
    }
    (now_ms() - due as f64) / 1000.0
}

/// (a) the library: a `Consumer` at `concurrency` in this process.
async fn library(pending: usize, n: usize, concurrency: usize) -> Run {
    let redis = Redis::start_tcp(redis_args());
    let q = queue(&redis);
    let run = library_on(&redis, &q, pending, n, concurrency).await;
    q.close().await;
    run
}

/// The library's way on a queue already there (the scale section loads its
/// pending set first); Redis's command stats are left as at the last finish.
pub(crate) async fn library_on(
    redis: &Redis,
    q: &Queue,
    pending: usize,
    n: usize,
    concurrency: usize,
) -> Run {
    let seen = Arc::new(Seen::default());
    let shutdown = Shutdown::new();
    let s = seen.clone();
    let consumer = tokio::spawn(
        Consumer::new(q.clone(), &[TOPIC])
            .concurrency(concurrency)
            .run(
                move |d: Delivery| {
                    s.note(&d.id, (d.popped_at_us - d.due_ms * 1000) as f64 / 1000.0);
                    async { Ok::<(), String>(()) }
                },
                shutdown.clone(),
            ),
    );
    let due = load(q, pending, n).await;
    let (idle, c1) = idle_then_start(redis, due).await;
    // The queue's own count of finishes (no Redis call); counted from here,
    // as the queue may have finished jobs before.
    let metrics = q.metrics();
    let before = metrics.finished.get([TOPIC]);
    let own = process_cpu(None);
    let secs = drained(due, Duration::from_millis(1), || {
        metrics.finished.get([TOPIC]) >= before + n as u64
    })
    .await;
    let own = process_cpu(None) - own;
    let used = cpu(redis) - c1 - idle * secs;
    let commands = per_job(commandstats(redis), n);
    shutdown.trigger();
    let _ = consumer.await;
    Run {
        commands,
        outside: Some((own * 1e6 / n as f64, None)),
        ..seen.run(
            format!("library, Consumer, concurrency {concurrency}"),
            n,
            secs,
            used,
        )
    }
}

/// (d) BullMQ: a Worker at concurrency 64 completing each.
fn bullmq_run(pending: usize, n: usize) -> Run {
    let redis = Redis::start_tcp(&[]);
    let r = bullmq(
        "burst",
        &redis,
        json!({"pending": pending, "jobs": n, "lead_ms": lead_ms(n), "concurrency": 64, "batch": BATCH}),
    );
    bullmq_figures(&r, n)
}

/// BullMQ's burst figures from its scenario's JSON.
pub(crate) fn bullmq_figures(r: &Value, n: usize) -> Run {
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    let c = |k: &str| r[k].as_u64().unwrap_or(0) as usize;
    Run {
        way: "BullMQ, Worker, concurrency 64".into(),
        drain_s: f("drain_s"),
        cpu_us_per_job: f("cpu_us_per_job"),
        p50: f("p50"),
        p99: f("p99"),
        early: c("early"),
        lost: c("lost"),
        twice: c("twice"),
        commands: per_job(
            parse_commandstats(r["commandstats"].as_str().unwrap_or("")),
            n,
        ),
        outside: None,
    }
}

/// `webhook_only`: the library's and the webhook's ways alone.
pub(crate) async fn run(n: usize, pending: &[usize], with_bullmq: bool, webhook_only: bool) {
    println!();
    if !redis_args().is_empty() {
        println!("burst: redis-server without persistence (--no-persistence)");
    }
    println!(
        "burst: {n} jobs pushed in batches of {BATCH}, all due at one instant {:.1} s ahead, drained one way per run, each on a fresh redis-server (redis-conf/redis.conf, {}; the same for BullMQ); Redis CPU from the due instant to the last finish, idle subtracted; lateness of each job's first delivery (hand-over minus due)",
        lead_ms(n) as f64 / 1000.0,
        crate::common::persist().label(),
    );
    for &p in pending {
        let mut runs = Vec::new();
        // The library at each of the webhook's concurrencies: a webhook's
        // rate is compared with the library's at the same one.
        let mut lib_rate = HashMap::new();
        for c in [64, 8] {
            eprintln!("burst: library at {c}, {p} pending");
            let r = library(p, n, c).await;
            lib_rate.insert(c, r.rate(n));
            runs.push((r, None));
        }
        if !webhook_only {
            eprintln!("burst: sidecar, {p} pending");
            runs.push((sidecar(p, n).await, None));
        }
        for c in [64, 8] {
            eprintln!("burst: webhook at {c}, {p} pending");
            runs.push((webhook(p, n, c).await, Some(c)));
        }
        let bull = (with_bullmq && !webhook_only).then(|| {
            eprintln!("burst: BullMQ, {p} pending");
            bullmq_run(p, n)
        });
        println!();
        println!("{p} other jobs pending a day away:");
        println!("| way | due -> last finished (s) | drain rate (jobs/s) | Redis CPU us/job | lateness p50 / p99 (ms) | early | lost / twice | rate / BullMQ | CPU / BullMQ | rate / library at its concurrency | CPU outside Redis us/job: this process / delayq | Redis commands per job |");
        println!("|---|---:|---:|---:|---|---:|---|---:|---:|---:|---|---|");
        let bull = bull.map(|b| (b, None));
        for (r, like) in runs.iter().chain(bull.iter()) {
            let ratio = |a: f64, b: Option<f64>| {
                b.filter(|b| *b > 0.0 && !r.way.starts_with("BullMQ"))
                    .map_or("-".to_owned(), |b| format!("{:.2}x", a / b))
            };
            let outside = match r.outside {
                Some((own, Some(delayq))) => format!("{own:.1} / {delayq:.1}"),
                Some((own, None)) => format!("{own:.1} / -"),
                None => "-".to_owned(),
            };
            println!(
                "| {} | {:.2} | {:.0} | {:.1} | {:.0} / {:.0} | {} | {} / {} | {} | {} | {} | {} | {} |",
                r.way,
                r.drain_s,
                r.rate(n),
                r.cpu_us_per_job,
                r.p50,
                r.p99,
                r.early,
                r.lost,
                r.twice,
                ratio(r.rate(n), bull.as_ref().map(|b| b.0.rate(n))),
                ratio(r.cpu_us_per_job, bull.as_ref().map(|b| b.0.cpu_us_per_job)),
                like.and_then(|c| lib_rate.get(&c))
                    .map_or("-".into(), |l| format!("{:.2}x", r.rate(n) / l)),
                outside,
                r.commands,
            );
        }
    }
}
