//! apalis's side of delayq's benchmark. The harness (bench/main.rs) starts a
//! redis-server and runs
//!   delayq-bench-apalis <scenario> '<options as JSON>'
//! and reads one JSON line of results from stdout, as with BullMQ's
//! bench.mjs. Every scenario mirrors the delayq one: 36-char ids (apalis
//! takes string task ids), the 64-byte JSON body as the task's argument
//! (stored as those same bytes by apalis's JSON codec), jobs scheduled with
//! `TaskBuilder::run_after`. apalis keeps finished tasks (its done set and
//! per-task metadata); that is its default and is left as is.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apalis::prelude::*;
use apalis_redis::{Config, ConnectionManager, RedisStorage};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};

type Storage = RedisStorage<Value>;

const HOUR: Duration = Duration::from_secs(3600);

struct Opts {
    o: Value,
    url: String,
}

impl Opts {
    fn n(&self, key: &str) -> usize {
        self.o[key]
            .as_u64()
            .unwrap_or_else(|| panic!("option {key}")) as usize
    }
}

/// The same ids as bench/common.rs: 36 characters.
fn id(tag: &str, i: usize) -> String {
    format!("{tag:0>8}-0000-0000-0000-{i:012}")
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

async fn connect(url: &str) -> ConnectionManager {
    apalis_redis::connect(url).await.expect("redis")
}

/// A plain connection for INFO and counts, apart from apalis's own.
async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn info(c: &mut redis::aio::MultiplexedConnection, section: &str, field: &str) -> f64 {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(c)
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} {field}"))
}

async fn cpu(c: &mut redis::aio::MultiplexedConnection) -> f64 {
    info(c, "cpu", "used_cpu_sys").await + info(c, "cpu", "used_cpu_user").await
}

fn storage(conn: ConnectionManager, queue: &str) -> Storage {
    RedisStorage::new(conn).with_config(Config::default().queue(queue))
}

fn task(body: &Value, id: String, delay: Duration) -> Task<Value> {
    TaskBuilder::new(body.clone())
        .task_id(TaskId::from_string(id))
        .run_after(delay)
        .build()
}

/// `n` single pushes, `inflight` at a time, each on its own clone of the
/// storage (one shared multiplexed connection, as apalis hands it out).
/// Records each job's due instant (ms since the epoch) when `due` is given.
async fn add_single(
    s: &Storage,
    body: &Value,
    tag: &str,
    n: usize,
    delay: Duration,
    inflight: usize,
    due: Option<&Mutex<HashMap<String, f64>>>,
) -> Duration {
    let start = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let mut s = s.clone();
            let id = id(tag, i);
            if let Some(due) = due {
                let at = now_ms() + delay.as_secs_f64() * 1000.0;
                due.lock().unwrap().insert(id.clone(), at);
            }
            let t = task(body, id, delay);
            async move { s.push_task(t).await.expect("push") }
        })
        .buffer_unordered(inflight)
        .for_each(|_| async {})
        .await;
    start.elapsed()
}

/// In batches through the storage's sink.
async fn add_bulk(s: &mut Storage, body: &Value, tag: &str, n: usize, batch: usize) {
    for from in (0..n).step_by(batch) {
        let tasks: Vec<Task<Value>> = (from..(from + batch).min(n))
            .map(|i| task(body, id(tag, i), HOUR))
            .collect();
        s.push_all(&mut stream::iter(tasks))
            .await
            .expect("push_all");
    }
}

/// What the handler sees: tasks started, and each one's lateness (start
/// less its due instant, ms, on this process's clock).
#[derive(Default)]
struct Seen {
    started: AtomicUsize,
    due: Mutex<HashMap<String, f64>>,
    late_ms: Mutex<Vec<f64>>,
}

async fn handle(_body: Value, id: TaskId, seen: Data<Arc<Seen>>) -> Result<(), BoxDynError> {
    let at = now_ms();
    if let Some(due) = seen.due.lock().unwrap().get(&id.to_string()) {
        seen.late_ms.lock().unwrap().push(at - due);
    }
    seen.started.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A worker of concurrency 64 on `queue`, polling every `poll`.
fn worker(conn: ConnectionManager, queue: &str, poll: Duration, seen: Arc<Seen>) {
    let backend = storage(conn, queue).poll_with_interval(poll);
    let w = WorkerBuilder::new(format!("bench-{queue}"))
        .backend(backend)
        .data(seen)
        .concurrency(64)
        .build(handle);
    tokio::spawn(async move {
        let _ = w.run().await;
    });
}

/// Waits until `n` tasks are in apalis's done set (acknowledged, not only
/// started).
async fn wait_done(c: &mut redis::aio::MultiplexedConnection, queue: &str, n: usize) {
    let key = format!("{queue}:done");
    loop {
        let done: usize = redis::cmd("SCARD").arg(&key).query_async(c).await.unwrap();
        if done >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn lateness_summary(mut late: Vec<f64>) -> Value {
    late.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| late[((late.len() as f64 * p) as usize).min(late.len() - 1)];
    if late.is_empty() {
        return json!({});
    }
    json!({
        "early": late.iter().filter(|&&l| l < 0.0).count(),
        "most_early_ms": -late[0].min(0.0),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "max_ms": late[late.len() - 1],
    })
}

async fn run(scenario: &str, o: &Opts) -> Value {
    let body: Value = serde_json::from_str(o.o["body"].as_str().expect("body")).unwrap();
    // Like for like: apalis's JSON codec must write the very bytes given.
    assert_eq!(
        serde_json::to_string(&body).unwrap(),
        o.o["body"].as_str().unwrap()
    );
    let queue = format!("bench-{scenario}");
    let mut admin = admin(&o.url).await;
    let conn = connect(&o.url).await;
    let poll = Duration::from_millis(o.o["poll_ms"].as_u64().unwrap_or(100));
    match scenario {
        // Single pushes an hour away, 64 in flight; Redis CPU per add over
        // the measured adds only.
        "add_single" => {
            let s = storage(conn, &queue);
            let inflight = o.n("inflight");
            add_single(&s, &body, "warm", 1000, HOUR, inflight, None).await;
            let c0 = cpu(&mut admin).await;
            let took = add_single(&s, &body, "one", o.n("n"), HOUR, inflight, None).await;
            let c1 = cpu(&mut admin).await;
            json!({
                "jobs_per_s": o.n("n") as f64 / took.as_secs_f64(),
                "cpu_us_per_job": (c1 - c0) * 1e6 / o.n("n") as f64,
            })
        }
        "memory" => {
            let mut s = storage(conn, &queue);
            add_bulk(&mut s, &body, "warm", 100, 100).await;
            let before = info(&mut admin, "memory", "used_memory").await;
            add_bulk(&mut s, &body, "mem", o.n("n"), 1000).await;
            let after = info(&mut admin, "memory", "used_memory").await;
            let stored: String = redis::cmd("HGET")
                .arg(format!("{queue}:data"))
                .arg(id("mem", 0))
                .query_async(&mut admin)
                .await
                .unwrap();
            assert_eq!(
                stored,
                o.o["body"].as_str().unwrap(),
                "apalis keeps the body as given"
            );
            json!({"bytes_per_job": (after - before) / o.n("n") as f64})
        }
        // add -> fire -> fetch -> finish of n jobs due 10 ms ahead, 64 adds
        // in flight, a worker of concurrency 64: Redis CPU per job (idle
        // subtracted) and the end-to-end rate, with lateness.
        "lifecycle" => {
            let n = o.n("n");
            let seen = Arc::new(Seen::default());
            worker(conn.clone(), &queue, poll, seen.clone());
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (c0, t0) = (cpu(&mut admin).await, Instant::now());
            tokio::time::sleep(Duration::from_secs(2)).await;
            let idle = (cpu(&mut admin).await - c0) / t0.elapsed().as_secs_f64();
            let s = storage(conn, &queue);
            let (c0, t0) = (cpu(&mut admin).await, Instant::now());
            let delay = Duration::from_millis(10);
            add_single(&s, &body, "life", n, delay, 64, Some(&seen.due)).await;
            wait_done(&mut admin, &queue, n).await;
            let wall = t0.elapsed().as_secs_f64();
            let cpu = cpu(&mut admin).await - c0 - idle * wall;
            let late = std::mem::take(&mut *seen.late_ms.lock().unwrap());
            json!({
                "cpu_us_per_job": cpu * 1e6 / n as f64,
                "jobs_per_s": n as f64 / wall,
                "idle_cpu_pct": idle * 100.0,
                "lateness": lateness_summary(late),
            })
        }
        // `n` jobs due one by one over spread_ms, the first lead_ms ahead:
        // how many start before their due instant, and by how much.
        "due_spread" => {
            let n = o.n("n");
            let (lead, spread) = (o.n("lead_ms") as f64, o.n("spread_ms") as f64);
            let seen = Arc::new(Seen::default());
            worker(conn.clone(), &queue, poll, seen.clone());
            tokio::time::sleep(Duration::from_millis(500)).await;
            let s = storage(conn, &queue);
            let t0 = now_ms();
            stream::iter(0..n)
                .map(|i| {
                    let mut s = s.clone();
                    let at = t0 + lead + spread * i as f64 / n as f64;
                    let id = id("due", i);
                    let delay = Duration::from_secs_f64(((at - now_ms()) / 1000.0).max(0.0));
                    seen.due
                        .lock()
                        .unwrap()
                        .insert(id.clone(), now_ms() + delay.as_secs_f64() * 1000.0);
                    let t = task(&body, id, delay);
                    async move { s.push_task(t).await.expect("push") }
                })
                .buffer_unordered(64)
                .for_each(|_| async {})
                .await;
            let deadline = Instant::now() + Duration::from_millis((lead + spread) as u64 + 30_000);
            while seen.started.load(Ordering::Relaxed) < n && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let late = std::mem::take(&mut *seen.late_ms.lock().unwrap());
            let mut r = lateness_summary(late);
            r["lost"] = json!(n - seen.started.load(Ordering::Relaxed).min(n));
            r
        }
        other => panic!("no scenario {other}"),
    }
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let scenario = args.next().expect("scenario");
    let o: Value = serde_json::from_str(&args.next().unwrap_or_else(|| "{}".into())).unwrap();
    let url = format!("redis://127.0.0.1:{}/", o["port"].as_u64().expect("port"));
    let result = run(&scenario, &Opts { o, url }).await;
    println!("{result}");
    // Workers run on spawned tasks: leave without waiting for them.
    std::process::exit(0);
}
