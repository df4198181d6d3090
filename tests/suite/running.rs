//! A running job's progress and log lines: set only under its current
//! lease, bounded, kept across attempts, gone with the job, kept and
//! expired with its finished record; the same over `/v1`.

use std::time::Duration;

use delayq::http::ServerConfig;
use delayq::{Config, Delivery, Error, JobState, Queue};
use serde_json::{json, Value};

use crate::common::*;

async fn pop_one(q: &Queue, topic: &str) -> Delivery {
    q.pop(&topics(&[topic]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a job to run")
}

async fn exists(redis: &RedisServer, key: &str) -> bool {
    redis.cmd::<i64>(&["EXISTS", key]).await == 1
}

/// POSTs `body` as it is (no JSON value could hold it): status and text.
async fn post_text(base: &str, path: &str, body: String) -> (u16, String) {
    let resp = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .body(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

fn lines(logs: &[delayq::LogLine]) -> Vec<&str> {
    logs.iter().map(|l| l.line.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_log_lines_under_the_lease_show_in_the_read_and_stay_across_attempts() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        events: true,
        ..config(&redis)
    })
    .unwrap();
    q.push(&job("a", "t", 0, 60_000)).await.unwrap();
    let d = pop_one(&q, "t").await;
    let before = redis.time_ms().await;
    q.progress("a", &d.token, &json!(10)).await.unwrap();
    q.progress("a", &d.token, &json!({"done": 3, "of": 7}))
        .await
        .unwrap();
    q.log("a", &d.token, "step one").await.unwrap();
    q.log("a", &d.token, "step\ttwo, ünïcode").await.unwrap();
    let j = q.get("a").await.unwrap().unwrap();
    assert_eq!(j.progress, Some(json!({"done": 3, "of": 7})));
    let logs = q.logs("a").await.unwrap();
    assert_eq!(lines(&logs), ["step one", "step\ttwo, ünïcode"]);
    assert!(logs.iter().all(|l| l.at_ms >= before), "{logs:?}");
    // A failed attempt: the job comes back with its log and progress; the
    // old lease no longer speaks for it.
    q.nack("a", &d.token, Some(Duration::ZERO), "again")
        .await
        .unwrap();
    let d2 = pop_one(&q, "t").await;
    assert!(matches!(
        q.log("a", &d.token, "late").await,
        Err(Error::StaleLease(_))
    ));
    assert_eq!(
        q.get("a").await.unwrap().unwrap().progress,
        Some(json!({"done": 3, "of": 7}))
    );
    q.log("a", &d2.token, "attempt two").await.unwrap();
    assert_eq!(
        lines(&q.logs("a").await.unwrap()),
        ["step one", "step\ttwo, ünïcode", "attempt two"]
    );
    let read = q.events_after("0", &[], 100).await.unwrap();
    let progress: Vec<&Value> = read
        .events
        .iter()
        .filter(|(_, e)| e.event == "progress")
        .filter_map(|(_, e)| e.progress.as_ref())
        .collect();
    assert_eq!(progress, [&json!(10), &json!({"done": 3, "of": 7})]);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_token_an_ended_lease_or_a_cancel_changes_nothing() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("s", "t", 0, 60_000)).await.unwrap();
    let d = pop_one(&q, "t").await;
    q.progress("s", &d.token, &json!(1)).await.unwrap();
    let stale = |r: Result<(), Error>| matches!(r, Err(Error::StaleLease(id)) if id == "s");
    assert!(stale(q.progress("s", "not-the-token", &json!(2)).await));
    assert!(stale(q.log("s", "not-the-token", "x").await));
    assert_eq!(q.get("s").await.unwrap().unwrap().progress, Some(json!(1)));
    assert!(!exists(&redis, "{dq}:log:s").await);

    // A lease past its end, whether or not the sweep has taken it back yet.
    q.push(&job("e", "te", 0, 300)).await.unwrap();
    let d = pop_one(&q, "te").await;
    let lease_end = d.lease_until_ms;
    eventually(Duration::from_secs(10), "the lease ended", || async {
        (redis.time_ms().await > lease_end).then_some(())
    })
    .await;
    let ended = |r: Result<(), Error>| matches!(r, Err(Error::StaleLease(id)) if id == "e");
    assert!(ended(q.progress("e", &d.token, &json!(50)).await));
    assert!(ended(q.log("e", &d.token, "too late").await));
    let j = q.get("e").await.unwrap().unwrap();
    assert_eq!(j.progress, None, "{j:?}");
    assert!(!exists(&redis, "{dq}:log:e").await);

    // Cancelled while it runs: its holder hears so, and nothing is written.
    q.push(&job("c", "tc", 0, 60_000)).await.unwrap();
    let d = pop_one(&q, "tc").await;
    q.log("c", &d.token, "before").await.unwrap();
    assert_eq!(q.cancel("c").await.unwrap(), Some(JobState::Reserved));
    assert!(!exists(&redis, "{dq}:log:c").await, "the log goes with it");
    let cancelled = |r: Result<(), Error>| matches!(r, Err(Error::Cancelled(id)) if id == "c");
    assert!(cancelled(q.progress("c", &d.token, &json!(99)).await));
    assert!(cancelled(q.log("c", &d.token, "after").await));
    let left = q.get("c").await.unwrap().unwrap();
    assert_eq!(left.progress, None, "{left:?}");
    assert!(!exists(&redis, "{dq}:log:c").await);

    // No job at all: not found, and no key made.
    assert!(matches!(
        q.progress("none", "tok", &json!(1)).await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        q.log("none", "tok", "x").await,
        Err(Error::NotFound(_))
    ));
    assert!(!exists(&redis, "{dq}:j:none").await);
    assert!(!exists(&redis, "{dq}:log:none").await);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_past_its_end_not_yet_taken_back_is_refused() {
    let redis = RedisServer::start();
    let a = queue(&redis);
    a.push(&job("e", "t", 0, 300)).await.unwrap();
    eventually(Duration::from_secs(10), "e is ready", || async {
        let j = a.get("e").await.unwrap()?;
        (j.state == JobState::Ready).then_some(())
    })
    .await;
    a.close().await;
    // No dispatcher runs now: nothing takes the lease back when it ends.
    let b = Queue::connect(Config {
        dispatch: false,
        ..config(&redis)
    })
    .unwrap();
    let d = pop_one(&b, "t").await;
    let lease_end = d.lease_until_ms;
    eventually(Duration::from_secs(10), "the lease ended", || async {
        (redis.time_ms().await > lease_end).then_some(())
    })
    .await;
    assert_eq!(b.get("e").await.unwrap().unwrap().state, JobState::Reserved);
    let ended = |r: Result<(), Error>| matches!(r, Err(Error::StaleLease(id)) if id == "e");
    assert!(ended(b.progress("e", &d.token, &json!(50)).await));
    assert!(ended(b.log("e", &d.token, "too late").await));
    assert_eq!(b.get("e").await.unwrap().unwrap().progress, None);
    assert!(!exists(&redis, "{dq}:log:e").await);
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_give_an_error_naming_the_problem_and_change_nothing() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("l", "t", 0, 60_000)).await.unwrap();
    let d = pop_one(&q, "t").await;
    let keys = redis.data_keys().await;
    let invalid = |r: Result<(), Error>, word: &str| match r {
        Err(Error::Invalid(m)) => assert!(m.contains(word), "{m}"),
        other => panic!("not refused as invalid ({word}): {other:?}"),
    };
    invalid(
        q.progress("l", &d.token, &json!("x".repeat(2_000))).await,
        "progress is",
    );
    invalid(q.progress("l", &d.token, &Value::Null).await, "null");
    invalid(q.log("l", &d.token, &"x".repeat(1_025)).await, "bytes");
    for bad in [
        "two\nlines",
        "cr\r",
        "esc \u{1b}[31m",
        "nul \0",
        "c1 \u{85}",
    ] {
        invalid(q.log("l", &d.token, bad).await, "control character");
    }
    invalid(q.log("l", "", "x").await, "token");
    assert_eq!(q.get("l").await.unwrap().unwrap().progress, None);
    assert_eq!(
        redis.data_keys().await,
        keys,
        "a refused report wrote a key"
    );
    // At the limits exactly: accepted.
    let s = "y".repeat(1_022);
    q.progress("l", &d.token, &json!(s)).await.unwrap();
    q.log("l", &d.token, &"z".repeat(1_024)).await.unwrap();
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_keeps_its_last_100_lines() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("n", "t", 0, 60_000)).await.unwrap();
    let d = pop_one(&q, "t").await;
    for i in 0..130 {
        q.log("n", &d.token, &format!("line {i}")).await.unwrap();
    }
    let logs = q.logs("n").await.unwrap();
    let want: Vec<String> = (30..130).map(|i| format!("line {i}")).collect();
    assert_eq!(lines(&logs), want);
    assert_eq!(redis.cmd::<i64>(&["LLEN", "{dq}:log:n"]).await, 100);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_goes_with_its_job_deleted_replaced_or_finished() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let logged = |id: &'static str| {
        let q = q.clone();
        async move {
            q.push(&job(id, id, 0, 60_000)).await.unwrap();
            let d = pop_one(&q, id).await;
            q.log(id, &d.token, "working").await.unwrap();
            d
        }
    };
    logged("del").await;
    assert!(exists(&redis, "{dq}:log:del").await);
    assert!(q.delete("del").await.unwrap());
    assert!(!exists(&redis, "{dq}:log:del").await);

    logged("rep").await;
    q.push(&job("rep", "rep", 3_600_000, 60_000)).await.unwrap();
    assert!(
        !exists(&redis, "{dq}:log:rep").await,
        "a new job, a new log"
    );
    assert!(q.logs("rep").await.unwrap().is_empty());

    let d = logged("fin").await;
    q.finish("fin", &d.token).await.unwrap();
    assert!(!exists(&redis, "{dq}:log:fin").await);

    // A dead job keeps its log until it goes.
    let mut dies = job("dies", "dies", 0, 60_000);
    dies.retry = one_attempt();
    q.push(&dies).await.unwrap();
    let d = pop_one(&q, "dies").await;
    q.log("dies", &d.token, "last words").await.unwrap();
    q.nack("dies", &d.token, None, "boom").await.unwrap();
    assert_eq!(q.get("dies").await.unwrap().unwrap().state, JobState::Dead);
    assert_eq!(lines(&q.logs("dies").await.unwrap()), ["last words"]);
    q.purge_dead("dies").await.unwrap();
    assert!(!exists(&redis, "{dq}:log:dies").await);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_record_keeps_the_progress_and_log_and_expires_with_them() {
    let redis = RedisServer::start();
    // Long enough for both jobs' lives and the reads below, however busy
    // the machine; the wait for the expiry allows for it.
    let q = Queue::connect(Config {
        keep_finished: Some(Duration::from_secs(8)),
        ..config(&redis)
    })
    .unwrap();
    for id in ["kept", "gone"] {
        q.push(&job(id, "t", 0, 60_000)).await.unwrap();
        let d = pop_one(&q, "t").await;
        q.progress(&d.id, &d.token, &json!(100)).await.unwrap();
        q.log(&d.id, &d.token, "done").await.unwrap();
        q.finish(&d.id, &d.token).await.unwrap();
    }
    let r = q.get("kept").await.unwrap().unwrap();
    assert_eq!(
        (r.state, r.progress),
        (JobState::Finished, Some(json!(100)))
    );
    assert_eq!(lines(&q.logs("kept").await.unwrap()), ["done"]);
    let job_ttl: i64 = redis.cmd(&["PTTL", "{dq}:j:kept"]).await;
    let log_ttl: i64 = redis.cmd(&["PTTL", "{dq}:log:kept"]).await;
    assert!(log_ttl > 0 && log_ttl <= job_ttl, "{log_ttl} {job_ttl}");
    // Deleting the record deletes its log.
    assert!(q.delete("gone").await.unwrap());
    assert!(!exists(&redis, "{dq}:log:gone").await);
    // The window ends: record and log both go.
    eventually(Duration::from_secs(30), "the record expired", || async {
        (!exists(&redis, "{dq}:j:kept").await).then_some(())
    })
    .await;
    assert!(!exists(&redis, "{dq}:log:kept").await);
    q.close().await;
}

/// A kept record and its log share one deadline, its finish time plus the
/// window, to the millisecond: a reader who finds the record gone never
/// finds its log. Finishing a batch in one call is where the clock moves
/// between one job's writes and the next's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_record_and_its_log_end_at_one_deadline_its_finish_plus_the_window() {
    let redis = RedisServer::start();
    let keep = Duration::from_secs(600);
    let q = Queue::connect(Config {
        keep_finished: Some(keep),
        ..config(&redis)
    })
    .unwrap();
    let jobs: Vec<_> = (0..400)
        .map(|i| job(&format!("j{i}"), "t", 0, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    let mut leases = Vec::new();
    while leases.len() < jobs.len() {
        for d in q
            .pop_many(&topics(&["t"]), 100, Duration::from_secs(10))
            .await
            .unwrap()
        {
            q.log(&d.id, &d.token, "done").await.unwrap();
            leases.push((d.id, d.token));
        }
    }
    let refs: Vec<(&str, &str)> = leases
        .iter()
        .map(|(i, t)| (i.as_str(), t.as_str()))
        .collect();
    for r in q.finish_many(&refs).await.unwrap() {
        r.unwrap();
    }
    // PEXPIRETIME came with Redis 7.0. On 6.2 (a conformance run) a
    // deadline can only be read as what is left of it, so each is checked
    // to be within the window, not compared to the millisecond.
    let c = redis.conn().await;
    let deadline = |key: String| {
        let mut c = c.clone();
        async move {
            let mut cmd = redis::cmd("PEXPIRETIME");
            cmd.arg(&key);
            cmd.query_async::<i64>(&mut c).await.map_err(|_| key)
        }
    };
    let exact = deadline("{dq}:none".into()).await.is_ok();
    let mut off = Vec::new();
    for (id, _) in &leases {
        let finished = q.get(id).await.unwrap().unwrap().finished_at_ms.unwrap();
        let (job, log) = (format!("{{dq}}:j:{id}"), format!("{{dq}}:log:{id}"));
        let want = finished + keep.as_millis() as i64;
        let got: (i64, i64) = if exact {
            (deadline(job).await.unwrap(), deadline(log).await.unwrap())
        } else {
            let left: Vec<i64> = redis::pipe()
                .cmd("PTTL")
                .arg(&job)
                .cmd("PTTL")
                .arg(&log)
                .query_async(&mut c.clone())
                .await
                .unwrap();
            assert!(
                left.iter().all(|&l| l > 0 && l <= keep.as_millis() as i64),
                "{id}: {left:?}"
            );
            (want, want)
        };
        if got != (want, want) {
            off.push((id.clone(), want, got.0, got.1));
        }
    }
    assert!(
        off.is_empty(),
        "(id, finish + window, record's, log's): {off:?}"
    );
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_racing_a_finish_writes_nothing_once_the_finish_won() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let (mut before, mut refused) = (0, 0);
    for i in 0..40 {
        let id = format!("race-{i}");
        q.push(&job(&id, "t", 0, 60_000)).await.unwrap();
        let d = pop_one(&q, "t").await;
        let value = json!(i);
        let (fin, prog, log) = tokio::join!(
            q.finish(&id, &d.token),
            q.progress(&id, &d.token, &value),
            q.log(&id, &d.token, "racing")
        );
        fin.unwrap();
        for r in [prog, log] {
            match r {
                Ok(()) => before += 1,
                Err(Error::NotFound(_)) => refused += 1,
                other => panic!("{id}: {other:?}"),
            }
        }
        // Whatever came first, nothing is left: no hash brought back by a
        // late write, no log.
        assert!(!exists(&redis, &format!("{{dq}}:j:{id}")).await, "{id}");
        assert!(!exists(&redis, &format!("{{dq}}:log:{id}")).await, "{id}");
    }
    // After the finish, always refused.
    q.push(&job("late", "t", 0, 60_000)).await.unwrap();
    let d = pop_one(&q, "t").await;
    q.finish("late", &d.token).await.unwrap();
    assert!(matches!(
        q.progress("late", &d.token, &json!(1)).await,
        Err(Error::NotFound(_))
    ));
    assert!(!exists(&redis, "{dq}:j:late").await);
    println!("40 races: {before} reports before the finish, {refused} refused after");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_progress_and_log_lines_show_in_the_job_read() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    q.push(&job("h", "t", 0, 60_000)).await.unwrap();
    let d = pop_one(&q, "t").await;
    let post = |path: &str, body: Value| {
        request_json(
            reqwest::Method::POST,
            format!("{}/v1/jobs/h/{path}", s.base),
            Some(body),
        )
    };
    let (st, _) = post("progress", json!({"token": d.token, "progress": 0.5})).await;
    assert_eq!(st, 204);
    let (st, _) = post("log", json!({"token": d.token, "line": "<b>half</b>"})).await;
    assert_eq!(st, 204);
    let (st, j) = get_json(&s.base, "/v1/jobs/h").await;
    assert_eq!(st, 200);
    assert_eq!(j["progress"], json!(0.5));
    assert_eq!(j["logs"][0]["line"], "<b>half</b>");
    assert!(j["logs"][0]["at_ms"].as_i64().unwrap() > 0, "{j}");

    let (st, e) = post("progress", json!({"token": "other", "progress": 1})).await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (409, Some("stale_lease"))
    );
    let (st, e) = post("log", json!({"token": d.token, "line": "a\nb"})).await;
    assert_eq!((st, e["error"]["code"].as_str()), (422, Some("invalid")));
    assert!(e["error"]["message"].as_str().unwrap().contains("control"));
    let big = "x".repeat(2_000);
    let (st, e) = post("progress", json!({"token": d.token, "progress": big})).await;
    assert_eq!((st, e["error"]["code"].as_str()), (422, Some("invalid")));
    let (st, _) = post("progress", json!({"token": d.token})).await;
    assert_eq!(st, 400, "no progress given");
    let (_, j) = get_json(&s.base, "/v1/jobs/h").await;
    assert_eq!(j["progress"], json!(0.5));
    assert_eq!(j["logs"].as_array().unwrap().len(), 1);

    assert_eq!(q.cancel("h").await.unwrap(), Some(JobState::Reserved));
    let (st, e) = post("log", json!({"token": d.token, "line": "x"})).await;
    assert_eq!((st, e["error"]["code"].as_str()), (409, Some("cancelled")));
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_line_limit_counts_bytes_of_multibyte_text() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    q.push(&job("u", "t", 0, 60_000)).await.unwrap();
    let d = pop_one(&q, "t").await;
    // 341 three-byte characters and one byte: 1,024 bytes, kept whole.
    let at = format!("{}a", "€".repeat(341));
    q.log("u", &d.token, &at).await.unwrap();
    // 342 of them: 1,026 bytes (342 characters), refused by bytes.
    match q.log("u", &d.token, &"€".repeat(342)).await {
        Err(Error::Invalid(m)) => assert!(m.contains("1026 bytes"), "{m}"),
        other => panic!("not refused: {other:?}"),
    }
    let url = "/v1/jobs/u/log";
    // A character split by a lone surrogate escape is no text: refused.
    let body = format!(r#"{{"token":"{}","line":"ab\ud800"}}"#, d.token);
    let (st, reply) = post_text(&s.base, url, body).await;
    assert_eq!(st, 400, "{reply}");
    assert!(
        reply.contains("invalid JSON") && reply.contains("escape"),
        "{reply}"
    );
    let body = format!(r#"{{"token":"{}","line":"{}é"}}"#, d.token, "é".repeat(512));
    let (st, reply) = post_text(&s.base, url, body).await;
    assert_eq!(st, 422, "{reply}");
    assert!(reply.contains("1026 bytes"), "{reply}");
    assert_eq!(lines(&q.logs("u").await.unwrap()), [at.as_str()]);
    s.stop().await;
    q.close().await;
}

/// `depth` arrays nested in one another: 2 * depth bytes of JSON.
fn nested(depth: usize) -> Value {
    let mut v = json!([]);
    for _ in 1..depth {
        v = Value::Array(vec![v]);
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_progress_is_refused_and_one_within_the_depth_reads_back_equal() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    q.push(&job("n", "t", 0, 60_000)).await.unwrap();
    let d = pop_one(&q, "t").await;
    // 500 levels in 1,000 bytes: within the size limit, too deep to read.
    match q.progress("n", &d.token, &nested(500)).await {
        Err(Error::Invalid(m)) => assert!(m.contains("levels"), "{m}"),
        other => {
            let read = q.get("n").await.unwrap().unwrap().progress;
            let text = read.as_ref().is_some_and(Value::is_string);
            panic!("not refused: {other:?}; it reads back as a string: {text}");
        }
    }
    assert_eq!(q.get("n").await.unwrap().unwrap().progress, None);
    let ok = nested(64);
    q.progress("n", &d.token, &ok).await.unwrap();
    assert_eq!(
        q.get("n").await.unwrap().unwrap().progress,
        Some(ok.clone())
    );
    let body = format!(r#"{{"token":"{}","progress":{}}}"#, d.token, nested(500));
    let (st, reply) = post_text(&s.base, "/v1/jobs/n/progress", body).await;
    assert_eq!(st, 400, "{reply}");
    assert!(reply.contains("recursion limit"), "{reply}");
    let body = format!(r#"{{"token":"{}","progress":{}}}"#, d.token, nested(100));
    let (st, reply) = post_text(&s.base, "/v1/jobs/n/progress", body).await;
    assert_eq!(st, 422, "{reply}");
    assert!(reply.contains("levels"), "{reply}");
    let (_, j) = get_json(&s.base, "/v1/jobs/n").await;
    assert_eq!(j["progress"], ok);
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_of_a_finished_or_replaced_job_logs_nothing() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        keep_finished: Some(Duration::from_secs(600)),
        ..config(&redis)
    })
    .unwrap();
    q.push(&job("f", "t", 0, 60_000)).await.unwrap();
    let d = pop_one(&q, "t").await;
    q.log("f", &d.token, "done soon").await.unwrap();
    q.finish("f", &d.token).await.unwrap();
    let kept = q.logs("f").await.unwrap();
    assert_eq!(lines(&kept), ["done soon"]);
    for token in [d.token.as_str(), "other"] {
        assert!(matches!(
            q.log("f", token, "after").await,
            Err(Error::NotFound(_))
        ));
        assert!(matches!(
            q.progress("f", token, &json!(1)).await,
            Err(Error::NotFound(_))
        ));
    }
    assert_eq!(lines(&q.logs("f").await.unwrap()), ["done soon"]);
    assert_eq!(q.get("f").await.unwrap().unwrap().state, JobState::Finished);

    // Replaced while its holder runs: the new job's log starts empty and
    // the old holder cannot write into it, before or after its pop.
    q.push(&job("r", "t", 0, 60_000)).await.unwrap();
    let old = pop_one(&q, "t").await;
    q.log("r", &old.token, "old").await.unwrap();
    q.push(&job("r", "t", 0, 60_000)).await.unwrap();
    assert!(matches!(
        q.log("r", &old.token, "old again").await,
        Err(Error::StaleLease(_))
    ));
    let new = pop_one(&q, "t").await;
    assert!(matches!(
        q.log("r", &old.token, "old again").await,
        Err(Error::StaleLease(_))
    ));
    q.log("r", &new.token, "new").await.unwrap();
    assert_eq!(lines(&q.logs("r").await.unwrap()), ["new"]);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_log_calls_on_a_partitioned_queue_are_all_kept_in_the_jobs_partition() {
    let redis = RedisServer::start();
    let cfg = Config {
        partitions: 4,
        ..config(&redis)
    };
    let q = Queue::connect(cfg.clone()).unwrap();
    let keys = delayq::testing::Keys::partitions(&cfg.prefix, cfg.partitions);
    // Ids in every partition.
    let ids: Vec<String> = (0..16).map(|i| format!("p{i}")).collect();
    let mut parts = std::collections::BTreeSet::new();
    for id in &ids {
        q.push(&job(id, "t", 0, 60_000)).await.unwrap();
        parts.insert(delayq::testing::partition_of(id, cfg.partitions));
    }
    assert_eq!(parts.len(), 4, "ids over every partition");
    let mut held = Vec::new();
    for _ in &ids {
        held.push(pop_one(&q, "t").await);
    }
    for d in &held {
        q.log(&d.id, &d.token, "one").await.unwrap();
        let part = delayq::testing::partition_of(&d.id, cfg.partitions);
        for (p, k) in keys.iter().enumerate() {
            assert_eq!(exists(&redis, &k.log(&d.id)).await, p == part, "{}", d.id);
        }
    }
    // 100 calls at once on one job: every line kept, each once, in the
    // order Redis took them (their times never go back).
    let d = &held[0];
    let calls = (0..100).map(|i| {
        let q = q.clone();
        let (id, token) = (d.id.clone(), d.token.clone());
        async move { q.log(&id, &token, &format!("c{i}")).await }
    });
    for r in futures::future::join_all(calls).await {
        r.unwrap();
    }
    let logs = q.logs(&d.id).await.unwrap();
    assert_eq!(logs.len(), 100);
    assert!(logs.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    let got: std::collections::BTreeSet<&str> = lines(&logs).into_iter().collect();
    let want: Vec<String> = (0..100).map(|i| format!("c{i}")).collect();
    assert_eq!(got, want.iter().map(String::as_str).collect());
    q.close().await;
}
