//! What delayq reports of its webhooks: metrics, the webhooks view,
//! errors with the URL's secrets masked.

use super::*;

/// Parses Prometheus text format strictly enough to catch a broken line.
fn parse_metrics(text: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("bad line {line:?}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad metric name in {line:?}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "bad labels in {line:?}");
        }
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        out.insert(series.to_owned(), v);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_move_as_jobs_flow() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let q = s.queue.clone();
    let n = 50;
    for i in 0..n {
        q.push(&job(&format!("m{i}"), "met", 50, 60_000))
            .await
            .unwrap();
    }
    let mut done = 0;
    while done < n {
        if let Some(d) = q
            .pop(&topics(&["met"]), Duration::from_secs(5))
            .await
            .unwrap()
        {
            q.finish(&d.id, &d.token).await.unwrap();
            done += 1;
        }
    }
    q.push(&job("later", "met", 3_600_000, 60_000))
        .await
        .unwrap();
    let text = reqwest::get(format!("{}/metrics", s.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let m = parse_metrics(&text);
    assert_eq!(m["delayq_jobs_pushed_total{topic=\"met\"}"], (n + 1) as f64);
    assert_eq!(m["delayq_jobs_popped_total{topic=\"met\"}"], n as f64);
    assert_eq!(m["delayq_jobs_finished_total{topic=\"met\"}"], n as f64);
    let dispatched: f64 = ["event", "sweep"]
        .iter()
        .map(|p| {
            m.get(&format!(
                "delayq_jobs_dispatched_total{{path=\"{p}\",topic=\"met\"}}"
            ))
            .copied()
            .unwrap_or(0.0)
        })
        .sum();
    assert_eq!(dispatched, n as f64);
    assert_eq!(
        m["delayq_fire_lateness_seconds_count"], dispatched,
        "one lateness sample per dispatch"
    );
    assert_eq!(
        m["delayq_fire_lateness_seconds_bucket{le=\"+Inf\"}"],
        dispatched
    );
    assert_eq!(m["delayq_jobs{topic=\"met\",state=\"delayed\"}"], 1.0);
    assert_eq!(m["delayq_subscriber_connected"], 1.0);
    s.stop().await;
}

async fn webhooks_view(base: &str) -> Vec<Value> {
    let v: Value = reqwest::get(format!("{base}/v1/webhooks"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["webhooks"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhooks_view_shows_each_topics_masked_url_last_delivery_and_the_hours_failures_from_every_instance(
) {
    let redis = RedisServer::start();
    let receiver = Receiver::start(|n| Reply::Status(if n < 2 { 503 } else { 200 })).await;
    let url = receiver
        .url
        .replace("http://", "http://bot:hunter2@")
        .replace("/hook", "/hook?token=s3cret");
    let hook = format!("close={url}");
    let delivering = DelayqProcess::start(&redis, &["--webhook", &hook]);
    // Another instance, delivering nothing, sees the same.
    let other = DelayqProcess::start(&redis, &[]);
    assert_eq!(
        eventually(Duration::from_secs(20), "the topic listed", || async {
            let w = webhooks_view(&other.base).await;
            (!w.is_empty()).then_some(w)
        })
        .await[0]["last_status"],
        Value::Null,
        "no delivery yet"
    );
    let q = queue(&redis);
    push(
        &q,
        "order-1",
        "close",
        RetryPolicy::parse("3s,3s", None).unwrap(),
    )
    .await;

    let failing = eventually(Duration::from_secs(20), "the failure shown", || async {
        let w = webhooks_view(&other.base).await;
        (w[0]["last_status"] == "503").then(|| w[0].clone())
    })
    .await;
    assert!(
        failing["last_error"].as_str().unwrap().contains("HTTP 503"),
        "{failing}"
    );
    assert!(
        failing["failures_last_hour"].as_u64().unwrap() >= 1,
        "{failing}"
    );
    let done = eventually(Duration::from_secs(30), "the success shown", || async {
        let w = webhooks_view(&other.base).await;
        (w[0]["last_status"] == "200").then(|| w[0].clone())
    })
    .await;
    assert_eq!(done["topic"], "close");
    assert_eq!(done["last_error"], Value::Null, "{done}");
    assert_eq!(done["delivered_last_hour"], 1, "{done}");
    assert_eq!(done["failures_last_hour"], 2, "{done}");
    assert_eq!(done["instances"], 1);
    assert_eq!(
        (done["concurrency"].as_u64(), done["timeout_ms"].as_u64()),
        (Some(8), Some(10_000))
    );
    assert!(done["last_at_ms"].as_i64().unwrap() >= failing["last_at_ms"].as_i64().unwrap());
    let shown = done["url"].as_str().unwrap();
    assert!(
        !shown.contains("hunter2") && !shown.contains("s3cret"),
        "{shown}"
    );
    assert!(
        shown.contains("bot:***@") && shown.contains("token=***"),
        "{shown}"
    );
    assert_eq!(receiver.hits().len(), 3);

    // The delivering instance stopped: its topic leaves the view.
    delivering.terminate();
    assert!(webhooks_view(&other.base).await.is_empty());
    q.close().await;
    drop(other);
}

/// A receiver that cannot be reached: the error kept with the job, shown in
/// the webhook status and logged names the URL with its password and query
/// values masked, as everywhere else (reqwest's own message carries the
/// whole URL, query secret included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_error_keeps_the_webhook_urls_secrets_out_of_the_job_the_status_and_the_log() {
    let redis = RedisServer::start();
    // Nothing listens on port 9 (discard) here: the connection is refused.
    let hook = "gone=http://bot:hunter2@127.0.0.1:9/in?key=hush-hush";
    let (delayq, logs) = DelayqProcess::spawn_logged(&["--redis", &redis.url(), "--webhook", hook]);
    let q = queue(&redis);
    q.push(&job("g-1", "gone", 0, 30_000)).await.unwrap();
    let line = log_line(&logs, "job failed; retrying later", Duration::from_secs(20));
    let error = eventually(Duration::from_secs(20), "the job's last error", || async {
        q.get("g-1").await.unwrap()?.last_error
    })
    .await;
    let status = eventually(Duration::from_secs(20), "the webhook status", || async {
        let w = webhooks_view(&delayq.base).await;
        w.first()
            .and_then(|w| w["last_error"].as_str().map(str::to_owned))
    })
    .await;
    for shown in [&line, &error, &status] {
        assert!(
            !shown.contains("hush-hush") && !shown.contains("hunter2"),
            "a secret shown: {shown}"
        );
        assert!(shown.contains("127.0.0.1:9/in?key=***"), "{shown}");
    }
    q.close().await;
    delayq.terminate();
}
