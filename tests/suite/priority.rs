//! Priorities among ready jobs: priority 0 (the default) is handed out
//! first, then 1, 2, ... 9; first in, first out within each; pause and rate
//! limits as before; kept by retries, requeues and releases; listed,
//! counted and aged; refused out of range; per partition on a split queue.

use std::time::Duration;

use crate::common::*;
use delayq::{Config, JobState, NewJob, Queue, RateLimit, RetryPolicy};
use serde_json::{json, Value};

const LIMIT: Duration = Duration::from_secs(10);

fn prio(id: &str, topic: &str, priority: u8) -> NewJob {
    NewJob {
        priority,
        ..job(id, topic, 0, 60_000)
    }
}

/// Waits until `n` jobs of `topic` are ready.
async fn ready(q: &Queue, topic: &str, n: u64) {
    eventually(LIMIT, &format!("{n} jobs of {topic} ready"), || async {
        let o = q.topics().await.ok()?;
        (o.topics.get(topic)?.ready == n).then_some(())
    })
    .await;
}

/// Pops one job at a time until none is ready: their ids, in order.
pub(crate) async fn drain(q: &Queue, topic: &str) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let got = q.try_pop(&topics(&[topic]), 1).await.unwrap();
        let Some(d) = got.into_iter().next() else {
            return out;
        };
        q.finish(&d.id, &d.token).await.unwrap();
        out.push(d.id);
    }
}

/// The keys of the priority levels (lists and indexes) left in Redis.
async fn level_keys(redis: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = redis.cmd(&["KEYS", "*readyp:*"]).await;
    let idx: Vec<String> = redis.cmd(&["KEYS", "*levels:*"]).await;
    keys.extend(idx);
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_jobs_go_out_by_priority_and_first_in_first_out_within_each() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // Pushed mixed: ids sort in push order, so jobs that fall due in the
    // same millisecond become ready in push order too.
    let pushed = [
        ("a00", 5),
        ("a01", 0),
        ("a02", 9),
        ("a03", 1),
        ("a04", 5),
        ("a05", 0),
        ("a06", 1),
        ("a07", 9),
        ("a08", 5),
        ("a09", 0),
    ];
    for (id, p) in pushed {
        q.push(&prio(id, "mixed", p)).await.unwrap();
    }
    ready(&q, "mixed", 10).await;
    assert_eq!(q.get("a00").await.unwrap().unwrap().priority, 5);
    assert_eq!(q.get("a01").await.unwrap().unwrap().priority, 0);

    // One batch pop crosses from priority 0 into 1.
    let batch = q.try_pop(&topics(&["mixed"]), 4).await.unwrap();
    let ids: Vec<&str> = batch.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["a01", "a05", "a09", "a03"]);
    for d in &batch {
        q.finish(&d.id, &d.token).await.unwrap();
    }
    assert_eq!(
        drain(&q, "mixed").await,
        ["a06", "a00", "a04", "a08", "a02", "a07"]
    );
    // Nothing is left behind: no level lists, no index of levels.
    assert_eq!(level_keys(&redis).await, Vec::<String>::new());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_rate_limits_hold_with_priorities() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.pause("held").await.unwrap();
    for (id, p) in [("h1", 3), ("h2", 0), ("h3", 3), ("h4", 7)] {
        q.push(&prio(id, "held", p)).await.unwrap();
    }
    ready(&q, "held", 4).await;
    assert!(q.try_pop(&topics(&["held"]), 10).await.unwrap().is_empty());

    // One token now, the next in 100 s: one job, the first by priority.
    q.set_rate(
        "held",
        RateLimit {
            per_second: 0.01,
            burst: 1,
        },
    )
    .await
    .unwrap();
    q.resume("held").await.unwrap();
    let got = q.try_pop(&topics(&["held"]), 10).await.unwrap();
    let ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["h2"]);
    assert!(q.try_pop(&topics(&["held"]), 10).await.unwrap().is_empty());
    let o = q.topics().await.unwrap();
    assert_eq!(o.topics["held"].ready, 3);

    // Lifted, the rest go by priority.
    q.clear_rate("held").await.unwrap();
    assert_eq!(drain(&q, "held").await, ["h1", "h3", "h4"]);
    q.close().await;
}

/// A plain job and a priority-1 job of `retry`, pushed; then waits until
/// `want` jobs are ready.
async fn others(q: &Queue, n: u32, want: u64) {
    q.push(&prio(&format!("plain{n}"), "retry", 0))
        .await
        .unwrap();
    q.push(&prio(&format!("one{n}"), "retry", 1)).await.unwrap();
    ready(q, "retry", want).await;
}

/// Pops three of `retry`, finishes the first two: their ids, and the third.
async fn take_three(q: &Queue) -> (Vec<String>, delayq::Delivery) {
    let d = q.try_pop(&topics(&["retry"]), 3).await.unwrap();
    let ids: Vec<String> = d.iter().map(|d| d.id.clone()).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    for d in &d[..2] {
        q.finish(&d.id, &d.token).await.unwrap();
    }
    (ids, d[2].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_releases_and_requeues_keep_a_jobs_priority() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let once_then_dead = Some(RetryPolicy {
        intervals: vec![Duration::from_millis(50)],
        max_attempts: Some(3),
    });
    q.push(&NewJob {
        retry: once_then_dead,
        ..prio("r", "retry", 2)
    })
    .await
    .unwrap();
    ready(&q, "retry", 1).await;

    // Each way back to ready, with a plain and a priority-1 job ready
    // beside it: the plain one goes first, then 1, then the job (2).
    // A nack with no wait: ready again at once.
    let d = q.try_pop(&topics(&["retry"]), 1).await.unwrap().remove(0);
    others(&q, 1, 2).await;
    q.nack(&d.id, &d.token, Some(Duration::ZERO), "boom")
        .await
        .unwrap();
    ready(&q, "retry", 3).await;
    let (ids, d) = take_three(&q).await;
    assert_eq!(ids, ["plain1", "one1", "r"]);

    // A release: back at the front of its level.
    q.release(&d.id, &d.token).await.unwrap();
    others(&q, 2, 3).await;
    let (ids, d) = take_three(&q).await;
    assert_eq!(ids, ["plain2", "one2", "r"]);

    // A nack whose retry waits 50 ms: delayed, then ready at its level.
    q.nack(&d.id, &d.token, None, "boom again").await.unwrap();
    others(&q, 3, 3).await;
    let (ids, d) = take_three(&q).await;
    assert_eq!(ids, ["plain3", "one3", "r"]);
    assert_eq!(d.attempts, 3);

    // The third failure kills it; requeued, it keeps its priority.
    let n = q.nack(&d.id, &d.token, None, "dead").await.unwrap();
    assert_eq!(n.state, JobState::Dead);
    others(&q, 4, 2).await;
    assert_eq!(q.requeue_dead("retry", &[]).await.unwrap(), 1);
    let (ids, d) = take_three(&q).await;
    assert_eq!(ids, ["plain4", "one4", "r"]);
    assert_eq!(q.get("r").await.unwrap().unwrap().priority, 2);
    q.finish(&d.id, &d.token).await.unwrap();
    assert_eq!(level_keys(&redis).await, Vec::<String>::new());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_or_deleted_ready_job_leaves_its_level() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    for (id, p) in [("x", 6), ("y", 6), ("z", 4)] {
        q.push(&prio(id, "moves", p)).await.unwrap();
    }
    ready(&q, "moves", 3).await;
    // x moves to the default level, z is deleted: y is the one job left
    // in level 6. Their old entries stay in levels 6 and 4 (taking them out
    // would walk the lists) until the pops below skip them.
    q.push(&prio("x", "moves", 0)).await.unwrap();
    q.delete("z").await.unwrap();
    ready(&q, "moves", 2).await;
    assert_eq!(q.get("x").await.unwrap().unwrap().priority, 0);
    assert_eq!(drain(&q, "moves").await, ["x", "y"]);
    let idx: Vec<String> = redis.cmd(&["ZRANGE", "{dq}:levels:moves", "0", "-1"]).await;
    assert_eq!(idx, Vec::<String>::new());
    assert_eq!(level_keys(&redis).await, Vec::<String>::new());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_counts_and_the_oldest_ready_age_include_prioritised_jobs() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // Only prioritised jobs ready: the default list is empty.
    for (id, p) in [("l1", 3), ("l2", 1), ("l3", 3), ("l4", 9), ("l5", 1)] {
        q.push(&prio(id, "listed", p)).await.unwrap();
    }
    ready(&q, "listed", 5).await;
    // They wait a while before a plain job joins them: the oldest ready job
    // is a prioritised one.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    q.push(&prio("l0", "listed", 0)).await.unwrap();
    ready(&q, "listed", 6).await;

    // Pages of two, in the order pops will take them.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let (page, next) = q
            .list_jobs("listed", JobState::Ready, cursor.as_deref(), 2)
            .await
            .unwrap();
        seen.extend(page.iter().map(|j| (j.id.clone(), j.priority)));
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let want = [
        ("l0", 0),
        ("l2", 1),
        ("l5", 1),
        ("l1", 3),
        ("l3", 3),
        ("l4", 9),
    ];
    let want: Vec<(String, u8)> = want.iter().map(|(i, p)| (i.to_string(), *p)).collect();
    assert_eq!(seen, want);

    // Over HTTP: the job and the listing show the priority (none when 0),
    // the topic counts them all and ages the oldest, which is prioritised.
    let s = TestServer::start(q.clone(), Default::default()).await;
    let (status, v) = get_json(&s.base, "/v1/jobs/l4").await;
    assert_eq!((status, &v["priority"]), (200, &json!(9)), "{v}");
    let (_, v) = get_json(&s.base, "/v1/jobs/l0").await;
    assert_eq!(v.get("priority"), None, "{v}");
    let (status, v) = get_json(&s.base, "/v1/topics").await;
    assert_eq!(status, 200, "{v}");
    let t = &v["topics"]["listed"];
    assert_eq!(t["ready"], 6, "{v}");
    // The oldest waits in level 3 (l1): it fell due at least 1.5 s before
    // l0, so it has waited at least that much longer.
    let (_, v) = get_json(&s.base, "/v1/jobs/l1").await;
    let l1_due = v["due_at_ms"].as_i64().unwrap();
    let (_, v) = get_json(&s.base, "/v1/jobs/l0").await;
    let l0_due = v["due_at_ms"].as_i64().unwrap();
    assert!(l0_due - l1_due >= 1500, "{l1_due} {l0_due}");
    let (_, v) = get_json(&s.base, "/v1/topics").await;
    let age = v["topics"]["listed"]["oldest_ready_ms"].as_i64();
    assert!(age.is_some_and(|a| a >= l0_due - l1_due), "{v}");
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priority_out_of_range_is_refused_naming_it_and_writes_nothing() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let e = q.push(&prio("lib", "bad", 10)).await.unwrap_err();
    assert!(e.to_string().contains("priority 10 is out of range"), "{e}");
    let s = TestServer::start(q.clone(), Default::default()).await;
    // Out of range: 422 (a limit broken); not a whole number: 400.
    for (bad, want) in [
        (json!(10), 422),
        (json!(-1), 422),
        (json!(256), 422),
        (json!(1.5), 400),
        (json!("high"), 400),
    ] {
        let body = json!({"id": "b", "topic": "bad", "priority": bad});
        let r = reqwest::Client::new()
            .post(format!("{}/v1/jobs", s.base))
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let v: Value = r.json().await.unwrap();
        assert_eq!(status, want, "{bad}: {v}");
        assert!(v.to_string().contains("priority"), "{bad}: {v}");
    }
    // In a batch, the bad job alone is refused.
    let v = post(
        &s.base,
        "/v1/jobs/batch",
        &json!({"jobs": [
            {"id": "ok", "topic": "bad", "priority": 9},
            {"id": "b", "topic": "bad", "priority": 12},
        ]})
        .to_string(),
    )
    .await;
    assert_eq!(v["accepted"], 1, "{v}");
    assert_eq!(v["results"][1]["status"], 422, "{v}");
    assert!(v["results"][1].to_string().contains("priority"), "{v}");
    assert!(q.get("b").await.unwrap().is_none());
    assert!(q.get("lib").await.unwrap().is_none());
    assert_eq!(q.get("ok").await.unwrap().unwrap().priority, 9);
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_split_queue_each_partition_hands_out_by_priority() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    each_partition_by_priority(&q, 4).await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_cluster_each_partition_hands_out_by_priority() {
    let cluster = crate::redis_cluster::TestCluster::start(3);
    let q = Queue::connect(crate::cluster::cluster_config(&cluster, 6)).unwrap();
    q.check_connection().await.unwrap();
    each_partition_by_priority(&q, 6).await;
    q.close().await;
}

/// Mixed priorities pushed over `parts` partitions: batch pops take each
/// partition's jobs smallest number first, in push order within a number,
/// and a listing shows each once.
async fn each_partition_by_priority(q: &Queue, parts: usize) {
    let n = 48;
    for i in 0..n {
        q.push(&prio(&format!("s{i:03}"), "split", (i % 4 * 3) as u8))
            .await
            .unwrap();
    }
    ready(q, "split", n as u64).await;
    let priority_of = |id: &str| id[1..].parse::<usize>().unwrap() % 4 * 3;
    // Batch pops of five: every partition's jobs come out lowest number
    // first, in push order within a number.
    let mut per_part: Vec<Vec<String>> = vec![Vec::new(); parts];
    let mut total = 0;
    loop {
        let got = q.try_pop(&topics(&["split"]), 5).await.unwrap();
        if got.is_empty() {
            break;
        }
        for d in got {
            per_part[delayq::testing::partition_of(&d.id, parts)].push(d.id.clone());
            q.finish(&d.id, &d.token).await.unwrap();
            total += 1;
        }
    }
    assert_eq!(total, n);
    for ids in &per_part {
        let mut sorted = ids.clone();
        sorted.sort_by_key(|id| (priority_of(id), id.clone()));
        assert_eq!(ids, &sorted);
    }
    // Listed over the partitions the same way, each job once.
    for i in 0..8 {
        q.push(&prio(&format!("t{i}"), "split", (i % 2 * 5) as u8))
            .await
            .unwrap();
    }
    ready(q, "split", 8).await;
    let mut listed: Vec<Vec<(u8, String)>> = vec![Vec::new(); parts];
    let mut seen = std::collections::HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let (page, next) = q
            .list_jobs("split", JobState::Ready, cursor.as_deref(), 3)
            .await
            .unwrap();
        for j in page {
            assert!(seen.insert(j.id.clone()), "{} listed twice", j.id);
            listed[delayq::testing::partition_of(&j.id, parts)].push((j.priority, j.id));
        }
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 8);
    for jobs in &listed {
        let mut sorted = jobs.clone();
        sorted.sort();
        assert_eq!(jobs, &sorted);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_a_topic_wakes_pops_waiting_on_another_instance_for_its_prioritised_jobs() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // Another delayq instance: it hears of the resume by the ready notice.
    let other = queue(&redis);
    q.pause("woken").await.unwrap();
    q.push(&prio("w1", "woken", 4)).await.unwrap();
    ready(&q, "woken", 1).await;
    eventually(LIMIT, "the other instance to listen", || async {
        other.subscriber_connected().then_some(())
    })
    .await;
    let waiter = {
        let other = other.clone();
        tokio::spawn(async move {
            other
                .pop(&topics(&["woken"]), Duration::from_secs(30))
                .await
                .unwrap()
        })
    };
    eventually(LIMIT, "the pop to wait", || async {
        (other.waiting_pops() == 1).then_some(())
    })
    .await;
    let resumed = std::time::Instant::now();
    q.resume("woken").await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiting pop was woken")
        .unwrap()
        .expect("a job");
    assert_eq!(got.id, "w1");
    // Woken by the resume's ready notice, not by a periodic look.
    assert!(
        resumed.elapsed() < Duration::from_secs(5),
        "{:?}",
        resumed.elapsed()
    );
    other.close().await;
    q.close().await;
}

/// Redis commands (INFO commandstats, the script call and the reading
/// itself left out) that `n` pops of one job each from `topic` run, with nothing else
/// running against Redis.
async fn commands_per_pop(redis: &RedisServer, topic: &str, n: usize) -> f64 {
    use delayq::testing::{call, scripts, Keys};
    let path = script_path(redis, scripts::POP).await;
    // One connection, opened before the count: a new one's setup (the
    // client's CLIENT SETINFO, which Redis 6.2 counts as failed calls)
    // is no pop's.
    let mut conn = redis.conn().await;
    let _: String = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    for i in 0..n {
        let mut args = redis::Cmd::new();
        args.arg(1)
            .arg(1 << 20)
            .arg(format!("n{i}"))
            .arg("")
            .arg(topic);
        let cmd = call(path, scripts::POP, &Keys::new("dq"), false, 0, &args);
        let _: redis::Value = cmd.query_async(&mut conn).await.unwrap();
    }
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    let calls: u64 = info
        .lines()
        .filter(|l| {
            !["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_config"]
                .iter()
                .any(|c| l.starts_with(c))
        })
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(":calls="))
        .filter_map(|(_, rest)| rest.split(',').next()?.parse::<u64>().ok())
        .sum();
    calls as f64 / n as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prioritised_pop_runs_three_redis_commands_more_than_a_plain_one() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let n = 500;
    let jobs = |topic: &str, p: u8| -> Vec<NewJob> {
        (0..n)
            .map(|i| prio(&format!("{topic}{i}"), topic, p))
            .collect()
    };
    push_all(&q, &jobs("plain", 0)).await;
    push_all(&q, &jobs("prio", 4)).await;
    ready(&q, "plain", n as u64).await;
    ready(&q, "prio", n as u64).await;
    // Nothing else runs against Redis while the pops are counted.
    q.close().await;
    let plain = commands_per_pop(&redis, "plain", n).await;
    let prioritised = commands_per_pop(&redis, "prio", n).await;
    println!("redis commands per one-job pop: plain {plain:.2}, priority 4 {prioritised:.2}");
    // A plain pop: TIME, HMGET (rate), SISMEMBER (paused), RPOP, HMGET,
    // HSET, ZADD (lease), LPUSH (latest pops, and an LTRIM every 64th
    // pop), HINCRBY twice (counts): as before priorities. A prioritised one: the RPOP that finds
    // the default list empty, a ZRANGE of the levels, an LLEN after.
    // (A connection's own setup commands round away.)
    assert_eq!(
        (prioritised.round() - plain.round()) as i64,
        3,
        "{plain} {prioritised}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_pop_runs_the_commands_it_ran_before_priorities() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let n = 200;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| job(&format!("p{i:03}"), "t", 0, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    ready(&q, "t", n as u64).await;
    q.close().await;
    // The 10 commands listed above (the LTRIM rounds away), and the ZRANGE
    // that sees whether the lease's end is the schedule's new earliest (the
    // partition leader's term then ends by it): no look at the priority
    // levels while the default list has jobs. By EVALSHA (Redis 6.2) one
    // more: the DEL of the never-written `moving` key that stands in for
    // allow-oom.
    let expected = if has_functions(&redis).await { 11 } else { 12 };
    let plain = commands_per_pop(&redis, "t", n).await;
    assert_eq!(plain.round() as i64, expected, "{plain}");
}

/// One dispatch call of at most `limit` jobs, made here (the queue under
/// test does not dispatch): with `ids`, as for their expired trigger keys;
/// without, a sweep. How many jobs it moved.
async fn dispatch_once(redis: &RedisServer, limit: usize, ids: &[&str]) -> i64 {
    use delayq::testing::{call, scripts, Keys};
    let path = script_path(redis, scripts::DISPATCH).await;
    let mut args = redis::Cmd::new();
    args.arg(limit).arg(1000).arg(86_400_000).arg(0).arg(0);
    for id in ids {
        args.arg(*id);
    }
    let cmd = call(path, scripts::DISPATCH, &Keys::new("dq"), false, 0, &args);
    let reply: Vec<redis::Value> = cmd.query_async(&mut redis.conn().await).await.unwrap();
    match reply[2] {
        redis::Value::Int(n) => n,
        ref v => panic!("dispatch replied {v:?}"),
    }
}

/// Sweeps of at most `limit` jobs until one moves nothing.
async fn sweep_all(redis: &RedisServer, limit: usize) {
    while dispatch_once(redis, limit, &[]).await > 0 {}
}

/// A queue that pushes and pops but leaves dispatch to the test, in
/// `layout` ("1 held", "3 held"), and the Redis time (ms) at which the
/// jobs `same_ms` pushes fall due.
async fn held_queue(redis: &RedisServer, layout: &str) -> (Queue, i64) {
    let _: () = redis.cmd(&["SET", "{dq}:layout", layout]).await;
    let q = Queue::connect(Config {
        dispatch: false,
        ..config(redis)
    })
    .unwrap();
    // Every push lands before `at` even on a busy machine (a push after it
    // would be ready at once, ahead of the scheduled ones): the library is
    // loaded first, and the pushes get seconds.
    let _ = q.get("warm-up").await.unwrap();
    (q, redis.time_ms().await + 3000)
}

/// Pushes, all due at `at` in topic "same", whose ids sort against the
/// order they are pushed in: a batch of three, a batch of ten, single
/// pushes, a priority-1 batch and (with `groups`: layout 1 takes none) a
/// group's batch. Returns the order in which a drain must hand them out:
/// priority 0 in push order, then priority 1 in push order, then the
/// group's line in push order.
async fn same_ms(q: &Queue, at: i64, groups: bool) -> Vec<String> {
    let at_job = |id: &str, priority: u8, group: Option<&str>| NewJob {
        due_at_ms: Some(at),
        priority,
        group: group.map(str::to_owned),
        ..job(id, "same", 0, 60_000)
    };
    let mut want = Vec::new();
    let mut batch = |ids: Vec<String>, priority: u8, group: Option<&str>| {
        want.push((priority, group.is_some(), ids.clone()));
        ids.iter()
            .map(|id| at_job(id, priority, group))
            .collect::<Vec<_>>()
    };
    let mut calls = vec![
        batch(
            vec!["z-first".into(), "a-second".into(), "m-third".into()],
            0,
            None,
        ),
        batch((1..=10).map(|i| format!("rl-{i}")).collect(), 0, None),
        batch(vec!["y-single".into()], 0, None),
        batch(vec!["b-single".into()], 0, None),
        batch(vec!["p-z".into(), "p-a".into()], 1, None),
    ];
    if groups {
        calls.push(batch(
            vec!["g-z".into(), "g-a".into(), "g-m".into()],
            0,
            Some("g"),
        ));
    }
    for jobs in &calls {
        push_all(q, jobs).await;
    }
    // Grouped jobs after the ungrouped ones; by priority among those.
    want.sort_by_key(|(priority, grouped, _)| (*grouped, *priority));
    want.into_iter().flat_map(|(_, _, ids)| ids).collect()
}

/// Waits until Redis's clock has passed `at`.
async fn past(redis: &RedisServer, at: i64) {
    eventually(LIMIT, "Redis's clock past the due time", || async {
        (redis.time_ms().await > at).then_some(())
    })
    .await;
}

/// Jobs that fall due in the same millisecond become ready in the order
/// they were pushed (issue 49): within one push call and across calls,
/// within each priority level and a group's line, whether a sweep moves
/// them or the expired event of one of them, in layouts 1 and 3. (The ids
/// sort against push order: a schedule's ties, by id, handed out
/// "a-second" before "z-first", and "rl-10" before "rl-2".) Layout 2
/// schedules as layout 1 does, and takes groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_due_in_the_same_millisecond_become_ready_in_push_order() {
    for layout in ["1 held", "2 held", "3 held"] {
        for by_event in [false, true] {
            let redis = RedisServer::start();
            let (q, at) = held_queue(&redis, layout).await;
            let want = same_ms(&q, at, layout != "1 held").await;
            past(&redis, at).await;
            if by_event {
                // The event of a job pushed in the middle comes first.
                dispatch_once(&redis, 1000, &["rl-5"]).await;
            }
            sweep_all(&redis, 1000).await;
            assert_eq!(
                drain(&q, "same").await,
                want,
                "layout {layout}, by event: {by_event}"
            );
            q.close().await;
        }
    }
}

/// The issue's recipe on a dispatching queue: a batch of three with one
/// delay pops first in, first out, whichever dispatch path moved it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_one_delay_pops_in_push_order() {
    for layout in ["1 held", "3 held"] {
        let redis = RedisServer::start();
        let _: () = redis.cmd(&["SET", "{dq}:layout", layout]).await;
        let q = queue(&redis);
        for round in 0..5 {
            let topic = format!("batch{round}");
            let ids = ["z-first", "a-second", "m-third"].map(|id| format!("{id}-{round}"));
            let jobs: Vec<NewJob> = ids.iter().map(|id| job(id, &topic, 300, 60_000)).collect();
            push_all(&q, &jobs).await;
            ready(&q, &topic, 3).await;
            assert_eq!(
                drain(&q, &topic).await,
                ids,
                "layout {layout}, round {round}"
            );
        }
        q.close().await;
    }
}

/// A dispatch call stops at its limit: one that would cut a millisecond's
/// jobs of a topic in two leaves that millisecond whole to the next call,
/// so the order holds across calls (here 3 calls of at most 10 jobs, over
/// 8 jobs due at one time and 8 at the next).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_limit_does_not_cut_a_milliseconds_order() {
    for layout in ["1 held", "3 held"] {
        let redis = RedisServer::start();
        let (q, at) = held_queue(&redis, layout).await;
        let mut want = Vec::new();
        for (k, due) in [at, at + 1].into_iter().enumerate() {
            // Ids sorting against push order: "j0-7" is pushed first.
            let jobs: Vec<NewJob> = (0..8)
                .rev()
                .map(|i| NewJob {
                    due_at_ms: Some(due),
                    ..job(&format!("j{k}-{i}"), "cut", 0, 60_000)
                })
                .collect();
            want.extend(jobs.iter().map(|j| j.id.clone()));
            push_all(&q, &jobs).await;
        }
        past(&redis, at + 1).await;
        sweep_all(&redis, 10).await;
        assert_eq!(drain(&q, "cut").await, want, "layout {layout}");
        q.close().await;
    }
}
