//! The burst's HTTP ways: (b) a sidecar that pops and finishes in batches,
//! (c) a webhook to a receiver in this process.

use super::*;

/// (b) a sidecar: 8 clients, each popping up to 100 and finishing them in
/// one request.
pub(super) async fn sidecar(pending: usize, n: usize) -> Run {
    let redis = Redis::start_tcp(super::redis_args());
    let http = http_client();
    let server = serve(&redis, &[], &http).await;
    let q = queue(&redis);
    let seen = Arc::new(Seen::default());
    let finished = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (http, base, seen, finished) = (
            http.clone(),
            server.base.clone(),
            seen.clone(),
            finished.clone(),
        );
        clients.push(tokio::spawn(async move {
            loop {
                let r = http
                    .post(format!("{base}/v1/pop"))
                    .json(&json!({"topics": [TOPIC], "max": POP_MAX, "wait_ms": 1000}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "/v1/pop");
                let popped: Value = r.json().await.unwrap();
                let jobs = popped["jobs"].as_array().unwrap();
                if jobs.is_empty() {
                    continue;
                }
                let mut leases = Vec::with_capacity(jobs.len());
                for j in jobs {
                    let late =
                        j["popped_at_ms"].as_f64().unwrap() - j["due_at_ms"].as_f64().unwrap();
                    seen.note(j["id"].as_str().unwrap(), late);
                    leases.push(json!({"id": j["id"], "token": j["token"]}));
                }
                let r = http
                    .post(format!("{base}/v1/finish"))
                    .json(&json!({ "jobs": leases }))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200, "/v1/finish");
                let reply: Value = r.json().await.unwrap();
                let results = reply["results"].as_array().unwrap();
                assert_eq!(
                    results.len(),
                    leases.len(),
                    "/v1/finish: one result per job"
                );
                for item in results {
                    assert_eq!(item["status"], 204, "/v1/finish item: {item}");
                }
                finished.fetch_add(results.len(), Ordering::Relaxed);
            }
        }));
    }
    let due = load(&q, pending, n).await;
    // Only the sidecar touches Redis from here.
    q.close().await;
    let (idle, c1) = idle_then_start(&redis, due).await;
    let secs = drained(due, Duration::from_millis(1), || {
        finished.load(Ordering::Relaxed) >= n
    })
    .await;
    let used = cpu(&redis) - c1 - idle * secs;
    let commands = per_job(commandstats(&redis), n);
    for c in clients {
        c.abort();
    }
    drop(server);
    Run {
        commands,
        ..seen.run(
            format!("HTTP sidecar, {CLIENTS} clients: /v1/pop max {POP_MAX} + one /v1/finish"),
            n,
            secs,
            used,
        )
    }
}

/// A receiver that answers 200 at once and notes each delivery; returns its
/// URL.
async fn receiver(seen: Arc<Seen>) -> (String, tokio::task::JoinHandle<()>) {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/hook",
        post(move |body: axum::Json<Value>| {
            let seen = seen.clone();
            async move {
                let late = now_ms() - body["due_at_ms"].as_f64().unwrap();
                seen.note(body["id"].as_str().unwrap(), late);
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (url, task)
}

/// `delayq_jobs_finished_total` of the topic, from a server's /metrics.
async fn finished_total(http: &reqwest::Client, base: &str) -> f64 {
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!("delayq_jobs_finished_total{{topic=\"{TOPIC}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// (c) a webhook at `concurrency`, to a receiver in this process.
pub(super) async fn webhook(pending: usize, n: usize, concurrency: usize) -> Run {
    let redis = Redis::start_tcp(super::redis_args());
    let http = http_client();
    let seen = Arc::new(Seen::default());
    let (url, receiving) = receiver(seen.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("topics.toml");
    std::fs::write(
        &config,
        format!("[topics.{TOPIC}]\nwebhook = \"{url}\"\nconcurrency = {concurrency}\n"),
    )
    .unwrap();
    let server = serve(&redis, &["--config", config.to_str().unwrap()], &http).await;
    let q = queue(&redis);
    let due = load(&q, pending, n).await;
    q.close().await;
    let (idle, c1) = idle_then_start(&redis, due).await;
    let (own, delayq) = (process_cpu(None), process_cpu(Some(server.pid())));
    // Every job received, then finished: /metrics is read only for the
    // tail (it reads queue depths from Redis).
    drained(due, Duration::from_millis(1), || seen.len() >= n).await;
    while finished_total(&http, &server.base).await < n as f64 {
        assert!(
            now_ms() - (due as f64) < DRAIN_BOUND.as_secs_f64() * 1000.0,
            "the webhook's finishes did not come"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = (now_ms() - due as f64) / 1000.0;
    let (own, delayq) = (
        process_cpu(None) - own,
        process_cpu(Some(server.pid())) - delayq,
    );
    let used = cpu(&redis) - c1 - idle * secs;
    let commands = per_job(commandstats(&redis), n);
    drop(server);
    receiving.abort();
    Run {
        commands,
        outside: Some((own * 1e6 / n as f64, Some(delayq * 1e6 / n as f64))),
        ..seen.run(
            format!("webhook, concurrency {concurrency}, receiver answers 200 at once"),
            n,
            secs,
            used,
        )
    }
}
