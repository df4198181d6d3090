//! The storage layout: bodies of 65 to 1,024 bytes kept in 64-byte pieces
//! (layout 2) round-trip through every path that reads or writes a body,
//! and keep the job's hash a listpack; the switch that writes layout 2
//! only once every running instance reads it, and the way back
//! (`delayq layout --hold 1`) before an older build starts, with the
//! older build itself (see [`crate::old_build`]).

use std::collections::BTreeMap;
use std::time::Duration;

use delayq::{Config, JobState, NewJob, Queue};
use redis::aio::MultiplexedConnection;
use reqwest::Method;
use serde_json::json;

use crate::common::{config, delayq_run, eventually, queue, request_json, script_path, topics};
use crate::doctor::doctor;
use crate::old_build::{old_binary, start_new, start_old};
use crate::redis_cluster::TestCluster;
use crate::redis_server::RedisServer;

const HOUR_MS: u64 = 3_600_000;
/// Generous: a leader looks at the layout once a minute.
const LIMIT: Duration = Duration::from_secs(150);

/// The lengths around every edge: empty, the one-field limit, one piece
/// more, the most pieces, and past them.
const LENGTHS: [usize; 8] = [0, 63, 64, 65, 100, 1000, 1024, 1025];

/// A body of exactly `len` bytes whose 64-byte boundaries each cut a
/// three-byte character, with two-byte ones between.
pub fn body(len: usize) -> String {
    let mut s = String::with_capacity(len);
    while s.len() < len {
        let (p, left) = (s.len(), len - s.len());
        let c = if p % 64 == 63 && left >= 3 {
            '日'
        } else if left >= 2 && p % 64 < 61 && p % 5 == 0 {
            'é'
        } else {
            'a'
        };
        s.push(c);
    }
    s
}

fn pieced(len: usize) -> bool {
    (65..=1024).contains(&len)
}

/// The fields a body of `len` bytes takes in layout 2.
fn body_fields(len: usize) -> i64 {
    if pieced(len) {
        1 + len.div_ceil(64) as i64
    } else {
        1
    }
}

async fn q_cmd<T: redis::FromRedisValue>(c: &mut MultiplexedConnection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(c).await.unwrap()
}

async fn flag(c: &mut MultiplexedConnection) -> Option<String> {
    q_cmd(c, &["GET", "{dq}:layout"]).await
}

/// The push-order field of a job scheduled in a millisecond where its
/// topic has another (issue 49, lib/order.lua): two pushes in a row tie
/// whenever Redis runs them within one millisecond.
const TIE_FIELD: &str = "i";

/// (OBJECT ENCODING, HLEN less the push-order field) of job `id`'s hash.
/// Redis 6.2's compact encoding is the ziplist (with the same 64-byte
/// limit): named listpack here.
async fn shape(c: &mut MultiplexedConnection, id: &str) -> (String, i64) {
    let key = format!("{{dq}}:j:{id}");
    let encoding: String = q_cmd(c, &["OBJECT", "ENCODING", &key]).await;
    let encoding = if encoding == "ziplist" {
        "listpack".to_owned()
    } else {
        encoding
    };
    let fields: i64 = q_cmd(c, &["HLEN", &key]).await;
    let tied: i64 = q_cmd(c, &["HEXISTS", &key, TIE_FIELD]).await;
    (encoding, fields - tied)
}

async fn wait_flag(c: &mut MultiplexedConnection, want: &str) {
    let mut c = c.clone();
    eventually(LIMIT, &format!("the layout flag {want}"), || {
        let mut c = c.clone();
        async move { (flag(&mut c).await.as_deref() == Some(want)).then_some(()) }
    })
    .await;
    let _ = flag(&mut c).await;
}

/// Opens a queue on `redis` and waits for its leader's first upkeep pass
/// to have ended (the layout step runs before the topic schedules'
/// backfill, whose `done` it waits for).
async fn queue_after_upkeep(redis: &RedisServer, cfg: Config) -> Queue {
    let mut c = redis.conn().await;
    let _: () = q_cmd(&mut c, &["DEL", "{dq}:indexed"]).await;
    let q = Queue::connect(cfg).unwrap();
    eventually(LIMIT, "the upkeep's pass", || {
        let mut c = c.clone();
        async move {
            let done: Option<String> = q_cmd(&mut c, &["HGET", "{dq}:indexed", "done"]).await;
            done.map(|_| ())
        }
    })
    .await;
    q
}

/// A heartbeat as an older build writes it: no `layout`.
pub async fn older_heartbeat(c: &mut MultiplexedConnection, id: &str) {
    let (secs, _): (i64, i64) = q_cmd(c, &["TIME"]).await;
    let now = secs * 1000;
    let beat = json!({"id": id, "host": "old", "pid": 1, "version": "0.1.0",
        "started_at_ms": now, "listen": "127.0.0.1:1", "waiting_pops": 0,
        "webhook_consumers": [], "dispatching": [], "last_seen_ms": now});
    let _: () = q_cmd(
        c,
        &[
            "SET",
            &format!("{{dq}}:instance:{id}"),
            &beat.to_string(),
            "PX",
            "600000",
        ],
    )
    .await;
    let _: () = q_cmd(
        c,
        &["ZADD", "{dq}:instances", &(now + 600_000).to_string(), id],
    )
    .await;
}

async fn forget_heartbeat(c: &mut MultiplexedConnection, id: &str) {
    let _: () = q_cmd(c, &["DEL", &format!("{{dq}}:instance:{id}")]).await;
    let _: () = q_cmd(c, &["ZREM", "{dq}:instances", id]).await;
}

fn delayed(id: &str, topic: &str, body: String) -> NewJob {
    NewJob {
        id: id.into(),
        topic: topic.into(),
        body,
        delay: Duration::from_millis(HOUR_MS),
        ttr: Duration::from_secs(60),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_of_every_length_round_trip_in_pieces_and_keep_the_hash_compact() {
    let redis = RedisServer::start();
    let mut c = redis.conn().await;
    let q = Queue::connect(Config {
        keep_finished: Some(Duration::from_secs(3600)),
        ..config(&redis)
    })
    .unwrap();
    // No instance reads less: the leader raises the layout.
    wait_flag(&mut c, "3").await;
    for len in LENGTHS {
        let id = format!("d-{len}");
        q.push(&delayed(&id, "d", body(len))).await.unwrap();
        let (encoding, fields) = shape(&mut c, &id).await;
        // Topic, ttr and the body's fields (and a push order if Redis ran
        // this push in the millisecond of the last: `shape` leaves it out).
        assert_eq!(fields, 2 + body_fields(len), "{id}");
        let compact = if len <= 1024 { "listpack" } else { "hashtable" };
        assert_eq!(encoding, compact, "{id}");
        assert_eq!(q.get(&id).await.unwrap().unwrap().body, body(len), "{id}");
    }
    // Two jobs due in one millisecond (one call): the second takes its
    // push order besides, a small number, and stays compact.
    let tied = [
        delayed("e-1", "e", body(1000)),
        delayed("e-2", "e", body(1000)),
    ];
    for pushed in q.push_many(&tied).await.unwrap() {
        pushed.unwrap();
    }
    let second: Option<String> = q_cmd(&mut c, &["HGET", "{dq}:j:e-2", TIE_FIELD]).await;
    assert!(second.is_some(), "e-2 ties with e-1");
    for id in ["e-1", "e-2"] {
        let want = ("listpack".to_owned(), 2 + body_fields(1000));
        assert_eq!(shape(&mut c, id).await, want, "{id}");
    }
    let (listed, _) = q.list_jobs("d", JobState::Delayed, None, 50).await.unwrap();
    assert_eq!(listed.len(), LENGTHS.len());
    for j in &listed {
        let len: usize = j.id[2..].parse().unwrap();
        assert_eq!(
            (j.body.as_str(), j.body_left_out),
            (body(len).as_str(), None)
        );
    }

    // A new body replaces the old whatever the forms: no piece is left.
    for (id, len) in [
        ("d-1000", 100),
        ("d-100", 1000),
        ("d-1024", 10),
        ("d-63", 1025),
        ("d-1025", 70),
    ] {
        q.reschedule(id, Duration::from_millis(HOUR_MS), None, Some(&body(len)))
            .await
            .unwrap();
        let (encoding, fields) = shape(&mut c, id).await;
        assert_eq!(fields, 2 + body_fields(len), "{id} to {len}");
        if pieced(len) || len <= 64 {
            // Once a hashtable, a hash stays one (Redis never converts back).
            if id != "d-1025" {
                assert_eq!(encoding, "listpack", "{id} to {len}");
            }
        }
        assert_eq!(q.get(id).await.unwrap().unwrap().body, body(len), "{id}");
    }
    // The same body pushed again with replace: the job is written afresh.
    let mut again = delayed("d-1000", "d", body(65));
    again.if_exists = delayq::IfExists::Replace;
    q.push(&again).await.unwrap();
    assert_eq!(
        shape(&mut c, "d-1000").await,
        ("listpack".into(), 2 + body_fields(65))
    );

    // Handed out whole; a finished job's kept record drops the pieces; a
    // cancel removes the job.
    for len in LENGTHS {
        let mut j = delayed(&format!("r-{len}"), "r", body(len));
        j.delay = Duration::ZERO;
        q.push(&j).await.unwrap();
    }
    let mut got = Vec::new();
    while got.len() < LENGTHS.len() {
        let more = q
            .pop_many(&topics(&["r"]), 10, Duration::from_secs(30))
            .await
            .unwrap();
        got.extend(more);
    }
    for d in &got {
        let len: usize = d.id[2..].parse().unwrap();
        assert_eq!(d.body, body(len), "{}", d.id);
    }
    let d1000 = got.iter().find(|d| d.id == "r-1000").unwrap();
    q.finish(&d1000.id, &d1000.token).await.unwrap();
    let record: Vec<String> = q_cmd(&mut c, &["HKEYS", "{dq}:j:r-1000"]).await;
    assert!(!record.is_empty());
    assert!(
        record
            .iter()
            .all(|f| f != "z" && f != "b" && f.parse::<u32>().is_err()),
        "a kept record has no body: {record:?}"
    );
    assert_eq!(q.cancel("r-100").await.unwrap(), Some(JobState::Reserved));
    let left: Vec<String> = q_cmd(&mut c, &["HKEYS", "{dq}:j:r-100"]).await;
    assert!(
        left.iter().all(|f| f != "z" && f.parse::<u32>().is_err()),
        "a cancelled job keeps no piece: {left:?}"
    );
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_past_its_page_bytes_gives_a_pieced_bodys_length() {
    let redis = RedisServer::start();
    let mut c = redis.conn().await;
    let q = queue(&redis);
    wait_flag(&mut c, "3").await;
    // 64 bodies of 64 KiB take the page's 4 MiB of bodies: the next one,
    // due after them, is listed without its body but with its length.
    let filler = "f".repeat(delayq::job::LIST_BODY_BYTES);
    for i in 0..(delayq::job::LIST_PAGE_BODY_BYTES / delayq::job::LIST_BODY_BYTES) {
        let mut j = delayed(&format!("f-{i:03}"), "t", filler.clone());
        j.delay = Duration::from_millis(HOUR_MS - 1000);
        q.push(&j).await.unwrap();
    }
    q.push(&delayed("pieced", "t", body(1000))).await.unwrap();
    let (jobs, _) = q
        .list_jobs("t", JobState::Delayed, None, 100)
        .await
        .unwrap();
    let last = jobs.last().unwrap();
    assert_eq!(last.id, "pieced");
    assert_eq!((last.body.as_str(), last.body_left_out), ("", Some(1000)));
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_2_waits_for_every_instance_and_doctor_names_an_older_one() {
    let redis = RedisServer::start();
    let mut c = redis.conn().await;
    older_heartbeat(&mut c, "old-1").await;
    let q = queue_after_upkeep(&redis, config(&redis)).await;
    assert_eq!(flag(&mut c).await, None, "an older build runs");
    q.push(&delayed("whole", "t", body(1000))).await.unwrap();
    let whole: Option<String> = q_cmd(&mut c, &["HGET", "{dq}:j:whole", "b"]).await;
    assert_eq!(whole, Some(body(1000)));
    assert_eq!(doctor(&redis.url(), &[]).1["storage layout"].0, "ok");
    q.close().await;

    // The older build gone, the next leader's pass raises it.
    forget_heartbeat(&mut c, "old-1").await;
    let q = queue_after_upkeep(&redis, config(&redis)).await;
    assert_eq!(flag(&mut c).await.as_deref(), Some("3"));
    q.push(&delayed("pieces", "t", body(1000))).await.unwrap();
    assert_eq!(shape(&mut c, "pieces").await, ("listpack".into(), 2 + 17));
    q.close().await;

    // An older build started without going back: doctor fails naming it;
    // the leader lowers the flag so nothing more is written in pieces, and
    // rewrites what was (an older build's pop of a pieced job fails).
    older_heartbeat(&mut c, "old-2").await;
    let (passed, checks) = doctor(&redis.url(), &[]);
    let (verdict, found, fix) = &checks["storage layout"];
    assert!(!passed);
    assert_eq!(verdict, "fail", "{found}");
    assert!(
        found.contains("old-2") && found.contains("layout 3"),
        "{found}"
    );
    assert!(fix.contains("delayq layout --hold 1"), "{fix}");
    let q = queue_after_upkeep(&redis, config(&redis)).await;
    assert_eq!(flag(&mut c).await, None, "lowered");
    q.push(&delayed("after", "t", body(1000))).await.unwrap();
    let whole: Option<String> = q_cmd(&mut c, &["HGET", "{dq}:j:after", "b"]).await;
    assert_eq!(whole, Some(body(1000)));
    // What was written in pieces is rewritten whole for it.
    let whole: Option<String> = q_cmd(&mut c, &["HGET", "{dq}:j:pieces", "b"]).await;
    assert_eq!(whole, Some(body(1000)));
    assert_eq!(q.get("pieces").await.unwrap().unwrap().body, body(1000));
    assert_eq!(doctor(&redis.url(), &[]).1["storage layout"].0, "ok");
    q.close().await;
}

pub fn layout_cli(redis: &RedisServer, args: &[&str]) -> (bool, String, String) {
    let url = redis.url();
    let mut all = vec!["layout", "--redis", url.as_str()];
    all.extend_from_slice(args);
    let out = delayq_run(&all, &[("DELAYQ_REDIS", "")]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holding_layout_1_rewrites_every_pieced_body_whole_and_the_upkeep_leaves_it() {
    let redis = RedisServer::start();
    let mut c = redis.conn().await;
    let q = queue(&redis);
    wait_flag(&mut c, "3").await;
    // Pieced jobs delayed, ready, reserved and dead; a whole one besides.
    for (id, len) in [
        ("delayed", 1000),
        ("ready", 200),
        ("reserved", 1024),
        ("dead", 65),
        ("short", 10),
    ] {
        let mut j = delayed(id, id, body(len));
        if id != "delayed" {
            j.delay = Duration::ZERO;
        }
        if id == "dead" {
            j.retry = crate::common::one_attempt();
        }
        q.push(&j).await.unwrap();
    }
    for t in ["reserved", "dead"] {
        let d = q
            .pop(&topics(&[t]), Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        if t == "dead" {
            q.nack(&d.id, &d.token, None, "no").await.unwrap();
        }
    }
    q.close().await;
    let (encoding, _) = shape(&mut c, "delayed").await;
    assert_eq!(encoding, "listpack");

    let (ok, _, err) = layout_cli(&redis, &["--hold", "4"]);
    assert!(!ok);
    assert!(
        err.contains("--hold 4") && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(flag(&mut c).await.as_deref(), Some("3"));
    // Layout 3 keeps the delayed job in its topic schedule only; holding 2
    // puts it back into the shared schedule before it returns.
    let due: Option<i64> = q_cmd(&mut c, &["ZSCORE", "{dq}:s:delayed", "delayed"]).await;
    assert!(due.is_some());
    let shared: Option<i64> = q_cmd(&mut c, &["ZSCORE", "{dq}:schedule", "delayed"]).await;
    assert_eq!(shared, None, "layout 3 left it in the shared schedule");
    let (ok, out, err) = layout_cli(&redis, &["--hold", "2"]);
    assert!(ok, "{err}");
    assert!(out.contains("partition 0: layout 2 (held)"), "{out}");
    let shared: Option<i64> = q_cmd(&mut c, &["ZSCORE", "{dq}:schedule", "delayed"]).await;
    assert_eq!(shared, due, "holding 2 put it back");

    let (ok, out, err) = layout_cli(&redis, &["--hold", "1"]);
    assert!(ok, "{err}");
    assert!(out.contains("4 pieced bodies rewritten whole"), "{out}");
    assert!(out.contains("partition 0: layout 1 (held)"), "{out}");
    assert_eq!(flag(&mut c).await.as_deref(), Some("1 held"));
    for (id, len) in [
        ("delayed", 1000),
        ("ready", 200),
        ("reserved", 1024),
        ("dead", 65),
        ("short", 10),
    ] {
        let key = format!("{{dq}}:j:{id}");
        let keys: Vec<String> = q_cmd(&mut c, &["HKEYS", &key]).await;
        assert!(
            keys.iter().all(|f| f != "z" && f.parse::<u32>().is_err()),
            "{id}: {keys:?}"
        );
        let b: Option<String> = q_cmd(&mut c, &["HGET", &key, "b"]).await;
        assert_eq!(b, Some(body(len)), "{id}");
    }
    // Nothing is left in pieces after a pass: a second hold finds none.
    let (ok, out, _) = layout_cli(&redis, &["--hold", "1"]);
    assert!(ok && out.contains("0 pieced bodies"), "{out}");

    // The upkeep leaves a held flag alone; writers write whole.
    let q = queue_after_upkeep(&redis, config(&redis)).await;
    assert_eq!(flag(&mut c).await.as_deref(), Some("1 held"));
    q.push(&delayed("new", "t", body(1000))).await.unwrap();
    let b: Option<String> = q_cmd(&mut c, &["HGET", "{dq}:j:new", "b"]).await;
    assert_eq!(b, Some(body(1000)));
    q.close().await;

    // Released, the next pass raises it.
    let (ok, _, err) = layout_cli(&redis, &["--release"]);
    assert!(ok, "{err}");
    assert_eq!(flag(&mut c).await, None);
    let q = queue_after_upkeep(&redis, config(&redis)).await;
    assert_eq!(flag(&mut c).await.as_deref(), Some("3"));
    q.close().await;
}

/// Pushes `body` as job `id` of `topic` through `base` (any build).
async fn http_push(base: &str, id: &str, topic: &str, body: &str, delay_ms: u64) {
    let job =
        json!({"id": id, "topic": topic, "body": body, "delay_ms": delay_ms, "ttr_ms": 60_000});
    let (status, reply) = request_json(Method::POST, format!("{base}/v1/jobs"), Some(job)).await;
    assert_eq!(status, 201, "push {id}: {reply}");
}

/// Pops every one of `n` jobs of `topic` through `base`: id -> body.
async fn http_pop(base: &str, topic: &str, n: usize) -> BTreeMap<String, String> {
    let mut got = BTreeMap::new();
    let deadline = std::time::Instant::now() + LIMIT;
    while got.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {n} popped",
            got.len()
        );
        let ask = json!({"topics": [topic], "max": n - got.len(), "wait_ms": 1000});
        let (status, reply) = request_json(Method::POST, format!("{base}/v1/pop"), Some(ask)).await;
        assert_eq!(status, 200, "pop: {reply}");
        for j in reply["jobs"].as_array().unwrap() {
            let (id, body) = (j["id"].as_str().unwrap(), j["body"].as_str().unwrap());
            got.insert(id.to_owned(), body.to_owned());
        }
    }
    got
}

/// Bodies of 100 to 300 bytes, one per id.
fn bodies(prefix: &str, n: usize) -> BTreeMap<String, String> {
    (0..n)
        .map(|i| (format!("{prefix}-{i}"), body(100 + i * 200 / n.max(1))))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_older_build_beside_this_one_and_after_a_hold_reads_every_body() {
    // Built (the first time: minutes) before anything runs.
    old_binary();
    let redis = RedisServer::start();
    let mut c = redis.conn().await;
    // The older build first: it leads the partition.
    let old = start_old(&redis, &[]);
    let new = start_new(&redis, &[]);
    // Side by side: each pushes, each pops the other's, every body whole.
    let mixed = bodies("mixed", 20);
    for (i, (id, b)) in mixed.iter().enumerate() {
        let through = if i % 2 == 0 { &old.base } else { &new.base };
        http_push(through, id, "mixed", b, 0).await;
    }
    let mut popped = http_pop(&old.base, "mixed", 10).await;
    popped.extend(http_pop(&new.base, "mixed", 10).await);
    assert_eq!(popped, mixed);
    let waiting = bodies("waiting", 10);
    for (id, b) in &waiting {
        http_push(&new.base, id, "waiting", b, 0).await;
    }
    assert_eq!(flag(&mut c).await, None, "an older build runs");
    let whole: Option<String> = q_cmd(&mut c, &["HGET", "{dq}:j:waiting-0", "b"]).await;
    assert_eq!(whole.as_ref(), waiting.get("waiting-0"));

    // The older build gone, this one's leader raises the layout.
    old.terminate();
    wait_flag(&mut c, "3").await;
    let pieced = bodies("pieced", 10);
    for (id, b) in &pieced {
        http_push(&new.base, id, "pieced", b, 0).await;
    }
    let (encoding, _) = shape(&mut c, "pieced-9").await;
    assert_eq!(encoding, "listpack");
    let size: Option<String> = q_cmd(&mut c, &["HGET", "{dq}:j:pieced-9", "z"]).await;
    assert!(size.is_some(), "written in pieces");
    // Delayed in layout 3: in their topic schedule only.
    let later = bodies("later", 10);
    for (id, b) in &later {
        http_push(&new.base, id, "later", b, 20_000).await;
        let shared: Option<i64> = q_cmd(&mut c, &["ZSCORE", "{dq}:schedule", id]).await;
        assert_eq!(shared, None, "{id} in the shared schedule");
    }

    // Going back: the hold, then the older build again, which fires the
    // delayed jobs from the shared schedule.
    let (ok, out, err) = layout_cli(&redis, &["--hold", "1"]);
    assert!(ok, "{err}");
    assert!(out.contains("20 pieced bodies rewritten whole"), "{out}");
    for id in later.keys() {
        let shared: Option<i64> = q_cmd(&mut c, &["ZSCORE", "{dq}:schedule", id]).await;
        assert!(shared.is_some(), "{id} not put back");
    }
    new.terminate();
    let old = start_old(&redis, &[]);
    assert_eq!(http_pop(&old.base, "pieced", 10).await, pieced);
    assert_eq!(http_pop(&old.base, "waiting", 10).await, waiting);
    assert_eq!(http_pop(&old.base, "later", 10).await, later);
    old.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_partition_is_raised_and_held() {
    let cluster = TestCluster::start(3);
    let q = Queue::connect(crate::cluster::cluster_config(&cluster, 6)).unwrap();
    let all_at = |q: Queue, layout: u8, held: bool| async move {
        let l = q.layouts().await.ok()?;
        (l.len() == 6 && l.iter().all(|p| (p.layout, p.held) == (layout, held))).then_some(())
    };
    eventually(LIMIT, "every partition at layout 3", || {
        all_at(q.clone(), 3, false)
    })
    .await;
    let jobs: BTreeMap<String, String> = bodies("c", 30);
    for (id, b) in &jobs {
        q.push(&delayed(id, "t", b.clone())).await.unwrap();
    }
    let seeds = cluster.seeds().join(",");
    let args = [
        "layout",
        "--redis-cluster",
        &seeds,
        "--partitions",
        "6",
        "--hold",
        "1",
    ];
    let out = delayq_run(&args, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("30 pieced bodies rewritten whole"), "{text}");
    eventually(LIMIT, "every partition held at 1", || {
        all_at(q.clone(), 1, true)
    })
    .await;
    for (id, b) in &jobs {
        assert_eq!(&q.get(id).await.unwrap().unwrap().body, b, "{id}");
    }
    let out = delayq_run(&args, &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 pieced bodies"));
    q.close().await;
}

/// The leader changes the flag only if it is still what it read: an
/// operator's hold written between the leader's read and its write stays
/// (`layout_swap.lua`). The race itself cannot be timed from here, so the
/// script is called as a leader that read the flag before the hold would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_change_of_the_flag_leaves_a_hold_written_after_its_read() {
    use delayq::testing::{call, relayout, Keys};
    let redis = RedisServer::start();
    let mut c = redis.conn().await;
    let q = queue_after_upkeep(&redis, config(&redis)).await;
    wait_flag(&mut c, "3").await;
    // No leader of its own beside the calls below.
    q.close().await;
    let path = script_path(&redis, relayout::SWAP).await;
    let swap = |from: &str, to: &str| {
        let mut args = redis::Cmd::new();
        args.arg(from).arg(to);
        call(path, relayout::SWAP, &Keys::new("dq"), false, 0, &args)
    };
    // The operator holds layout 1 after the leader read "3".
    let _: () = q_cmd(&mut c, &["SET", "{dq}:layout", "1 held"]).await;
    let r: (i64, i64) = swap("3", "").query_async(&mut c).await.unwrap();
    assert_eq!(r, (0, 0), "a stale read writes nothing");
    assert_eq!(flag(&mut c).await.as_deref(), Some("1 held"));
    // What it read is what is there: written.
    let r: (i64, i64) = swap("1 held", "2").query_async(&mut c).await.unwrap();
    assert_eq!(r, (0, 1));
    assert_eq!(flag(&mut c).await.as_deref(), Some("2"));
    // A flag an operator broke reads as layout 1, not held.
    let _: () = q_cmd(&mut c, &["DEL", "{dq}:layout"]).await;
    let _: () = q_cmd(&mut c, &["HSET", "{dq}:layout", "f", "1"]).await;
    let r: (i64, i64) = swap("", "2").query_async(&mut c).await.unwrap();
    assert_eq!(r, (0, 1));
    assert_eq!(flag(&mut c).await.as_deref(), Some("2"));
    // A raise to 3 owes the way back from then on (index.lua's `out`).
    let _: () = q_cmd(&mut c, &["HDEL", "{dq}:indexed", "out"]).await;
    let r: (i64, i64) = swap("2", "3").query_async(&mut c).await.unwrap();
    assert_eq!(r, (0, 1));
    let out: Option<String> = q_cmd(&mut c, &["HGET", "{dq}:indexed", "out"]).await;
    assert_eq!(out.as_deref(), Some("1"));
}

/// Layout 3 in force (delayed jobs out of the shared schedule) when an
/// instance that reads less appears: the leader lowers the flag within
/// seconds and puts every delayed job back into the shared schedule at its
/// time, where an older build fires from; nothing is lost or early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_3_is_lowered_and_the_delayed_jobs_put_back_when_an_older_build_appears() {
    let redis = RedisServer::start();
    let mut c = redis.conn().await;
    let q = queue(&redis);
    wait_flag(&mut c, "3").await;
    let mut dues = BTreeMap::new();
    for i in 0..300 {
        let mut j = delayed(&format!("d{i}"), ["t", "a:b"][i % 2], format!("b{i}"));
        // d0 falls due after the leader's watch (15 s) and the way back,
        // so it is put back with the others, then fires once.
        j.delay = Duration::from_millis(if i == 0 { 45_000 } else { HOUR_MS + i as u64 });
        dues.insert(j.id.clone(), q.push(&j).await.unwrap().due_ms);
    }
    let shared: usize = q_cmd(&mut c, &["ZCARD", "{dq}:schedule"]).await;
    assert_eq!(shared, 0, "layout 3 wrote to the shared schedule");
    older_heartbeat(&mut c, "old-1").await;
    let t0 = std::time::Instant::now();
    eventually(
        LIMIT,
        "every delayed job back in the shared schedule",
        || {
            let (mut c, dues) = (c.clone(), &dues);
            async move {
                let all: Vec<(String, i64)> = q_cmd(
                    &mut c,
                    &["ZRANGE", "{dq}:schedule", "0", "-1", "WITHSCORES"],
                )
                .await;
                let all: BTreeMap<String, i64> = all.into_iter().collect();
                (&all == dues).then_some(())
            }
        },
    )
    .await;
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "put back only after {:?}: the leader did not watch",
        t0.elapsed()
    );
    assert_eq!(
        flag(&mut c).await,
        None,
        "lowered to what the older build reads"
    );
    eventually(LIMIT, "the way back ended", || {
        let mut c = c.clone();
        async move {
            let left: Vec<Option<String>> =
                q_cmd(&mut c, &["HMGET", "{dq}:indexed", "split", "out", "phase"]).await;
            left.iter().all(Option::is_none).then_some(())
        }
    })
    .await;
    // Fired once, never early.
    let d = q
        .pop(&topics(&["t"]), Duration::from_secs(90))
        .await
        .unwrap()
        .expect("d0 fired");
    assert_eq!(d.id, "d0");
    assert!(d.popped_at_us >= dues["d0"] * 1000, "early");
    forget_heartbeat(&mut c, "old-1").await;
    q.close().await;
}

/// A quick roll back: an older build starts and the last instance that
/// reads layout 3 stops before its leader's watch (every 15 s) has seen
/// it. Stopping, the leader looks once more: the flag is lowered and every
/// delayed job is back in the shared schedule, where the older build
/// fires from, before the stop returns. Both older shapes: a build before
/// topic schedules (reads 1), and one that keeps them and reads 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_instance_reading_layout_3_puts_the_delayed_jobs_back_as_it_stops() {
    let redis = RedisServer::start();
    let mut c = redis.conn().await;
    for (older, lowered_to) in [("old-1", None), ("old-2", Some("2"))] {
        let _: () = q_cmd(&mut c, &["FLUSHALL"]).await;
        let q = queue(&redis);
        wait_flag(&mut c, "3").await;
        let mut dues = BTreeMap::new();
        for i in 0..300 {
            let j = delayed(&format!("d{i}"), ["t", "a:b"][i % 2], format!("b{i}"));
            dues.insert(j.id.clone(), q.push(&j).await.unwrap().due_ms);
        }
        older_heartbeat(&mut c, older).await;
        if lowered_to.is_some() {
            reads_2_with_topic_schedules(&mut c, older).await;
        }
        q.close().await;
        let all: Vec<(String, i64)> = q_cmd(
            &mut c,
            &["ZRANGE", "{dq}:schedule", "0", "-1", "WITHSCORES"],
        )
        .await;
        let all: BTreeMap<String, i64> = all.into_iter().collect();
        let wrong = dues.iter().filter(|(id, due)| all.get(*id) != Some(due));
        assert_eq!(
            wrong.count(),
            0,
            "{older}: delayed jobs not in the shared schedule at their time"
        );
        assert_eq!(all.len(), dues.len(), "{older}");
        assert_eq!(
            flag(&mut c).await.as_deref(),
            lowered_to,
            "{older}: lowered to what it reads"
        );
    }
}

/// Rewrites heartbeat `id` as a build that keeps topic schedules and reads
/// layout 2 writes it.
async fn reads_2_with_topic_schedules(c: &mut MultiplexedConnection, id: &str) {
    let key = format!("{{dq}}:instance:{id}");
    let beat: String = q_cmd(c, &["GET", &key]).await;
    let mut beat: serde_json::Value = serde_json::from_str(&beat).unwrap();
    beat["layout"] = json!(2);
    beat["topic_schedules"] = json!(true);
    let _: () = q_cmd(c, &["SET", &key, &beat.to_string(), "PX", "600000"]).await;
}
