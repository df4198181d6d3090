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
    let loaded = load.elapsed();
    let counted: u64 = q
        .topics()
        .await
        .unwrap()
        .topics
        .values()
        .map(|c| c.delayed)
        .sum();
    assert_eq!(counted, jobs as u64, "every job loaded");

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
    let _ = rustls::crypto::ring::default_provider().install_default();
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
        "\ndashboard refresh at {jobs} delayed jobs over {TOPICS} topics (loaded in {:.1} s): \
         {per_cpu_ms:.2} ms of Redis CPU and {per_ms:.1} ms per refresh (mean of {REFRESHES}; INFO cpu delta)",
        loaded.as_secs_f64()
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
    shutdown.trigger();
    let _ = server.await;
    q.close().await;
}
