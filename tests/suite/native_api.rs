//! The native `/v1` API: every status code it promises, batch pushes,
//! leases, dead letters, and the OpenAPI document matching the routes.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use delayq::http::v1::{openapi, ROUTES};
use delayq::http::ServerConfig;
use serde_json::{json, Value};

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    fn new(s: &TestServer) -> Api {
        Api {
            base: s.base.clone(),
            http: reqwest::Client::new(),
        }
    }
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let mut req = self.http.request(m, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        self.send(req).await
    }
    async fn raw(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let req = self
            .http
            .request(m, format!("{}{path}", self.base))
            .body(body.to_owned());
        self.send(req).await
    }
    async fn send(&self, req: reqwest::RequestBuilder) -> (u16, Value) {
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let v = if text.is_empty() {
            Value::Null
        } else {
            // /metrics is text; everything else must be JSON.
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, v)
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

async fn server(redis: &RedisServer) -> TestServer {
    // Long enough for a busy machine's Redis (a 500 ms bound timed out a
    // heartbeat beside other tests' clusters), short enough that the 503
    // of a dead Redis comes quickly.
    let q = delayq::Queue::connect(delayq::Config {
        redis_timeout: Duration::from_secs(2),
        ..config(redis)
    })
    .unwrap();
    TestServer::start(
        q,
        ServerConfig {
            max_request_bytes: 64 * 1024,
            ..ServerConfig::default()
        },
    )
    .await
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_status_code_means_what_the_document_says() {
    let mut redis = RedisServer::start();
    let s = server(&redis).await;
    let api = Api::new(&s);

    // 201 created, 200 replaced, 409 kept.
    let job = json!({"id":"a","topic":"t","body":"x","delay_ms":3_600_000});
    let (st, v) = api.call("post", "/v1/jobs", Some(job.clone())).await;
    assert_eq!((st, v["outcome"].as_str()), (201, Some("created")), "{v}");
    let (st, v) = api.call("post", "/v1/jobs", Some(job.clone())).await;
    assert_eq!((st, v["outcome"].as_str()), (200, Some("replaced")), "{v}");
    let mut keep = job.clone();
    keep["if_exists"] = json!("keep");
    let (st, v) = api.call("post", "/v1/jobs", Some(keep)).await;
    assert_eq!((st, code(&v)), (409, "exists"), "{v}");
    // An id is generated when none is given.
    let (st, v) = api
        .call("post", "/v1/jobs", Some(json!({"topic":"t"})))
        .await;
    assert_eq!(st, 201);
    assert_eq!(v["id"].as_str().unwrap().len(), 36);

    // 400: not JSON, wrong shape, unknown field.
    for bad in ["{", "[]", r#"{"topic":5}"#, r#"{"topic":"t","dleay_ms":5}"#] {
        let (st, v) = api.raw("POST", "/v1/jobs", bad).await;
        assert_eq!((st, code(&v)), (400, "bad_request"), "{bad}: {v}");
    }
    // 422: values out of bounds, each named.
    for (bad, word) in [
        (json!({"topic":""}), "topic"),
        (json!({"topic":"a,b"}), "comma"),
        (json!({"topic":"t","ttr_ms":0}), "ttr"),
        (json!({"topic":"t","delay_ms":1,"due_at":5}), "not both"),
        (json!({"topic":"t","due_at":"yesterday"}), "RFC 3339"),
        (json!({"topic":"t","retry":{"intervals":["2y"]}}), "unit"),
        (
            json!({"topic":"t","retry":{"max_attempts":0}}),
            "max_attempts",
        ),
        (json!({"id":"i".repeat(300),"topic":"t"}), "300 bytes"),
    ] {
        let (st, v) = api.call("post", "/v1/jobs", Some(bad.clone())).await;
        assert_eq!((st, code(&v)), (422, "invalid"), "{bad}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(word),
            "{v}"
        );
    }
    // A JSON object as the body: say to encode it into a string.
    let (st, v) = api
        .call(
            "post",
            "/v1/jobs",
            Some(json!({"topic":"t","body":{"order":42}})),
        )
        .await;
    assert_eq!((st, code(&v)), (400, "bad_request"), "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("body must be a string") && msg.contains(r#"{\"order\":42}"#),
        "{msg}"
    );
    // 413: over the body limit.
    let (st, v) = api
        .call(
            "post",
            "/v1/jobs",
            Some(json!({"topic":"t","body":"x".repeat(100_000)})),
        )
        .await;
    assert_eq!((st, code(&v)), (413, "too_large"), "{v}");

    // 404 for unknown jobs.
    for (m, p, b) in [
        ("get", "/v1/jobs/none", None),
        ("delete", "/v1/jobs/none", None),
        ("post", "/v1/jobs/none/finish", Some(json!({"token":"1"}))),
        ("post", "/v1/jobs/none/nack", Some(json!({"token":"1"}))),
        ("post", "/v1/jobs/none/touch", Some(json!({"token":"1"}))),
        (
            "post",
            "/v1/jobs/none/reschedule",
            Some(json!({"delay_ms":1})),
        ),
    ] {
        let (st, v) = api.call(m, p, b).await;
        assert_eq!((st, code(&v)), (404, "not_found"), "{m} {p}: {v}");
    }

    // 200 pop, 409 stale token, 204 finish, 204 delete.
    api.call(
        "post",
        "/v1/jobs",
        Some(json!({"id":"p","topic":"now","ttr_ms":60000})),
    )
    .await;
    let (st, v) = api
        .call(
            "post",
            "/v1/pop",
            Some(json!({"topics":["now"],"wait_ms":5000})),
        )
        .await;
    assert_eq!(st, 200);
    let token = v["jobs"][0]["token"].as_str().unwrap().to_owned();
    assert_eq!(v["jobs"][0]["id"], "p");
    let (st, v) = api
        .call("post", "/v1/jobs/p/finish", Some(json!({"token":"stale"})))
        .await;
    assert_eq!((st, code(&v)), (409, "stale_lease"), "{v}");
    let (st, _) = api
        .call("post", "/v1/jobs/p/finish", Some(json!({"token":token})))
        .await;
    assert_eq!(st, 204);
    let (st, _) = api.call("delete", "/v1/jobs/a", None).await;
    assert_eq!(st, 204);

    // /healthz and /readyz, then 503 while Redis is down.
    assert_eq!(api.call("get", "/healthz", None).await.0, 200);
    let ready = eventually(Duration::from_secs(5), "ready", || async {
        let (st, v) = api.call("get", "/readyz", None).await;
        (st == 200).then_some(v)
    })
    .await;
    assert_eq!(
        ready,
        json!({"redis": true, "subscriber": true, "memory": "ok"})
    );
    redis.kill();
    let (st, v) = api
        .call("post", "/v1/jobs", Some(json!({"topic":"t"})))
        .await;
    assert_eq!((st, code(&v)), (503, "unavailable"), "{v}");
    let (st, v) = api.call("get", "/readyz", None).await;
    assert_eq!((st, &v["redis"]), (503, &json!(false)));
    assert_eq!(api.call("get", "/healthz", None).await.0, 200);
    redis.restart();
    eventually(Duration::from_secs(10), "ready again", || async {
        (api.call("get", "/readyz", None).await.0 == 200).then_some(())
    })
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_times_in_unix_seconds_or_without_a_zone_are_refused_not_fired_now() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let api = Api::new(&s);
    let (st, _) = api
        .call(
            "post",
            "/v1/jobs",
            Some(json!({"id":"r","topic":"t","delay_ms":3_600_000})),
        )
        .await;
    assert_eq!(st, 201);
    for (due, words) in [
        // Unix seconds (what the Go server's /get gives): read as ms, 1970.
        (
            json!(1_806_224_400i64),
            &["milliseconds", "1806224400000", "RFC 3339"][..],
        ),
        (json!(0), &["milliseconds"][..]),
        (json!(-5), &["milliseconds"][..]),
        // No zone: RFC 3339 requires one; UTC would be a guess.
        (json!("2027-03-28 09:00:00"), &["time zone", "Z"][..]),
        (json!("2027-03-28T09:00:00"), &["time zone"][..]),
    ] {
        let (st, v) = api
            .call(
                "post",
                "/v1/jobs",
                Some(json!({"id":"n","topic":"t","due_at":due})),
            )
            .await;
        assert_eq!((st, code(&v)), (422, "invalid"), "{due}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        for w in words {
            assert!(msg.contains(w), "{due}: {msg}");
        }
        let (st, v) = api
            .call(
                "post",
                "/v1/jobs/r/reschedule",
                Some(json!({ "due_at": due })),
            )
            .await;
        assert_eq!((st, code(&v)), (422, "invalid"), "{due}: {v}");
    }
    let (st, _) = api.call("get", "/v1/jobs/n", None).await;
    assert_eq!(st, 404, "nothing was pushed");
    let (_, r) = api.call("get", "/v1/jobs/r", None).await;
    assert_eq!(r["state"], "delayed", "{r}");
    // Milliseconds and zoned times still work.
    for (due, ms) in [
        (json!(1_806_224_400_000i64), 1_806_224_400_000i64),
        (json!("2027-03-28 09:00:00Z"), 1_806_224_400_000),
        (json!("2027-03-28T17:00:00+08:00"), 1_806_224_400_000),
    ] {
        let (st, v) = api
            .call("post", "/v1/jobs", Some(json!({"topic":"t","due_at":due})))
            .await;
        assert_eq!((st, v["due_at_ms"].as_i64()), (201, Some(ms)), "{due}: {v}");
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_accepts_the_valid_jobs_and_reports_each_invalid_one() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let api = Api::new(&s);
    let (st, v) = api
        .call(
            "post",
            "/v1/jobs/batch",
            Some(json!({"jobs": [
                {"id":"b0","topic":"batch","delay_ms":3_600_000},
                {"id":"b1","topic":"","delay_ms":1},
                {"id":"b2","topic":"batch","due_at":"2999-01-01T00:00:00Z"},
                {"id":"b3","topic":"batch","ttr_ms":0},
                {"id":"b4","topic":"batch","nonsense":true},
                {"id":"b5","topic":"batch","due_at":1_000_000_000_000i64}
            ]})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["accepted"].as_u64(), v["rejected"].as_u64()),
        (Some(3), Some(3))
    );
    let statuses: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [201, 422, 201, 422, 400, 201]);
    assert_eq!(v["results"][1]["error"]["code"], "invalid");
    assert_eq!(v["results"][4]["error"]["code"], "bad_request");
    // Nothing of the rejected ones was written.
    let mut keys: Vec<String> = redis.cmd(&["KEYS", "{dq}:j:*"]).await;
    keys.sort();
    assert_eq!(keys, ["{dq}:j:b0", "{dq}:j:b2", "{dq}:j:b5"]);
    // RFC 3339 due times; a past one means now.
    let (_, b2) = api.call("get", "/v1/jobs/b2", None).await;
    assert_eq!(b2["due_at_ms"], 32_472_144_000_000i64);
    let (_, b5) = api.call("get", "/v1/jobs/b5", None).await;
    assert!(b5["due_at_ms"].as_i64().unwrap() >= redis.time_ms().await - 5_000);
    let over: Vec<Value> = (0..1001)
        .map(|i| json!({"id": format!("o{i}"), "topic":"t"}))
        .collect();
    let (st, v) = api
        .call("post", "/v1/jobs/batch", Some(json!({ "jobs": over })))
        .await;
    assert_eq!((st, code(&v)), (422, "invalid"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_dead_letters_and_requeue_over_http() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let api = Api::new(&s);
    api.call(
        "post",
        "/v1/jobs",
        Some(json!({"id":"n1","topic":"hook","retry":{"intervals":["100ms", 200]}})),
    )
    .await;
    for attempt in 1..=3 {
        let (_, v) = api
            .call(
                "post",
                "/v1/pop",
                Some(json!({"topics":["hook"],"wait_ms":5000,"max":10})),
            )
            .await;
        let d = &v["jobs"][0];
        assert_eq!(d["attempts"], attempt, "{v}");
        let (st, n) = api
            .call(
                "post",
                "/v1/jobs/n1/nack",
                Some(json!({"token": d["token"], "error": format!("HTTP 502 #{attempt}")})),
            )
            .await;
        assert_eq!(st, 200);
        assert_eq!(n["state"], if attempt < 3 { "delayed" } else { "dead" });
    }
    let (_, dead) = api.call("get", "/v1/topics/hook/dead?limit=10", None).await;
    assert_eq!(dead["jobs"][0]["id"], "n1");
    assert_eq!(dead["jobs"][0]["last_error"], "HTTP 502 #3");
    assert_eq!(dead["jobs"][0]["history"].as_array().unwrap().len(), 3);
    let (_, topics) = api.call("get", "/v1/topics", None).await;
    assert_eq!(topics["topics"]["hook"]["dead"], 1);
    let (st, v) = api.call("get", "/v1/topics/hook/dead?limit=0", None).await;
    assert_eq!((st, code(&v)), (422, "invalid"));

    let (st, v) = api
        .call(
            "post",
            "/v1/topics/hook/dead/requeue",
            Some(json!({"ids":["n1","zzz"]})),
        )
        .await;
    assert_eq!((st, v["requeued"].as_u64()), (200, Some(1)));
    let (_, v) = api
        .call(
            "post",
            "/v1/pop",
            Some(json!({"topics":["hook"],"wait_ms":5000})),
        )
        .await;
    let token = v["jobs"][0]["token"].clone();
    assert_eq!(v["jobs"][0]["attempts"], 1);
    // touch, then let it die again by nacking with max attempts... purge.
    let (st, t) = api
        .call(
            "post",
            "/v1/jobs/n1/touch",
            Some(json!({"token": token, "ttr_ms": 5000})),
        )
        .await;
    assert_eq!(st, 200);
    assert!(t["lease_until_ms"].as_i64().unwrap() > 0);
    let (st, _) = api.call("delete", "/v1/topics/hook/dead", None).await;
    assert_eq!(st, 200);
    let (st, r) = api
        .call(
            "post",
            "/v1/jobs/n1/reschedule",
            Some(json!({"delay_ms": 3_600_000, "body": "later"})),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    let (_, j) = api.call("get", "/v1/jobs/n1", None).await;
    assert_eq!(
        (j["state"].as_str(), j["body"].as_str()),
        (Some("delayed"), Some("later"))
    );
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
fn undocumented(doc: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        let schema = &doc["components"]["schemas"][name];
        return undocumented(doc, schema, value, at, out);
    }
    let branches: Vec<&Value> = ["oneOf", "anyOf", "allOf"]
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_finish_settles_each_job_on_its_own() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let api = Api::new(&s);
    let jobs: Vec<Value> = (0..4)
        .map(|i| json!({"id": format!("f{i}"), "topic": "fin"}))
        .collect();
    let (st, _) = api
        .call("post", "/v1/jobs/batch", Some(json!({ "jobs": jobs })))
        .await;
    assert_eq!(st, 200);
    let (st, popped) = api
        .call(
            "post",
            "/v1/pop",
            Some(json!({"topics": ["fin"], "max": 4, "wait_ms": 5000})),
        )
        .await;
    assert_eq!(st, 200);
    let mut got: Vec<(String, String)> = popped["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().into(),
                j["token"].as_str().unwrap().into(),
            )
        })
        .collect();
    // A long-poll returns once one is ready: take the rest too.
    while got.len() < 4 {
        let (_, more) = api
            .call(
                "post",
                "/v1/pop",
                Some(json!({"topics": ["fin"], "max": 4, "wait_ms": 5000})),
            )
            .await;
        for j in more["jobs"].as_array().unwrap() {
            got.push((
                j["id"].as_str().unwrap().into(),
                j["token"].as_str().unwrap().into(),
            ));
        }
    }
    got.sort();
    // Three good leases, one token of another job, an unknown id and an id
    // over the limit: each has its own outcome.
    let body = json!({"jobs": [
        {"id": got[0].0, "token": got[0].1},
        {"id": got[1].0, "token": got[1].1},
        {"id": got[2].0, "token": got[3].1},
        {"id": "nobody", "token": got[3].1},
        {"id": "x".repeat(300), "token": got[3].1},
        {"id": got[3].0, "token": got[3].1},
    ]});
    let (st, v) = api.call("post", "/v1/finish", Some(body)).await;
    assert_eq!(st, 200, "{v}");
    let statuses: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [204, 204, 409, 404, 422, 204], "{v}");
    assert_eq!(
        (v["finished"].as_u64(), v["failed"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(v["results"][2]["error"]["code"], "stale_lease");
    assert_eq!(v["results"][3]["error"]["code"], "not_found");
    assert_eq!(v["results"][4]["error"]["code"], "invalid");
    // The finished ones are gone; the one sent with a stale token is
    // still leased to its consumer, untouched.
    for (id, _) in [&got[0], &got[1], &got[3]] {
        let (st, _) = api.call("get", &format!("/v1/jobs/{id}"), None).await;
        assert_eq!(st, 404, "{id} was finished");
    }
    let (_, kept) = api
        .call("get", &format!("/v1/jobs/{}", got[2].0), None)
        .await;
    assert_eq!(kept["state"], "reserved", "{kept}");
    // Nothing to finish, too many, or a field misspelt: refused whole.
    let (st, v) = api
        .call("post", "/v1/finish", Some(json!({"jobs": []})))
        .await;
    assert_eq!((st, code(&v)), (422, "invalid"), "{v}");
    let over: Vec<Value> = (0..1001)
        .map(|i| json!({"id": format!("o{i}"), "token": "t"}))
        .collect();
    let (st, v) = api
        .call("post", "/v1/finish", Some(json!({ "jobs": over })))
        .await;
    assert_eq!((st, code(&v)), (422, "invalid"), "{v}");
    let (st, v) = api
        .call(
            "post",
            "/v1/finish",
            Some(json!({"jobs": [{"id": "a", "tokn": "t"}]})),
        )
        .await;
    assert_eq!((st, code(&v)), (400, "bad_request"), "{v}");
    let (_, still) = api
        .call("get", &format!("/v1/jobs/{}", got[2].0), None)
        .await;
    assert_eq!(still["state"], "reserved");
    s.stop().await;
}

/// A duration out of its limit is quoted in milliseconds, as the API takes
/// it, with the limit in words and in milliseconds: never in another unit
/// ("0ns", "700000s").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_errors_quote_durations_in_milliseconds() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let http = reqwest::Client::new();
    let refused = |body: Value| {
        let (http, base) = (http.clone(), s.base.clone());
        async move {
            let r = http
                .post(format!("{base}/v1/jobs"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 422, "{body}");
            let v: Value = r.json().await.unwrap();
            v["error"]["message"].as_str().unwrap().to_owned()
        }
    };
    assert_eq!(
        refused(json!({"topic": "t", "ttr_ms": 0})).await,
        "ttr 0 ms is out of range: 1 ms to 7 days (604800000 ms)"
    );
    assert_eq!(
        refused(json!({"topic": "t", "ttr_ms": 700_000_000})).await,
        "ttr 700000000 ms is out of range: 1 ms to 7 days (604800000 ms)"
    );
    assert_eq!(
        refused(json!({"topic": "t", "delay_ms": 3_000_000_000_000u64})).await,
        "delay 3000000000000 ms is longer than the limit: 2147483647 s (2147483647000 ms)"
    );
    assert_eq!(
        refused(json!({"topic": "t", "retry": {"intervals": ["400d"]}})).await,
        "retry interval 34560000000 ms is longer than the limit: 366 days (31622400000 ms)"
    );
    s.stop().await;
}

/// A queue and server whose Redis replies come through `proxy`, waiting
/// for each at most a second.
async fn server_behind(proxy: &SlowProxy) -> TestServer {
    let q = delayq::Queue::connect(delayq::Config {
        redis: delayq::Redis::Url(proxy.url()),
        redis_timeout: Duration::from_secs(1),
        ..delayq::Config::default()
    })
    .unwrap();
    TestServer::start(q, ServerConfig::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_whose_reply_comes_too_late_is_504_not_a_503_that_says_nothing_changed() {
    let redis = RedisServer::start();
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let s = server_behind(&proxy).await;
    let api = Api::new(&s);
    let (st, v) = api
        .call(
            "post",
            "/v1/jobs",
            Some(json!({"id":"u","topic":"t","delay_ms":3_600_000,"tags":["m:1"]})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let direct = queue(&redis);
    let before = direct.get("u").await.unwrap().unwrap().due_ms;

    // Redis runs the reschedule at once; its reply takes 3 s to come back,
    // past the 1 s delayq waits.
    proxy.set_delay(Duration::from_secs(3));
    let (st, v) = api
        .call(
            "post",
            "/v1/tags/m:1/reschedule",
            Some(json!({"shift_ms": 3_600_000})),
        )
        .await;
    proxy.set_delay(Duration::ZERO);
    assert_eq!((st, code(&v)), (504, "outcome_unknown"), "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("may or may not have been applied"),
        "{message}"
    );
    // And it was applied: a client told "nothing changed" would shift it
    // again.
    let after = direct.get("u").await.unwrap().unwrap().due_ms;
    assert_eq!(after - before, 3_600_000);
    direct.close().await;
    s.stop().await;
}
