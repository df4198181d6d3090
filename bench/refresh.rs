//! What a dashboard refresh costs Redis (issue 24): a million delayed jobs
//! over 100 topics on a fresh redis-server, then the overview page's calls
//! (`/v1/topics`, `/v1/schedule?limit=20`, `/metrics`, and the throughput
//! chart's `/v1/stats/throughput`) made 20 times; Redis CPU from `INFO cpu`
//! before and after, and the time per refresh. Then each call alone, 20
//! times, to show which costs what.
//!
//! ```text
//! cargo run --release --example bench -- --only refresh [--quick | --smoke]
//! ```

use std::time::{Duration, Instant};

use delayq::http::{AppState, ServerConfig};
use delayq::{NewJob, Shutdown};
use futures::stream::{self, StreamExt};

use crate::common::{cpu, id, new_job, queue, HOUR};
use crate::Redis;

const TOPICS: usize = 100;
const REFRESHES: usize = 20;
/// What the overview page asks for on each refresh.
const CALLS: &[&str] = &[
    "/v1/topics",
    "/v1/schedule?limit=20",
    "/metrics",
    "/v1/stats/throughput?resolution=minute",
];

pub(crate) async fn run(jobs: usize) {
    let redis = Redis::start_tcp(&[]);
    let q = queue(&redis);
    let load = Instant::now();
    // Batches of 1000 through the library, 4 at once; due times spread
    // over the hour after next.
    stream::iter((0..jobs).step_by(1000))
        .map(|from| {
            let q = q.clone();
            async move {
                let batch: Vec<NewJob> = (from..(from + 1000).min(jobs))
                    .map(|i| {
                        let delay = HOUR + Duration::from_millis((i * 3) as u64 % 3_600_000);
                        new_job(id("refresh", i), &format!("topic-{}", i % TOPICS), delay)
                    })
                    .collect();
                for r in q.push_many(&batch).await.expect("push_many") {
                    r.expect("push");
                }
            }
        })
        .buffer_unordered(4)
        .for_each(|_| async {})
        .await;
    // One job of topic "one", due after every other topic's jobs: the
    // small topic beside big ones whose listing must start with it.
    q.push(&new_job("one-1".into(), "one", 3 * HOUR))
        .await
        .expect("push");
    let loaded = load.elapsed();
    let counted: u64 = q
        .topics()
        .await
        .unwrap()
        .topics
        .values()
        .map(|c| c.delayed)
        .sum();
    assert_eq!(counted, jobs as u64 + 1, "every job loaded");
    // The leader's first pass over the topic schedules (begun as the load
    // began, paced to a quarter of Redis's time) ends before anything is
    // measured: until then listings walk the shared schedule.
    let backfill = Instant::now();
    loop {
        let done: Option<String> = redis.cmd(&["HGET", "{dq}:indexed", "done"]).await;
        if done.as_deref() == Some("1") {
            break;
        }
        assert!(
            backfill.elapsed() < Duration::from_secs(600),
            "the topic schedules' first pass did not end in 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let backfill = backfill.elapsed();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = Shutdown::new();
    let server = tokio::spawn(delayq::http::serve(
        listener,
        AppState {
            queue: q.clone(),
            server: ServerConfig::default(),
        },
        shutdown.clone(),
    ));
    // reqwest is built without a crypto provider of its own (plain HTTP here).
    let _ = delayq::https::ring_provider().install_default();
    let http = reqwest::Client::new();
    let call = |path: &'static str| {
        let (http, url) = (http.clone(), format!("{base}{path}"));
        async move {
            let r = http.get(url).send().await.expect("GET");
            assert!(r.status().is_success(), "{path}: {}", r.status());
            r.bytes().await.expect("body").len()
        }
    };
    // Warm: connections made, scripts loaded.
    futures::future::join_all(CALLS.iter().map(|p| call(p))).await;

    let c0 = cpu(&redis);
    let t0 = Instant::now();
    for _ in 0..REFRESHES {
        futures::future::join_all(CALLS.iter().map(|p| call(p))).await;
    }
    let per_cpu_ms = (cpu(&redis) - c0) * 1000.0 / REFRESHES as f64;
    let per_ms = t0.elapsed().as_secs_f64() * 1000.0 / REFRESHES as f64;
    println!(
        "\ndashboard refresh at {jobs} delayed jobs over {TOPICS} topics (loaded in {:.1} s; the \
         topic schedules' first pass ended {:.1} s after): {per_cpu_ms:.2} ms of Redis CPU and \
         {per_ms:.1} ms per refresh (mean of {REFRESHES}; INFO cpu delta)",
        loaded.as_secs_f64(),
        backfill.as_secs_f64()
    );
    println!("| call | Redis CPU per call (ms) | time per call (ms) | reply bytes |");
    println!("|---|---:|---:|---:|");
    for path in CALLS {
        let c0 = cpu(&redis);
        let t0 = Instant::now();
        let mut bytes = 0;
        for _ in 0..REFRESHES {
            bytes = call(path).await;
        }
        println!(
            "| `{path}` | {:.3} | {:.2} | {bytes} |",
            (cpu(&redis) - c0) * 1000.0 / REFRESHES as f64,
            t0.elapsed().as_secs_f64() * 1000.0 / REFRESHES as f64
        );
    }
    listings(&redis, &q, &http, &base).await;
    shutdown.trigger();
    let _ = server.await;
    q.close().await;
}

/// Topics whose first page is read: three of the hundred and the one-job
/// topic due after all of them.
const LISTED: &[&str] = &["topic-0", "topic-37", "topic-99", "one"];

/// Each of [`LISTED`]'s first page of delayed jobs (100 a page) over HTTP:
/// it must start with the topic's earliest job (the one-job topic's only
/// job), and each listing call's Redis time is read from SLOWLOG (every
/// command logged while the pages are read).
async fn listings(redis: &Redis, q: &delayq::Queue, http: &reqwest::Client, base: &str) {
    let next_due = q.topics().await.expect("topics").topics;
    let _: () = redis
        .cmd(&["CONFIG", "SET", "slowlog-max-len", "200000"])
        .await;
    let _: () = redis
        .cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"])
        .await;
    let _: () = redis.cmd(&["SLOWLOG", "RESET"]).await;
    let mut firsts = Vec::new();
    for topic in LISTED {
        for _ in 0..REFRESHES {
            let page: serde_json::Value = http
                .get(format!(
                    "{base}/v1/topics/{topic}/jobs?state=delayed&limit=100"
                ))
                .send()
                .await
                .expect("GET")
                .json()
                .await
                .expect("JSON");
            let jobs = page["jobs"].as_array().expect("jobs");
            let first = jobs.first().expect("a first page with jobs");
            assert_eq!(
                first["due_at_ms"].as_i64(),
                next_due[*topic].next_due_ms,
                "{topic}'s first page starts with its earliest job"
            );
            firsts.push((
                topic,
                jobs.len(),
                first["id"].as_str().unwrap_or("").to_owned(),
            ));
        }
    }
    let log: Vec<redis::Value> = redis.cmd(&["SLOWLOG", "GET", "200000"]).await;
    let _: () = redis
        .cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"])
        .await;
    // An entry: id, time, duration (µs), [command, args...], ...
    let mut micros: Vec<i64> = log
        .iter()
        .filter_map(|e| {
            let redis::Value::Array(f) = e else {
                return None;
            };
            let (Some(redis::Value::Int(us)), Some(redis::Value::Array(args))) =
                (f.get(2), f.get(3))
            else {
                return None;
            };
            let name = args.get(1).and_then(|a| match a {
                redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            })?;
            name.starts_with("dq_list_").then_some(*us)
        })
        .collect();
    micros.sort_unstable();
    let (max, median) = (
        micros.last().copied().unwrap_or(0),
        micros.get(micros.len() / 2).copied().unwrap_or(0),
    );
    println!(
        "\na topic's first page of delayed jobs (100 a page, {REFRESHES} reads each of {LISTED:?}): \
         {} listing calls, Redis time per call median {median} µs, max {max} µs (SLOWLOG)",
        micros.len()
    );
    println!("| topic | jobs on its first page | first job |");
    println!("|---|---:|---|");
    for (topic, n, first) in firsts.iter().step_by(REFRESHES) {
        println!("| {topic} | {n} | {first} |");
    }
}
