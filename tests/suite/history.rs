//! History of finished jobs (`--keep-finished`): a finished job's record
//! kept for a window, read by id, listed, counted, replaced by a new push,
//! deleted, expired; nothing kept without the flag or for a stale finish;
//! the same over a Redis Cluster; the memory one record costs.

use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::redis_cluster::TestCluster;
use delayq::{Config, Delivery, JobState, Queue};
use serde_json::Value;

fn keeping(redis: &RedisServer, keep: Duration) -> Config {
    Config {
        keep_finished: Some(keep),
        ..config(redis)
    }
}

/// Pops `n` jobs of `topic` (waiting up to 10 s for each batch).
async fn pop_n(q: &Queue, topic: &str, n: usize) -> Vec<Delivery> {
    let topics = topics(&[topic]);
    let mut got = Vec::new();
    while got.len() < n {
        let batch = q
            .pop_many(&topics, (n - got.len()).min(100), Duration::from_secs(10))
            .await
            .unwrap();
        assert!(!batch.is_empty(), "only {} of {n} jobs came", got.len());
        got.extend(batch);
    }
    got
}

async fn push_ready(q: &Queue, id: &str, topic: &str) {
    q.push(&job(id, topic, 0, 60_000)).await.unwrap();
}

async fn finished_count(q: &Queue, topic: &str) -> u64 {
    q.topics()
        .await
        .unwrap()
        .topics
        .get(topic)
        .map_or(0, |c| c.finished)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_leaves_a_record_of_when_by_which_attempt_and_the_last_error() {
    let redis = RedisServer::start();
    let q = Queue::connect(keeping(&redis, Duration::from_secs(3600))).unwrap();
    let s = TestServer::start(q.clone(), Default::default()).await;
    push_ready(&q, "order-1001", "close").await;
    let first = pop_n(&q, "close", 1).await.remove(0);
    q.nack(
        &first.id,
        &first.token,
        Some(Duration::ZERO),
        "gateway timeout",
    )
    .await
    .unwrap();
    let second = pop_n(&q, "close", 1).await.remove(0);
    assert_eq!(second.attempts, 2);
    let before = redis.time_ms().await;
    q.finish(&second.id, &second.token).await.unwrap();
    let after = redis.time_ms().await;

    let (status, v) = get_json(&s.base, "/v1/jobs/order-1001").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "finished");
    let metrics = reqwest::get(format!("{}/metrics", s.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("delayq_jobs{topic=\"close\",state=\"finished\"} 1\n"),
        "/metrics counts the kept record"
    );
    assert_eq!(v["topic"], "close");
    assert_eq!(v["attempts"], 2, "the attempt that finished it");
    assert_eq!(v["last_error"], "gateway timeout");
    assert_eq!(v["body"], "", "the body is not kept");
    assert_eq!(v["due_at_ms"].as_i64(), Some(second.due_ms));
    let at = v["finished_at_ms"].as_i64().unwrap();
    assert!(
        (before..=after).contains(&at),
        "{before} <= {at} <= {after}"
    );
    assert_eq!(finished_count(&q, "close").await, 1);
    let (_, topics) = get_json(&s.base, "/v1/topics").await;
    assert_eq!(topics["topics"]["close"]["finished"], 1, "{topics}");

    // The OpenAPI document names the state and the field.
    let doc: Value = serde_json::from_str(delayq::http::v1::openapi::json()).unwrap();
    let schemas = &doc["components"]["schemas"];
    assert!(schemas["Job"]["properties"]["finished_at_ms"].is_object());
    assert!(schemas["TopicCounts"]["properties"]["finished"].is_object());
    let states = schemas["JobState"]["enum"].as_array().unwrap();
    assert!(states.contains(&Value::from("finished")), "{states:?}");

    // The CLI shows it too.
    let (ok, out, err) = delayq_cli(&s.base, &["get", "order-1001"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("state: finished") && out.contains("finished at:"),
        "{out}"
    );

    // A lease operation on the record finds no job, as without history.
    for (status, what) in [
        (q.finish("order-1001", &second.token).await, "finish"),
        (
            q.touch("order-1001", &second.token, None).await.map(|_| ()),
            "touch",
        ),
        (
            q.nack("order-1001", &second.token, None, "x")
                .await
                .map(|_| ()),
            "nack",
        ),
        (
            q.reschedule("order-1001", Duration::ZERO, None, None)
                .await
                .map(|_| ()),
            "reschedule",
        ),
    ] {
        assert!(
            matches!(status, Err(delayq::Error::NotFound(_))),
            "{what}: {status:?}"
        );
    }
    assert_eq!(
        q.get("order-1001").await.unwrap().unwrap().state,
        JobState::Finished
    );

    // Deleting the id removes the record: 404 from then on.
    let r = reqwest::Client::new()
        .delete(format!("{}/v1/jobs/order-1001", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(get_json(&s.base, "/v1/jobs/order-1001").await.0, 404);
    assert_eq!(finished_count(&q, "close").await, 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keep_finished_a_finished_job_is_gone_and_nothing_more_is_written() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), Default::default()).await;
    push_ready(&q, "a", "t").await;
    let d = pop_n(&q, "t", 1).await.remove(0);
    // The leader's first upkeep pass (the layout, the topic schedules'
    // backfill, which ends with an HSET) is over: its writes are not the
    // finish's.
    upkeep_pass_done(&redis).await;
    let writes = ["zadd", "hset", "pexpire", "pexpireat", "zrevrangebyscore"];
    let counted = || async {
        let mut n = Vec::new();
        for c in writes {
            n.push(command_calls(&redis, c).await);
        }
        n
    };
    let before = counted().await;
    q.finish(&d.id, &d.token).await.unwrap();
    let after = counted().await;
    assert_eq!(
        before, after,
        "a finish wrote more than a removal: {writes:?}"
    );
    assert_eq!(get_json(&s.base, "/v1/jobs/a").await.0, 404);
    let keys: Vec<String> = redis.cmd(&["KEYS", "*"]).await;
    assert!(
        keys.iter()
            .all(|k| !k.contains(":finished:") && !k.contains(":j:")),
        "{keys:?}"
    );
    let counts: Vec<String> = redis.cmd(&["HKEYS", "{dq}:count"]).await;
    assert!(counts.is_empty(), "{counts:?}");
    assert_eq!(finished_count(&q, "t").await, 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_expires_with_its_window_and_leaves_the_counts() {
    let redis = RedisServer::start();
    let q = Queue::connect(keeping(&redis, Duration::from_secs(5))).unwrap();
    let s = TestServer::start(q.clone(), Default::default()).await;
    push_ready(&q, "short", "t").await;
    let d = pop_n(&q, "t", 1).await.remove(0);
    q.finish(&d.id, &d.token).await.unwrap();
    let ttl: i64 = redis.cmd(&["PTTL", "{dq}:j:short"]).await;
    assert!(
        (1..=5000).contains(&ttl),
        "the record carries its window: {ttl}"
    );
    eventually(Duration::from_secs(20), "the record expired", || async {
        (get_json(&s.base, "/v1/jobs/short").await.0 == 404).then_some(())
    })
    .await;
    // Nothing finishes any more: the trim loop (every second here) takes
    // the index entry and the count.
    eventually(Duration::from_secs(30), "the count back to 0", || async {
        (finished_count(&q, "t").await == 0).then_some(())
    })
    .await;
    let index: i64 = redis.cmd(&["EXISTS", "{dq}:finished:t"]).await;
    assert_eq!(index, 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_window_wins_over_the_default() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        topic_keep_finished: [("brief".to_string(), Duration::from_millis(500))].into(),
        ..keeping(&redis, Duration::from_secs(3600))
    })
    .unwrap();
    push_ready(&q, "b1", "brief").await;
    push_ready(&q, "l1", "long").await;
    for d in pop_n(&q, "brief", 1)
        .await
        .into_iter()
        .chain(pop_n(&q, "long", 1).await)
    {
        q.finish(&d.id, &d.token).await.unwrap();
    }
    let pttl = |key: &'static str| {
        let redis = &redis;
        async move { redis.cmd::<i64>(&["PTTL", key]).await }
    };
    assert!(pttl("{dq}:j:b1").await <= 500);
    assert!(pttl("{dq}:j:l1").await > 3_000_000);
    eventually(Duration::from_secs(20), "brief's record gone", || async {
        q.get("b1").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(
        q.get("l1").await.unwrap().unwrap().state,
        JobState::Finished
    );
    // Library input is checked as the flag is.
    for bad in [Duration::ZERO, Duration::from_secs(400 * 86400)] {
        let e = Queue::connect(Config {
            topic_keep_finished: [("x".to_string(), bad)].into(),
            ..config(&redis)
        })
        .err()
        .unwrap();
        assert!(e.to_string().contains("keep_finished"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_are_listed_newest_first_a_page_at_a_time() {
    let redis = RedisServer::start();
    let q = Queue::connect(keeping(&redis, Duration::from_secs(3600))).unwrap();
    let s = TestServer::start(q.clone(), Default::default()).await;
    for i in 0..7 {
        push_ready(&q, &format!("j{i}"), "t").await;
    }
    push_ready(&q, "still-ready", "t").await;
    let got = pop_n(&q, "t", 8).await;
    for d in got.iter().filter(|d| d.id != "still-ready") {
        q.finish(&d.id, &d.token).await.unwrap();
    }
    let (mut listed, mut cursor) = (Vec::<(String, i64)>::new(), None::<String>);
    loop {
        let mut path = "/v1/topics/t/jobs?state=finished&limit=3".to_string();
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let (status, page) = get_json(&s.base, &path).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["state"], "finished");
        for j in page["jobs"].as_array().unwrap() {
            assert_eq!(j["state"], "finished");
            listed.push((
                j["id"].as_str().unwrap().to_owned(),
                j["finished_at_ms"].as_i64().unwrap(),
            ));
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let mut ids: Vec<&str> = listed.iter().map(|(id, _)| id.as_str()).collect();
    assert!(
        listed.windows(2).all(|w| w[0].1 >= w[1].1),
        "newest first: {listed:?}"
    );
    ids.sort();
    assert_eq!(ids, ["j0", "j1", "j2", "j3", "j4", "j5", "j6"]);
    let (ok, out, err) = delayq_cli(&s.base, &["list", "t", "--state", "finished"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("finished at") && out.contains("j6"), "{out}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushing_a_finished_id_again_makes_a_new_job_in_its_place() {
    let redis = RedisServer::start();
    let q = Queue::connect(keeping(&redis, Duration::from_secs(3600))).unwrap();
    let s = TestServer::start(q.clone(), Default::default()).await;
    push_ready(&q, "r", "t").await;
    let d = pop_n(&q, "t", 1).await.remove(0);
    q.finish(&d.id, &d.token).await.unwrap();
    // Even with if_exists keep: the record is no job.
    let r = reqwest::Client::new()
        .post(format!("{}/v1/jobs", s.base))
        .json(
            &serde_json::json!({"id": "r", "topic": "u", "body": "again",
            "delay_ms": 60000, "if_exists": "keep"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let j = q.get("r").await.unwrap().unwrap();
    assert_eq!(
        (j.state, j.topic.as_str(), j.body.as_str(), j.finished_at_ms),
        (JobState::Delayed, "u", "again", None)
    );
    let ttl: i64 = redis.cmd(&["PTTL", "{dq}:j:r"]).await;
    assert_eq!(ttl, -1, "the new job carries no expiry");
    assert_eq!(finished_count(&q, "t").await, 0);
    let index: i64 = redis.cmd(&["EXISTS", "{dq}:finished:t"]).await;
    assert_eq!(index, 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_with_a_stale_token_keeps_nothing() {
    let redis = RedisServer::start();
    let q = Queue::connect(keeping(&redis, Duration::from_secs(3600))).unwrap();
    push_ready(&q, "s", "t").await;
    let old = pop_n(&q, "t", 1).await.remove(0);
    q.nack(&old.id, &old.token, Some(Duration::ZERO), "retry")
        .await
        .unwrap();
    let current = pop_n(&q, "t", 1).await.remove(0);
    let e = q.finish("s", &old.token).await.unwrap_err();
    assert!(matches!(e, delayq::Error::StaleLease(_)), "{e:?}");
    assert_eq!(q.get("s").await.unwrap().unwrap().state, JobState::Reserved);
    assert_eq!(finished_count(&q, "t").await, 0);
    let index: i64 = redis.cmd(&["EXISTS", "{dq}:finished:t"]).await;
    assert_eq!(index, 0);
    q.finish("s", &current.token).await.unwrap();
    assert_eq!(finished_count(&q, "t").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compatible_api_keeps_its_behaviour_for_a_finished_id() {
    let redis = RedisServer::start();
    let q = Queue::connect(keeping(&redis, Duration::from_secs(3600))).unwrap();
    let s = TestServer::start(q.clone(), Default::default()).await;
    let b = s.base.as_str();
    let pushed = post(
        b,
        "/push",
        r#"{"topic":"order","id":"c1","delay":3600,"ttr":60,"body":"x"}"#,
    )
    .await;
    assert_eq!(pushed["code"], 0, "{pushed}");
    // /finish takes the job whatever its state and keeps its record...
    assert_eq!(post(b, "/finish", r#"{"id":"c1"}"#).await["code"], 0);
    let j = q.get("c1").await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Finished);
    assert!(j.due_ms > 0, "a delayed job's due time is kept");
    // ...which /get does not show: the original forgets finished jobs.
    let got = post(b, "/get", r#"{"id":"c1"}"#).await;
    assert_eq!(got["code"], 0);
    assert_eq!(got["data"], Value::Null, "{got}");
    // /finish again succeeds and changes nothing; /delete removes it.
    assert_eq!(post(b, "/finish", r#"{"id":"c1"}"#).await["code"], 0);
    assert_eq!(finished_count(&q, "order").await, 1);
    assert_eq!(post(b, "/delete", r#"{"id":"c1"}"#).await["code"], 0);
    assert!(q.get("c1").await.unwrap().is_none());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_cluster_records_are_counted_and_listed_across_partitions() {
    let cluster = TestCluster::start(3);
    let q = Queue::connect(Config {
        keep_finished: Some(Duration::from_secs(3600)),
        ..crate::cluster::cluster_config(&cluster, 6)
    })
    .unwrap();
    q.check_connection().await.unwrap();
    let jobs: Vec<_> = (0..30)
        .map(|i| job(&format!("c{i}"), "t", 0, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    for d in pop_n(&q, "t", 30).await {
        q.finish(&d.id, &d.token).await.unwrap();
    }
    assert_eq!(finished_count(&q, "t").await, 30);
    let (mut seen, mut cursor, mut last) =
        (std::collections::BTreeSet::new(), None::<String>, i64::MAX);
    loop {
        let (page, next) = q
            .list_jobs("t", JobState::Finished, cursor.as_deref(), 7)
            .await
            .unwrap();
        for j in page {
            let at = j.finished_at_ms.unwrap();
            assert!(at <= last, "newest first over the partitions");
            last = at;
            assert!(seen.insert(j.id.clone()), "{} listed twice", j.id);
        }
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 30);
    let j = q.get("c17").await.unwrap().unwrap();
    assert_eq!((j.state, j.attempts), (JobState::Finished, 1));
    assert!(q.delete("c17").await.unwrap());
    assert_eq!(finished_count(&q, "t").await, 29);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_finished_refuses_zero_negative_and_huge_naming_the_problem() {
    for (value, says) in [
        ("0", "at least 1ms"),
        ("-5s", "invalid duration"),
        ("400d", "at most 365d"),
        ("99999999999999999999d", "invalid duration"),
        ("7y", "unknown unit"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args([
                "serve",
                "--keep-finished",
                value,
                "--redis",
                "redis://127.0.0.1:1",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{value}: started");
        assert!(
            err.contains("--keep-finished") && err.contains(says),
            "{value}: {err}"
        );
    }
}

/// The memory a kept record costs (docs/history.md):
/// 10,000 jobs finished with records kept, Redis's memory at rest before
/// and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_record_costs_a_bounded_number_of_bytes() {
    const N: usize = 10_000;
    let redis = RedisServer::start();
    let q = Queue::connect(keeping(&redis, Duration::from_secs(3600))).unwrap();
    // One first, so the index, the count field and the library exist.
    push_ready(&q, "warm", "mem").await;
    let d = pop_n(&q, "mem", 1).await.remove(0);
    q.finish(&d.id, &d.token).await.unwrap();
    let empty = crate::common::memory_at_rest(&redis).await;
    let jobs: Vec<_> = (0..N)
        .map(|i| delayq::NewJob {
            body: "x".repeat(200),
            ..job(&format!("order-{i:08}"), "mem", 0, 60_000)
        })
        .collect();
    crate::common::push_all(&q, &jobs).await;
    let pending = crate::common::memory_at_rest(&redis).await;
    let got = pop_n(&q, "mem", N).await;
    for chunk in got.chunks(500) {
        let done = futures::future::join_all(chunk.iter().map(|d| q.finish(&d.id, &d.token))).await;
        done.into_iter().for_each(|r| r.unwrap());
    }
    let kept = crate::common::memory_at_rest(&redis).await;
    let per_record = (kept - empty) / N as f64;
    let per_pending = (pending - empty) / N as f64;
    let one: i64 = redis
        .cmd(&["MEMORY", "USAGE", "{dq}:j:order-00000042"])
        .await;
    println!(
        "kept finished record: {per_record:.0} bytes each over {N} (hash alone: {one} bytes); \
         the same jobs pending with a 200-byte body: {per_pending:.0} bytes each"
    );
    assert_eq!(finished_count(&q, "mem").await, N as u64 + 1);
    // Measured: 370-371 (Redis 7.0, ids of 14 bytes): the hash
    // (listpack), its key and expiry, and the index entry.
    assert!(per_record < 500.0, "{per_record} bytes per record");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_window_or_none_later_still_trims_what_an_earlier_one_kept() {
    let redis = RedisServer::start();
    let before = Queue::connect(Config {
        topic_keep_finished: [("gone".to_string(), Duration::from_millis(300))].into(),
        ..keeping(&redis, Duration::from_secs(3600))
    })
    .unwrap();
    push_ready(&before, "old", "t").await;
    push_ready(&before, "x", "gone").await;
    for d in pop_n(&before, "t", 1)
        .await
        .into_iter()
        .chain(pop_n(&before, "gone", 1).await)
    {
        before.finish(&d.id, &d.token).await.unwrap();
    }
    before.close().await;
    // Restarted with a window of 500 ms for t and none for gone.
    let after = Queue::connect(Config {
        topic_keep_finished: [("t".to_string(), Duration::from_millis(500))].into(),
        ..config(&redis)
    })
    .unwrap();
    // t's record (its TTL an hour) goes with the new window...
    eventually(
        Duration::from_secs(30),
        "t's old record trimmed",
        || async {
            (after.get("old").await.unwrap().is_none() && finished_count(&after, "t").await == 0)
                .then_some(())
        },
    )
    .await;
    // ...and gone's index entry goes once its record expired, though this
    // process keeps nothing there.
    eventually(Duration::from_secs(30), "gone's entry dropped", || async {
        (finished_count(&after, "gone").await == 0).then_some(())
    })
    .await;
    let keys: Vec<String> = redis.cmd(&["KEYS", "*finished*"]).await;
    assert!(keys.is_empty(), "{keys:?}");
}
