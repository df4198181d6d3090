//! delayq's benchmark, side by side with BullMQ on the same redis-server
//! configuration, in the same run.
//!
//! ```text
//! cargo run --release --example bench -- [--quick | --smoke] [--only delayq|bullmq|cluster]
//!                                        [--repeats N] [--pending 0,100000,1000000]
//!                                        [--settle-rewrites]
//! ```
//!
//! Every scenario runs for delayq and BullMQ alternately, each run on a fresh
//! redis-server started here (loopback TCP, `redis-conf/redis.conf`), and the
//! table shows medians over the repeats and delayq/BullMQ ratios. BullMQ runs
//! in Node (`bench/bullmq/`, installed with npm on first use); `--only
//! delayq` needs no Node. HTTP push uses `wrk` (apt-get install wrk) as the
//! load generator, a separate C process, and is skipped without it. With
//! delayq, the run ends with the same queue on a standalone Redis and on a
//! three-master Redis Cluster (`--only cluster`: that alone).
//! `--settle-rewrites` makes delayq's lateness runs wait, after loading the
//! pending jobs, until Redis has finished the AOF rewrites the load set off:
//! lateness without Redis's rewrite fork and child in the window.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayq::http::{AppState, ServerConfig};
use delayq::{Config, NewJob, Queue, Shutdown};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};

const BENCH_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bench");

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Delayq,
    Bullmq,
}

/// Sizes of one run.
struct Sizes {
    adds: usize,
    batch: usize,
    wrk_secs: u32,
    due_jobs: usize,
    due_spread_ms: u64,
    memory_jobs: usize,
    cpu_jobs: usize,
    e2e_jobs: usize,
}

struct Options {
    systems: Vec<System>,
    /// Run the cluster comparison.
    cluster: bool,
    /// Let AOF rewrites finish before delayq's lateness windows.
    settle_rewrites: bool,
    repeats: usize,
    pending: Vec<usize>,
    sizes: Sizes,
    label: &'static str,
}

fn options() -> Options {
    let mut o = Options {
        systems: vec![System::Delayq, System::Bullmq],
        cluster: true,
        settle_rewrites: false,
        repeats: 3,
        pending: vec![0, 100_000, 1_000_000],
        sizes: Sizes {
            adds: 100_000,
            batch: 100,
            wrk_secs: 10,
            due_jobs: 5000,
            due_spread_ms: 10_000,
            memory_jobs: 1_000_000,
            cpu_jobs: 20_000,
            e2e_jobs: 50_000,
        },
        label: "full",
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" | "--smoke" => {
                let smoke = a == "--smoke";
                o.repeats = 1;
                o.pending = if smoke { vec![1000] } else { vec![0, 20_000] };
                o.sizes = Sizes {
                    adds: if smoke { 2000 } else { 10_000 },
                    batch: 100,
                    wrk_secs: if smoke { 1 } else { 3 },
                    due_jobs: if smoke { 200 } else { 1000 },
                    due_spread_ms: if smoke { 1000 } else { 3000 },
                    memory_jobs: if smoke { 5000 } else { 50_000 },
                    cpu_jobs: if smoke { 1000 } else { 5000 },
                    e2e_jobs: if smoke { 2000 } else { 10_000 },
                };
                o.label = if smoke {
                    "smoke (tiny counts: checks the harness, not the speed)"
                } else {
                    "quick (small counts)"
                };
            }
            "--only" => {
                (o.systems, o.cluster) = match args.next().as_deref() {
                    Some("delayq") => (vec![System::Delayq], true),
                    Some("bullmq") => (vec![System::Bullmq], false),
                    Some("cluster") => (vec![], true),
                    other => panic!("--only delayq|bullmq|cluster, not {other:?}"),
                }
            }
            "--settle-rewrites" => o.settle_rewrites = true,
            "--repeats" => {
                o.repeats = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--repeats N")
            }
            "--pending" => {
                o.pending = args
                    .next()
                    .expect("--pending N[,N...]")
                    .split(',')
                    .map(|n| n.parse().expect("--pending takes numbers"))
                    .collect()
            }
            other => panic!("unknown argument {other:?}"),
        }
    }
    o
}

/// The test suite's redis-server launcher: the same config, a fresh temp
/// dir, killed on drop. The benchmark listens on TCP (BullMQ's client needs
/// it) and uses a part of what the tests use.
#[allow(dead_code)]
#[path = "../tests/suite/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer as Redis;
#[allow(dead_code)]
#[path = "../tests/suite/redis_cluster.rs"]
mod redis_cluster;

/// Script calls (FCALL, EVALSHA, EVAL) and other data commands Redis ran
/// since it started, from `INFO commandstats` (commands run by scripts
/// count there too); administrative ones (INFO, CONFIG, CLIENT, ...) are
/// left out.
fn command_counts(redis: &Redis) -> (f64, f64) {
    let mut c = redis.client().get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let (mut scripts, mut commands) = (0.0, 0.0);
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(":calls="))
        else {
            continue;
        };
        let calls: f64 = rest
            .split(',')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0);
        let admin = [
            "info", "config", "client", "hello", "select", "ping", "function", "script", "latency",
            "command",
        ];
        if ["fcall", "fcall_ro", "evalsha", "eval"].contains(&name) {
            scripts += calls;
        } else if !admin
            .iter()
            .any(|a| name == *a || name.starts_with(&format!("{a}|")))
        {
            commands += calls;
        }
    }
    (scripts, commands)
}

/// Redis's CPU seconds so far (system + user).
fn cpu(redis: &Redis) -> f64 {
    redis.info("cpu", "used_cpu_sys") + redis.info("cpu", "used_cpu_user")
}

fn id(tag: &str, i: usize) -> String {
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

fn queue(redis: &Redis) -> Queue {
    Queue::connect(Config {
        redis: delayq::Redis::Url(redis.url()),
        ..Config::default()
    })
    .unwrap()
}

async fn add_single(q: &Queue, tag: &str, n: usize, delay: Duration) -> Duration {
    let start = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let q = q.clone();
            let job = new_job(id(tag, i), "t", delay);
            async move { q.push(&job).await.expect("push") }
        })
        .buffer_unordered(64)
        .for_each(|_| async {})
        .await;
    start.elapsed()
}

async fn add_bulk(q: &Queue, tag: &str, n: usize, delay: Duration, batch: usize) -> Duration {
    let start = Instant::now();
    for from in (0..n).step_by(batch) {
        let jobs: Vec<NewJob> = (from..(from + batch).min(n))
            .map(|i| new_job(id(tag, i), "t", delay))
            .collect();
        for r in q.push_many(&jobs).await.expect("push_many") {
            r.expect("push");
        }
    }
    start.elapsed()
}

const HOUR: Duration = Duration::from_secs(3600);

/// Runs one BullMQ scenario in Node and returns its JSON result.
fn bullmq(scenario: &str, redis: &Redis, options: Value) -> Value {
    let dir = Path::new(BENCH_DIR).join("bullmq");
    if !dir.join("node_modules").exists() {
        let ok = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(
            ok,
            "npm ci in bench/bullmq failed (or Node is missing: use --only delayq)"
        );
    }
    let mut o = options;
    // redis://127.0.0.1:PORT/
    let port: u16 = redis
        .url()
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a TCP server");
    o["port"] = json!(port);
    let out = Command::new("node")
        .arg(dir.join("bench.mjs"))
        .arg(scenario)
        .arg(o.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("node");
    assert!(out.status.success(), "BullMQ scenario {scenario} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or(""))
        .unwrap_or_else(|_| panic!("BullMQ said {text}"))
}

/// HTTP push through wrk (`bench/push.lua`, `mode` compat or native):
/// jobs/s and Redis CPU per push (us), or None without wrk.
async fn http_push(secs: u32, mode: &str) -> Option<(f64, f64)> {
    if Command::new("wrk").arg("--version").output().is_err() {
        return None;
    }
    let redis = Redis::start_tcp(&[]);
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
    let script = Path::new(BENCH_DIR).join("push.lua");
    let mode = mode.to_owned();
    let cpu_before = cpu(&redis);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("wrk")
            .args(["-t1", "-c64", "-d", &format!("{secs}s"), "-s"])
            .arg(script)
            .arg(format!("http://{addr}"))
            .args(["--", &mode])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let cpu_used = cpu(&redis) - cpu_before;
    shutdown.trigger();
    let _ = server.await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let errors: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("non-success replies: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(u64::MAX);
    assert_eq!(errors, 0, "HTTP push had failures: {text}");
    let rate: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())?;
    Some((rate, cpu_used * 1e6 / (rate * secs as f64)))
}

/// Lateness samples (ms) of `jobs` jobs due evenly over `spread` while
/// `pending` others wait an hour away; 16 consumers.
async fn delayq_lateness(
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
                if let Some(d) = q.pop(&topic, Duration::from_millis(200)).await.unwrap() {
                    late.lock()
                        .unwrap()
                        .push((d.popped_at_us - d.due_ms * 1000) as f64 / 1000.0);
                    q.finish(&d.id, &d.token).await.unwrap();
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
                q.push(&new_job(id("due", i), "due", delay)).await.unwrap()
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

/// 64 consumers popping and finishing until `n` are done; returns when.
fn consume(q: &Queue, n: usize, done: Arc<AtomicUsize>) -> Vec<tokio::task::JoinHandle<()>> {
    (0..64)
        .map(|_| {
            let (q, done) = (q.clone(), done.clone());
            tokio::spawn(async move {
                let topic = ["t".to_string()];
                while done.load(Ordering::Relaxed) < n {
                    if let Some(d) = q.pop(&topic, Duration::from_millis(100)).await.unwrap() {
                        q.finish(&d.id, &d.token).await.unwrap();
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect()
}

/// Redis CPU (µs) per add -> fire -> pop -> finish, idle subtracted; and the
/// end-to-end rate of the same flow (jobs/s).
async fn delayq_lifecycle(redis: &Redis, n: usize, measure_cpu: bool) -> f64 {
    lifecycle(queue(redis), n, measure_cpu, &|| cpu(redis)).await
}

/// [`delayq_lifecycle`] on any queue, with Redis CPU read by `cpu`.
async fn lifecycle(q: Queue, n: usize, measure_cpu: bool, cpu: &dyn Fn() -> f64) -> f64 {
    let done = Arc::new(AtomicUsize::new(0));
    let consumers = consume(&q, n, done.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rate = if measure_cpu {
        let (c0, t0) = (cpu(), Instant::now());
        tokio::time::sleep(Duration::from_secs(2)).await;
        (cpu() - c0) / t0.elapsed().as_secs_f64()
    } else {
        0.0
    };
    let (c0, t0) = (cpu(), Instant::now());
    add_single(&q, "life", n, Duration::from_millis(10)).await;
    while done.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu() - c0 - idle_rate * wall;
    for c in consumers {
        let _ = c.await;
    }
    q.close().await;
    if measure_cpu {
        cpu * 1e6 / n as f64
    } else {
        n as f64 / wall
    }
}

/// Partitions of the cluster runs: four per master.
const CLUSTER_PARTITIONS: usize = 12;

/// One queue on a standalone Redis against the same queue split over a
/// three-master cluster (no replicas), in the same run, same config.
async fn cluster_figures(s: &Sizes, repeats: usize) {
    use redis_cluster::TestCluster;
    let mut rows: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut per_master: Vec<Vec<f64>> = Vec::new();
    for _ in 0..repeats {
        let redis = Redis::start_tcp(&[]);
        let q = queue(&redis);
        add_single(&q, "warm", 1000, HOUR).await;
        let took = add_single(&q, "one", s.adds, HOUR).await;
        q.close().await;
        drop(redis);
        rows.entry("standalone pushes/s")
            .or_default()
            .push(s.adds as f64 / took.as_secs_f64());
        let redis = Redis::start_tcp(&[]);
        let v = delayq_lifecycle(&redis, s.cpu_jobs, true).await;
        drop(redis);
        rows.entry("standalone cpu").or_default().push(v);

        let cq = |cluster: &TestCluster| {
            Queue::connect(Config {
                redis: delayq::Redis::Cluster(cluster.seeds()),
                partitions: CLUSTER_PARTITIONS,
                ..Config::default()
            })
            .unwrap()
        };
        let cluster = TestCluster::start_with(3, 0, &[]);
        let q = cq(&cluster);
        add_single(&q, "warm", 1000, HOUR).await;
        let took = add_single(&q, "one", s.adds, HOUR).await;
        q.close().await;
        rows.entry("cluster pushes/s")
            .or_default()
            .push(s.adds as f64 / took.as_secs_f64());
        drop(cluster);

        let cluster = TestCluster::start_with(3, 0, &[]);
        let masters: Vec<&Redis> = cluster.nodes.iter().collect();
        let before: Vec<f64> = masters.iter().map(|m| cpu(m)).collect();
        let total = || masters.iter().map(|m| cpu(m)).sum::<f64>();
        let v = lifecycle(cq(&cluster), s.cpu_jobs, true, &total).await;
        rows.entry("cluster cpu").or_default().push(v);
        // Each master's share of that, by its share of the CPU used.
        let used: Vec<f64> = masters
            .iter()
            .zip(before)
            .map(|(m, b)| cpu(m) - b)
            .collect();
        let sum: f64 = used.iter().sum();
        per_master.push(used.iter().map(|u| v * u / sum).collect());
    }
    let m = |k: &str| median(rows.get(k).cloned().unwrap_or_default());
    println!();
    println!(
        "Redis Cluster: the same queue on one standalone Redis and split into {CLUSTER_PARTITIONS} partitions over a three-master cluster (no replicas; each node with redis-conf/redis.conf), same run, {repeats} repeat(s), medians:"
    );
    println!("| measure | standalone | cluster, 3 masters | cluster/standalone |");
    println!("|---|---:|---:|---:|");
    let (sp, cp) = (m("standalone pushes/s"), m("cluster pushes/s"));
    println!(
        "| add, single, 64 in flight (jobs/s) | {sp:.0} | {cp:.0} | {:.2}x |",
        cp / sp
    );
    let (sc, cc) = (m("standalone cpu"), m("cluster cpu"));
    println!(
        "| Redis CPU per job lifecycle, all nodes (us) | {sc:.1} | {cc:.1} | {:.2}x |",
        cc / sc
    );
    let shares: Vec<String> = (0..3)
        .map(|i| format!("{:.1}", median(per_master.iter().map(|r| r[i]).collect())))
        .collect();
    println!(
        "| Redis CPU per job lifecycle, per master (us) | - | {} | - |",
        shares.join(" / ")
    );
}

/// A command on its own connection, reply ignored.
fn redis_sync(redis: &Redis, args: &[&str]) {
    let mut c = redis.client().get_connection().unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd.query(&mut c).unwrap();
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

/// The table's rows, in order.
const ROWS: &[&str] = &[
    "add, single, 64 in flight (jobs/s)",
    "Redis CPU per single add (us)",
    "add, batches of 100 (jobs/s)",
    "HTTP /push (compatible), 64 conns, wrk (jobs/s)",
    "HTTP /push (compatible), 64 conns, wrk (jobs/s), Redis CPU per push (us)",
    "HTTP /v1/jobs (native), 64 conns, wrk (jobs/s)",
    "Redis memory per pending job (bytes)",
    "Redis CPU per job lifecycle (us)",
    "Redis script calls per job lifecycle",
    "Redis commands per job lifecycle (run by scripts, or sent)",
    "end to end, add->fire->pop->finish (jobs/s)",
];

/// Results: (row, system) -> samples over repeats.
type Table = BTreeMap<(String, &'static str), Vec<f64>>;

fn record(t: &mut Table, row: &str, system: System, value: f64) {
    let col = match system {
        System::Delayq => "delayq",
        System::Bullmq => "bullmq",
    };
    t.entry((row.to_owned(), col)).or_default().push(value);
}

#[tokio::main]
async fn main() {
    let o = options();
    let s = &o.sizes;
    let node = Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let redis_version = Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .find_map(|w| w.strip_prefix("v="))
                .unwrap_or("?")
                .to_owned()
        })
        .unwrap_or_default();
    println!(
        "delayq benchmark: {} run, {} repeat(s), medians",
        o.label, o.repeats
    );
    println!(
        "conditions: redis-server {redis_version} on loopback TCP with redis-conf/redis.conf (AOF, appendfsync always), a fresh server per run; {} cores shared by Redis, the system under test and the load; 36-char ids, 64-byte bodies; node {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        node.as_deref().unwrap_or("absent"),
    );
    let mut t = Table::new();
    let mut lateness: BTreeMap<(usize, &'static str), Vec<Vec<f64>>> = BTreeMap::new();
    let mut stalls: Vec<String> = Vec::new();
    for rep in 0..o.repeats {
        eprintln!("repeat {} of {}", rep + 1, o.repeats);
        for &system in &o.systems {
            let row = "add, single, 64 in flight (jobs/s)";
            let redis = Redis::start_tcp(&[]);
            let (v, us) = match system {
                System::Delayq => {
                    let q = queue(&redis);
                    add_single(&q, "warm", 1000, HOUR).await;
                    let c0 = cpu(&redis);
                    let took = add_single(&q, "one", s.adds, HOUR).await;
                    let us = (cpu(&redis) - c0) * 1e6 / s.adds as f64;
                    q.close().await;
                    (s.adds as f64 / took.as_secs_f64(), us)
                }
                System::Bullmq => {
                    // The whole node run (its warm-up included) over the
                    // adds: a little in BullMQ's disfavour.
                    let c0 = cpu(&redis);
                    let v = bullmq("add_single", &redis, json!({"n": s.adds, "inflight": 64}))
                        ["jobs_per_s"]
                        .as_f64()
                        .unwrap();
                    (v, (cpu(&redis) - c0) * 1e6 / s.adds as f64)
                }
            };
            record(&mut t, row, system, v);
            record(&mut t, "Redis CPU per single add (us)", system, us);
            // Stop this run's server before the next starts: an idle
            // redis-server with a million keys still expires and syncs.
            drop(redis);

            let row = "add, batches of 100 (jobs/s)";
            let redis = Redis::start_tcp(&[]);
            let v = match system {
                System::Delayq => {
                    let q = queue(&redis);
                    add_bulk(&q, "warm", 1000, HOUR, s.batch).await;
                    let took = add_bulk(&q, "bulk", s.adds, HOUR, s.batch).await;
                    q.close().await;
                    s.adds as f64 / took.as_secs_f64()
                }
                System::Bullmq => {
                    bullmq("add_bulk", &redis, json!({"n": s.adds, "batch": s.batch}))["jobs_per_s"]
                        .as_f64()
                        .unwrap()
                }
            };
            record(&mut t, row, system, v);
            // Stop this run's server before the next starts: an idle
            // redis-server with a million keys still expires and syncs.
            drop(redis);

            if system == System::Delayq {
                for (row, script) in [
                    ("HTTP /push (compatible), 64 conns, wrk (jobs/s)", "compat"),
                    ("HTTP /v1/jobs (native), 64 conns, wrk (jobs/s)", "native"),
                ] {
                    if let Some((v, us)) = http_push(s.wrk_secs, script).await {
                        record(&mut t, row, system, v);
                        record(
                            &mut t,
                            &format!("{row}, Redis CPU per push (us)"),
                            system,
                            us,
                        );
                    }
                }
            }

            let row = "Redis memory per pending job (bytes)";
            let redis = Redis::start_tcp(&[]);
            let v = match system {
                System::Delayq => {
                    let q = queue(&redis);
                    add_bulk(&q, "warm", 100, HOUR, 100).await;
                    let before = redis.info("memory", "used_memory");
                    add_bulk(&q, "mem", s.memory_jobs, HOUR, 1000).await;
                    let after = redis.info("memory", "used_memory");
                    q.close().await;
                    (after - before) / s.memory_jobs as f64
                }
                System::Bullmq => bullmq("memory", &redis, json!({"n": s.memory_jobs}))
                    ["bytes_per_job"]
                    .as_f64()
                    .unwrap(),
            };
            record(&mut t, row, system, v);
            // Stop this run's server before the next starts: an idle
            // redis-server with a million keys still expires and syncs.
            drop(redis);

            let row = "Redis CPU per job lifecycle (us)";
            let redis = Redis::start_tcp(&[]);
            let v = match system {
                System::Delayq => delayq_lifecycle(&redis, s.cpu_jobs, true).await,
                System::Bullmq => bullmq("cpu", &redis, json!({"n": s.cpu_jobs}))["cpu_us_per_job"]
                    .as_f64()
                    .unwrap(),
            };
            record(&mut t, row, system, v);
            // Where that CPU goes: script calls, and the commands Redis ran
            // (inside scripts or sent alone), over the whole run (warm-up
            // included) per job.
            let (scripts, commands) = command_counts(&redis);
            let n = s.cpu_jobs as f64;
            record(
                &mut t,
                "Redis script calls per job lifecycle",
                system,
                scripts / n,
            );
            record(
                &mut t,
                "Redis commands per job lifecycle (run by scripts, or sent)",
                system,
                commands / n,
            );
            // Stop this run's server before the next starts: an idle
            // redis-server with a million keys still expires and syncs.
            drop(redis);

            let row = "end to end, add->fire->pop->finish (jobs/s)";
            let redis = Redis::start_tcp(&[]);
            let v = match system {
                System::Delayq => delayq_lifecycle(&redis, s.e2e_jobs, false).await,
                System::Bullmq => {
                    bullmq("e2e", &redis, json!({"n": s.e2e_jobs, "concurrency": 64}))["jobs_per_s"]
                        .as_f64()
                        .unwrap()
                }
            };
            record(&mut t, row, system, v);
            // Stop this run's server before the next starts: an idle
            // redis-server with a million keys still expires and syncs.
            drop(redis);

            for &pending in &o.pending {
                let redis = Redis::start_tcp(&[]);
                // Redis's own record of stalls during the run: the latency
                // monitor (events of 5 ms or more) and fork/rewrite counts.
                redis_sync(&redis, &["CONFIG", "SET", "latency-monitor-threshold", "5"]);
                let mut v = match system {
                    System::Delayq => delayq_lateness(&redis, pending, s.due_jobs, s.due_spread_ms, o.settle_rewrites).await,
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
                };
                v.sort_by(|a, b| a.partial_cmp(b).unwrap());
                let col = if system == System::Delayq {
                    "delayq"
                } else {
                    "bullmq"
                };
                stalls.push(format!(
                    "| {pending} | {col} | {:.2} | {} | {:.1} | {} |",
                    v.last().copied().unwrap_or(0.0),
                    redis.info("persistence", "aof_rewrites"),
                    redis.info("stats", "latest_fork_usec") / 1000.0,
                    latency_events(&redis),
                ));
                lateness.entry((pending, col)).or_default().push(v);
            }
        }
    }

    if !o.systems.is_empty() {
        println!();
        println!("| scenario | delayq | BullMQ | delayq/BullMQ |");
        println!("|---|---:|---:|---:|");
        for row in ROWS {
            let row = row.to_string();
            let d = t.get(&(row.clone(), "delayq")).cloned().map(median);
            let b = t.get(&(row.clone(), "bullmq")).cloned().map(median);
            let fmt = |v: Option<f64>| {
                v.map_or("-".to_owned(), |v| {
                    if v >= 100.0 {
                        format!("{v:.0}")
                    } else {
                        format!("{v:.1}")
                    }
                })
            };
            let ratio = match (d, b) {
                (Some(d), Some(b)) if b > 0.0 => format!("{:.2}x", d / b),
                _ => "-".into(),
            };
            println!("| {row} | {} | {} | {ratio} |", fmt(d), fmt(b));
        }
        println!();
        println!(
            "fire lateness, ms (hand-over minus due time; {} jobs due evenly over {} s while N others wait an hour away; 16 consumers):",
            s.due_jobs,
            s.due_spread_ms / 1000
        );
        println!("| N pending | system | p50 | p90 | p99 | p99.9 | max | early |");
        println!("|---:|---|---:|---:|---:|---:|---:|---:|");
        for ((pending, col), runs) in &lateness {
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
    if !stalls.is_empty() {
        println!();
        println!("Redis during each lateness run (every repeat): AOF rewrites, the last fork's duration, and the latency monitor's events of 5 ms or more (event: worst ms):");
        println!(
            "| N pending | system | max lateness ms | AOF rewrites | last fork ms | Redis events |"
        );
        println!("|---:|---|---:|---:|---:|---|");
        for line in &stalls {
            println!("{line}");
        }
    }
    if o.cluster {
        cluster_figures(s, o.repeats).await;
    }
    // Raw samples for charts: one line per (N, system, repeat).
    if let Ok(path) = std::env::var("DELAYQ_BENCH_SAMPLES") {
        let mut out = String::new();
        for ((pending, col), runs) in &lateness {
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
