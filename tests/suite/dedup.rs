//! Deduplication windows: a push's `dedup` key in mode simple (until the
//! job ends), throttle (the first push in a window wins) and debounce (each
//! push in the window replaces the pending job and moves it, capped by
//! max_wait), through the library and `/v1/jobs`, on one partition and
//! four.

use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;
use crate::redis_server::RedisServer;
use delayq::http::ServerConfig;
use delayq::{Config, Dedup, DedupMode, NewJob, PushOutcome, Queue};

fn dedup_job(
    id: &str,
    body: &str,
    key: &str,
    mode: DedupMode,
    window_ms: Option<u64>,
    max_wait_ms: Option<u64>,
    delay_ms: u64,
) -> NewJob {
    NewJob {
        id: id.into(),
        topic: "t".into(),
        body: body.into(),
        delay: Duration::from_millis(delay_ms),
        dedup: Some(Dedup {
            key: key.into(),
            mode,
            window: window_ms.map(Duration::from_millis),
            max_wait: max_wait_ms.map(Duration::from_millis),
        }),
        ..NewJob::default()
    }
}

async fn jobs_in_redis(redis: &RedisServer) -> usize {
    let keys: Vec<String> = redis.cmd(&["KEYS", "*:j:*"]).await;
    keys.len()
}

async fn dedup_records(redis: &RedisServer) -> Vec<String> {
    redis.cmd(&["KEYS", "*:dedup:*"]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttle_lets_the_first_push_of_a_window_win_and_a_push_after_it_creates() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // Long enough for the four pushes below to fall in it on a busy
    // machine.
    let window = 5000;
    let push = |body: &str| {
        dedup_job(
            "",
            body,
            "k",
            DedupMode::Throttle,
            Some(window),
            None,
            60_000,
        )
    };
    let started = redis.time_ms().await;
    let first = q.push(&push("b0")).await.unwrap();
    assert_eq!(first.outcome, PushOutcome::Created);
    assert!(!first.id.is_empty(), "an id is picked");
    for i in 1..5 {
        let p = q.push(&push(&format!("b{i}"))).await.unwrap();
        assert_eq!((p.outcome, &p.id), (PushOutcome::Deduplicated, &first.id));
        assert_eq!(p.due_ms, first.due_ms, "the winner's due time");
    }
    assert_eq!(jobs_in_redis(&redis).await, 1);
    assert_eq!(q.get(&first.id).await.unwrap().unwrap().body, "b0");
    // Pushes go on until one creates: never before the window's end.
    let second = eventually(
        Duration::from_secs(20),
        "a push after the window",
        || async {
            let p = q.push(&push("late")).await.unwrap();
            let now = redis.time_ms().await;
            match p.outcome {
                PushOutcome::Created => Some((p, now)),
                PushOutcome::Deduplicated => {
                    assert_eq!(p.id, first.id);
                    None
                }
                o => panic!("{o:?}"),
            }
        },
    )
    .await;
    assert!(
        second.1 >= started + window as i64,
        "created {} ms after the first push, window {window}",
        second.1 - started
    );
    assert_ne!(second.0.id, first.id);
    assert_eq!(jobs_in_redis(&redis).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debounce_replaces_the_body_and_moves_the_due_time_never_beyond_max_wait_nor_early() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let push = |body: &str, delay: u64| {
        dedup_job(
            "",
            body,
            "k",
            DedupMode::Debounce,
            Some(10_000),
            Some(3_000),
            delay,
        )
    };
    let before = redis.time_ms().await;
    let first = q.push(&push("b1", 1_000)).await.unwrap();
    assert_eq!(first.outcome, PushOutcome::Created);
    let second = q.push(&push("b2", 1_500)).await.unwrap();
    assert_eq!(
        (second.outcome, &second.id),
        (PushOutcome::Debounced, &first.id)
    );
    assert!(second.due_ms > first.due_ms, "the due time moves later");
    let job = q.get(&first.id).await.unwrap().unwrap();
    assert_eq!((job.body.as_str(), job.due_ms), ("b2", second.due_ms));
    // A delay past max_wait: due at the first push + max_wait, no later.
    let third = q.push(&push("b3", 60_000)).await.unwrap();
    assert_eq!(
        (third.outcome, &third.id),
        (PushOutcome::Debounced, &first.id)
    );
    let after = redis.time_ms().await;
    assert!(
        third.due_ms >= before + 3_000 && third.due_ms <= after + 3_000,
        "due {} ms after the first push; max_wait 3000",
        third.due_ms - before
    );
    assert_eq!(jobs_in_redis(&redis).await, 1);
    // Never early: it fires at its moved due time, with the last body.
    let d = q
        .pop(&topics(&["t"]), Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the debounced job fires");
    assert_eq!((d.id.as_str(), d.body.as_str()), (first.id.as_str(), "b3"));
    assert_eq!(d.due_ms, third.due_ms);
    assert!(
        d.popped_at_us >= third.due_ms * 1000,
        "not before its due time"
    );
    // Handed out: the next push starts a new job (and series).
    let fourth = q.push(&push("b4", 60_000)).await.unwrap();
    assert_eq!(fourth.outcome, PushOutcome::Created);
    assert_ne!(fourth.id, first.id);
    assert_eq!(q.get(&first.id).await.unwrap().unwrap().body, "b3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debounce_pushes_past_the_window_start_a_new_job() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let push = || dedup_job("", "b", "k", DedupMode::Debounce, Some(300), None, 60_000);
    let first = q.push(&push()).await.unwrap();
    // Each push slides the window: wait for it to pass without pushing.
    eventually(Duration::from_secs(20), "the window to pass", || async {
        dedup_records(&redis).await.is_empty().then_some(())
    })
    .await;
    let later = q.push(&push()).await.unwrap();
    assert_eq!(later.outcome, PushOutcome::Created);
    assert_ne!(later.id, first.id);
    assert!(
        q.get(&first.id).await.unwrap().is_some(),
        "the old job stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_dedups_until_the_job_finishes_is_deleted_or_dies() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let push = |key: &str| dedup_job("", "b", key, DedupMode::Simple, None, None, 0);
    let first = q.push(&push("k")).await.unwrap();
    assert_eq!(first.outcome, PushOutcome::Created);
    let again = q.push(&push("k")).await.unwrap();
    assert_eq!(
        (again.outcome, &again.id),
        (PushOutcome::Deduplicated, &first.id)
    );
    // Ready, then reserved: still the key's job.
    let d = q
        .pop(&topics(&["t"]), Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.id, first.id);
    let again = q.push(&push("k")).await.unwrap();
    assert_eq!(
        (again.outcome, &again.id),
        (PushOutcome::Deduplicated, &first.id)
    );
    q.finish(&d.id, &d.token).await.unwrap();
    assert!(
        dedup_records(&redis).await.is_empty(),
        "the record goes with the job"
    );
    let next = q.push(&push("k")).await.unwrap();
    assert_eq!(next.outcome, PushOutcome::Created);
    assert_ne!(next.id, first.id);

    // Deleted: ends it too.
    assert!(q.delete(&next.id).await.unwrap());
    assert!(dedup_records(&redis).await.is_empty());
    assert_eq!(
        q.push(&push("k")).await.unwrap().outcome,
        PushOutcome::Created
    );

    // Dead: ends it (a dead job runs no more unless requeued).
    let mut dying = push("d");
    dying.retry = Some(delayq::RetryPolicy {
        intervals: vec![],
        max_attempts: Some(1),
    });
    let dying_id = q.push(&dying).await.unwrap().id;
    let d = loop {
        let d = q
            .pop(&topics(&["t"]), Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        if d.id == dying_id {
            break d;
        }
        q.finish(&d.id, &d.token).await.unwrap();
    };
    let nacked = q.nack(&d.id, &d.token, None, "boom").await.unwrap();
    assert_eq!(nacked.state, delayq::JobState::Dead);
    let p = q.push(&push("d")).await.unwrap();
    assert_eq!(p.outcome, PushOutcome::Created);
    assert_ne!(p.id, dying_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_simple_record_does_not_dedup() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let first = q
        .push(&dedup_job(
            "",
            "b",
            "k",
            DedupMode::Simple,
            None,
            None,
            60_000,
        ))
        .await
        .unwrap();
    // The job vanished without its end path (as if deleted by hand).
    let (job, trigger) = (
        format!("{{dq}}:j:{}", first.id),
        format!("{{dq}}:t:{}", first.id),
    );
    let _: i64 = redis.cmd(&["DEL", &job, &trigger]).await;
    let _: i64 = redis.cmd(&["ZREM", "{dq}:schedule", &first.id]).await;
    let _: i64 = redis.cmd(&["ZREM", "{dq}:s:t", &first.id]).await;
    let p = q
        .push(&dedup_job(
            "",
            "b",
            "k",
            DedupMode::Simple,
            None,
            None,
            60_000,
        ))
        .await
        .unwrap();
    assert_eq!(p.outcome, PushOutcome::Created);
}

async fn server(redis: &RedisServer, partitions: usize) -> TestServer {
    let q = Queue::connect(Config {
        partitions,
        ..config(redis)
    })
    .unwrap();
    TestServer::start(q, ServerConfig::default()).await
}

async fn post_json(base: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_http_push_says_what_dedup_did_and_a_batch_reports_each_in_order() {
    let redis = RedisServer::start();
    let s = server(&redis, 1).await;
    let throttle = |body: &str| {
        json!({"topic":"t","body":body,"delay_ms":60_000,
            "dedup":{"key":"th","mode":"throttle","window_ms":600_000}})
    };
    let (st, first) = post_json(&s.base, "/v1/jobs", throttle("a")).await;
    assert_eq!(
        (st, first["outcome"].as_str()),
        (201, Some("created")),
        "{first}"
    );
    let (st, v) = post_json(&s.base, "/v1/jobs", throttle("b")).await;
    assert_eq!(
        (st, v["outcome"].as_str()),
        (200, Some("deduplicated")),
        "{v}"
    );
    assert_eq!(v["id"], first["id"]);
    let debounce = |body: &str| {
        json!({"topic":"t","body":body,"delay_ms":60_000,
            "dedup":{"key":"de","mode":"debounce","window_ms":600_000,"max_wait_ms":120_000}})
    };
    let (st, d1) = post_json(&s.base, "/v1/jobs", debounce("a")).await;
    assert_eq!(st, 201, "{d1}");
    let (st, v) = post_json(&s.base, "/v1/jobs", debounce("b")).await;
    assert_eq!((st, v["outcome"].as_str()), (200, Some("debounced")), "{v}");
    assert_eq!(v["id"], d1["id"]);

    // A batch: each job its own outcome, in order; later ones see earlier.
    let simple = |key: &str| json!({"topic":"t","dedup":{"key":key,"mode":"simple"}});
    let (st, v) = post_json(
        &s.base,
        "/v1/jobs/batch",
        json!({"jobs":[simple("s1"), simple("s1"), simple("s2"), throttle("c"),
            {"topic":"t","dedup":{"key":"s1","mode":"simple","window_ms":5}}, simple("s2")]}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let r = &v["results"];
    let outcomes: Vec<&str> = (0..6)
        .map(|i| r[i]["outcome"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        outcomes,
        [
            "created",
            "deduplicated",
            "created",
            "deduplicated",
            "-",
            "deduplicated"
        ],
        "{v}"
    );
    assert_eq!(r[1]["id"], r[0]["id"]);
    assert_eq!(r[5]["id"], r[2]["id"]);
    assert_eq!(r[3]["id"], first["id"]);
    assert_eq!(r[1]["status"], 200);
    assert_eq!(r[4]["status"], 422);
    assert!(
        r[4]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("dedup.window_ms"),
        "{v}"
    );
    assert_eq!(
        (v["accepted"].as_u64(), v["rejected"].as_u64()),
        (Some(5), Some(1))
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_dedup_input_is_refused_naming_the_field_and_writes_nothing() {
    let redis = RedisServer::start();
    let s = server(&redis, 1).await;
    let long = "k".repeat(257);
    // 422 invalid: a value out of its range; 400: not the shape of a push.
    let cases = [
        (json!({"key":"","mode":"simple"}), 422, "dedup.key"),
        (json!({"key":long,"mode":"simple"}), 422, "dedup.key"),
        (json!({"key":"a\nb","mode":"simple"}), 422, "dedup.key"),
        (json!({"key":"k","mode":"throttle"}), 422, "dedup.window_ms"),
        (
            json!({"key":"k","mode":"debounce","max_wait_ms":5}),
            422,
            "dedup.window_ms",
        ),
        (
            json!({"key":"k","mode":"simple","window_ms":5}),
            422,
            "dedup.window_ms",
        ),
        (
            json!({"key":"k","mode":"throttle","window_ms":0}),
            422,
            "dedup.window_ms",
        ),
        (
            json!({"key":"k","mode":"throttle","window_ms":2_592_000_001u64}),
            422,
            "dedup.window_ms",
        ),
        (
            json!({"key":"k","mode":"throttle","window_ms":5,"max_wait_ms":5}),
            422,
            "dedup.max_wait_ms",
        ),
        (
            json!({"key":"k","mode":"debounce","window_ms":5,"max_wait_ms":0}),
            422,
            "dedup.max_wait_ms",
        ),
        (json!({"key":"k","mode":"sometimes"}), 400, "sometimes"),
        (
            json!({"key":"k","mode":"simple","windo_ms":5}),
            400,
            "windo_ms",
        ),
    ];
    for (dedup, status, field) in cases {
        let (st, v) = post_json(
            &s.base,
            "/v1/jobs",
            json!({"topic":"t","dedup":dedup.clone()}),
        )
        .await;
        assert_eq!(st, status, "{dedup}: {v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(field), "{dedup}: {msg}");
    }
    assert_eq!(redis.data_keys().await, 0, "nothing written");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_four_partitions_each_key_keeps_its_record_with_its_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    let keys: Vec<String> = (0..12).map(|i| format!("key-{i}")).collect();
    let push = |k: &str| dedup_job("", "b", k, DedupMode::Simple, None, None, 60_000);
    let mut ids = Vec::new();
    let batch: Vec<NewJob> = keys.iter().flat_map(|k| [push(k), push(k)]).collect();
    for (i, r) in q.push_many(&batch).await.unwrap().into_iter().enumerate() {
        let p = r.unwrap();
        if i % 2 == 0 {
            assert_eq!(p.outcome, PushOutcome::Created);
            ids.push(p.id);
        } else {
            assert_eq!(
                (p.outcome, ids.last().unwrap()),
                (PushOutcome::Deduplicated, &p.id)
            );
        }
    }
    // Each record sits in its job's partition (its hash tag).
    let tag = |k: &str| k[..k.find('}').unwrap() + 1].to_owned();
    for (k, id) in keys.iter().zip(&ids) {
        let record: Vec<String> = redis.cmd(&["KEYS", &format!("*:dedup:{k}")]).await;
        let job: Vec<String> = redis.cmd(&["KEYS", &format!("*:j:{id}")]).await;
        assert_eq!((record.len(), job.len()), (1, 1));
        assert_eq!(tag(&record[0]), tag(&job[0]), "{k}");
    }
    let parts = |s: &str| delayq::testing::partition_of(s, 4);
    let spread: std::collections::BTreeSet<usize> = keys.iter().map(|k| parts(k)).collect();
    assert!(spread.len() > 1, "the keys spread over partitions");

    // An id of another partition than its key is refused, saying what to do.
    let stray = (0..)
        .map(|i| format!("stray-{i}"))
        .find(|id| parts(id) != parts("key-0"))
        .unwrap();
    let before = redis.data_keys().await;
    let err = q
        .push(&dedup_job(
            &stray,
            "b",
            "key-0",
            DedupMode::Simple,
            None,
            None,
            0,
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, delayq::Error::Invalid(_)), "{err}");
    assert!(err.to_string().contains("hash tag"), "{err}");
    assert_eq!(redis.data_keys().await, before, "nothing written");
    // The same hash tag in id and key: taken.
    let p = q
        .push(&dedup_job(
            "{m77}:r1",
            "b",
            "{m77}",
            DedupMode::Simple,
            None,
            None,
            0,
        ))
        .await
        .unwrap();
    assert_eq!(
        (p.outcome, p.id.as_str()),
        (PushOutcome::Created, "{m77}:r1")
    );
    let p = q
        .push(&dedup_job(
            "{m77}:r2",
            "b",
            "{m77}",
            DedupMode::Simple,
            None,
            None,
            0,
        ))
        .await
        .unwrap();
    assert_eq!(
        (p.outcome, p.id.as_str()),
        (PushOutcome::Deduplicated, "{m77}:r1")
    );
}

#[test]
fn the_openapi_document_describes_dedup_and_its_outcomes() {
    let doc: Value = serde_json::from_str(delayq::http::v1::openapi::json()).unwrap();
    let schemas = &doc["components"]["schemas"];
    assert!(
        schemas["JobSpec"]["properties"]["dedup"].is_object(),
        "{}",
        schemas["JobSpec"]
    );
    let spec = &schemas["DedupSpec"];
    for field in ["key", "mode", "window_ms", "max_wait_ms"] {
        assert!(spec["properties"][field].is_object(), "{field}: {spec}");
    }
    assert_eq!(spec["properties"]["key"]["maxLength"], 256, "{spec}");
    let modes = schemas["DedupModeSpec"].to_string();
    let outcomes = schemas["Outcome"].to_string();
    for m in ["simple", "throttle", "debounce"] {
        assert!(modes.contains(m), "{modes}");
    }
    for o in ["deduplicated", "debounced"] {
        assert!(outcomes.contains(o), "{outcomes}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_pushes_with_a_dedup_key_and_prints_the_outcome() {
    let redis = RedisServer::start();
    let s = server(&redis, 1).await;
    let args = [
        "push",
        "--topic",
        "t",
        "--delay",
        "1h",
        "--dedup-key",
        "k",
        "--dedup-mode",
        "throttle",
        "--dedup-window",
        "10m",
    ];
    let (ok, first, err) = delayq_cli(&s.base, &args).await;
    assert!(ok && first.starts_with("created "), "{first} {err}");
    let (ok, second, err) = delayq_cli(&s.base, &args).await;
    assert!(ok && second.starts_with("deduplicated "), "{second} {err}");
    let id = |out: &str| out.split_whitespace().nth(1).unwrap().to_owned();
    assert_eq!(id(&first), id(&second));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_changes_mode_never_makes_its_job_early_nor_reports_a_wrong_due_time() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let now = redis.time_ms().await;
    // Simple, then debounce: the simple job is moved to the debounce
    // push's own due time (30 s), its series starting now, not in 1970.
    let s1 = q
        .push(&dedup_job(
            "s1",
            "a",
            "order:42",
            DedupMode::Simple,
            None,
            None,
            3_600_000,
        ))
        .await
        .unwrap();
    assert_eq!(s1.outcome, PushOutcome::Created);
    let d = q
        .push(&dedup_job(
            "",
            "b",
            "order:42",
            DedupMode::Debounce,
            Some(60_000),
            Some(300_000),
            30_000,
        ))
        .await
        .unwrap();
    assert_eq!((d.outcome, d.id.as_str()), (PushOutcome::Debounced, "s1"));
    assert!(
        d.due_ms >= now + 30_000,
        "debounced to {} ms from now, asked 30000",
        d.due_ms - now
    );
    let j = q.get("s1").await.unwrap().unwrap();
    assert_eq!((j.state, j.due_ms), (delayq::JobState::Delayed, d.due_ms));

    // Throttle after debounce: deduplicated, answering the job's own due
    // time (not the series' start).
    let t = q
        .push(&dedup_job(
            "",
            "c",
            "order:42",
            DedupMode::Throttle,
            Some(60_000),
            None,
            5_000,
        ))
        .await
        .unwrap();
    assert_eq!(
        (t.outcome, t.id.as_str(), t.due_ms),
        (PushOutcome::Deduplicated, "s1", d.due_ms)
    );

    // Throttle first, then debounce: the throttled job moves to the
    // debounce push's due time, its series starting now.
    let now = redis.time_ms().await;
    let w = q
        .push(&dedup_job(
            "w1",
            "x",
            "pay:7",
            DedupMode::Throttle,
            Some(60_000),
            None,
            3_600_000,
        ))
        .await
        .unwrap();
    let d = q
        .push(&dedup_job(
            "",
            "y",
            "pay:7",
            DedupMode::Debounce,
            Some(60_000),
            Some(300_000),
            20_000,
        ))
        .await
        .unwrap();
    assert_eq!((d.outcome, d.id.as_str()), (PushOutcome::Debounced, "w1"));
    assert!(d.due_ms >= now + 20_000 && d.due_ms < w.due_ms, "{d:?}");
    // Simple after throttle: deduplicated while the job lives, with its due.
    let s = q
        .push(&dedup_job(
            "",
            "z",
            "pay:7",
            DedupMode::Simple,
            None,
            None,
            0,
        ))
        .await
        .unwrap();
    assert_eq!(
        (s.outcome, s.id.as_str(), s.due_ms),
        (PushOutcome::Deduplicated, "w1", d.due_ms)
    );
    // Nothing fires early: both jobs are still delayed.
    for id in ["s1", "w1"] {
        let j = q.get(id).await.unwrap().unwrap();
        assert_eq!(j.state, delayq::JobState::Delayed, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_cancel_ends_a_simple_dedup_like_a_delete() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let tagged = |id: &str| NewJob {
        tags: vec!["promo".into()],
        ..dedup_job(id, "a", "order:9", DedupMode::Simple, None, None, 3_600_000)
    };
    q.push(&tagged("c1")).await.unwrap();
    assert_eq!(q.cancel_tag_all("promo").await.unwrap().changed, 1);
    assert_eq!(dedup_records(&redis).await, Vec::<String>::new());
    // The key is free, also once a plain job reuses the id: the next push
    // with the key creates its own job.
    q.push(&job("c1", "t", 3_600_000, 60_000)).await.unwrap();
    let other = q.push(&tagged("c2")).await.unwrap();
    assert_eq!(
        (other.outcome, other.id.as_str()),
        (PushOutcome::Created, "c2")
    );
}

/// A push that replaces a simple-dedup job ends that job, and its dedup
/// with it, as a delete does: the record goes. Else it stayed, naming the
/// replacement (which does not carry the key: a push with the key was
/// deduplicated against it), and outlived it for good (a simple record
/// has no TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_simple_dedup_job_ends_its_dedup_and_leaves_no_record() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let keyed = |id: &str| dedup_job(id, "a", "order:7", DedupMode::Simple, None, None, 3_600_000);
    q.push(&keyed("r1")).await.unwrap();
    assert_eq!(dedup_records(&redis).await.len(), 1);
    let replaced = q.push(&job("r1", "t", 3_600_000, 60_000)).await.unwrap();
    assert_eq!(replaced.outcome, PushOutcome::Replaced);
    assert_eq!(
        dedup_records(&redis).await,
        Vec::<String>::new(),
        "the replaced job's record goes with it"
    );
    let other = q.push(&keyed("r2")).await.unwrap();
    assert_eq!(
        (other.outcome, other.id.as_str()),
        (PushOutcome::Created, "r2")
    );
    // Once both jobs are gone, nothing of the key is left.
    assert!(q.delete("r1").await.unwrap());
    assert!(q.delete("r2").await.unwrap());
    assert_eq!(dedup_records(&redis).await, Vec::<String>::new());
    assert_eq!(jobs_in_redis(&redis).await, 0);
}
