//! A job's result (issue 53): carried by its finish, bounded, kept on its
//! finished record (listed with `keep_finished`, otherwise unlisted for
//! the result retention), shown by a read, gone with the record; the same
//! over `/v1`.

use std::time::Duration;

use delayq::defaults::{MAX_OUTCOME_WAITS, MAX_RESULT_BYTES};
use delayq::http::ServerConfig;
use delayq::{Config, Delivery, Error, JobState, Queue};
use serde_json::{json, Value};

use crate::common::*;

mod work;

async fn pop_one(q: &Queue, topic: &str) -> Delivery {
    q.pop(&topics(&[topic]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a job to run")
}

async fn leased(q: &Queue, id: &str, topic: &str) -> Delivery {
    q.push(&job(id, topic, 0, 60_000)).await.unwrap();
    let d = pop_one(q, topic).await;
    assert_eq!(d.id, id);
    d
}

async fn finished_count(q: &Queue, topic: &str) -> u64 {
    (q.topics().await.unwrap().topics.get(topic)).map_or(0, |c| c.finished)
}

async fn keys(redis: &RedisServer) -> Vec<String> {
    let mut k: Vec<String> = redis.cmd(&["KEYS", "*"]).await;
    k.sort();
    k
}

/// A JSON string whose text is exactly `bytes` long.
fn string_of(bytes: usize) -> Value {
    Value::String("x".repeat(bytes - 2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_of_any_json_is_read_back_after_the_job_is_gone() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let values = [
        json!({"refunded": true, "id": "r-991"}),
        Value::Null,
        json!("a bare string"),
        json!({"a": [1, 2, {"b": [null, true, 1.5e300]}], "ü": "ünïcode ✓ 日本"}),
        json!(0),
        json!([]),
    ];
    for (i, v) in values.iter().enumerate() {
        let id = format!("close-{i}");
        let d = leased(&q, &id, "close").await;
        q.finish_with_result(&id, &d.token, v).await.unwrap();
        let j = q.get(&id).await.unwrap().expect("the result's record");
        assert_eq!(j.state, JobState::Finished, "{id}");
        assert_eq!(j.result.as_ref(), Some(v), "{id}");
        assert_eq!(j.attempts, 1);
        assert!(j.body.is_empty(), "a record keeps no body");
    }
    // A topic that keeps no records lists and counts none: the results'
    // records are read by id only.
    assert_eq!(finished_count(&q, "close").await, 0);
    let (page, _) = q
        .list_jobs("close", JobState::Finished, None, 50)
        .await
        .unwrap();
    assert!(page.is_empty(), "{page:?}");
    // A plain finish leaves nothing, as before.
    let d = leased(&q, "plain", "close").await;
    q.finish("plain", &d.token).await.unwrap();
    assert!(q.get("plain").await.unwrap().is_none());
    assert!(!keys(&redis).await.iter().any(|k| k.ends_with(":plain")));
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_stays_with_the_finished_record_when_records_are_kept() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        keep_finished: Some(Duration::from_secs(3600)),
        ..config(&redis)
    })
    .unwrap();
    let d = leased(&q, "order-1", "close").await;
    q.finish_with_result("order-1", &d.token, &json!({"refunded": "r-991"}))
        .await
        .unwrap();
    let d = leased(&q, "order-2", "close").await;
    q.finish("order-2", &d.token).await.unwrap();
    assert_eq!(finished_count(&q, "close").await, 2);
    let j = q.get("order-1").await.unwrap().unwrap();
    assert_eq!(j.result, Some(json!({"refunded": "r-991"})));
    assert_eq!(q.get("order-2").await.unwrap().unwrap().result, None);
    // Its record ends with the window: the result with it (same deadline).
    let ttl: i64 = redis.cmd(&["PTTL", "{dq}:j:order-1"]).await;
    assert!(ttl > 3_500_000 && ttl <= 3_600_000, "{ttl}");
    // Listings leave results out (up to 64 KiB each); the read has it.
    let (page, _) = q
        .list_jobs("close", JobState::Finished, None, 50)
        .await
        .unwrap();
    assert_eq!(page.len(), 2);
    assert!(page.iter().all(|j| j.result.is_none()), "{page:?}");
    assert!(q.delete("order-1").await.unwrap());
    assert!(q.get("order-1").await.unwrap().is_none());
    assert_eq!(finished_count(&q, "close").await, 1);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_at_the_limit_is_kept_and_one_byte_more_changes_nothing() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let d = leased(&q, "big", "t").await;
    let over = string_of(MAX_RESULT_BYTES + 1);
    let e = q
        .finish_with_result("big", &d.token, &over)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    assert!(e.to_string().contains(&MAX_RESULT_BYTES.to_string()), "{e}");
    // Nothing changed: still leased under the same token.
    let j = q.get("big").await.unwrap().unwrap();
    assert_eq!((j.state, j.result), (JobState::Reserved, None));
    q.touch("big", &d.token, None).await.unwrap();
    let at = string_of(MAX_RESULT_BYTES);
    q.finish_with_result("big", &d.token, &at).await.unwrap();
    let j = q.get("big").await.unwrap().unwrap();
    assert_eq!(j.result, Some(at));
    // Too deep for a read to parse back: refused the same way.
    let d = leased(&q, "deep", "t").await;
    let mut deep = json!(1);
    for _ in 0..65 {
        deep = json!([deep]);
    }
    let e = q
        .finish_with_result("deep", &d.token, &deep)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("levels"), "{e}");
    assert_eq!(
        q.get("deep").await.unwrap().unwrap().state,
        JobState::Reserved
    );
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_under_a_stale_or_cancelled_lease_writes_no_result() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let first = leased(&q, "a", "t").await;
    q.nack("a", &first.token, Some(Duration::ZERO), "again")
        .await
        .unwrap();
    let second = pop_one(&q, "t").await;
    let e = q
        .finish_with_result("a", &first.token, &json!("late"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::StaleLease(_)), "{e}");
    let j = q.get("a").await.unwrap().unwrap();
    assert_eq!((j.state, j.result), (JobState::Reserved, None));
    q.finish_with_result("a", &second.token, &json!("mine"))
        .await
        .unwrap();
    assert_eq!(
        q.get("a").await.unwrap().unwrap().result,
        Some(json!("mine"))
    );
    // Cancelled while it ran: its holder's finish carries nothing back.
    let d = leased(&q, "b", "t").await;
    q.cancel("b").await.unwrap();
    let e = q
        .finish_with_result("b", &d.token, &json!("done anyway"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Cancelled(_)), "{e}");
    assert!(q.get("b").await.unwrap().is_none_or(|j| j.result.is_none()));
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_records_a_result_is_kept_for_the_retention_then_gone_with_its_keys() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        result_retention: Duration::from_secs(3),
        ..config(&redis)
    })
    .unwrap();
    let empty = keys(&redis).await;
    let d = leased(&q, "r", "t").await;
    q.log("r", &d.token, "refund sent").await.unwrap();
    q.finish_with_result("r", &d.token, &json!({"id": "r-991"}))
        .await
        .unwrap();
    let ttl: i64 = redis.cmd(&["PTTL", "{dq}:j:r"]).await;
    assert!(ttl > 0 && ttl <= 3_000, "{ttl}");
    assert_eq!(
        q.get("r").await.unwrap().unwrap().result,
        Some(json!({"id": "r-991"}))
    );
    assert_eq!(q.logs("r").await.unwrap().len(), 1);
    eventually(Duration::from_secs(30), "the result to expire", || async {
        q.get("r").await.unwrap().is_none().then_some(())
    })
    .await;
    let left = keys(&redis).await;
    let added: Vec<_> = left.iter().filter(|k| !empty.contains(k)).collect();
    assert!(
        !added.iter().any(|k| k.ends_with(":r")),
        "the job's keys stay: {added:?}"
    );
    // The retention is checked as keep_finished is.
    let bad = Queue::connect(Config {
        result_retention: Duration::ZERO,
        ..config(&redis)
    });
    let e = bad.err().expect("a zero retention refused");
    assert!(e.to_string().contains("result_retention"), "{e}");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_goes_with_its_job_by_delete_by_a_new_push_and_by_the_record_trim() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let d = leased(&q, "x", "t").await;
    q.log("x", &d.token, "a line").await.unwrap();
    q.finish_with_result("x", &d.token, &json!(1))
        .await
        .unwrap();
    assert!(q.delete("x").await.unwrap());
    assert!(q.get("x").await.unwrap().is_none());
    let left = keys(&redis).await;
    assert!(!left.iter().any(|k| k.ends_with(":x")), "{left:?}");
    assert_eq!(finished_count(&q, "t").await, 0);
    // A new push of the id is a new job, without the old result.
    let d = leased(&q, "y", "t").await;
    q.finish_with_result("y", &d.token, &json!(2))
        .await
        .unwrap();
    q.push(&job("y", "t", 60_000, 60_000)).await.unwrap();
    let j = q.get("y").await.unwrap().unwrap();
    assert_eq!((j.state, j.result), (JobState::Delayed, None));
    assert_eq!(q.cancel("y").await.unwrap(), Some(JobState::Delayed));
    let left = keys(&redis).await;
    assert!(!left.iter().any(|k| k.ends_with(":y")), "{left:?}");
    q.close().await;

    // With records kept, the trim of an ended window takes the result too.
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        keep_finished: Some(Duration::from_millis(500)),
        ..config(&redis)
    })
    .unwrap();
    let d = leased(&q, "z", "t").await;
    q.finish_with_result("z", &d.token, &json!("kept"))
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the record to go", || async {
        let left = keys(&redis).await;
        (finished_count(&q, "t").await == 0 && !left.iter().any(|k| k.ends_with(":z")))
            .then_some(())
    })
    .await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_v1_the_finish_takes_a_result_and_the_read_shows_it() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let finish = |id: &str, body: Value| {
        request_json(
            reqwest::Method::POST,
            format!("{}/v1/jobs/{id}/finish", s.base),
            Some(body),
        )
    };
    let d = leased(&q, "h1", "t").await;
    let (st, v) = finish(
        "h1",
        json!({"token": d.token, "result": {"refunded": true, "id": "r-991"}}),
    )
    .await;
    assert_eq!(st, 204, "{v}");
    let (st, v) = get_json(&s.base, "/v1/jobs/h1").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "finished");
    assert_eq!(v["result"], json!({"refunded": true, "id": "r-991"}));
    let (ok, out, err) = delayq_cli(&s.base, &["get", "h1"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(r#"result: {"id":"r-991","refunded":true}"#),
        "{out}"
    );

    // An explicit null is a result; no field is none.
    let d = leased(&q, "h2", "t").await;
    let (st, _) = finish("h2", json!({"token": d.token, "result": null})).await;
    assert_eq!(st, 204);
    let (_, v) = get_json(&s.base, "/v1/jobs/h2").await;
    assert!(v.as_object().unwrap().contains_key("result"), "{v}");
    assert_eq!(v["result"], Value::Null);
    let d = leased(&q, "h3", "t").await;
    let (st, _) = finish("h3", json!({"token": d.token})).await;
    assert_eq!(st, 204);
    let (st, _) = get_json(&s.base, "/v1/jobs/h3").await;
    assert_eq!(st, 404);

    // One byte over: refused naming the limit, the lease still held.
    let d = leased(&q, "h4", "t").await;
    let (st, v) = finish(
        "h4",
        json!({"token": d.token, "result": string_of(MAX_RESULT_BYTES + 1)}),
    )
    .await;
    assert_eq!(st, 422, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains(&MAX_RESULT_BYTES.to_string()), "{msg}");
    let (_, v) = get_json(&s.base, "/v1/jobs/h4").await;
    assert_eq!(v["state"], "reserved");
    assert!(v.get("result").is_none(), "{v}");
    let (st, v) = finish(
        "h4",
        json!({"token": d.token, "result": string_of(MAX_RESULT_BYTES)}),
    )
    .await;
    assert_eq!(st, 204, "{v}");
    let (_, v) = get_json(&s.base, "/v1/jobs/h4").await;
    assert_eq!(v["result"].as_str().unwrap().len(), MAX_RESULT_BYTES - 2);
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_with_wait_ms_answers_at_the_outcome_or_when_the_wait_runs_out() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let d = leased(&q, "w1", "t").await;
    let base = s.base.clone();
    let started = std::time::Instant::now();
    let waiting = tokio::spawn(async move { get_json(&base, "/v1/jobs/w1?wait_ms=60000").await });
    // The finish comes while the read waits (the reply is the same if the
    // read came later: it answers at once).
    tokio::time::sleep(Duration::from_millis(300)).await;
    q.finish_with_result("w1", &d.token, &json!({"refunded": "r-991"}))
        .await
        .unwrap();
    let (st, v) = waiting.await.unwrap();
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "finished");
    assert_eq!(v["result"], json!({"refunded": "r-991"}));
    // Answered at the finish, long before the wait would have run out.
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );

    // Still running when the wait runs out: the job as it stands.
    let _d = leased(&q, "w2", "t").await;
    let started = std::time::Instant::now();
    let (st, v) = get_json(&s.base, "/v1/jobs/w2?wait_ms=700").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["state"], "reserved");
    assert!(started.elapsed() >= Duration::from_millis(700));

    // Dead after its one attempt; a deleted job is gone (404).
    q.push(&delayq::NewJob {
        retry: one_attempt(),
        ..job("w3", "t", 0, 60_000)
    })
    .await
    .unwrap();
    let d = pop_one(&q, "t").await;
    let base = s.base.clone();
    let waiting = tokio::spawn(async move { get_json(&base, "/v1/jobs/w3?wait_ms=60000").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    q.nack("w3", &d.token, None, "card declined").await.unwrap();
    let (st, v) = waiting.await.unwrap();
    assert_eq!((st, v["state"].as_str()), (200, Some("dead")), "{v}");
    q.push(&job("w4", "t", 60_000, 60_000)).await.unwrap();
    let base = s.base.clone();
    let waiting = tokio::spawn(async move { get_json(&base, "/v1/jobs/w4?wait_ms=60000").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(q.delete("w4").await.unwrap());
    assert_eq!(waiting.await.unwrap().0, 404);

    // A wait that is no number, negative or over the bound: refused.
    for bad in ["abc", "-1", "60001", "1.5"] {
        let (st, v) = get_json(&s.base, &format!("/v1/jobs/w2?wait_ms={bad}")).await;
        assert_eq!(st, 400, "{bad}: {v}");
    }
    let e = q
        .wait_outcome("w2", Duration::from_millis(60_001))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("60000"), "{e}");
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_on_one_job_share_one_poll() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let _d = leased(&q, "busy", "t").await;
    let hgetalls = || async {
        let info: String = redis.cmd(&["INFO", "commandstats"]).await;
        (info.lines())
            .find_map(|l| l.strip_prefix("cmdstat_hgetall:calls="))
            .and_then(|l| l.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let before = hgetalls().await;
    let waits: Vec<_> = (0..40)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.wait_outcome("busy", Duration::from_secs(2)).await })
        })
        .collect();
    for w in waits {
        let j = w.await.unwrap().unwrap().unwrap();
        assert_eq!(j.state, JobState::Reserved);
    }
    // Each waiter reads once at its start and once at its end; the poll
    // reads the job once per 100 ms for all 40 (about 20 times in 2 s, more
    // if a busy machine starts the waiters apart). A poll per waiter would
    // be 40 times that: 800 and more.
    let reads = hgetalls().await - before;
    eprintln!("{reads} job reads for 40 waiters over 2 s");
    assert!(reads <= 80 + 200, "{reads} reads");
    q.close().await;
}

/// One instance waits on at most MAX_OUTCOME_WAITS jobs at once: one more
/// is refused (a typed error; 503 `busy` over `/v1`), a second waiter on a
/// job already waited on is not, and once the waits end there is room
/// again. The poll reads two fields of each job waited on, and the whole
/// job only once it has an outcome (no HGETALL per poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_waits_on_a_bounded_number_of_jobs_and_reads_two_fields_of_each() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let n = MAX_OUTCOME_WAITS;
    let jobs: Vec<_> = (0..=n)
        .map(|i| job(&format!("o{i:04}"), "t", 3_600_000, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    let hgetalls = || async {
        let info: String = redis.cmd(&["INFO", "commandstats"]).await;
        (info.lines())
            .find_map(|l| l.strip_prefix("cmdstat_hgetall:calls="))
            .and_then(|l| l.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let waits: Vec<_> = (0..n)
        .map(|i| {
            let q = q.clone();
            tokio::spawn(async move {
                q.wait_outcome(&format!("o{i:04}"), Duration::from_secs(60))
                    .await
            })
        })
        .collect();
    // Every waiter in (each joins after its own first read): the next
    // job is refused.
    until_value(
        n as u64,
        Duration::from_secs(60),
        "the waits in",
        || async { Some(q.outcome_waits() as u64) },
    )
    .await;
    let refused = match q.wait_outcome("o1000", Duration::from_secs(5)).await {
        Err(Error::Busy(m)) => m,
        other => panic!("a wait past the bound: {other:?}"),
    };
    assert!(refused.contains(&n.to_string()), "{refused}");
    let (st, v) = get_json(&s.base, "/v1/jobs/o1000?wait_ms=5000").await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (503, Some("busy")),
        "{v}"
    );
    // A second waiter on a job waited on joins it.
    let before = hgetalls().await;
    let again = q.wait_outcome("o0007", Duration::from_millis(500)).await;
    assert_eq!(again.unwrap().unwrap().state, JobState::Delayed);
    // Over about 5 polls only that waiter's own two reads were whole ones.
    assert!(
        hgetalls().await - before <= 2,
        "whole jobs read by the poll"
    );
    for w in &waits {
        w.abort();
    }
    // Once the waits end the poll lets them go: room again.
    eventually(Duration::from_secs(60), "room for a wait again", || async {
        match q.wait_outcome("o1000", Duration::from_millis(200)).await {
            Ok(j) => Some(j),
            Err(Error::Busy(_)) => None,
            Err(e) => panic!("{e}"),
        }
    })
    .await;
    s.stop().await;
    q.close().await;
}

/// A receiver that answers 200 with a reply chosen by the job's body.
async fn replying_receiver() -> String {
    use axum::routing::post;
    async fn reply(body: axum::body::Bytes) -> String {
        let sent: Value = serde_json::from_slice(&body).unwrap();
        match sent["body"].as_str().unwrap() {
            "json" => r#"{"refunded": true, "id": "r-991"}"#.to_owned(),
            "text" => "refunded, id r-991\n".to_owned(),
            "huge" => "x".repeat(MAX_RESULT_BYTES + 1),
            _ => String::new(),
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/hook", post(reply));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_set_to_take_results_keeps_the_receivers_reply_body() {
    use delayq::webhook::{self, Webhook};
    let redis = RedisServer::start();
    let q = queue(&redis);
    let url = replying_receiver().await;
    for (id, topic, body) in [
        ("k1", "close", "json"),
        ("k2", "close", "text"),
        ("k3", "close", "huge"),
        ("k4", "close", "empty"),
        ("k5", "plain", "json"),
    ] {
        q.push(&delayq::NewJob {
            body: body.into(),
            ..job(id, topic, 0, 60_000)
        })
        .await
        .unwrap();
    }
    let shutdown = delayq::Shutdown::new();
    let taking = Webhook {
        result: true,
        ..Webhook::new("close", &url)
    };
    let tasks = [
        tokio::spawn(webhook::run(q.clone(), taking, shutdown.clone())),
        tokio::spawn(webhook::run(
            q.clone(),
            Webhook::new("plain", &url),
            shutdown.clone(),
        )),
    ];
    eventually(Duration::from_secs(90), "every job delivered", || async {
        let t = q.topics().await.ok()?.topics;
        let busy = |topic: &str| {
            let c = t.get(topic).copied().unwrap_or_default();
            c.delayed + c.ready + c.reserved
        };
        (busy("close") + busy("plain") == 0).then_some(())
    })
    .await;
    let result = |id: &'static str| {
        let q = q.clone();
        async move { q.get(id).await.unwrap().and_then(|j| j.result) }
    };
    assert_eq!(
        result("k1").await,
        Some(json!({"refunded": true, "id": "r-991"}))
    );
    assert_eq!(result("k2").await, Some(json!("refunded, id r-991")));
    // Over 64 KiB, or no body: finished without one (nothing kept).
    assert_eq!(result("k3").await, None);
    assert!(q.get("k4").await.unwrap().is_none());
    // A hook not set to take results keeps nothing, as before.
    assert!(q.get("k5").await.unwrap().is_none());
    shutdown.trigger();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("the webhook stops")
            .unwrap();
    }
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finished_event_carries_the_result() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        events: true,
        ..config(&redis)
    })
    .unwrap();
    let d = leased(&q, "e1", "t").await;
    q.finish_with_result("e1", &d.token, &json!({"id": "r-991"}))
        .await
        .unwrap();
    let d = leased(&q, "e2", "t").await;
    q.finish("e2", &d.token).await.unwrap();
    let read = q.events_after("0", &[], 100).await.unwrap();
    let finished: Vec<_> = (read.events.iter())
        .filter(|(_, e)| e.event == "finished")
        .map(|(_, e)| (e.id.as_str(), e.result.clone(), e.error.clone()))
        .collect();
    assert_eq!(
        finished,
        [
            ("e1", Some(json!({"id": "r-991"})), None),
            ("e2", None, None)
        ]
    );
    q.close().await;
}
