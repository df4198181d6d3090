//! The ouqiang/delay-queue HTTP contract (docs/DESIGN.md, "The compatible API"), endpoint
//! by endpoint, message by message, against a real redis-server.

use std::time::{Duration, Instant};

use crate::common::*;
use delayq::http::ServerConfig;
use serde_json::json;

async fn server(redis: &RedisServer) -> TestServer {
    let cfg = ServerConfig {
        pop_timeout: Duration::from_millis(300),
        max_request_bytes: 64 * 1024,
        ..ServerConfig::default()
    };
    TestServer::start(queue(redis), cfg).await
}

const PUSHED: &str = r#"{"code":0,"message":"添加成功","data":null}"#;
const OK_NULL: &str = r#"{"code":0,"message":"操作成功","data":null}"#;

fn error(message: &str) -> String {
    format!(r#"{{"code":1,"message":"{message}","data":null}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_replies_and_validation_messages_are_the_originals() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let b = &s.base;
    let cases: &[(&str, String)] = &[
        (
            r#"{"topic":"order","id":"1","delay":3600,"ttr":120,"body":"x"}"#,
            PUSHED.into(),
        ),
        // body is optional
        (
            r#"{"topic":"order","id":"2","delay":1,"ttr":1}"#,
            PUSHED.into(),
        ),
        // bounds that are accepted
        (
            r#"{"topic":"t","id":"3","delay":2147483647,"ttr":86400}"#,
            PUSHED.into(),
        ),
        // validation order: id, topic, delay, ttr
        (
            r#"{"topic":"","id":"","delay":0,"ttr":0}"#,
            error("job id不能为空"),
        ),
        (
            r#"{"id":"   ","topic":"t","delay":1,"ttr":1}"#,
            error("job id不能为空"),
        ),
        (
            r#"{"id":"a","topic":" ","delay":0,"ttr":0}"#,
            error("topic 不能为空"),
        ),
        (
            r#"{"id":"a","topic":"t","delay":0,"ttr":0}"#,
            error("delay 取值范围1 - (2^31 - 1)"),
        ),
        (
            r#"{"id":"a","topic":"t","delay":-1,"ttr":1}"#,
            error("delay 取值范围1 - (2^31 - 1)"),
        ),
        (
            r#"{"id":"a","topic":"t","delay":2147483648,"ttr":1}"#,
            error("delay 取值范围1 - (2^31 - 1)"),
        ),
        (
            r#"{"id":"a","topic":"t","delay":1,"ttr":0}"#,
            error("ttr 取值范围1 - 86400"),
        ),
        (
            r#"{"id":"a","topic":"t","delay":1,"ttr":86401}"#,
            error("ttr 取值范围1 - 86400"),
        ),
        (
            r#"{"id":"a","topic":"t","delay":1}"#,
            error("ttr 取值范围1 - 86400"),
        ),
        // what Go's json refuses
        (
            r#"{"id":"a","topic":"t","delay":"5","ttr":1}"#,
            error("解析json失败"),
        ),
        (
            r#"{"id":"a","topic":"t","delay":5.5,"ttr":1}"#,
            error("解析json失败"),
        ),
        (
            r#"{"id":"a","topic":"t","delay":5,"ttr":1,"body":{"k":1}}"#,
            error("解析json失败"),
        ),
        (
            r#"{"id":"a","topic":"t","delay":5,"ttr":1} trailing"#,
            error("解析json失败"),
        ),
        (r#"["a"]"#, error("解析json失败")),
        ("", error("解析json失败")),
        ("not json", error("解析json失败")),
    ];
    for (body, want) in cases {
        assert_eq!(&post_raw(b, "/push", body).await, want, "push {body}");
    }
    // Nothing that was refused was written: only jobs 1, 2 and 3 exist.
    let keys: Vec<String> = redis.cmd(&["KEYS", "{dq}:j:*"]).await;
    let mut keys = keys;
    keys.sort();
    assert_eq!(keys, ["{dq}:j:1", "{dq}:j:2", "{dq}:j:3"]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_match_case_insensitively_are_trimmed_and_unknown_ones_ignored() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let b = &s.base;
    let reply = post_raw(
        b,
        "/push",
        r#"{"TOPIC":"  order ","Id":" 42 ","DELAY":1,"TtR":5,"Body":"  hello  ","extra":[1,{"x":null}]}"#,
    )
    .await;
    assert_eq!(reply, PUSHED);
    let got = post(b, "/get", r#"{"ID":"42"}"#).await;
    assert_eq!(got["data"]["id"], "42");
    assert_eq!(got["data"]["topic"], "order");
    assert_eq!(got["data"]["body"], "hello");
    assert_eq!(got["data"]["ttr"], 5);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_reports_the_absolute_due_second_and_null_for_missing_jobs() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let b = &s.base;
    let before = redis.time_ms().await / 1000;
    assert_eq!(
        post_raw(
            b,
            "/push",
            r#"{"topic":"order","id":"o1","delay":3600,"ttr":60,"body":"订单<1>&"}"#
        )
        .await,
        PUSHED
    );
    let after = redis.time_ms().await / 1000;
    let raw = post_raw(b, "/get", r#"{"id":"o1"}"#).await;
    // Key order, Go's escaping of < > &, Chinese written raw.
    assert!(
        raw.starts_with(
            r#"{"code":0,"message":"操作成功","data":{"topic":"order","id":"o1","delay":"#
        ),
        "{raw}"
    );
    assert!(
        raw.ends_with(r#","ttr":60,"body":"订单\u003c1\u003e\u0026"}}"#),
        "{raw}"
    );
    let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let delay = v["data"]["delay"].as_i64().unwrap();
    assert!(
        (before + 3600..=after + 3601).contains(&delay),
        "delay {delay} should be the due time in Unix seconds ({before}+3600..{after}+3600)"
    );
    assert_eq!(post_raw(b, "/get", r#"{"id":"nope"}"#).await, OK_NULL);
    assert_eq!(
        post_raw(b, "/get", r#"{"id":""}"#).await,
        error("job id不能为空")
    );
    assert_eq!(
        post_raw(b, "/get", r#"{"id":5}"#).await,
        error("解析json失败")
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_and_delete_remove_jobs_and_succeed_for_unknown_ids() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let b = &s.base;
    for path in ["/finish", "/delete"] {
        assert_eq!(post_raw(b, path, r#"{"id":"never-pushed"}"#).await, OK_NULL);
        assert_eq!(
            post_raw(b, path, r#"{"id":" "}"#).await,
            error("job id不能为空")
        );
        assert_eq!(post_raw(b, path, "{").await, error("解析json失败"));
    }
    // A deleted delayed job never fires.
    post(b, "/push", r#"{"topic":"d","id":"gone","delay":1,"ttr":5}"#).await;
    assert_eq!(post_raw(b, "/delete", r#"{"id":"gone"}"#).await, OK_NULL);
    assert_eq!(post_raw(b, "/get", r#"{"id":"gone"}"#).await, OK_NULL);
    // A finished job is gone from every structure.
    post(b, "/push", r#"{"topic":"f","id":"done","delay":1,"ttr":5}"#).await;
    let popped = pop_until_job(b, r#"{"topic":"f"}"#).await;
    assert_eq!(popped["data"]["id"], "done");
    assert_eq!(post_raw(b, "/finish", r#"{"id":"done"}"#).await, OK_NULL);
    let left: Vec<String> = redis.cmd(&["KEYS", "*done*"]).await;
    assert!(left.is_empty(), "left behind: {left:?}");
    let scheduled: i64 = redis.cmd(&["ZCARD", "{dq}:schedule"]).await;
    assert_eq!(scheduled, 0);
    s.stop().await;
}

/// Pops until a job comes (each pop holds 300 ms here).
async fn pop_until_job(base: &str, body: &str) -> serde_json::Value {
    for _ in 0..20 {
        let v = post(base, "/pop", body).await;
        assert_eq!(v["code"], 0, "{v}");
        if !v["data"].is_null() {
            return v;
        }
    }
    panic!("no job popped for {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_tries_topics_in_the_order_given_and_trims_each_name() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let b = &s.base;
    assert_eq!(
        post_raw(b, "/pop", r#"{"topic":""}"#).await,
        error("topic不能为空")
    );
    assert_eq!(
        post_raw(b, "/pop", r#"{"topic":" , "}"#).await,
        error("topic不能为空")
    );
    assert_eq!(post_raw(b, "/pop", r#"{}"#).await, error("topic不能为空"));
    assert_eq!(
        post_raw(b, "/pop", r#"{"topic":7}"#).await,
        error("解析json失败")
    );
    for (id, topic) in [("b1", "b"), ("a1", "a"), ("b2", "b")] {
        let body = json!({"topic": topic, "id": id, "delay": 1, "ttr": 60}).to_string();
        assert_eq!(post_raw(b, "/push", &body).await, PUSHED);
    }
    // Wait until all three are ready.
    let q = s.queue.clone();
    eventually(Duration::from_secs(20), "three ready jobs", || {
        let q = q.clone();
        async move {
            let n = ["a1", "b1", "b2"].len();
            let mut ready = 0;
            for id in ["a1", "b1", "b2"] {
                if q.get(id).await.unwrap().unwrap().state == delayq::JobState::Ready {
                    ready += 1;
                }
            }
            (ready == n).then_some(())
        }
    })
    .await;
    let order: Vec<String> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            let r = post(b, "/pop", r#"{"topic":"a, b"}"#).await;
            v.push(r["data"]["id"].as_str().unwrap().to_owned());
        }
        v
    };
    // "a" first, then "b" in push order. " b" was trimmed to "b".
    assert_eq!(order, ["a1", "b1", "b2"]);
    let popped = post_raw(b, "/pop", r#"{"topic":"a,b"}"#).await;
    assert_eq!(popped, OK_NULL);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_holds_for_the_configured_time_then_answers_null() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let start = Instant::now();
    assert_eq!(
        post_raw(&s.base, "/pop", r#"{"topic":"empty"}"#).await,
        OK_NULL
    );
    let held = start.elapsed();
    assert!(
        held >= Duration::from_millis(300),
        "answered after {held:?}, before the hold"
    );
    assert!(held < Duration::from_secs(3), "held {held:?}");
    // The original holds about 178 s; so does delayq unless configured.
    assert_eq!(
        ServerConfig::default().pop_timeout,
        Duration::from_secs(178)
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop_returns_id_and_body_and_get_works_with_a_get_request() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let b = &s.base;
    post(
        b,
        "/push",
        r#"{"topic":"order","id":"15702398321","delay":1,"ttr":60,"body":"<x>"}"#,
    )
    .await;
    let raw = loop {
        let raw = post_raw(b, "/pop", r#"{"topic":"order"}"#).await;
        if raw != OK_NULL {
            break raw;
        }
    };
    assert_eq!(
        raw,
        r#"{"code":0,"message":"操作成功","data":{"id":"15702398321","body":"\u003cx\u003e"}}"#
    );
    // The original also answers GET with a body.
    let resp = reqwest::Client::new()
        .get(format!("{b}/get"))
        .body(r#"{"id":"15702398321"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["data"]["id"], "15702398321");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_and_delayq_limits_get_clear_errors_and_change_nothing() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let b = &s.base;
    let huge =
        json!({"topic":"t","id":"big","delay":1,"ttr":1,"body":"x".repeat(100_000)}).to_string();
    let v = post(b, "/push", &huge).await;
    assert_eq!(v["code"], 1);
    assert!(
        v["message"].as_str().unwrap().contains("65536 bytes"),
        "{v}"
    );
    let long_id = json!({"topic":"t","id":"i".repeat(300),"delay":1,"ttr":1}).to_string();
    let v = post(b, "/push", &long_id).await;
    assert_eq!(v["code"], 1);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("job id is 300 bytes"),
        "{v}"
    );
    let bad_topic = json!({"topic":"a\u{1}b","id":"x","delay":1,"ttr":1}).to_string();
    let v = post(b, "/push", &bad_topic).await;
    assert_eq!(v["code"], 1);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("control characters"),
        "{v}"
    );
    let n: i64 = redis.data_keys().await;
    assert_eq!(n, 0, "a refused push wrote something");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_that_look_like_delayq_keys_are_just_ids() {
    let redis = RedisServer::start();
    let s = server(&redis).await;
    let b = &s.base;
    // In the original, id "dq_bucket_1" overwrote a bucket. Here ids live
    // under their own key kind.
    for id in ["{dq}:schedule", "dq_bucket_1", "{dq}:ready:t", "{dq}:seq"] {
        let body = json!({"topic":"t","id":id,"delay":1,"ttr":60}).to_string();
        assert_eq!(post_raw(b, "/push", &body).await, PUSHED);
    }
    let mut got = Vec::new();
    while got.len() < 4 {
        let v = post(b, "/pop", r#"{"topic":"t"}"#).await;
        if let Some(id) = v["data"]["id"].as_str() {
            got.push(id.to_owned());
        }
    }
    got.sort();
    assert_eq!(
        got,
        ["dq_bucket_1", "{dq}:ready:t", "{dq}:schedule", "{dq}:seq"]
    );
    s.stop().await;
}

/// Sends raw bytes on a fresh connection and reads until the server closes
/// it or `limit` passes.
async fn raw_exchange(base: &str, request: &[u8], limit: Duration) -> (String, Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.strip_prefix("http://").unwrap();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let start = Instant::now();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(limit, stream.read_to_end(&mut buf)).await;
    (String::from_utf8_lossy(&buf).into_owned(), start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_an_unreadable_body_gets_the_original_message() {
    let redis = RedisServer::start();
    let cfg = ServerConfig {
        header_timeout: Duration::from_millis(500),
        body_timeout: Duration::from_millis(500),
        ..ServerConfig::default()
    };
    let s = TestServer::start(queue(&redis), cfg).await;
    // Headers never finished: the connection is closed after the timeout.
    let (_, took) = raw_exchange(
        &s.base,
        b"POST /push HTTP/1.1\r\nHost: x\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(
        took < Duration::from_secs(5),
        "a connection with unfinished headers was held {took:?}"
    );
    // A body that never arrives in full: the original's "cannot read body".
    let (reply, _) = raw_exchange(
        &s.base,
        b"POST /push HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"id\":",
        Duration::from_secs(10),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.contains(r#"{"code":1,"message":"读取request body失败","data":null}"#),
        "{reply}"
    );
    let n: i64 = redis.data_keys().await;
    assert_eq!(n, 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_held_by_a_rate_limit_answers_when_the_next_token_comes() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(
        q.clone(),
        ServerConfig {
            pop_timeout: Duration::from_secs(30),
            ..ServerConfig::default()
        },
    )
    .await;
    q.set_rate(
        "sms",
        delayq::RateLimit {
            per_second: 5.0,
            burst: 1,
        },
    )
    .await
    .unwrap();
    for i in 0..5 {
        q.push(&job(&format!("sms-{i}"), "sms", 0, 60_000))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(5), "5 ready", || async {
        (q.topics().await.unwrap().topics["sms"].ready == 5).then_some(())
    })
    .await;
    // One at once, then one every 200 ms; before, each pop after the
    // first waited out its 30 s.
    let start = Instant::now();
    for _ in 0..5 {
        let v = post(&s.base, "/pop", r#"{"topic":"sms"}"#).await;
        assert!(v["data"]["id"].is_string(), "{v}");
    }
    let took = start.elapsed();
    assert!(took < Duration::from_secs(10), "5 pops took {took:?}");
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_whose_reply_comes_too_late_says_its_outcome_is_unknown() {
    let redis = RedisServer::start();
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let q = delayq::Queue::connect(delayq::Config {
        redis: delayq::Redis::Url(proxy.url()),
        redis_timeout: Duration::from_secs(5),
        ..delayq::Config::default()
    })
    .unwrap();
    let s = TestServer::start(q, ServerConfig::default()).await;
    // One push that works: the connection is up and the policy read.
    let v = post(
        &s.base,
        "/push",
        r#"{"topic":"t","id":"a","delay":3600,"ttr":60}"#,
    )
    .await;
    assert_eq!(v["code"], 0, "{v}");

    // Redis takes the push at once; its reply is held until delayq has
    // given up on it (after 5 s: time enough for a busy machine to send the
    // push before its deadline). The contract's shape (code 1, a message)
    // stays.
    proxy.hold(true);
    let v = post(
        &s.base,
        "/push",
        r#"{"topic":"t","id":"b","delay":3600,"ttr":60}"#,
    )
    .await;
    proxy.hold(false);
    assert_eq!(v["code"], 1, "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.starts_with("push failed: outcome unknown")
            && message.contains("may or may not have been applied"),
        "{message}"
    );
    let direct = queue(&redis);
    assert!(
        direct.get("b").await.unwrap().is_some(),
        "the push did apply"
    );
    direct.close().await;
    s.stop().await;
}
