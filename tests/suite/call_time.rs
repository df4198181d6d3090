//! A dispatch or push call stops once it has run about a millisecond
//! (CALL.BUDGET_US, issue 54): whatever the shape of its jobs (a thousand topics, a
//! thousand groups), no call holds Redis for long. It stops at a safe
//! point: a dispatch moves a topic's millisecond it began whole, in push
//! order, a push stops after a whole job; the next call does the rest,
//! nothing lost, nothing twice.

use std::time::Duration;

use crate::common::*;
use crate::priority::drain;
use delayq::{Config, NewJob, PushOutcome, Queue};

const LIMIT: Duration = Duration::from_secs(30);
/// The shapes of load the dispatch tests use: topics, milliseconds a
/// topic, jobs a millisecond; each 4,000 moves, several milliseconds of
/// Redis time on any machine. Many topics stop a call between topics;
/// one topic stops it within the topic, part-way through a millisecond's
/// ties.
const SHAPES: [(usize, i64, usize); 2] = [(200, 2, 10), (1, 400, 10)];

/// One dispatch call with a limit far above what is due, made here (the
/// queue under test does not dispatch): with `ids`, as for their expired
/// trigger keys; without, a sweep. How many jobs it moved, and its next
/// due time (-1: none said).
async fn dispatch_once(redis: &RedisServer, ids: &[String]) -> (i64, i64) {
    dispatch_limited(redis, 100_000, ids).await
}

/// [`dispatch_once`] with a limit.
async fn dispatch_limited(redis: &RedisServer, limit: usize, ids: &[String]) -> (i64, i64) {
    use delayq::testing::{call, scripts, Keys};
    let path = script_path(redis, scripts::DISPATCH).await;
    let mut args = redis::Cmd::new();
    args.arg(limit).arg(1000).arg(86_400_000).arg(0).arg(0);
    for id in ids {
        args.arg(id);
    }
    let cmd = call(path, scripts::DISPATCH, &Keys::new("dq"), false, 0, &args);
    let reply: Vec<redis::Value> = cmd.query_async(&mut redis.conn().await).await.unwrap();
    match (&reply[2], &reply[3]) {
        (redis::Value::Int(moved), redis::Value::Int(next)) => (*moved, *next),
        v => panic!("dispatch replied {v:?}"),
    }
}

/// `topics` topics with `per_ms` jobs due in each of `ms` milliseconds
/// from `at`, each millisecond's ids sorting against the order pushed
/// ("t007-1-9" first): each topic's push order, and every id.
async fn load(
    q: &Queue,
    at: i64,
    (topics, ms, per_ms): (usize, i64, usize),
) -> (Vec<Vec<String>>, Vec<String>) {
    let mut orders = Vec::new();
    for t in 0..topics {
        let topic = format!("t{t:03}");
        let mut jobs = Vec::new();
        for k in 0..ms {
            for i in (0..per_ms).rev() {
                jobs.push(NewJob {
                    due_at_ms: Some(at + k),
                    ..job(&format!("{topic}-{k:03}-{i}"), &topic, 0, 60_000)
                });
            }
        }
        push_all(q, &jobs).await;
        orders.push(jobs.into_iter().map(|j| j.id).collect::<Vec<_>>());
    }
    let all = orders.iter().flatten().cloned().collect();
    (orders, all)
}

/// A queue that does not dispatch, on a fresh Redis in storage layout
/// `layout`, with `shape` pushed due at `at`: every job pushed before
/// `at`, so that each waits delayed (one due at its push is made ready
/// there, and these tests are about the calls that make them ready).
/// A busy machine's pushes can outrun a lead: the load is made again
/// on a fresh Redis with a longer one.
struct Loaded {
    redis: RedisServer,
    q: Queue,
    at: i64,
    orders: Vec<Vec<String>>,
    all: Vec<String>,
}

async fn loaded(layout: &str, shape: (usize, i64, usize)) -> Loaded {
    for lead in [2_000, 8_000, 30_000] {
        let redis = RedisServer::start();
        let _: () = redis.cmd(&["SET", "{dq}:layout", layout]).await;
        let q = Queue::connect(Config {
            dispatch: false,
            ..config(&redis)
        })
        .unwrap();
        let at = redis.time_ms().await + lead;
        let (orders, all) = load(&q, at, shape).await;
        if redis.time_ms().await < at {
            return Loaded {
                redis,
                q,
                at,
                orders,
                all,
            };
        }
        println!("pushing {shape:?} took over {lead} ms: again with a longer lead");
        q.close().await;
    }
    panic!("pushing {shape:?} took over 30 s, three times");
}

/// Out of time, a call (sweep or event path, layouts 1 and 3) moves part
/// of what is due and leaves the rest due; the calls after it move the
/// rest; every topic's jobs come out in push order, each once, and the
/// counts say where they are. (Before, one call moved all 4,000.) One
/// topic of ties: a call stops part-way through a millisecond's ties,
/// what it leaves of them after what it moved in push order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_out_of_time_leaves_the_rest_whole_and_in_order() {
    for (layout, by_event, shape) in [
        ("1 held", false, SHAPES[0]),
        ("1 held", true, SHAPES[0]),
        ("3 held", false, SHAPES[0]),
        ("3 held", true, SHAPES[0]),
        ("3 held", false, SHAPES[1]),
        ("3 held", true, SHAPES[1]),
    ] {
        {
            let Loaded {
                redis,
                q,
                at,
                orders,
                all,
            } = loaded(layout, shape).await;
            eventually(LIMIT, "Redis's clock past the due times", || async {
                (redis.time_ms().await > at + shape.1).then_some(())
            })
            .await;
            let what = format!("layout {layout}, by event: {by_event}, {} topics", shape.0);
            let (moved, next) = dispatch_once(&redis, if by_event { &all } else { &[] }).await;
            assert!(
                moved > 0 && (moved as usize) < all.len(),
                "{what}: the first call moved {moved} of {}",
                all.len()
            );
            if by_event {
                // It says it left due jobs, for its caller to wake the sweep.
                assert!(next > 0, "{what}: the event call said {next}");
            }
            let mut calls = 1;
            while dispatch_once(&redis, &[]).await.0 > 0 {
                calls += 1;
            }
            let counts = q.topics().await.unwrap();
            let ready: u64 = counts.topics.values().map(|t| t.ready).sum();
            let delayed: u64 = counts.topics.values().map(|t| t.delayed).sum();
            assert_eq!(
                (ready, delayed),
                (all.len() as u64, 0),
                "{what}: counts after {calls} calls"
            );
            for (t, want) in orders.iter().enumerate() {
                let got = drain(&q, &format!("t{t:03}")).await;
                let at = got.iter().zip(want).position(|(g, w)| g != w);
                assert!(
                    at.is_none() && got.len() == want.len(),
                    "{what}: topic {t} after {calls} calls: {} of {} jobs, out of order from {at:?}: {:?} where {:?}",
                    got.len(),
                    want.len(),
                    at.map(|i| &got[i..(i + 12).min(got.len())]),
                    at.map(|i| &want[i..(i + 12).min(want.len())]),
                );
            }
            q.close().await;
        }
    }
}

/// A burst: 4,000 jobs of one topic due in one millisecond, more than a
/// call reads (the default batch, 1,000) and far more than it moves in its
/// time: handed out over several calls. While what is left of it fills a
/// call's read, each call reads (HMGET) the jobs it moves and few more:
/// within twice the jobs moved. (Before, a call took what it read of the
/// millisecond whole: "375 calls read 375000 jobs to move 3000".) Every
/// job moves once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_in_one_millisecond_is_read_as_it_is_moved() {
    let Loaded {
        redis, q, at, all, ..
    } = loaded("3 held", (1, 1, 4000)).await;
    // Nothing else reads jobs meanwhile.
    q.close().await;
    eventually(LIMIT, "Redis's clock past the due time", || async {
        (redis.time_ms().await > at).then_some(())
    })
    .await;
    let before = command_calls(&redis, "hmget").await;
    let (mut calls, mut moved) = (0, 0);
    while moved < 3000 {
        let m = dispatch_limited(&redis, 1000, &[]).await.0;
        assert!(m > 0, "a call moved nothing, {moved} moved before");
        calls += 1;
        moved += m;
    }
    let read = command_calls(&redis, "hmget").await - before;
    assert!(
        read <= 2 * moved as u64,
        "{calls} calls read {read} jobs to move {moved}"
    );
    // The rest, as the sweep's first call reads.
    loop {
        let m = dispatch_limited(&redis, 62, &[]).await.0;
        if m == 0 {
            break;
        }
        moved += m;
    }
    assert_eq!(moved as usize, all.len());
}

/// With the service dispatching, a thousand topics whose jobs fall due
/// together all fire, each once, though each call takes only part of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_topics_due_together_all_fire_once_across_calls() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let n = 1000;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| job(&format!("j{i:04}"), &format!("m{i:04}"), 1500, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    let names: Vec<String> = (0..n).map(|i| format!("m{i:04}")).collect();
    let mut fired = std::collections::HashSet::new();
    let deadline = std::time::Instant::now() + LIMIT;
    while fired.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {n} fired",
            fired.len()
        );
        for chunk in names.chunks(32) {
            for d in q.try_pop(chunk, 64).await.unwrap() {
                assert!(fired.insert(d.id.clone()), "{} handed out twice", d.id);
                q.finish(&d.id, &d.token).await.unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    q.close().await;
}

/// A push of 256 jobs that each cost many writes (8 tags, a group, a
/// priority, a topic of their own) runs out of time part-way through each
/// call of 128: the jobs after the stop go in the next call, before the
/// next 128 go. Every job is pushed once, in the order given: the last,
/// with the first one's id, replaces it; the 129th, with the 128th's id
/// (the one most likely left to the first call's rest), replaces that.
/// (Before, the second call went beside the first, and the first's rest
/// after both.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_out_of_time_sends_the_rest_in_the_next_call() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let heavy = |i: usize, id: &str| NewJob {
        tags: (0..8).map(|t| format!("tag{t}-{i}")).collect(),
        group: Some(format!("g{i}")),
        priority: 3,
        body: format!("body {i}"),
        ..job(id, &format!("topic{i:03}"), 600_000, 60_000)
    };
    let id = |i: usize| match i {
        255 => "j000".to_string(),
        128 => "j127".to_string(),
        i => format!("j{i:03}"),
    };
    let jobs: Vec<NewJob> = (0..256).map(|i| heavy(i, &id(i))).collect();
    arm_slowlog(&redis, 10_000).await;
    let results = q.push_many(&jobs).await.unwrap();
    let calls = script_calls(&redis, "dq_push").await;
    assert!(calls >= 3, "256 heavy jobs went in {calls} calls");
    for (i, r) in results.iter().enumerate() {
        let want = if i == 255 || i == 128 {
            PushOutcome::Replaced
        } else {
            PushOutcome::Created
        };
        assert_eq!(
            r.as_ref().unwrap().outcome,
            want,
            "job {i} after {calls} calls"
        );
    }
    for (id, from) in [("j000", 255), ("j127", 128)] {
        let j = q.get(id).await.unwrap().unwrap();
        assert_eq!(
            (j.topic, j.body),
            (format!("topic{from:03}"), format!("body {from}")),
            "{id} after {calls} calls"
        );
    }
    for i in (1..255).filter(|&i| i != 127 && i != 128) {
        let j = q.get(&format!("j{i:03}")).await.unwrap().unwrap();
        assert_eq!(j.topic, format!("topic{i:03}"));
    }
    let o = q.topics().await.unwrap();
    let delayed: u64 = o.topics.values().map(|t| t.delayed).sum();
    assert_eq!(delayed, 254, "delayed jobs counted");
    q.close().await;
}

/// A push checks every job it writes before its first write, and only
/// those: with extras that take long to decode (a long array the script
/// reads and ignores), a call stops checking once out of time, pushes the
/// jobs it checked and replies PARTIAL. A bad job later in the call is
/// left to the caller's next call: the first ones are pushed, not refused
/// with it. (Before, a call decoded all it was sent first, however long
/// that took, and one bad job anywhere refused the call.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_checks_no_more_jobs_than_it_has_time_to_push() {
    use delayq::testing::{call, scripts, Keys};
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.check_connection().await.unwrap();
    let path = script_path(&redis, scripts::PUSH).await;
    let pad: Vec<u32> = (0..4000).collect();
    let heavy = serde_json::json!({ "priority": 1, "pad": pad }).to_string();
    let mut args = redis::Cmd::new();
    for i in 0..128 {
        let extra = if i == 127 { "not json" } else { heavy.as_str() };
        args.arg(format!("j{i:03}"))
            .arg("t")
            .arg("body")
            .arg(60_000)
            .arg(600_000)
            .arg(-1)
            .arg("")
            .arg(0)
            .arg("replace")
            .arg(extra);
    }
    let cmd = call(path, scripts::PUSH, &Keys::new("dq"), false, 0, &args);
    let reply: Vec<redis::Value> = cmd
        .query_async(&mut redis.conn().await)
        .await
        .expect("the jobs checked pushed, the bad one not reached");
    // PARTIAL (8), then status, due time and head flag per job pushed.
    assert_eq!(reply[0], redis::Value::Int(8), "{:?}", &reply[..1]);
    let pushed = (reply.len() - 1) / 3;
    assert!((4..127).contains(&pushed), "{pushed} of 128 pushed");
    for i in 0..128 {
        let j = q.get(&format!("j{i:03}")).await.unwrap();
        assert_eq!(j.is_some(), i < pushed, "j{i:03} after {pushed} pushed");
    }
    let o = q.topics().await.unwrap();
    assert_eq!(o.topics["t"].delayed, pushed as u64);
    q.close().await;
}
