//! What every scenario uses: a queue on a fresh Redis, job ids and bodies,
//! adds, Redis CPU readings, BullMQ's runner, and the statistics.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use delayq::{Config, Delivery, Error, NewJob, Queue};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};

use crate::Redis;

pub(crate) const BENCH_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/bench");

/// Redis's CPU seconds so far (system + user).
pub(crate) fn cpu(redis: &Redis) -> f64 {
    redis.info("cpu", "used_cpu_sys") + redis.info("cpu", "used_cpu_user")
}

/// A benchmark's redis-server persistence: `redis-conf/redis.conf` as it
/// is (AOF, `appendfsync always`; the config has no RDB saves), or none.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum Persist {
    AofAlways,
    None,
}

impl Persist {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Persist::AofAlways => "AOF always",
            Persist::None => "no persistence",
        }
    }
    /// The server's arguments beyond the config file.
    pub(crate) fn redis_args(self) -> &'static [&'static str] {
        match self {
            Persist::AofAlways => &[],
            Persist::None => &["--appendonly", "no"],
        }
    }
}

/// `--no-persistence` (or `DELAYQ_BENCH_BURST_NO_PERSIST=1`, the burst's
/// older switch): see [`persist`].
pub(crate) static NO_PERSISTENCE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The persistence of the scale and burst sections' servers.
pub(crate) fn persist() -> Persist {
    let env = std::env::var_os("DELAYQ_BENCH_BURST_NO_PERSIST").is_some_and(|v| v == "1");
    if env || NO_PERSISTENCE.load(std::sync::atomic::Ordering::Relaxed) {
        Persist::None
    } else {
        Persist::AofAlways
    }
}

/// `--short-ids`: ids like `far0-123456` (as long as a counter's), not
/// 36 characters; both systems' ids follow it (BullMQ's too, by
/// [`bullmq_on`]).
pub(crate) static SHORT_IDS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Job `i` of the jobs tagged `tag`: a UUID's length (36 characters) unless
/// `--short-ids`.
pub(crate) fn id(tag: &str, i: usize) -> String {
    if SHORT_IDS.load(std::sync::atomic::Ordering::Relaxed) {
        return format!("{tag}-{i}");
    }
    format!("{tag:0>8}-0000-0000-0000-{i:012}")
}

pub(crate) fn new_job(id: String, topic: &str, delay: Duration) -> NewJob {
    new_job_with(id, topic, delay, "b".repeat(64))
}

pub(crate) fn new_job_with(id: String, topic: &str, delay: Duration, body: String) -> NewJob {
    NewJob {
        id,
        topic: topic.into(),
        body,
        delay,
        ttr: Duration::from_secs(60),
        ..NewJob::default()
    }
}

pub(crate) fn queue(redis: &Redis) -> Queue {
    settle_layout(redis);
    Queue::connect(Config {
        redis: delayq::Redis::Url(redis.url()),
        ..Config::default()
    })
    .unwrap()
}

/// A queue of this build settles at the highest storage layout it reads
/// within a second of its leader's first look, and its leader's first pass
/// over the topic schedules ends. A benchmark measures that settled queue,
/// not a load begun in its first second: that pass would walk every job
/// loaded meanwhile (paced: about 5% of a core for a minute after a
/// million, see BENCHMARKS.md "Ten million pending"), in whatever window
/// comes next. So an empty server is given the state the leader leaves on
/// an empty Redis (the flag, and the pass's marks) before the queue
/// connects; a server already in use keeps its own (`SET NX`, `HSETNX`).
fn settle_layout(redis: &Redis) {
    let mut c = redis.client().get_connection().unwrap();
    let fresh: bool = redis::cmd("SET")
        .arg("{dq}:layout")
        .arg(delayq::queue::LAYOUT)
        .arg("NX")
        .query::<Option<String>>(&mut c)
        .unwrap()
        .is_some();
    if fresh {
        for field in ["done", "headed", "split", "out"] {
            let _: i64 = redis::cmd("HSETNX")
                .arg("{dq}:indexed")
                .arg(field)
                .arg(1)
                .query(&mut c)
                .unwrap();
        }
    }
}

/// Waits until every partition of `q` is at the highest layout this build
/// reads (see [`settle_layout`]; on a cluster the partitions' flags live
/// on several nodes, so the queue's own leaders raise them, within about
/// a second of connecting).
pub(crate) async fn settled(q: &Queue) {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let layouts = q.layouts().await.unwrap_or_default();
        if !layouts.is_empty() && layouts.iter().all(|l| l.layout == delayq::queue::LAYOUT) {
            return;
        }
        assert!(
            Instant::now() < end,
            "the queue's layout did not settle: {layouts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn add_single(q: &Queue, tag: &str, n: usize, delay: Duration) -> Duration {
    add_single_body(q, tag, n, delay, 64, &"b".repeat(64)).await
}

/// [`add_single`] with `inflight` pushes at once and the given body.
pub(crate) async fn add_single_body(
    q: &Queue,
    tag: &str,
    n: usize,
    delay: Duration,
    inflight: usize,
    body: &str,
) -> Duration {
    let start = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let q = q.clone();
            let job = new_job_with(id(tag, i), "t", delay, body.to_owned());
            async move { push(&q, &job).await }
        })
        .buffer_unordered(inflight)
        .for_each(|_| async {})
        .await;
    start.elapsed()
}

pub(crate) async fn add_bulk(
    q: &Queue,
    tag: &str,
    n: usize,
    delay: Duration,
    batch: usize,
) -> Duration {
    add_bulk_body(q, tag, n, delay, batch, &"b".repeat(64)).await
}

/// A JSON object of exactly `n` bytes, `{"order":12345678,"pad":"xx..."}`:
/// a body both systems keep as the same bytes (delayq as given, BullMQ as
/// the JSON.stringify of the parsed object).
pub(crate) fn json_body(n: usize) -> String {
    let empty = r#"{"order":12345678,"pad":""}"#;
    assert!(n >= empty.len(), "a JSON body of {n} bytes is too small");
    let body = format!(
        r#"{{"order":12345678,"pad":"{}"}}"#,
        "x".repeat(n - empty.len())
    );
    assert_eq!(body.len(), n);
    body
}

/// [`add_bulk`] with the given body.
pub(crate) async fn add_bulk_body(
    q: &Queue,
    tag: &str,
    n: usize,
    delay: Duration,
    batch: usize,
    body: &str,
) -> Duration {
    let start = Instant::now();
    for from in (0..n).step_by(batch) {
        let jobs: Vec<NewJob> = (from..(from + batch).min(n))
            .map(|i| new_job_with(id(tag, i), "t", delay, body.to_owned()))
            .collect();
        match q.push_many(&jobs).await {
            Ok(results) => {
                for (r, job) in results.into_iter().zip(&jobs) {
                    if let Err(e) = r {
                        assert!(e.is_unavailable(), "push: {e}");
                        push(q, job).await;
                    }
                }
            }
            Err(e) if e.is_unavailable() => {
                for job in &jobs {
                    push(q, job).await;
                }
            }
            Err(e) => panic!("push_many: {e}"),
        }
    }
    start.elapsed()
}

// A busy machine (the smoke run in `./dev test`, beside other builds) may
// keep Redis from answering within the call timeout: a call given up on
// changed nothing, or took effect, and these try again as a client would.

/// Pushes `job` (again, if Redis did not answer: the same job replaces it).
pub(crate) async fn push(q: &Queue, job: &NewJob) {
    loop {
        match q.push(job).await {
            Ok(_) => return,
            Err(e) if e.is_unavailable() => {}
            Err(e) => panic!("push: {e}"),
        }
    }
}

/// Pops a job from `topic` within `wait` (None if none came, or Redis did
/// not answer).
pub(crate) async fn pop(q: &Queue, topic: &[String], wait: Duration) -> Option<Delivery> {
    match q.pop(topic, wait).await {
        Ok(d) => d,
        Err(e) if e.is_unavailable() => None,
        Err(e) => panic!("pop: {e}"),
    }
}

/// Finishes `d` (again, if Redis did not answer: a stale token or no job
/// then means the first finish took effect).
pub(crate) async fn finish(q: &Queue, d: &Delivery) {
    let mut tried = false;
    loop {
        match q.finish(&d.id, &d.token).await {
            Ok(_) => return,
            Err(e) if e.is_unavailable() => tried = true,
            Err(Error::StaleLease(_) | Error::NotFound(_)) if tried => return,
            Err(e) => panic!("finish: {e}"),
        }
    }
}

pub(crate) const HOUR: Duration = Duration::from_secs(3600);

/// Runs one BullMQ scenario in Node and returns its JSON result.
pub(crate) fn bullmq(scenario: &str, redis: &Redis, options: Value) -> Value {
    bullmq_on(scenario, port(redis), options)
}

/// [`bullmq`] against the server on `port` (from another thread).
pub(crate) fn bullmq_on(scenario: &str, port: u16, options: Value) -> Value {
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
    o["port"] = json!(port);
    o["short_ids"] = json!(SHORT_IDS.load(std::sync::atomic::Ordering::Relaxed));
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

/// apalis's side (`bench/apalis`, a crate of its own): built here on first
/// use, as `npm ci` is for BullMQ. False, with the reason printed, when it
/// does not build.
pub(crate) fn apalis_ready() -> bool {
    let manifest = Path::new(BENCH_DIR).join("apalis/Cargo.toml");
    eprintln!(
        "building bench/apalis (cargo build --release; the first time takes a minute or two)"
    );
    let ok = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        // Its own target dir, whatever CARGO_TARGET_DIR says: the binary is
        // looked for there.
        .arg("--target-dir")
        .arg(Path::new(BENCH_DIR).join("apalis/target"))
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("apalis: bench/apalis did not build, so no apalis beside");
    }
    ok
}

/// Runs one apalis scenario and returns its JSON result; `body` is the
/// 64-byte JSON body unless given.
pub(crate) fn apalis(scenario: &str, redis: &Redis, options: Value) -> Value {
    let bin = Path::new(BENCH_DIR).join("apalis/target/release/delayq-bench-apalis");
    let mut o = options;
    o["port"] = json!(port(redis));
    if o.get("body").is_none() {
        o["body"] = json!(json_body(64));
    }
    let out = Command::new(bin)
        .arg(scenario)
        .arg(o.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("bench/apalis's binary");
    assert!(out.status.success(), "apalis scenario {scenario} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or(""))
        .unwrap_or_else(|_| panic!("apalis said {text}"))
}

fn port(redis: &Redis) -> u16 {
    // redis://127.0.0.1:PORT/
    redis
        .url()
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a TCP server")
}

/// A command on its own connection, reply ignored.
pub(crate) fn redis_sync(redis: &Redis, args: &[&str]) {
    let mut c = redis.client().get_connection().unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd.query(&mut c).unwrap();
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}
