//! 10,000 long-polling /pop requests held at once: the Redis connections
//! stay bounded and so does memory, and every one is answered. Bodies
//! trickled a byte at a time cannot hold every connection.

use std::time::{Duration, Instant};

use crate::common::*;
use delayq::http::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAITERS: usize = 10_000;

fn raise_open_files_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    assert!(
        lim.rlim_max as usize > WAITERS + 500,
        "this test needs more than {} open files (hard limit {})",
        WAITERS + 500,
        lim.rlim_max
    );
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// One raw HTTP/1.1 /pop on the connection `s`; returns the reply body.
async fn raw_pop(mut s: tokio::net::TcpStream) -> String {
    let body = r#"{"topic":"load"}"#;
    let req = format!(
        "POST /pop HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.split("\r\n\r\n").nth(1).unwrap_or("").to_owned()
}

/// The server's own count of waiting pops.
async fn waiting_pops(http: &reqwest::Client, url: &str) -> Option<u64> {
    let v: serde_json::Value = http.get(url).send().await.ok()?.json().await.ok()?;
    v["waiting_pops"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_waiting_pops_hold_no_redis_connections_of_their_own() {
    raise_open_files_limit();
    let redis = RedisServer::start();
    // Held far longer than it may take a busy machine to open them all.
    let server = DelayqProcess::start(&redis, &["--pop-timeout", "600s"]);
    let addr = server.base.trim_start_matches("http://").to_owned();
    let rss_idle = rss_kib(server.pid());
    let clients_idle: String = redis.cmd(&["CLIENT", "LIST"]).await;

    let started = Instant::now();
    // Connected one after the other, so that the listen backlog never
    // overflows into SYN retries (which give up after about two minutes on
    // a busy machine); the requests then wait side by side.
    let mut tasks = Vec::with_capacity(WAITERS);
    for _ in 0..WAITERS {
        let s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        tasks.push(tokio::spawn(raw_pop(s)));
    }
    // Wait until all are held, however slowly a busy machine gets there:
    // the count only has to keep rising.
    let http = reqwest::Client::new();
    let topics_url = format!("{}/v1/topics", server.base);
    until_value(
        WAITERS as u64,
        Duration::from_secs(60),
        "10,000 pops waiting",
        || waiting_pops(&http, &topics_url),
    )
    .await;
    let rss_held = rss_kib(server.pid());
    let clients: String = redis.cmd(&["CLIENT", "LIST"]).await;
    let connections = clients.lines().count();
    println!(
        "{WAITERS} long-polls held after {:?}: delayq RSS {} MiB (idle {} MiB, {:.1} KiB per waiting pop); Redis connections {} (idle {}, 1 of them this test's)",
        started.elapsed(),
        rss_held / 1024,
        rss_idle / 1024,
        (rss_held.saturating_sub(rss_idle)) as f64 / WAITERS as f64,
        connections,
        clients_idle.lines().count(),
    );
    // One command connection, one subscriber, and the test's own.
    assert!(
        connections <= 4,
        "{connections} Redis connections:\n{clients}"
    );
    assert!(
        rss_held < 1024 * 1024,
        "delayq uses {} MiB",
        rss_held / 1024
    );

    // 100 jobs arrive: 100 waiters get one each (leased for an hour: a
    // lease running out on a slow machine would hand a job to a second
    // waiter).
    for i in 0..100 {
        let body = format!(r#"{{"topic":"load","id":"L{i}","delay":1,"ttr":3600}}"#);
        assert_eq!(post(&server.base, "/push", &body).await["code"], 0);
    }
    let mut got = 0;
    let mut answered = 0;
    // Then stop the server: the rest are answered with null at once.
    until_value(
        (WAITERS - 100) as u64,
        Duration::from_secs(60),
        "100 jobs taken",
        || waiting_pops(&http, &topics_url),
    )
    .await;
    server.terminate();
    for t in tasks {
        let body = t.await.unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("reply {body:?}"));
        assert_eq!(v["code"], 0);
        answered += 1;
        if !v["data"].is_null() {
            got += 1;
        }
    }
    assert_eq!((answered, got), (WAITERS, 100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_bodies_cannot_hold_every_connection() {
    use tokio::io::AsyncWriteExt;
    let redis = RedisServer::start();
    let s = TestServer::start(
        queue(&redis),
        ServerConfig {
            body_timeout: Duration::from_secs(1),
            max_connections: 4,
            ..ServerConfig::default()
        },
    )
    .await;
    let addr = s.base.strip_prefix("http://").unwrap().to_owned();
    // Four clients take every slot, then send one byte every 200 ms: never
    // idle long, never done.
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
        c.write_all(b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n")
            .await
            .unwrap();
        slow.push(tokio::spawn(async move {
            for _ in 0..100 {
                if c.write_all(b" ").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }));
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(8))
        .build()
        .unwrap();
    let r = client
        .get(format!("{}/healthz", s.base))
        .send()
        .await
        .expect("a slot freed once the slow bodies ran out of time");
    assert_eq!(r.status(), 200);
    for t in slow {
        t.abort();
    }
    s.stop().await;
}
