//! delayq benchmarks: figures and the conditions they were measured under.
//!
//! `cargo run --release --example bench -- [--quick] [--pending N] [--appendfsync always|everysec]`
//!
//! Starts its own redis-server on loopback TCP with `redis-conf/redis.conf`
//! and measures, for delayq:
//! - library push throughput, 64 in flight;
//! - HTTP push throughput on the compatible `/push`, 64 connections in
//!   flight, load from `wrk` (a separate C process) when installed;
//! - fire lateness (hand-over minus due time, Redis clock) of jobs falling
//!   due at a steady rate while N other jobs wait far in the future;
//! - Redis memory per pending job (used_memory delta / jobs).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayq::http::{AppState, ServerConfig};
use delayq::{Config, NewJob, Queue, Shutdown};
use futures::stream::{self, StreamExt};

const CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/redis-conf/redis.conf");
const WRK_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/push.lua");

struct Options {
    quick: bool,
    pending: Vec<usize>,
    appendfsync: String,
}

fn options() -> Options {
    let mut o = Options {
        quick: false,
        pending: vec![0, 10_000],
        appendfsync: "always".into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--pending" => {
                o.pending = args
                    .next()
                    .expect("--pending N[,N...]")
                    .split(',')
                    .map(|n| n.parse().expect("--pending takes numbers"))
                    .collect()
            }
            "--appendfsync" => o.appendfsync = args.next().expect("--appendfsync always|everysec"),
            other => panic!("unknown argument {other:?}"),
        }
    }
    o
}

/// A redis-server on a free loopback port, killed on drop.
struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    fn start(appendfsync: &str) -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("redis-server")
            .arg(CONF)
            .args(["--port", &port.to_string(), "--appendfsync", appendfsync])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server");
        let r = Redis {
            child,
            port,
            _dir: dir,
        };
        let client = redis::Client::open(r.url()).unwrap();
        for _ in 0..200 {
            if let Ok(mut c) = client.get_connection() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return r;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not start");
    }
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
    fn used_memory(&self) -> i64 {
        let client = redis::Client::open(self.url()).unwrap();
        let mut c = client.get_connection().unwrap();
        let info: String = redis::cmd("INFO").arg("memory").query(&mut c).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    }
    fn version() -> String {
        let out = Command::new("redis-server")
            .arg("--version")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or("?")
            .to_owned()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn id(tag: &str, i: usize) -> String {
    // 36 characters, like a UUID.
    format!("{tag:0>8}-0000-0000-0000-{i:012}")
}

fn new_job(id: String, topic: &str, delay: Duration) -> NewJob {
    NewJob {
        id,
        topic: topic.into(),
        body: "b".repeat(64),
        delay,
        ttr: Duration::from_secs(60),
        ..NewJob::default()
    }
}

async fn push_many(q: &Queue, tag: &str, n: usize, delay: Duration, in_flight: usize) -> Duration {
    let start = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let q = q.clone();
            let job = new_job(id(tag, i), "far", delay);
            async move { q.push(&job).await.expect("push") }
        })
        .buffer_unordered(in_flight)
        .for_each(|_| async {})
        .await;
    start.elapsed()
}

fn queue(redis: &Redis) -> Queue {
    Queue::connect(Config {
        redis_url: redis.url(),
        ..Config::default()
    })
    .unwrap()
}

async fn library_push(o: &Options) -> f64 {
    let redis = Redis::start(&o.appendfsync);
    let q = queue(&redis);
    let n = if o.quick { 5_000 } else { 100_000 };
    push_many(&q, "warm", 1000, Duration::from_secs(3600), 64).await;
    let took = push_many(&q, "lib", n, Duration::from_secs(3600), 64).await;
    q.close().await;
    n as f64 / took.as_secs_f64()
}

async fn http_push(o: &Options) -> Option<(f64, String)> {
    if Command::new("wrk").arg("--version").output().is_err() {
        println!("  (wrk not installed: apt-get install wrk; HTTP push skipped)");
        return None;
    }
    let redis = Redis::start(&o.appendfsync);
    let q = queue(&redis);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = tokio::spawn(delayq::http::serve(
        listener,
        AppState {
            queue: q.clone(),
            server: ServerConfig::default(),
        },
        shutdown.clone(),
    ));
    let secs = if o.quick { "2s" } else { "10s" };
    let out = tokio::task::spawn_blocking(move || {
        Command::new("wrk")
            .args(["-t1", "-c64", "-d", secs, "-s", WRK_SCRIPT])
            .arg(format!("http://{addr}"))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    shutdown.trigger();
    let _ = server.await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())?;
    let errors = text
        .lines()
        .find_map(|l| l.strip_prefix("non-success replies: "))
        .unwrap_or("?")
        .trim()
        .to_owned();
    Some((rps, errors))
}

struct Lateness {
    pending: usize,
    jobs: usize,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    early: usize,
}

/// `jobs` jobs fall due evenly over `spread` while `pending` others wait an
/// hour away; 16 consumers long-poll and finish. Lateness is the Redis time
/// of the hand-over minus the due time.
async fn lateness(o: &Options, pending: usize) -> Lateness {
    let redis = Redis::start(&o.appendfsync);
    let q = queue(&redis);
    push_many(&q, "far", pending, Duration::from_secs(3600), 256).await;
    let (jobs, spread) = if o.quick {
        (500, Duration::from_secs(2))
    } else {
        (5000, Duration::from_secs(10))
    };
    let lead = Duration::from_secs(2);
    let late = Arc::new(Mutex::new(Vec::with_capacity(jobs)));
    let done = Arc::new(AtomicBool::new(false));
    let mut consumers = Vec::new();
    for _ in 0..16 {
        let (q, late, done) = (q.clone(), late.clone(), done.clone());
        consumers.push(tokio::spawn(async move {
            let topic = ["due".to_string()];
            while !done.load(Ordering::Relaxed) {
                if let Some(d) = q.pop(&topic, Duration::from_millis(200)).await.unwrap() {
                    late.lock().unwrap().push(d.popped_at_us - d.due_ms * 1000);
                    q.finish(&d.id, &d.token).await.unwrap();
                }
            }
        }));
    }
    // Push all of them first (with 2 s lead), spread evenly over `spread`.
    let step = spread.as_micros() as u64 / jobs as u64;
    let t0 = Instant::now();
    stream::iter(0..jobs)
        .map(|i| {
            let q = q.clone();
            let due_in = lead + Duration::from_micros(step * i as u64);
            async move {
                let delay = due_in.saturating_sub(t0.elapsed());
                q.push(&new_job(id("due", i), "due", delay)).await.unwrap()
            }
        })
        .buffer_unordered(64)
        .for_each(|_| async {})
        .await;
    let deadline = Instant::now() + lead + spread + Duration::from_secs(30);
    while late.lock().unwrap().len() < jobs && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.store(true, Ordering::Relaxed);
    for c in consumers {
        let _ = c.await;
    }
    q.close().await;
    let mut v = late.lock().unwrap().clone();
    assert_eq!(v.len(), jobs, "not every job fired");
    v.sort();
    let pct = |p: f64| v[((v.len() as f64 * p) as usize).min(v.len() - 1)] as f64 / 1000.0;
    Lateness {
        pending,
        jobs,
        p50: pct(0.50),
        p90: pct(0.90),
        p99: pct(0.99),
        max: *v.last().unwrap() as f64 / 1000.0,
        early: v.iter().filter(|l| **l < 0).count(),
    }
}

async fn memory_per_job(o: &Options) -> (usize, f64) {
    let redis = Redis::start(&o.appendfsync);
    let q = queue(&redis);
    let n = if o.quick { 10_000 } else { 100_000 };
    push_many(&q, "warm", 100, Duration::from_secs(3600), 64).await;
    let before = redis.used_memory();
    push_many(&q, "mem", n, Duration::from_secs(3600), 256).await;
    let after = redis.used_memory();
    q.close().await;
    (n, (after - before) as f64 / n as f64)
}

#[tokio::main]
async fn main() {
    let o = options();
    println!("delayq benchmark");
    println!(
        "conditions: redis-server {} on loopback TCP, redis-conf/redis.conf with appendfsync {}; {} cores; 36-char ids, 64-byte bodies{}",
        Redis::version(),
        o.appendfsync,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        if o.quick { "; QUICK smoke run (small counts)" } else { "" }
    );
    let lib = library_push(&o).await;
    println!("library push, 64 in flight:          {lib:>10.0} jobs/s");
    if let Some((rps, errors)) = http_push(&o).await {
        println!("HTTP /push (compatible), 64 conns:   {rps:>10.0} jobs/s  (wrk -t1 -c64; non-success replies: {errors})");
    }
    let (n, per_job) = memory_per_job(&o).await;
    println!("redis memory per pending job:        {per_job:>10.0} bytes  (used_memory delta over {n} jobs)");
    println!("fire lateness (hand-over minus due time, Redis clock), ms:");
    println!(
        "  {:>9} {:>6} {:>7} {:>7} {:>7} {:>7} {:>6}",
        "pending", "jobs", "p50", "p90", "p99", "max", "early"
    );
    for &pending in &o.pending {
        let l = lateness(&o, pending).await;
        println!(
            "  {:>9} {:>6} {:>7.2} {:>7.2} {:>7.2} {:>7.2} {:>6}",
            l.pending, l.jobs, l.p50, l.p90, l.p99, l.max, l.early
        );
    }
}
