//! Flows over `/v1`: a tree pushed in one request, read, run with its
//! children's outcomes (pop and `GET /v1/jobs/{id}` carry them, as the
//! OpenAPI document says), failed, cancelled; refusals with their status,
//! naming the job, and nothing changed.

use delayq::http::ServerConfig;
use reqwest::Method;
use serde_json::{json, Value};

use crate::common::*;
use crate::native_api::document::undocumented;

async fn post(base: &str, path: &str, body: Value) -> (u16, Value) {
    request_json(Method::POST, format!("{base}{path}"), Some(body)).await
}

/// Every field of a reply is in the OpenAPI schema of its route and status.
fn documented(route: &str, method: &str, status: u16, v: &Value) {
    let doc: Value = serde_json::from_str(delayq::http::v1::openapi::json()).unwrap();
    let response = &doc["paths"][route][method]["responses"][status.to_string()];
    assert!(
        response.is_object(),
        "{method} {route}: {status} undocumented"
    );
    let schema = &response["content"]["application/json"]["schema"];
    let mut out = Vec::new();
    undocumented(&doc, schema, v, "", &mut out);
    assert!(out.is_empty(), "{method} {route} {status}: {out:?} in {v}");
}

/// Pops one job of `topic` (waiting up to 10 s).
async fn pop(base: &str, topic: &str) -> Value {
    let (s, v) = post(
        base,
        "/v1/pop",
        json!({"topics": [topic], "wait_ms": 10_000}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    documented("/v1/pop", "post", s, &v);
    v["jobs"][0].clone()
}

async fn finish(base: &str, d: &Value, result: Value) {
    let id = d["id"].as_str().unwrap();
    let (s, v) = post(
        base,
        &format!("/v1/jobs/{id}/finish"),
        json!({"token": d["token"], "result": result}),
    )
    .await;
    assert_eq!(s, 204, "{v}");
}

/// A parent's delivery, once its children are done.
async fn released(base: &str, topic: &str) -> Value {
    eventually(std::time::Duration::from_secs(30), "released", || async {
        let (_, v) = post(base, "/v1/pop", json!({"topics": [topic], "wait_ms": 200})).await;
        v["jobs"].get(0).cloned()
    })
    .await
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_pushed_over_http_runs_its_parents_with_their_childrens_outcomes() {
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let base = server.base.as_str();
    // An order closes once its refunds are done and its customer was told
    // (a text that may fail: the notice goes on without it).
    let (s, pushed) = post(
        base,
        "/v1/flows",
        json!({
            "id": "order-1", "topic": "close", "body": "order 1",
            "children": [
                {"id": "refund-a", "topic": "refund"},
                {"topic": "refund", "priority": 2},
                {"id": "notify-1", "topic": "notify", "on_child_dead": "ignore",
                 "children": [{"id": "sms-1", "topic": "send", "retry": {"max_attempts": 1}}]},
            ]
        }),
    )
    .await;
    assert_eq!(s, 201, "{pushed}");
    documented("/v1/flows", "post", s, &pushed);
    assert_eq!(pushed["id"], "order-1");
    let jobs: Vec<&str> = pushed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_str().unwrap())
        .collect();
    assert_eq!(jobs.len(), 5, "{pushed}");
    assert_eq!(
        [jobs[0], jobs[1], jobs[3], jobs[4]],
        ["order-1", "refund-a", "notify-1", "sms-1"]
    );
    // The leaf without an id got one.
    let picked = jobs[2].to_owned();
    assert_eq!(get_json(base, &format!("/v1/jobs/{picked}")).await.0, 200);

    let (s, f) = get_json(base, "/v1/flows/order-1").await;
    assert_eq!(s, 200, "{f}");
    documented("/v1/flows/{id}", "get", s, &f);
    assert_eq!(
        (
            f["state"].as_str(),
            f["topic"].as_str(),
            f["on_child_dead"].as_str()
        ),
        (Some("waiting"), Some("close"), Some("fail"))
    );
    assert_eq!(
        (f["children"].as_u64(), f["pending"].as_u64()),
        (Some(3), Some(3))
    );
    assert!(
        f["created_at_ms"].as_i64().unwrap() > 0 && f.get("ended_at_ms").is_none(),
        "{f}"
    );
    let (_, sub) = get_json(base, "/v1/flows/notify-1").await;
    assert_eq!(
        (sub["parent"].as_str(), sub["on_child_dead"].as_str()),
        (Some("order-1"), Some("ignore"))
    );
    // A waiting parent is a flow, not a job yet.
    assert_eq!(get_json(base, "/v1/jobs/order-1").await.0, 404);

    // The text dies; its parent runs without it, told so.
    let sms = pop(base, "send").await;
    assert!(sms.get("children").is_none(), "a leaf has none: {sms}");
    let (s, v) = post(
        base,
        "/v1/jobs/sms-1/nack",
        json!({"token": sms["token"], "error": "no signal"}),
    )
    .await;
    assert_eq!((s, v["state"].as_str()), (200, Some("dead")), "{v}");
    let notify = released(base, "notify").await;
    assert_eq!(
        notify["children"],
        json!({"sms-1": {"outcome": "dead"}}),
        "{notify}"
    );
    finish(base, &notify, json!("mailed instead")).await;
    for _ in 0..2 {
        let d = pop(base, "refund").await;
        let r = json!({"refunded": d["id"]});
        finish(base, &d, r).await;
    }
    let close = released(base, "close").await;
    documented("/v1/pop", "post", 200, &json!({"jobs": [close.clone()]}));
    assert_eq!(close["body"], "order 1");
    assert_eq!(
        close["children"],
        json!({
            "refund-a": {"outcome": "finished", "result": {"refunded": "refund-a"}},
            picked.clone(): {"outcome": "finished", "result": {"refunded": picked}},
            "notify-1": {"outcome": "finished", "result": "mailed instead"},
        })
    );
    // The job as read carries them too.
    let (s, j) = get_json(base, "/v1/jobs/order-1").await;
    assert_eq!((s, j["state"].as_str()), (200, Some("reserved")), "{j}");
    documented("/v1/jobs/{id}", "get", s, &j);
    assert_eq!(j["children"], close["children"]);
    assert!(j.get("traceparent").is_none(), "untraced: {j}");
    let (_, f) = get_json(base, "/v1/flows/order-1").await;
    assert_eq!(
        (
            f["state"].as_str(),
            f["finished"].as_u64(),
            f["pending"].as_u64()
        ),
        (Some("released"), Some(3), Some(0)),
        "{f}"
    );
    assert!(f["ended_at_ms"].as_i64().is_some(), "{f}");
    // Released: it is a job now, cancelled as one.
    let (s, v) = post(base, "/v1/flows/order-1/cancel", json!({})).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{v}"
    );
    documented("/v1/flows/{id}/cancel", "post", s, &v);
    assert!(
        message(&v).contains("cancel the job \"order-1\" instead"),
        "{v}"
    );
    // A job of no flow carries no children.
    assert!(get_json(base, "/v1/jobs/refund-a")
        .await
        .1
        .get("children")
        .is_none());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_cancelled_or_failed_over_http_says_so() {
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let base = server.base.as_str();
    let hour = 3_600_000;
    let (s, v) = post(
        base,
        "/v1/flows",
        json!({"id": "digest-1", "topic": "digest", "children": [
            {"id": "m-1", "topic": "member", "delay_ms": hour},
            {"id": "team-1", "topic": "team", "children": [
                {"id": "m-2", "topic": "member", "delay_ms": hour},
                {"id": "m-3", "topic": "member", "delay_ms": hour},
            ]},
        ]}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = post(base, "/v1/flows/digest-1/cancel", json!({})).await;
    assert_eq!((s, v), (200, json!({"deleted": 3})));
    documented("/v1/flows/{id}/cancel", "post", s, &json!({"deleted": 3}));
    for id in ["m-1", "m-2", "m-3"] {
        assert_eq!(
            get_json(base, &format!("/v1/jobs/{id}")).await.0,
            404,
            "{id}"
        );
    }
    for id in ["digest-1", "team-1"] {
        let (_, f) = get_json(base, &format!("/v1/flows/{id}")).await;
        assert_eq!(f["state"], "cancelled", "{f}");
    }

    // A child dies and the flow says fail: the parent is dead at once,
    // naming it, with its siblings' outcomes (one pending).
    let (s, v) = post(
        base,
        "/v1/flows",
        json!({"id": "close-2", "topic": "close", "children": [
            {"id": "pay-1", "topic": "pay", "retry": {"max_attempts": 1}},
            {"id": "pay-2", "topic": "pay", "delay_ms": hour},
        ]}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let d = pop(base, "pay").await;
    let (s, _) = post(
        base,
        "/v1/jobs/pay-1/nack",
        json!({"token": d["token"], "error": "card declined"}),
    )
    .await;
    assert_eq!(s, 200);
    let f = eventually(std::time::Duration::from_secs(30), "failed", || async {
        let (_, f) = get_json(base, "/v1/flows/close-2").await;
        (f["state"] == "failed").then_some(f)
    })
    .await;
    documented("/v1/flows/{id}", "get", 200, &f);
    assert_eq!(f["failed_by"], "pay-1", "{f}");
    let (s, j) = get_json(base, "/v1/jobs/close-2").await;
    assert_eq!((s, j["state"].as_str()), (200, Some("dead")), "{j}");
    assert_eq!(
        j["children"],
        json!({"pay-1": {"outcome": "dead"}, "pay-2": {"outcome": "pending"}})
    );
    let (s, v) = post(base, "/v1/flows/close-2/cancel", json!({})).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{v}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_refusals_over_http_name_the_problem_and_leave_nothing() {
    let redis = RedisServer::start();
    let server = TestServer::start(
        queue(&redis),
        ServerConfig {
            max_request_bytes: 64 * 1024,
            ..ServerConfig::default()
        },
    )
    .await;
    let base = server.base.as_str();
    let leaf = |id: &str| json!({"id": id, "topic": "t"});
    let with = |extra: Value| {
        let mut node = json!({"id": "p", "topic": "t", "children": [leaf("x1")]});
        for (k, v) in extra.as_object().unwrap() {
            node[k] = v.clone();
        }
        node
    };
    // (body, status, what the message says)
    let cases: Vec<(Value, u16, &str)> = vec![
        (leaf("p"), 422, "a flow's root has children"),
        (
            json!({"topic": "t", "children": [leaf("x1")]}),
            422,
            "flow job (the root): a parent needs an id",
        ),
        (
            with(json!({"children": [{"topic": "t", "children": [leaf("x1")]}]})),
            422,
            "flow job children[0]: a parent needs an id",
        ),
        (
            with(json!({"group": "g"})),
            422,
            "flow job \"p\": a parent takes no group",
        ),
        (
            with(json!({"due_at": "2030-01-01T00:00:00Z"})),
            422,
            "flow job \"p\": a parent takes no due time",
        ),
        (
            with(json!({"children": [{"id": "x1", "topic": "t", "batch": "b"}]})),
            422,
            "flow job \"x1\": a job of a flow takes no batch",
        ),
        (
            with(json!({"children": [{"id": "x1", "topic": "t",
                "dedup": {"key": "k", "mode": "simple"}}]})),
            422,
            "flow job \"x1\": a job of a flow takes no dedup key",
        ),
        (
            with(json!({"children": [{"id": "x1", "topic": "t", "on_child_dead": "ignore"}]})),
            422,
            "flow job \"x1\": on_child_dead is a parent's",
        ),
        (
            with(json!({"children": [leaf("x1"), leaf("x1")]})),
            422,
            "flow job \"x1\": its id is given twice in the flow",
        ),
        (
            with(json!({"children": [{"id": "x1", "topic": ""}]})),
            422,
            "flow job \"x1\": ",
        ),
        (
            with(json!({"children": [{"id": "x1", "topic": "t", "delay_ms": 1, "due_at": 1}]})),
            422,
            "flow job \"x1\": give delay_ms or due_at, not both",
        ),
        (
            with(json!({"children": [{"id": "x1", "topic": "t", "colour": 1}]})),
            400,
            "children[0] (\"x1\"): unknown field `colour`",
        ),
        (
            with(json!({"on_child_dead": "maybe"})),
            400,
            "on_child_dead must be \"fail\" or \"ignore\"",
        ),
        (
            with(json!({"children": "x1"})),
            400,
            "children must be a list of jobs",
        ),
    ];
    for (body, status, said) in cases {
        let (s, v) = post(base, "/v1/flows", body.clone()).await;
        assert_eq!(s, status, "{body}: {v}");
        assert!(message(&v).contains(said), "{body}: {v}");
        documented("/v1/flows", "post", s, &v);
    }
    // Seventeen levels: the limit's 422; nested past what JSON is read
    // to (a stack-safe 400), not a crash.
    let deep = |levels: usize| {
        let mut node = leaf("bottom");
        for i in 0..levels - 1 {
            node = json!({"id": format!("l{i}"), "topic": "t", "children": [node]});
        }
        node
    };
    let (s, v) = post(base, "/v1/flows", deep(17)).await;
    assert_eq!(s, 422, "{v}");
    assert!(
        message(&v).contains("the flow has 17 levels; the limit is 16"),
        "{v}"
    );
    // As deep as JSON is read to (two levels of it a job): still the 422.
    let (s, v) = post(base, "/v1/flows", deep(63)).await;
    assert_eq!(s, 422, "{v}");
    assert!(message(&v).contains("the flow has 63 levels"), "{v}");
    let (s, v) = post(base, "/v1/flows", deep(16)).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = post(base, "/v1/flows/l0/cancel", json!({})).await;
    assert_eq!((s, v["deleted"].as_u64()), (200, Some(1)), "{v}");
    let mut text = String::new();
    for _ in 0..300 {
        text.push_str(r#"{"id":"d","topic":"t","children":["#);
    }
    text.push_str(&"]}".repeat(300));
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/flows"))
        .body(text)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(message(&v).contains("recursion limit"), "{v}");
    // Nothing was written by any of them.
    for id in ["p", "x1", "bottom"] {
        assert_eq!(
            get_json(base, &format!("/v1/jobs/{id}")).await.0,
            404,
            "{id}"
        );
    }
    assert_eq!(get_json(base, "/v1/flows/p").await.0, 404);
    // Over the request body limit: 413, as for a batch of jobs.
    let big = "b".repeat(70 * 1024);
    let (s, v) = post(
        base,
        "/v1/flows",
        json!({"id": "p", "topic": "t", "children": [{"id": "x1", "topic": "t", "body": big}]}),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (413, Some("too_large")),
        "{v}"
    );

    // A leaf id in use: 409 naming it; the job is left as it was, and
    // nothing of the flow is pending.
    let (s, _) = post(
        base,
        "/v1/jobs",
        json!({"id": "taken", "topic": "t", "body": "mine"}),
    )
    .await;
    assert_eq!(s, 201);
    let (s, v) = post(
        base,
        "/v1/flows",
        json!({"id": "p3", "topic": "t", "children": [
            {"id": "free", "topic": "t", "delay_ms": 3_600_000},
            {"id": "taken", "topic": "t", "body": "theirs"},
        ]}),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{v}"
    );
    documented("/v1/flows", "post", s, &v);
    assert!(message(&v).contains("flow job \"taken\""), "{v}");
    assert_eq!(get_json(base, "/v1/jobs/taken").await.1["body"], "mine");
    assert_eq!(get_json(base, "/v1/jobs/free").await.0, 404);
    assert_eq!(get_json(base, "/v1/flows/p3").await.1["state"], "cancelled");
    // A parent id in use: 409 naming it.
    let (s, v) = post(base, "/v1/flows", with(json!({"id": "p4"}))).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = post(
        base,
        "/v1/flows",
        json!({"id": "p4", "topic": "t", "children": [leaf("x9")]}),
    )
    .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{v}"
    );
    assert!(
        message(&v).contains("flow parent id \"p4\" is in use"),
        "{v}"
    );
    assert_eq!(get_json(base, "/v1/jobs/x9").await.0, 404);
    // No such flow.
    let (s, v) = get_json(base, "/v1/flows/nope").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{v}"
    );
    documented("/v1/flows/{id}", "get", s, &v);
    assert!(message(&v).contains("nope"), "{v}");
    let (s, v) = post(base, "/v1/flows/nope/cancel", json!({})).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{v}"
    );
    server.stop().await;
}

/// A parent pushed with a trace context (its own, or the request's) is
/// handed out with it, as its leaves are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_keeps_its_trace_context_as_its_leaves_do() {
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let base = server.base.as_str();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (s, v) = post(
        base,
        "/v1/flows",
        json!({"id": "traced", "topic": "close", "traceparent": tp, "tracestate": "shop=7",
               "children": [{"id": "traced-leaf", "topic": "leaf", "traceparent": tp}]}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let leaf = pop(base, "leaf").await;
    assert_eq!(
        get_json(base, "/v1/jobs/traced-leaf").await.1["traceparent"],
        tp
    );
    finish(base, &leaf, Value::Null).await;
    let parent = released(base, "close").await;
    let (_, j) = get_json(base, "/v1/jobs/traced").await;
    assert_eq!(
        (j["traceparent"].as_str(), j["tracestate"].as_str()),
        (Some(tp), Some("shop=7")),
        "the parent as read: {j}"
    );
    assert_eq!(parent["traceparent"], tp, "as popped: {parent}");
    server.stop().await;
}

/// A node's schema is a job's with `children` and `on_child_dead` in the
/// same object: a schema refusing fields it does not name (as a job's
/// does) must name those two, or a validating client refuses every flow.
#[test]
fn the_flow_schema_is_a_jobs_with_its_children() {
    let doc: Value = serde_json::from_str(delayq::http::v1::openapi::json()).unwrap();
    let schemas = &doc["components"]["schemas"];
    let node = &schemas["FlowSpec"];
    assert_eq!(node["additionalProperties"], false, "{node}");
    for field in schemas["JobSpec"]["properties"].as_object().unwrap().keys() {
        assert!(node["properties"].get(field).is_some(), "{field}: {node}");
    }
    assert_eq!(
        node["properties"]["children"]["items"]["$ref"],
        "#/components/schemas/FlowSpec"
    );
    assert_eq!(
        node["properties"]["on_child_dead"]["$ref"],
        "#/components/schemas/ChildDeadSpec"
    );
    assert_eq!(node["required"], json!(["topic"]));
    let body = &doc["paths"]["/v1/flows"]["post"]["requestBody"]["content"]["application/json"];
    assert_eq!(body["schema"]["$ref"], "#/components/schemas/FlowSpec");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayq_get_names_a_childs_flow_without_a_control_character() {
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let base = server.base.as_str();
    let (s, v) = post(
        base,
        "/v1/flows",
        json!({"id": "order-7", "topic": "close",
               "children": [{"id": "refund-7", "topic": "refund"}]}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    // The child's batch is its parent's flow (the parent's id after a
    // control byte): the text names the flow, printing no control byte
    // to the terminal.
    let (ok, out, err) = delayq_cli(base, &["get", "refund-7"]).await;
    assert!(ok, "{err}");
    assert!(!out.contains('\u{1}'), "{out:?}");
    assert!(out.lines().any(|l| l.trim() == "flow: order-7"), "{out}");
    assert!(!out.contains("batch:"), "{out}");
    // Over HTTP: `flow`, the parent's id, in place of the raw batch id.
    let (s, j) = get_json(base, "/v1/jobs/refund-7").await;
    assert_eq!((s, &j["flow"]), (200, &json!("order-7")), "{j}");
    assert!(j.get("batch").is_none(), "{j}");
    documented("/v1/jobs/{id}", "get", s, &j);
}
