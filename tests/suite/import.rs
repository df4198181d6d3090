//! `delayq import-ouqiang` against a redis-server filled exactly as the Go
//! server fills it: MessagePack job maps under raw ids, `dq_bucket_N` sorted
//! sets, `dq_queue_<topic>` lists.

use std::process::Command;
use std::time::Duration;

use crate::common::*;
use delayq::JobState;
use rmpv::Value;

/// The Go server's job record: a map with string keys "1" to "5".
fn record(topic: &str, id: &str, due_s: i64, ttr_s: i64, body: &str) -> Vec<u8> {
    let map = Value::Map(vec![
        (Value::from("1"), Value::from(topic)),
        (Value::from("2"), Value::from(id)),
        (Value::from("3"), Value::from(due_s)),
        (Value::from("4"), Value::from(ttr_s)),
        (Value::from("5"), Value::from(body)),
    ]);
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &map).unwrap();
    out
}

/// What the old server holds; returns its "now" in Unix seconds.
async fn fill(old: &RedisServer) -> i64 {
    let now = old.time_ms().await / 1000;
    let mut c = old.conn().await;
    let mut pipe = redis::pipe();
    for i in 0..50 {
        let id = format!("d{i}");
        pipe.cmd("SET")
            .arg(&id)
            .arg(record("remind", &id, now + 3600, 60, "renew"));
        pipe.cmd("ZADD")
            .arg(format!("dq_bucket_{}", i % 3 + 1))
            .arg(now + 3600)
            .arg(&id);
    }
    // Replaced: a stale entry from the first push, the live one later.
    pipe.cmd("SET")
        .arg("r1")
        .arg(record("remind", "r1", now + 7200, 60, "v2"));
    pipe.cmd("ZADD")
        .arg("dq_bucket_1")
        .arg(now + 3600)
        .arg("r1");
    pipe.cmd("ZADD")
        .arg("dq_bucket_2")
        .arg(now + 7200)
        .arg("r1");
    // Popped and not finished: the lease end in a bucket.
    pipe.cmd("SET")
        .arg("l1")
        .arg(record("order", "l1", now - 10, 30, "close"));
    pipe.cmd("ZADD").arg("dq_bucket_3").arg(now + 20).arg("l1");
    // Ready, waiting for a pop.
    for id in ["q1", "q2"] {
        pipe.cmd("SET")
            .arg(id)
            .arg(record("order", id, now - 5, 30, "close"));
        pipe.cmd("RPUSH").arg("dq_queue_order").arg(id);
    }
    // Finished: the bucket entry outlived its job.
    pipe.cmd("ZADD")
        .arg("dq_bucket_1")
        .arg(now + 100)
        .arg("gone");
    let _: () = pipe.query_async(&mut c).await.unwrap();
    now
}

fn import(old: &RedisServer, new: &RedisServer, extra: &[&str]) -> String {
    import_from(&old.url(), &new.url(), extra)
}

/// `delayq import-ouqiang` from the old Redis at `old_url`.
fn import_from(old_url: &str, new_url: &str, extra: &[&str]) -> String {
    let from = format!("{old_url}?db=0");
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["import-ouqiang", "--from", &from, "--redis", new_url])
        .args(extra)
        .env("DELAYQ_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pending_job_moves_once_with_its_due_time() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let now = fill(&old).await;

    let dry = import(&old, &new, &["--dry-run"]);
    assert!(dry.contains("would import 54"), "{dry}");
    let keys: Vec<String> = new.cmd(&["KEYS", "{dq}:j:*"]).await;
    assert!(keys.is_empty(), "a dry run wrote {keys:?}");

    // A run that crashed half way landed some jobs already.
    let q = queue(&new);
    for i in 0..20 {
        q.push(&delayq::NewJob {
            due_at_ms: Some((now + 3600) * 1000),
            ..job(&format!("d{i}"), "remind", 0, 60_000)
        })
        .await
        .unwrap();
    }
    let report = import(&old, &new, &[]);
    assert!(
        report.contains("imported 34, already present 20"),
        "{report}"
    );
    assert!(
        report.contains("skipped 1: no job behind the entry"),
        "{report}"
    );

    let d = q.get("d30").await.unwrap().unwrap();
    assert_eq!((d.topic.as_str(), d.body.as_str()), ("remind", "renew"));
    assert_eq!((d.due_ms, d.ttr.as_secs()), ((now + 3600) * 1000, 60));
    assert_eq!(
        q.get("r1").await.unwrap().unwrap().due_ms,
        (now + 7200) * 1000
    );
    assert_eq!(
        q.get("l1").await.unwrap().unwrap().due_ms,
        (now + 20) * 1000
    );
    // Ready jobs are due at once and get delivered.
    let got = q
        .pop_many(&topics(&["order"]), 2, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!got.is_empty() && got.iter().all(|d| d.id.starts_with('q')));

    // A second run creates no copies.
    let again = import(&old, &new, &[]);
    assert!(again.contains("imported 0, already present 54"), "{again}");
    let o = q.topics().await.unwrap();
    let total: u64 = o
        .topics
        .values()
        .map(|c| c.delayed + c.ready + c.reserved)
        .sum();
    assert_eq!(total, 54);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_mode_leaves_each_job_in_exactly_one_place() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    fill(&old).await;
    let report = import(&old, &new, &["--remove"]);
    assert!(
        report.contains("imported 54") && report.contains("removed from the old layout 54"),
        "{report}"
    );
    for id in ["d0", "d49", "r1", "l1", "q1"] {
        let exists: i64 = old.cmd(&["EXISTS", id]).await;
        assert_eq!(exists, 0, "{id} still in the old pool");
    }
    for b in 1..=3 {
        let left: Vec<String> = old
            .cmd(&["ZRANGE", &format!("dq_bucket_{b}"), "0", "-1"])
            .await;
        assert!(left.iter().all(|id| id == "gone"), "{left:?}");
    }
    let ready: i64 = old.cmd(&["LLEN", "dq_queue_order"]).await;
    assert_eq!(ready, 0);
    let q = queue(&new);
    assert_eq!(q.get("l1").await.unwrap().unwrap().state, JobState::Delayed);
    q.close().await;
}

/// The Go server's record with a body of raw bytes (its strings may hold
/// any bytes): written as a str, or as a bin when `bin`.
fn record_raw(topic: &str, id: &str, due_s: i64, body: &[u8], bin: bool) -> Vec<u8> {
    if bin {
        let map = Value::Map(vec![
            (Value::from("1"), Value::from(topic)),
            (Value::from("2"), Value::from(id)),
            (Value::from("3"), Value::from(due_s)),
            (Value::from("4"), Value::from(60)),
            (Value::from("5"), Value::Binary(body.to_vec())),
        ]);
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, &map).unwrap();
        return out;
    }
    // The body is the record's last value: a str of as many placeholder
    // bytes, then the raw bytes in their place.
    let mut out = record(topic, id, due_s, 60, &"x".repeat(body.len()));
    let at = out.len() - body.len();
    out[at..].copy_from_slice(body);
    out
}

/// Puts jobs in the old layout's first bucket, due at `due_s`.
async fn put(old: &RedisServer, jobs: &[(&str, Vec<u8>, f64)]) {
    let mut c = old.conn().await;
    let mut pipe = redis::pipe();
    for (id, record, due_s) in jobs {
        pipe.cmd("SET").arg(*id).arg(record.as_slice());
        pipe.cmd("ZADD").arg("dq_bucket_1").arg(*due_s).arg(*id);
    }
    let _: () = pipe.query_async(&mut c).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_body_is_not_text_is_skipped_and_kept_never_emptied() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let due = old.time_ms().await / 1000 + 3600;
    put(
        &old,
        &[
            (
                "latin1",
                record_raw("t", "latin1", due, b"caf\xe9", false),
                due as f64,
            ),
            (
                "bin-bytes",
                record_raw("t", "bin-bytes", due, b"\x00\xff\xfe", true),
                due as f64,
            ),
            (
                "bin-text",
                record_raw("t", "bin-text", due, "grüß".as_bytes(), true),
                due as f64,
            ),
            ("text", record("t", "text", due, 60, "plain"), due as f64),
        ],
    )
    .await;
    let report = import(&old, &new, &["--remove"]);
    assert!(report.contains("imported 2,"), "{report}");
    assert!(
        report.contains("skipped 2: body is not UTF-8 text"),
        "{report}"
    );
    let q = queue(&new);
    assert_eq!(q.get("bin-text").await.unwrap().unwrap().body, "grüß");
    assert_eq!(q.get("text").await.unwrap().unwrap().body, "plain");
    for id in ["latin1", "bin-bytes"] {
        assert!(q.get(id).await.unwrap().is_none(), "{id} imported");
        let kept: i64 = old.cmd(&["EXISTS", id]).await;
        assert_eq!(kept, 1, "{id} removed from the old layout");
        let score: Option<f64> = old.cmd(&["ZSCORE", "dq_bucket_1", id]).await;
        assert!(score.is_some(), "{id} left its bucket");
    }
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_due_past_what_delayq_takes_is_skipped_and_kept() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let due = old.time_ms().await / 1000 + 3600;
    // 2^64 ms in seconds: times 1000 wraps to almost nothing.
    let far: i64 = 18_446_744_073_709_552;
    put(
        &old,
        &[
            ("far", record("t", "far", far, 60, "later"), far as f64),
            ("near", record("t", "near", due, 60, "soon"), due as f64),
        ],
    )
    .await;
    let report = import(&old, &new, &["--remove"]);
    assert!(report.contains("imported 1,"), "{report}");
    assert!(
        report.contains("skipped 1: due time") && report.contains("year 9999"),
        "{report}"
    );
    let q = queue(&new);
    assert!(q.get("far").await.unwrap().is_none());
    assert_eq!(q.get("near").await.unwrap().unwrap().due_ms, due * 1000);
    let kept: i64 = old.cmd(&["EXISTS", "far"]).await;
    assert_eq!(kept, 1, "the far job was removed from the old layout");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_named_like_a_ready_list_that_is_not_one_is_skipped() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    fill(&old).await;
    let _: () = old.cmd(&["SET", "dq_queue_notes", "not a list"]).await;
    let _: i64 = old.cmd(&["HSET", "dq_queue_cfg", "a", "b"]).await;
    let report = import(&old, &new, &[]);
    assert!(report.contains("imported 54,"), "{report}");
    assert!(
        report.contains("dq_queue_notes") && report.contains("dq_queue_cfg"),
        "{report}"
    );
    assert!(report.contains("not a list"), "{report}");
    let notes: String = old.cmd(&["GET", "dq_queue_notes"]).await;
    assert_eq!(notes, "not a list");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_remove_run_finds_nothing_left_and_succeeds() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    fill(&old).await;
    let first = import(&old, &new, &["--remove"]);
    assert!(first.contains("removed from the old layout 54"), "{first}");
    let again = import(&old, &new, &["--remove"]);
    assert!(
        again.contains("imported 0, already present 0")
            && again.contains("removed from the old layout 0"),
        "{again}"
    );
}

/// A job record as older Go builds wrote it: a map keyed by the struct's
/// field names (no `msgpack:"1"` tags).
fn record_named(topic: &str, id: &str, due_s: i64, ttr_s: i64, body: &str) -> Vec<u8> {
    let map = Value::Map(vec![
        (Value::from("Topic"), Value::from(topic)),
        (Value::from("Id"), Value::from(id)),
        (Value::from("Delay"), Value::from(due_s)),
        (Value::from("TTR"), Value::from(ttr_s)),
        (Value::from("Body"), Value::from(body)),
    ]);
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &map).unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_with_field_name_keys_are_imported_like_numbered_ones() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let due = old.time_ms().await / 1000 + 3600;
    put(
        &old,
        &[
            (
                "named",
                record_named("remind", "named", due, 45, "renew"),
                due as f64,
            ),
            (
                "numbered",
                record("remind", "numbered", due, 60, "v"),
                due as f64,
            ),
        ],
    )
    .await;
    let report = import(&old, &new, &["--remove"]);
    assert!(report.contains("imported 2,"), "{report}");
    assert!(!report.contains("skipped"), "{report}");
    let q = queue(&new);
    let j = q.get("named").await.unwrap().unwrap();
    assert_eq!(
        (j.topic.as_str(), j.body.as_str(), j.due_ms, j.ttr.as_secs()),
        ("remind", "renew", due * 1000, 45)
    );
    let gone: i64 = old.cmd(&["EXISTS", "named"]).await;
    assert_eq!(gone, 0, "the imported job stayed in the old layout");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_skipped_job_is_named_by_its_id_and_where_it_was_found() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let due = old.time_ms().await / 1000 + 3600;
    put(
        &old,
        &[
            ("garbled-7", b"\xc1 not msgpack".to_vec(), due as f64),
            (
                "latin-9",
                record_raw("t", "latin-9", due, b"caf\xe9", false),
                due as f64,
            ),
            ("gone-3", Vec::new(), due as f64),
        ],
    )
    .await;
    let _: i64 = old.cmd(&["DEL", "gone-3"]).await;
    let report = import(&old, &new, &[]);
    for (reason, id) in [
        ("not a job in the Go server's format", "garbled-7"),
        ("body is not UTF-8 text", "latin-9"),
        ("no job behind the entry", "gone-3"),
    ] {
        let at = report
            .find(reason)
            .unwrap_or_else(|| panic!("no {reason:?} in {report}"));
        let after = &report[at..];
        let block = after.split("\nskipped").next().unwrap();
        assert!(
            block.contains(&format!("\"{id}\"")) && block.contains("dq_bucket_1"),
            "{id} not named under {reason:?}: {report}"
        );
    }
}

/// The old Redis far away or busy (every reply 800 ms late): the import
/// waits for its answers instead of giving up after half a second with
/// "timed out" half way through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_redis_that_answers_slowly_is_waited_for() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    fill(&old).await;
    let slow = SlowProxy::start(&old, Duration::from_millis(800)).await;
    let report = tokio::task::spawn_blocking({
        let (old_url, new_url) = (slow.url(), new.url());
        move || import_from(&old_url, &new_url, &[])
    })
    .await
    .unwrap();
    assert!(report.contains("imported 54"), "{report}");
}
