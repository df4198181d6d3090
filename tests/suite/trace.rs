//! W3C trace context: kept with a job at its push (headers or per-job
//! fields), handed on by pops, job reads, webhooks and `delayq work`; and
//! delayq's own spans exported over OTLP to a stand-in collector.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use axum::http::HeaderMap;
use axum::routing;
use axum::Router;
use delayq::webhook::{self, Webhook};
use delayq::{Config, NewJob, Queue, Shutdown};
use serde_json::{json, Value};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TS: &str = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE";

const LIMIT: Duration = Duration::from_secs(20);

/// POST base+path with JSON and extra headers: status and reply.
async fn post_with(base: &str, path: &str, headers: &[(&str, &str)], body: Value) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Pops jobs of `topic` through /v1/pop until `n` are taken (bounded).
async fn pop_all(base: &str, topic: &str, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + LIMIT;
    let mut got = Vec::new();
    while got.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {n} jobs popped",
            got.len()
        );
        let (_, r) = post_with(
            base,
            "/v1/pop",
            &[],
            json!({"topics": [topic], "max": 100, "wait_ms": 500}),
        )
        .await;
        got.extend(r["jobs"].as_array().cloned().unwrap_or_default());
    }
    got
}

/// The job hash's field names (a partitioned queue's job too).
async fn job_fields(redis: &RedisServer, id: &str) -> Vec<String> {
    let keys: Vec<String> = redis.cmd(&["KEYS", &format!("*:j:{id}")]).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let mut f: Vec<String> = redis.cmd(&["HKEYS", &keys[0]]).await;
    f.sort();
    f
}

fn by_id<'a>(jobs: &'a [Value], id: &str) -> &'a Value {
    jobs.iter()
        .find(|j| j["id"] == id)
        .unwrap_or_else(|| panic!("{id} in {jobs:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_header_is_kept_with_the_job_and_handed_on_by_pops_and_job_reads() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let headers = [("traceparent", TP), ("tracestate", TS)];
    let (status, _) = post_with(
        &s.base,
        "/v1/jobs",
        &headers,
        json!({"id": "traced", "topic": "t"}),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = post_with(
        &s.base,
        "/v1/jobs",
        &[],
        json!({"id": "plain", "topic": "t"}),
    )
    .await;
    assert_eq!(status, 201);
    // The batch: the header for every job without its own fields.
    let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let (status, reply) = post_with(
        &s.base,
        "/v1/jobs/batch",
        &headers,
        json!({"jobs": [{"id": "b1", "topic": "t"}, {"id": "b2", "topic": "t", "traceparent": own}]}),
    )
    .await;
    assert_eq!(
        (status, reply["accepted"].as_u64()),
        (200, Some(2)),
        "{reply}"
    );
    // The compatible /push: the header.
    let r = reqwest::Client::new()
        .post(format!("{}/push", s.base))
        .header("traceparent", TP)
        .body(r#"{"id":"compat","topic":"t","delay":1,"ttr":30,"body":"x"}"#)
        .send()
        .await
        .unwrap();
    assert!(r.text().await.unwrap().contains("\"code\":0"));

    let (_, job) = get_json(&s.base, "/v1/jobs/traced").await;
    assert_eq!(
        (job["traceparent"].as_str(), job["tracestate"].as_str()),
        (Some(TP), Some(TS)),
        "{job}"
    );
    let (_, job) = get_json(&s.base, "/v1/jobs/plain").await;
    assert!(
        job.get("traceparent").is_none() && job.get("tracestate").is_none(),
        "{job}"
    );
    let jobs = pop_all(&s.base, "t", 5).await;
    // Two fields on a traced job; a plain job's hash is as it always was
    // (both reserved now).
    let plain = job_fields(&redis, "plain").await;
    let mut traced = plain.clone();
    traced.extend(["tp".to_owned(), "ts".to_owned()]);
    traced.sort();
    assert_eq!(job_fields(&redis, "traced").await, traced);
    assert!(!plain.iter().any(|f| f.starts_with('t')), "{plain:?}");
    let traced = by_id(&jobs, "traced");
    assert_eq!(
        (
            traced["traceparent"].as_str(),
            traced["tracestate"].as_str()
        ),
        (Some(TP), Some(TS))
    );
    let plain = by_id(&jobs, "plain");
    assert!(
        plain.get("traceparent").is_none() && plain.get("tracestate").is_none(),
        "{plain}"
    );
    assert_eq!(by_id(&jobs, "b1")["traceparent"], TP);
    // A job's own traceparent comes without the header's tracestate.
    let b2 = by_id(&jobs, "b2");
    assert_eq!(
        (b2["traceparent"].as_str(), b2.get("tracestate")),
        (Some(own), None)
    );
    assert_eq!(by_id(&jobs, "compat")["traceparent"], TP);
    // The library's pop sees the same.
    s.queue
        .push(&NewJob {
            traceparent: Some(TP.into()),
            ..crate::common::job("lib", "u", 0, 30_000)
        })
        .await
        .unwrap();
    let d = s.queue.pop(&topics(&["u"]), LIMIT).await.unwrap().unwrap();
    assert_eq!((d.traceparent.as_deref(), d.tracestate), (Some(TP), None));
    // The OpenAPI document names the headers and the fields.
    let (_, doc) = get_json(&s.base, "/v1/openapi.json").await;
    for path in ["/v1/jobs", "/v1/jobs/batch"] {
        let params = doc["paths"][path]["post"]["parameters"].as_array().unwrap();
        for name in ["traceparent", "tracestate"] {
            assert!(
                params
                    .iter()
                    .any(|p| p["name"] == name && p["in"] == "header"),
                "{path}: {params:?}"
            );
        }
    }
    for schema in ["JobSpec", "Job", "Delivery"] {
        let props = &doc["components"]["schemas"][schema]["properties"];
        assert!(
            props.get("traceparent").is_some() && props.get("tracestate").is_some(),
            "{schema}"
        );
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_trace_header_is_ignored_and_an_invalid_trace_field_is_refused_naming_it() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    // Headers W3C's way: invalid ones are ignored, the push goes on.
    for tp in [
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "garbage",
    ] {
        let (status, _) = post_with(
            &s.base,
            "/v1/jobs",
            &[("traceparent", tp), ("tracestate", TS)],
            json!({"id": "h", "topic": "t"}),
        )
        .await;
        assert_eq!(status, 201, "{tp}");
        let (_, job) = get_json(&s.base, "/v1/jobs/h").await;
        assert!(
            job.get("traceparent").is_none() && job.get("tracestate").is_none(),
            "{job}"
        );
        s.queue.delete("h").await.unwrap();
    }
    // A tracestate too long is dropped, the traceparent kept.
    let long = format!("k={}", "v".repeat(600));
    post_with(
        &s.base,
        "/v1/jobs",
        &[("traceparent", TP), ("tracestate", &long)],
        json!({"id": "h", "topic": "t"}),
    )
    .await;
    let (_, job) = get_json(&s.base, "/v1/jobs/h").await;
    assert_eq!(
        (job["traceparent"].as_str(), job.get("tracestate")),
        (Some(TP), None)
    );
    s.queue.delete("h").await.unwrap();

    // Fields the client wrote: refused (422 invalid, as every field that
    // breaks a rule) naming the field, nothing written.
    for (body, named) in [
        (
            json!({"id": "f", "topic": "t", "traceparent": "00-xyz"}),
            "traceparent",
        ),
        (
            json!({"id": "f", "topic": "t", "traceparent": TP, "tracestate": long}),
            "tracestate",
        ),
        (
            json!({"id": "f", "topic": "t", "tracestate": TS}),
            "tracestate",
        ),
    ] {
        let (status, reply) = post_with(&s.base, "/v1/jobs", &[("traceparent", TP)], body).await;
        assert_eq!(status, 422, "{reply}");
        let message = reply["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(named), "{reply}");
    }
    let (status, reply) = post_with(
        &s.base,
        "/v1/jobs/batch",
        &[],
        json!({"jobs": [{"id": "f", "topic": "t", "traceparent": "00-xyz"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(reply["results"][0]["status"], 422, "{reply}");
    assert!(reply["results"][0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("traceparent"));
    // No hash, no trigger key, no schedule entry: nothing of the job.
    let left: Vec<String> = redis.cmd(&["KEYS", "*:[jt]:f"]).await;
    assert!(left.is_empty(), "{left:?}");
    let scheduled: Option<f64> = redis.cmd(&["ZSCORE", "{dq}:schedule", "f"]).await;
    assert_eq!(scheduled, None);
    assert_eq!(get_json(&s.base, "/v1/jobs/f").await.0, 404);
    s.stop().await;
}

/// One request a receiver (webhook endpoint or collector) saw.
#[derive(Clone, Debug)]
struct Hit {
    headers: HeaderMap,
    body: Vec<u8>,
}

/// A local HTTP endpoint that records every POST to any path; `hang`
/// makes it never answer.
struct Receiver {
    base: String,
    hits: Arc<Mutex<Vec<Hit>>>,
}

impl Receiver {
    async fn start(hang: bool) -> Receiver {
        let hits: Arc<Mutex<Vec<Hit>>> = Default::default();
        let app = Router::new().fallback(routing::post({
            let hits = hits.clone();
            move |headers: HeaderMap, body: axum::body::Bytes| {
                let hits = hits.clone();
                async move {
                    hits.lock().unwrap().push(Hit {
                        headers,
                        body: body.to_vec(),
                    });
                    if hang {
                        std::future::pending::<()>().await;
                    }
                    "{}"
                }
            }
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { base, hits }
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    /// Every span the collector received.
    fn spans(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for h in self.hits() {
            let v: Value = serde_json::from_slice(&h.body).unwrap();
            for rs in v["resourceSpans"].as_array().unwrap() {
                for ss in rs["scopeSpans"].as_array().unwrap() {
                    out.extend(ss["spans"].as_array().unwrap().iter().cloned());
                }
            }
        }
        out
    }
}

fn header(h: &Hit, name: &str) -> Option<String> {
    h.headers.get(name).map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_request_carries_the_jobs_trace_context_and_a_plain_jobs_none() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let receiver = Receiver::start(false).await;
    q.push(&NewJob {
        traceparent: Some(TP.into()),
        tracestate: Some(TS.into()),
        ..job("traced", "hook", 0, 30_000)
    })
    .await
    .unwrap();
    q.push(&job("plain", "hook", 0, 30_000)).await.unwrap();
    let stop = Shutdown::new();
    let hook = Webhook::new("hook", &format!("{}/hook", receiver.base));
    let task = tokio::spawn(webhook::run(q.clone(), hook, stop.clone()));
    let hits = eventually(LIMIT, "both jobs are delivered", || {
        let hits = receiver.hits();
        async move { (hits.len() >= 2).then_some(hits) }
    })
    .await;
    stop.trigger();
    task.await.unwrap();
    let of = |id: &str| {
        hits.iter()
            .find(|h| header(h, "x-delayq-id").as_deref() == Some(id))
            .unwrap()
            .clone()
    };
    // No OTLP export in this process: the push's context, unchanged.
    let traced = of("traced");
    assert_eq!(header(&traced, "traceparent").as_deref(), Some(TP));
    assert_eq!(header(&traced, "tracestate").as_deref(), Some(TS));
    let plain = of("plain");
    assert_eq!(
        (header(&plain, "traceparent"), header(&plain, "tracestate")),
        (None, None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayq_work_gives_its_command_the_jobs_traceparent_and_a_plain_jobs_command_none() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    s.queue
        .push(&NewJob {
            traceparent: Some(TP.into()),
            tracestate: Some(TS.into()),
            ..job("traced", "w", 0, 30_000)
        })
        .await
        .unwrap();
    s.queue.push(&job("plain", "w", 0, 30_000)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let script = format!(
        "echo \"$DELAYQ_JOB_ID|${{TRACEPARENT-none}}|${{TRACESTATE-none}}\" >> {}",
        seen.display()
    );
    use std::os::unix::process::CommandExt;
    let mut worker = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["work", "w", "--server", &s.base, "--", "sh", "-c", &script])
        // `work`'s own context is not its jobs'.
        .env(
            "TRACEPARENT",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .env("TRACESTATE", "other=1")
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    struct Kill(u32);
    impl Drop for Kill {
        fn drop(&mut self) {
            // SAFETY: a signal to our own child's process group.
            unsafe {
                libc::kill(-(self.0 as i32), libc::SIGKILL);
            }
        }
    }
    let _kill = Kill(worker.id());
    let lines = eventually(LIMIT, "both commands ran", || {
        let text = std::fs::read_to_string(&seen).unwrap_or_default();
        async move { (text.lines().count() >= 2).then_some(text) }
    })
    .await;
    assert!(lines.contains(&format!("traced|{TP}|{TS}")), "{lines}");
    assert!(lines.contains("plain|none|none"), "{lines}");
    unsafe {
        libc::kill(worker.id() as i32, libc::SIGTERM);
    }
    let _ = worker.wait();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_is_kept_on_a_partitioned_queue() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    for i in 0..8 {
        let tp = format!("00-{TRACE}-{:016x}-01", i + 1);
        q.push(&NewJob {
            traceparent: Some(tp),
            ..job(&format!("p{i}"), "parts", 0, 30_000)
        })
        .await
        .unwrap();
    }
    let mut got = Vec::new();
    while got.len() < 8 {
        got.extend(q.pop_many(&topics(&["parts"]), 8, LIMIT).await.unwrap());
    }
    for d in got {
        let i: u64 = d.id[1..].parse().unwrap();
        assert_eq!(d.traceparent, Some(format!("00-{TRACE}-{:016x}-01", i + 1)));
        let read = q.get(&d.id).await.unwrap().unwrap();
        assert_eq!(read.traceparent, d.traceparent);
    }
}

/// The span of `name` ("delayq push", ...) in `spans`.
fn span<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {spans:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_export_sends_push_pop_and_webhook_spans_in_the_jobs_trace_under_its_parent() {
    let redis = RedisServer::start();
    let collector = Receiver::start(false).await;
    let endpoint = Receiver::start(false).await;
    let hook = format!("hook={}/hook", endpoint.base);
    let delayq = DelayqProcess::start(
        &redis,
        &["--otlp-endpoint", &collector.base, "--webhook", &hook],
    );
    let headers = [("traceparent", TP), ("tracestate", TS)];
    for (id, topic) in [("by-hook", "hook"), ("by-pop", "pulled")] {
        let (status, _) = post_with(
            &delayq.base,
            "/v1/jobs",
            &headers,
            json!({"id": id, "topic": topic}),
        )
        .await;
        assert_eq!(status, 201);
    }
    // A plain job makes no span at all.
    post_with(
        &delayq.base,
        "/v1/jobs",
        &[],
        json!({"id": "plain", "topic": "pulled"}),
    )
    .await;
    let delivered = eventually(LIMIT, "the webhook is called", || {
        let hits = endpoint.hits();
        async move { hits.into_iter().next() }
    })
    .await;
    let pulled = pop_all(&delayq.base, "pulled", 2).await;
    // The hop delayq makes is its own span: same trace, its own id.
    let sent = header(&delivered, "traceparent").unwrap();
    let (trace, span_id) = (&sent[3..35], &sent[36..52]);
    assert_eq!(trace, TRACE);
    assert_ne!(span_id, PARENT);
    assert_eq!(header(&delivered, "tracestate").as_deref(), Some(TS));
    let handed = by_id(&pulled, "by-pop")["traceparent"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(&handed[3..35], TRACE);
    assert!(by_id(&pulled, "plain").get("traceparent").is_none());

    let spans = eventually(LIMIT, "the spans reach the collector", || {
        let spans = collector.spans();
        async move {
            let names = |n: &str| spans.iter().filter(|s| s["name"] == n).count();
            (names("delayq push") >= 2 && names("delayq webhook") >= 1 && names("delayq pop") >= 1)
                .then_some(spans)
        }
    })
    .await;
    for s in &spans {
        assert_eq!(s["traceId"], TRACE, "{s}");
        assert_eq!(
            s["parentSpanId"], PARENT,
            "every hop is a child of the push's context: {s}"
        );
        assert_eq!(s["traceState"], TS, "{s}");
    }
    assert_eq!(
        spans.iter().filter(|s| s["name"] == "delayq push").count(),
        2,
        "{spans:?}"
    );
    assert_eq!(span(&spans, "delayq webhook")["spanId"], span_id);
    assert_eq!(span(&spans, "delayq pop")["spanId"], &handed[36..52]);
    assert_eq!(span(&spans, "delayq push")["kind"], 2);
    // The stored context is still the push's.
    let (_, job) = get_json(&delayq.base, "/v1/jobs/by-pop").await;
    assert_eq!(job["traceparent"], TP);
    delayq.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_holds_up_no_push_or_delivery() {
    let redis = RedisServer::start();
    let collector = Receiver::start(true).await;
    // The endpoint from the config file's key this time.
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("delayq.toml");
    std::fs::write(&conf, format!("otlp_endpoint = {:?}\n", collector.base)).unwrap();
    let delayq = DelayqProcess::start(&redis, &["--config", conf.to_str().unwrap()]);
    let n = 200;
    let jobs: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("j{i}"), "topic": "t", "traceparent": TP}))
        .collect();
    let (status, reply) =
        post_with(&delayq.base, "/v1/jobs/batch", &[], json!({"jobs": jobs})).await;
    assert_eq!(
        (status, reply["accepted"].as_u64()),
        (200, Some(n)),
        "{reply}"
    );
    let got = pop_all(&delayq.base, "t", n as usize).await;
    assert_eq!(got.len(), n as usize);
    eventually(LIMIT, "the exporter tried the collector", || {
        let tried = !collector.hits().is_empty();
        async move { tried.then_some(()) }
    })
    .await;
    // Spans beyond the buffer would be dropped and counted here.
    let metrics = reqwest::get(format!("{}/metrics", delayq.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("\ndelayq_otlp_spans_dropped_total "),
        "{metrics}"
    );
    // Still serving while the export hangs.
    let (status, _) = post_with(
        &delayq.base,
        "/v1/jobs",
        &[("traceparent", TP)],
        json!({"id": "after", "topic": "t"}),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(pop_all(&delayq.base, "t", 1).await[0]["id"], "after");
    delayq.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_otlp_endpoint_is_refused_at_start_naming_the_flag() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--otlp-endpoint",
            "collector:4318",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--otlp-endpoint"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayq_push_sends_a_traceparent_and_delayq_get_shows_it() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = &s.base;
    let (ok, _, err) = delayq_cli(
        b,
        &[
            "push",
            "--topic",
            "t",
            "--id",
            "c1",
            "--delay",
            "1h",
            "--traceparent",
            TP,
            "--tracestate",
            TS,
        ],
    )
    .await;
    assert!(ok, "{err}");
    let (ok, out, err) = delayq_cli(b, &["get", "c1"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("traceparent: {TP}")) && out.contains(&format!("tracestate: {TS}")),
        "{out}"
    );
    // Refused, naming the field; nothing written.
    let (ok, _, err) = delayq_cli(
        b,
        &[
            "push",
            "--topic",
            "t",
            "--id",
            "c2",
            "--traceparent",
            "00-nope",
        ],
    )
    .await;
    assert!(!ok && err.contains("traceparent"), "{err}");
    assert!(s.queue.get("c2").await.unwrap().is_none());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_delayq_sends_its_last_spans_before_it_exits() {
    let redis = RedisServer::start();
    let collector = Receiver::start(false).await;
    let delayq = DelayqProcess::start(&redis, &["--otlp-endpoint", &collector.base]);
    let (status, _) = post_with(
        &delayq.base,
        "/v1/jobs",
        &[("traceparent", TP)],
        json!({"id": "last", "topic": "t"}),
    )
    .await;
    assert_eq!(status, 201);
    // Stopped at once, before the exporter's batch would have gone.
    delayq.terminate();
    let spans = collector.spans();
    assert_eq!(span(&spans, "delayq push")["traceId"], TRACE, "{spans:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_is_kept_and_handed_on_over_a_redis_cluster() {
    let cluster =
        crate::redis_cluster::TestCluster::start_with(3, 0, &crate::redis_cluster::node_config());
    let q = Queue::connect(crate::cluster::cluster_config(&cluster, 6)).unwrap();
    q.check_connection().await.unwrap();
    let mut jobs: Vec<NewJob> = (0..12)
        .map(|i| NewJob {
            traceparent: Some(format!("00-{TRACE}-{:016x}-01", i + 1)),
            tracestate: Some(format!("k={i}")),
            ..job(&format!("c{i}"), "spread", 0, 30_000)
        })
        .collect();
    jobs.push(job("plain", "spread", 0, 30_000));
    push_all(&q, &jobs).await;
    let mut got = Vec::new();
    while got.len() < jobs.len() {
        got.extend(q.pop_many(&topics(&["spread"]), 20, LIMIT).await.unwrap());
    }
    for d in got {
        let sent = jobs.iter().find(|j| j.id == d.id).unwrap();
        assert_eq!(
            (&d.traceparent, &d.tracestate),
            (&sent.traceparent, &sent.tracestate),
            "{}",
            d.id
        );
        let read = q.get(&d.id).await.unwrap().unwrap();
        assert_eq!(read.traceparent, sent.traceparent);
    }
}

/// `delayq push --topic t --id ID --delay 1h` against `base` with `env`
/// set: whether it succeeded, and its stderr.
async fn push_with_env(base: &str, id: &str, env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"));
    cmd.args([
        "push", "--topic", "t", "--id", id, "--delay", "1h", "--server", base,
    ])
    .env_remove("TRACEPARENT")
    .env_remove("TRACESTATE")
    .envs(env.iter().copied());
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayq_push_ignores_an_empty_or_invalid_traceparent_from_the_environment() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = &s.base;
    // Empty: ignored without a word.
    let (ok, err) = push_with_env(b, "e1", &[("TRACEPARENT", ""), ("TRACESTATE", "")]).await;
    assert!(ok, "{err}");
    assert!(!err.contains("traceparent"), "{err}");
    // Invalid: ignored with a warning, as HTTP ignores such a header.
    let (ok, err) = push_with_env(b, "e2", &[("TRACEPARENT", "00-nope"), ("TRACESTATE", TS)]).await;
    assert!(ok, "{err}");
    assert!(err.contains("TRACEPARENT"), "{err}");
    // A tracestate alone is no trace context.
    let (ok, err) = push_with_env(b, "e3", &[("TRACESTATE", TS)]).await;
    assert!(ok, "{err}");
    // A valid one with an invalid tracestate: the traceparent alone.
    let (ok, err) =
        push_with_env(b, "e4", &[("TRACEPARENT", TP), ("TRACESTATE", "a=\u{7f}")]).await;
    assert!(ok, "{err}");
    for id in ["e1", "e2", "e3"] {
        let j = s.queue.get(id).await.unwrap().unwrap();
        assert_eq!((j.traceparent, j.tracestate), (None, None), "{id}");
    }
    let j = s.queue.get("e4").await.unwrap().unwrap();
    assert_eq!((j.traceparent.as_deref(), j.tracestate), (Some(TP), None));
    // A valid pair is kept, as before.
    let (ok, err) = push_with_env(b, "e5", &[("TRACEPARENT", TP), ("TRACESTATE", TS)]).await;
    assert!(ok, "{err}");
    let j = s.queue.get("e5").await.unwrap().unwrap();
    assert_eq!(
        (j.traceparent.as_deref(), j.tracestate.as_deref()),
        (Some(TP), Some(TS))
    );
    s.stop().await;
}
