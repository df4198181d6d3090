//! The OpenAPI document: exactly the routes, each operation named, every
//! reply's fields and statuses in it.

use super::*;

#[test]
fn the_openapi_document_lists_exactly_the_routes() {
    let doc: Value = serde_json::from_str(openapi::json()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| (m.clone(), path.clone()))
        })
        .collect();
    let routed: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (r.method.to_string(), r.path.to_string()))
        .collect();
    assert_eq!(documented, routed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listed_route_is_served_and_the_document_is_too() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let api = Api::new(&s);
    for route in ROUTES {
        let method = route.method;
        let path = route.path.replace("{id}", "x").replace("{topic}", "t");
        let (status, v) = api.call(method, &path, Some(json!({}))).await;
        assert_ne!(status, 405, "{method} {path}");
        assert_ne!(code(&v), "no_route", "{method} {path} is not routed");
    }
    let (status, v) = api.call("get", "/nowhere", None).await;
    assert_eq!((status, code(&v)), (404, "no_route"));
    let (status, doc) = api.call("get", "/v1/openapi.json", None).await;
    assert_eq!(status, 200);
    assert_eq!(doc, serde_json::from_str::<Value>(openapi::json()).unwrap());
    s.stop().await;
}

/// Generated clients need a name per operation and the security scheme:
/// every operation has a unique operationId, every route but /healthz
/// needs the bearer token, and what a tokenless call gets (401) is in the
/// document for every route that gives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_names_each_operation_and_its_401() {
    let doc: Value = serde_json::from_str(openapi::json()).unwrap();
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(doc["security"][0]["bearer"], json!([]));
    let mut ids = BTreeSet::new();
    for route in ROUTES {
        let op = &doc["paths"][route.path][route.method];
        let id = op["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{} {} has no operationId", route.method, route.path));
        assert!(ids.insert(id.to_owned()), "operationId {id} twice");
    }
    let redis = RedisServer::start();
    let s = TestServer::start(
        queue(&redis),
        ServerConfig {
            auth_token: Some(delayq::webhook::Secret("t0ken".into())),
            ..ServerConfig::default()
        },
    )
    .await;
    let api = Api::new(&s);
    for route in ROUTES {
        let path = route
            .path
            .replace("{id}", "x")
            .replace("{topic}", "t")
            .replace("{name}", "n");
        let (status, _) = api.call(route.method, &path, Some(json!({}))).await;
        let op = &doc["paths"][route.path][route.method];
        if route.path == "/healthz" {
            assert_eq!(status, 200);
            assert_eq!(op["security"], json!([]));
        } else {
            assert_eq!(status, 401, "{} {path}", route.method);
            assert!(
                op["responses"]["401"].is_object(),
                "{} {} does not document 401",
                route.method,
                route.path
            );
        }
    }
    s.stop().await;
}

/// The fields of `value` that `schema` (in `doc`) does not name, as paths.
pub(crate) fn undocumented(
    doc: &Value,
    schema: &Value,
    value: &Value,
    at: &str,
    out: &mut Vec<String>,
) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        let schema = &doc["components"]["schemas"][name];
        return undocumented(doc, schema, value, at, out);
    }
    // A schema of any value (a job's result, its progress) documents all
    // a value holds.
    let shapes = [
        "type",
        "properties",
        "items",
        "additionalProperties",
        "$ref",
    ];
    let kinds = ["oneOf", "anyOf", "allOf"];
    if schema.is_object() && !shapes.iter().chain(&kinds).any(|k| schema.get(k).is_some()) {
        return;
    }
    let branches: Vec<&Value> = kinds
        .iter()
        .flat_map(|k| schema[*k].as_array().into_iter().flatten())
        .collect();
    if !branches.is_empty() {
        // Documented when one branch documents it all.
        let all: Vec<Vec<String>> = branches
            .iter()
            .map(|b| {
                let mut o = Vec::new();
                undocumented(doc, b, value, at, &mut o);
                o
            })
            .collect();
        if let Some(best) = all.into_iter().min_by_key(Vec::len) {
            out.extend(best);
        }
        return;
    }
    match value {
        Value::Object(fields) => {
            for (k, v) in fields {
                let field = format!("{at}.{k}");
                if let Some(s) = schema["properties"].get(k) {
                    undocumented(doc, s, v, &field, out);
                } else if schema["additionalProperties"].is_object() {
                    undocumented(doc, &schema["additionalProperties"], v, &field, out);
                } else {
                    out.push(field);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                undocumented(doc, &schema["items"], v, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The document is derived from the types the server writes: every field
/// of every reply (success and error) is in the reply's schema, for the
/// status it came with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reply_field_and_status_is_in_the_openapi_document() {
    let doc: Value = serde_json::from_str(openapi::json()).unwrap();
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let api = Api::new(&s);
    let check = |route: &str, method: &str, status: u16, v: &Value| {
        let op = &doc["paths"][route][method];
        let response = &op["responses"][status.to_string()];
        assert!(
            response.is_object(),
            "{method} {route}: {status} is not documented: {v}"
        );
        let schema = &response["content"]["application/json"]["schema"];
        if v.is_null() {
            assert!(schema.is_null(), "{method} {route}: {status} has no body");
            return;
        }
        let mut out = Vec::new();
        undocumented(&doc, schema, v, "", &mut out);
        assert!(
            out.is_empty(),
            "{method} {route} {status}: {out:?} undocumented in {v}"
        );
    };
    // An instance with a webhook topic, for /v1/instances and /v1/webhooks.
    let mut me = delayq::instances::this_process(
        "host",
        "127.0.0.1:1",
        vec![delayq::webhook::Webhook::new("t", "http://u:p@h/x?k=v").consumer()],
        false,
    );
    s.queue
        .heartbeat(&mut me, Duration::from_secs(60))
        .await
        .unwrap();
    let calls: Vec<(&str, &str, String, Option<Value>)> = vec![
        (
            "put",
            "/v1/topics/{topic}/rate",
            "/v1/topics/t/rate".into(),
            Some(json!({"per_second": 100})),
        ),
        (
            "get",
            "/v1/topics/{topic}/rate",
            "/v1/topics/t/rate".into(),
            None,
        ),
        (
            "post",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(
                json!({"id":"a","topic":"t","body":"x","retry":{"intervals":["1s"],"max_attempts":1}}),
            ),
        ),
        (
            "post",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({"id":"b","topic":"t","delay_ms":3_600_000})),
        ),
        (
            "post",
            "/v1/jobs/batch",
            "/v1/jobs/batch".into(),
            Some(json!({"jobs":[{"topic":"t","delay_ms":3_600_000},{"topic":""}]})),
        ),
        ("get", "/v1/jobs/{id}", "/v1/jobs/a".into(), None),
        ("get", "/v1/jobs/{id}", "/v1/jobs/none".into(), None),
        (
            "post",
            "/v1/pop",
            "/v1/pop".into(),
            Some(json!({"topics":["t"],"wait_ms":5000})),
        ),
        (
            "get",
            "/v1/topics/{topic}/jobs",
            "/v1/topics/t/jobs?state=reserved".into(),
            None,
        ),
        ("get", "/v1/jobs/{id}", "/v1/jobs/a".into(), None),
        (
            "post",
            "/v1/jobs/{id}/touch",
            "/v1/jobs/a/touch".into(),
            None,
        ),
        ("post", "/v1/jobs/{id}/nack", "/v1/jobs/a/nack".into(), None),
        ("get", "/v1/jobs/{id}", "/v1/jobs/a".into(), None),
        (
            "get",
            "/v1/topics/{topic}/dead",
            "/v1/topics/t/dead".into(),
            None,
        ),
        (
            "get",
            "/v1/topics/{topic}/jobs",
            "/v1/topics/t/jobs?state=dead".into(),
            None,
        ),
        (
            "get",
            "/v1/topics/{topic}/jobs",
            "/v1/topics/t/jobs?limit=1".into(),
            None,
        ),
        ("get", "/v1/schedule", "/v1/schedule".into(), None),
        (
            "post",
            "/v1/topics/{topic}/dead/requeue",
            "/v1/topics/t/dead/requeue".into(),
            None,
        ),
        (
            "delete",
            "/v1/topics/{topic}/dead",
            "/v1/topics/t/dead".into(),
            None,
        ),
        (
            "post",
            "/v1/jobs/{id}/reschedule",
            "/v1/jobs/b/reschedule".into(),
            Some(json!({"delay_ms": 7_200_000})),
        ),
        // Tags: a tagged job, listed, moved and cancelled by its tag.
        (
            "post",
            "/v1/jobs",
            "/v1/jobs".into(),
            Some(json!({"id":"g","topic":"t","delay_ms":3_600_000,"tags":["m:7"]})),
        ),
        (
            "get",
            "/v1/tags/{tag}/jobs",
            "/v1/tags/m:7/jobs?limit=1".into(),
            None,
        ),
        (
            "post",
            "/v1/tags/{tag}/reschedule",
            "/v1/tags/m:7/reschedule".into(),
            Some(json!({"shift_ms": 1000})),
        ),
        (
            "post",
            "/v1/tags/{tag}/cancel",
            "/v1/tags/m:7/cancel".into(),
            None,
        ),
        (
            "post",
            "/v1/topics/{topic}/pause",
            "/v1/topics/t/pause".into(),
            None,
        ),
        ("get", "/v1/topics", "/v1/topics".into(), None),
        (
            "post",
            "/v1/topics/{topic}/resume",
            "/v1/topics/t/resume".into(),
            None,
        ),
        (
            "put",
            "/v1/recurring/{name}",
            "/v1/recurring/r".into(),
            Some(json!({"topic":"t","cron":"0 9 * * *","retry":{"intervals":[1000]}})),
        ),
        (
            "get",
            "/v1/recurring/{name}",
            "/v1/recurring/r".into(),
            None,
        ),
        ("get", "/v1/recurring", "/v1/recurring".into(), None),
        (
            "post",
            "/v1/recurring/{name}/run",
            "/v1/recurring/r/run".into(),
            None,
        ),
        (
            "post",
            "/v1/recurring/{name}/pause",
            "/v1/recurring/r/pause".into(),
            None,
        ),
        (
            "post",
            "/v1/recurring/{name}/resume",
            "/v1/recurring/nope/resume".into(),
            None,
        ),
        (
            "post",
            "/v1/recurring/{name}/resume",
            "/v1/recurring/r/resume".into(),
            None,
        ),
        ("get", "/v1/instances", "/v1/instances".into(), None),
        ("get", "/v1/webhooks", "/v1/webhooks".into(), None),
        (
            "delete",
            "/v1/recurring/{name}",
            "/v1/recurring/r".into(),
            None,
        ),
        (
            "delete",
            "/v1/topics/{topic}/rate",
            "/v1/topics/t/rate".into(),
            None,
        ),
        ("delete", "/v1/jobs/{id}", "/v1/jobs/b".into(), None),
        (
            "post",
            "/v1/jobs/{id}/finish",
            "/v1/jobs/b/finish".into(),
            Some(json!({"token":"stale"})),
        ),
        ("get", "/readyz", "/readyz".into(), None),
        ("get", "/healthz", "/healthz".into(), None),
    ];
    let mut token = String::new();
    for (method, route, path, body) in calls {
        // The lease calls carry the token the pop gave.
        let body = match route {
            "/v1/jobs/{id}/touch" => Some(json!({"token": token, "ttr_ms": 60_000})),
            "/v1/jobs/{id}/nack" => Some(json!({"token": token, "error": "it broke"})),
            _ => body,
        };
        let (status, v) = api.call(method, &path, body).await;
        if route == "/v1/pop" {
            token = v["jobs"][0]["token"]
                .as_str()
                .expect("a job popped")
                .to_owned();
        }
        check(route, method, status, &v);
    }
    // An error of each kind the shared responses name.
    let (status, v) = api.raw("POST", "/v1/jobs", "{").await;
    check("/v1/jobs", "post", status, &v);
    let (status, v) = api
        .call("post", "/v1/jobs", Some(json!({"topic":""})))
        .await;
    check("/v1/jobs", "post", status, &v);
    s.stop().await;
}

/// Generated clients name their types after the document's schemas: a
/// Rust type renamed inside delayq must not rename a published schema.
#[test]
fn the_published_schema_names_stay_as_they_are() {
    let doc: Value = serde_json::from_str(openapi::json()).unwrap();
    let names: Vec<&str> = doc["components"]["schemas"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        names, PUBLISHED_SCHEMAS,
        "the published schema names changed"
    );
}

const PUBLISHED_SCHEMAS: &[&str] = &[
    "Attempt",
    "Batch",
    "BatchCancelled",
    "BatchCreated",
    "BatchJobsSpec",
    "BatchOnSpec",
    "BatchReply",
    "BatchResult",
    "BatchSpec",
    "CallbackSpec",
    "Cancelled",
    "Child",
    "ChildDeadSpec",
    "ChildOutcome",
    "DeadPage",
    "DedupModeSpec",
    "DedupSpec",
    "Delivery",
    "DueAt",
    "Error",
    "ErrorBody",
    "ErrorCode",
    "Event",
    "EventGap",
    "FinishJobSpec",
    "FinishReply",
    "FinishResult",
    "FinishSpec",
    "Flow",
    "FlowCancelled",
    "FlowPushed",
    "FlowSpec",
    "Group",
    "GroupPage",
    "GroupSpec",
    "Health",
    "Held",
    "IfExistsSpec",
    "Instance",
    "Instances",
    "Interval",
    "Job",
    "JobSpec",
    "JobState",
    "JobsPage",
    "Lateness",
    "LeaseSpec",
    "LogLine",
    "LogSpec",
    "MasterMemory",
    "MemoryState",
    "Missed",
    "NackSpec",
    "Nacked",
    "NewBatchSpec",
    "Outcome",
    "Paused",
    "PopSpec",
    "Popped",
    "ProgressSpec",
    "Purged",
    "Pushed",
    "Rate",
    "RateLimit",
    "RateSpec",
    "Readiness",
    "RecurringRun",
    "RequeueSpec",
    "Requeued",
    "RescheduleSpec",
    "Rescheduled",
    "Retry",
    "RetrySpec",
    "Schedule",
    "ScheduleSpec",
    "Schedules",
    "Series",
    "Shard",
    "TagCancelSpec",
    "TagChanged",
    "TagJobs",
    "TagRescheduleSpec",
    "TagSkipped",
    "Throughput",
    "TokenSpec",
    "TopicCounts",
    "Topics",
    "TouchSpec",
    "Touched",
    "Upcoming",
    "WebhookConsumer",
    "WebhookStatus",
    "Webhooks",
];
