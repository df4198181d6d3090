//! Batches over `/v1`: created with their jobs in one request, read,
//! added to, closed, cancelled; refusals with their status and nothing
//! changed.

use delayq::http::ServerConfig;
use reqwest::Method;
use serde_json::json;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_made_in_one_request_fires_its_callback_after_its_jobs() {
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let base = &server.base;
    let (status, created) = request_json(
        Method::POST,
        format!("{base}/v1/batches"),
        Some(json!({
            "id": "sale-42",
            "on": "settled",
            "callback": {"topic": "settle", "body": "{\"merchant\":7}"},
            "jobs": [
                {"id": "order-1", "topic": "close", "body": "1"},
                {"id": "order-2", "topic": "close", "body": "2", "batch": "sale-42"},
            ]
        })),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["batch"]["state"], "closed");
    assert_eq!(created["batch"]["jobs"], 2);
    assert_eq!(created["jobs"]["accepted"], 2);
    let callback_id = created["batch"]["callback_id"].as_str().unwrap().to_owned();
    for _ in 0..2 {
        let (_, popped) = request_json(
            Method::POST,
            format!("{base}/v1/pop"),
            Some(json!({"topics": ["close"], "wait_ms": 5000})),
        )
        .await;
        let d = &popped["jobs"][0];
        let (s, _) = request_json(
            Method::POST,
            format!("{base}/v1/jobs/{}/finish", d["id"].as_str().unwrap()),
            Some(json!({"token": d["token"]})),
        )
        .await;
        assert_eq!(s, 204);
    }
    let b = eventually(std::time::Duration::from_secs(30), "fired", || async {
        let (_, b) = get_json(base, "/v1/batches/sale-42").await;
        (b["state"] == "fired").then_some(b)
    })
    .await;
    assert_eq!(
        (b["finished"].as_u64(), b["pending"].as_u64()),
        (Some(2), Some(0))
    );
    let (s, cb) = get_json(base, &format!("/v1/jobs/{callback_id}")).await;
    assert_eq!(s, 200, "{cb}");
    let report: serde_json::Value = serde_json::from_str(cb["body"].as_str().unwrap()).unwrap();
    assert_eq!(report["batch"], "sale-42");
    assert_eq!(report["body"], "{\"merchant\":7}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_over_http_name_the_problem_and_leave_nothing() {
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let base = &server.base;
    let post = |path: &str, body: serde_json::Value| {
        request_json(Method::POST, format!("{base}{path}"), Some(body))
    };
    // A job naming another batch: refused at its index, the batch stays
    // open (it must not fire without it).
    let (s, r) = post(
        "/v1/batches",
        json!({"id": "b1", "callback": {"topic": "settle"},
               "jobs": [{"id": "j1", "topic": "t"}, {"id": "j2", "topic": "t", "batch": "other"}]}),
    )
    .await;
    assert_eq!(s, 201, "{r}");
    assert_eq!(r["jobs"]["rejected"], 1);
    assert_eq!(r["jobs"]["results"][1]["status"], 422);
    assert_eq!(r["batch"]["state"], "open");
    // A member pushed again while pending (a retry after a lost reply):
    // 409 saying so, in either path, and still one member.
    let (s, r) = post(
        "/v1/jobs",
        json!({"id": "j1", "topic": "t", "body": "new", "batch": "b1"}),
    )
    .await;
    let said = r["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (409, Some("exists")),
        "{r}"
    );
    assert!(
        said.contains("already in batch \"b1\", pending") && !said.contains("if_exists"),
        "{said}"
    );
    let (s, r) = post(
        "/v1/batches/b1/jobs",
        json!({"jobs": [{"id": "j1", "topic": "t", "body": "new"}]}),
    )
    .await;
    assert_eq!((s, r["rejected"].as_u64()), (200, Some(1)), "{r}");
    assert_eq!(r["results"][0]["status"], 409, "{r}");
    assert!(
        r["results"][0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("already in batch \"b1\", pending")),
        "{r}"
    );
    assert_eq!(get_json(base, "/v1/jobs/j1").await.1["body"], "");
    assert_eq!(get_json(base, "/v1/batches/b1").await.1["jobs"], 1);
    // Push the rest, close.
    let (s, r) = post(
        "/v1/batches/b1/jobs",
        json!({"jobs": [{"id": "j2", "topic": "t"}]}),
    )
    .await;
    assert_eq!((s, r["accepted"].as_u64()), (200, Some(1)), "{r}");
    let (s, r) = post("/v1/batches/b1/close", json!({})).await;
    assert_eq!(
        (s, r["state"].as_str(), r["jobs"].as_u64()),
        (200, Some("closed"), Some(2))
    );
    // No such batch.
    let (s, r) = post(
        "/v1/batches/nope/jobs",
        json!({"jobs": [{"id": "x", "topic": "t"}]}),
    )
    .await;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{r}"
    );
    let (s, _) = get_json(base, "/v1/batches/nope").await;
    assert_eq!(s, 404);
    assert_eq!(get_json(base, "/v1/jobs/x").await.0, 404);
    // Created twice.
    let (s, r) = post(
        "/v1/batches",
        json!({"id": "b1", "callback": {"topic": "settle"}}),
    )
    .await;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{r}"
    );
    // Bad shapes: unknown field, bad trigger, missing callback, long id.
    for body in [
        json!({"id": "b2", "callback": {"topic": "settle"}, "colour": 1}),
        json!({"id": "b2", "on": "done", "callback": {"topic": "settle"}}),
        json!({"id": "b2"}),
    ] {
        let (s, r) = post("/v1/batches", body.clone()).await;
        assert_eq!(s, 400, "{body}: {r}");
    }
    let (s, r) = post(
        "/v1/batches",
        json!({"id": "", "callback": {"topic": "settle"}}),
    )
    .await;
    assert_eq!(s, 422, "an empty id is no id: {r}");
    let long = "b".repeat(201);
    let (s, r) = post(
        "/v1/batches",
        json!({"id": long, "callback": {"topic": "settle"}}),
    )
    .await;
    assert_eq!(s, 422, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("201 bytes"),
        "{r}"
    );
    assert_eq!(get_json(base, "/v1/batches/b2").await.0, 404);
    // Cancel: the jobs not handed out go; then cancelled twice is fine,
    // closing it is not.
    let (s, r) = post("/v1/batches/b1/cancel", json!({})).await;
    assert_eq!((s, r["deleted"].as_u64()), (200, Some(2)), "{r}");
    assert_eq!(r["batch"]["state"], "cancelled");
    assert_eq!(get_json(base, "/v1/jobs/j1").await.0, 404);
    let (s, r) = post("/v1/batches/b1/close", json!({})).await;
    assert_eq!(
        (s, r["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{r}"
    );
    server.stop().await;
}
