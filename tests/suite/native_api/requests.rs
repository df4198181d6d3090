//! What each request gets: status codes, batches, retries and dead
//! letters, limits, replies that come too late, HTTP details.

use super::*;

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
    // Expired events: the canary's answer, unknown until its first check.
    let heard = ready["expired_events"].clone();
    assert!(heard.is_null() || heard == json!(true), "{ready}");
    assert_eq!(
        ready,
        json!({"redis": true, "subscriber": true, "memory": "ok", "scripts": true, "expired_events": heard})
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
/// for each at most 5 s (time enough for a busy machine to send a call
/// before its deadline).
async fn server_behind(proxy: &SlowProxy) -> TestServer {
    let q = delayq::Queue::connect(delayq::Config {
        redis: delayq::Redis::Url(proxy.url()),
        redis_timeout: Duration::from_secs(5),
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

    // Redis runs the reschedule at once; its reply is held until delayq
    // has given up on it.
    proxy.hold(true);
    let (st, v) = api
        .call(
            "post",
            "/v1/tags/m:1/reschedule",
            Some(json!({"shift_ms": 3_600_000})),
        )
        .await;
    proxy.hold(false);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_method_a_bad_path_a_huge_offset_and_zoned_times_are_answered_clearly() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(
        q.clone(),
        ServerConfig {
            auth_token: Some(delayq::webhook::Secret("tok".into())),
            ..ServerConfig::default()
        },
    )
    .await;
    let c = reqwest::Client::new();
    let send = |req: reqwest::RequestBuilder| async move {
        let r = req
            .header("authorization", "bearer tok")
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)),
        )
    };
    // GET on a POST route: a JSON 405 (and the lowercase scheme is taken).
    let (st, v) = send(c.get(format!("{}/v1/pop", s.base))).await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (405, &json!("method_not_allowed")),
        "{v}"
    );
    // Invalid UTF-8 in a path: a JSON 400.
    let (st, v) = send(c.get(format!("{}/v1/jobs/%FF%FE", s.base))).await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (400, &json!("bad_request")),
        "{v}"
    );
    // An offset past i64: a 422 that says so, not "redis unavailable".
    let (st, v) = send(c.get(format!(
        "{}/v1/topics/t/dead?offset=18446744073709551615",
        s.base
    )))
    .await;
    assert_eq!((st, &v["error"]["code"]), (422, &json!("invalid")), "{v}");
    // RFC 3339 with an offset: the same instant as in UTC.
    let (st, v) = send(c.post(format!("{}/v1/jobs", s.base)).body(
        json!({"topic": "t", "id": "tz", "due_at": "2031-01-01T01:00:00+01:00"}).to_string(),
    ))
    .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["due_at_ms"], json!(1_924_992_000_000i64));
    let (st, v) = send(
        c.post(format!("{}/v1/jobs", s.base))
            .body(json!({"topic": "t", "due_at": "2031-01-01T00:00:00.250-02:30"}).to_string()),
    )
    .await;
    assert_eq!(
        (st, &v["due_at_ms"]),
        (201, &json!(1_924_992_000_000i64 + 9_000_000 + 250)),
        "{v}"
    );
    s.stop().await;
    q.close().await;
}
