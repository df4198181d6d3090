//! Trigger keys within a horizon: a job due beyond it gets no trigger key
//! at push; the partition leader's sweep arms it ahead of its due time, and
//! every path that schedules a job follows the watermark.

use std::time::Duration;

use delayq::{Config, JobState, Queue};
use futures::stream::{self, StreamExt};

use crate::common::{
    config, eventually, job, push_all, scheduled_due, topics, DelayqProcess, RedisServer,
};

const HORIZON: Duration = Duration::from_secs(4);

fn horizon_queue(redis: &RedisServer) -> Queue {
    Queue::connect(Config {
        trigger_horizon: HORIZON,
        ..config(redis)
    })
    .unwrap()
}

fn trigger(id: &str) -> String {
    format!("{{dq}}:t:{id}")
}

/// The trigger key's expiry (Unix ms), or None without one.
async fn trigger_at(redis: &RedisServer, id: &str) -> Option<i64> {
    let at: i64 = redis.cmd(&["PEXPIRETIME", &trigger(id)]).await;
    (at >= 0).then_some(at)
}

/// Waits until the leader's sweep has written the watermark: from then on
/// a push beyond the horizon writes no trigger key.
async fn watermark(redis: &RedisServer) {
    eventually(Duration::from_secs(30), "the trigger watermark", || async {
        let w: Option<String> = redis.cmd(&["GET", "{dq}:armed"]).await;
        w.map(|_| ())
    })
    .await;
}

/// Pops `id` and checks it was handed over at or after `due_ms` (Redis
/// time) and within `late_ms` of it.
async fn fires_on_time(q: &Queue, topic: &str, id: &str, due_ms: i64, late_ms: i64) {
    let got = q
        .pop(&topics(&[topic]), Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{id} never fired"));
    assert_eq!(got.id, id);
    assert_eq!(got.due_ms, due_ms);
    let at_ms = got.popped_at_us / 1000;
    assert!(
        got.popped_at_us >= due_ms * 1000,
        "{id} handed out {} us early",
        due_ms * 1000 - got.popped_at_us
    );
    assert!(
        at_ms - due_ms <= late_ms,
        "{id} handed out {} ms late",
        at_ms - due_ms
    );
}

/// A job pushed beyond the horizon has no trigger key; the sweep writes it
/// (expiring at the due time) while the job is still ahead, and the job
/// fires on time, with expired events on and off. (Whether Redis publishes
/// the key's expired event is not asserted: the sweep that fires the job
/// at its due millisecond deletes the key, which has not expired yet in
/// that millisecond, and a deleted key publishes none.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_beyond_the_horizon_gets_its_trigger_key_ahead_of_its_due_time() {
    for events in ["Ex", ""] {
        let redis = RedisServer::start_with(&["--notify-keyspace-events", events]);
        let q = horizon_queue(&redis);
        watermark(&redis).await;
        let pushed = q.push(&job("far", "t", 9_000, 60_000)).await.unwrap();
        let due = pushed.due_ms;
        assert_eq!(trigger_at(&redis, "far").await, None, "armed at push");
        let armed = eventually(Duration::from_secs(20), "the trigger key", || async {
            trigger_at(&redis, "far").await
        })
        .await;
        let armed_at = redis.time_ms().await;
        assert_eq!(armed, due, "the key expires at the due time");
        assert!(
            armed_at <= due - 1_000,
            "events {events:?}: armed only {} ms before due",
            due - armed_at
        );
        fires_on_time(&q, "t", "far", due, 1_000).await;
        assert_eq!(trigger_at(&redis, "far").await, None);
        q.close().await;
    }
}

/// Rescheduled from inside the horizon to beyond it, a job loses its
/// trigger key; back inside, it gets one again, and it fires once, on
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reschedule_across_the_horizon_moves_the_trigger_key() {
    let redis = RedisServer::start();
    let q = horizon_queue(&redis);
    watermark(&redis).await;
    let near = q.push(&job("r", "t", 2_000, 60_000)).await.unwrap();
    assert_eq!(trigger_at(&redis, "r").await, Some(near.due_ms));
    let far = q
        .reschedule("r", Duration::from_secs(3600), None, None)
        .await
        .unwrap();
    assert_eq!(
        trigger_at(&redis, "r").await,
        None,
        "a far job kept its key"
    );
    assert_eq!(q.get("r").await.unwrap().unwrap().state, JobState::Delayed);
    assert!(far > near.due_ms);
    let back = q
        .reschedule("r", Duration::from_millis(2_500), None, None)
        .await
        .unwrap();
    assert_eq!(trigger_at(&redis, "r").await, Some(back));
    fires_on_time(&q, "t", "r", back, 1_000).await;
    // Once: nothing else comes.
    let again = q
        .pop(&topics(&["t"]), Duration::from_millis(1_500))
        .await
        .unwrap();
    assert!(again.is_none(), "fired twice");
    q.close().await;
}

/// A retry delay beyond the horizon schedules the job without a trigger
/// key; the sweep arms it and the next attempt comes on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_delay_beyond_the_horizon_is_armed_later() {
    let redis = RedisServer::start();
    let q = horizon_queue(&redis);
    watermark(&redis).await;
    q.push(&job("n", "t", 0, 60_000)).await.unwrap();
    let first = q
        .pop(&topics(&["t"]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("first attempt");
    q.nack("n", &first.token, Some(Duration::from_secs(9)), "later")
        .await
        .unwrap();
    let due = scheduled_due(&redis, "n").await.expect("n scheduled");
    assert_eq!(trigger_at(&redis, "n").await, None, "armed at the nack");
    let armed = eventually(Duration::from_secs(20), "the trigger key", || async {
        trigger_at(&redis, "n").await
    })
    .await;
    assert_eq!(armed, due);
    fires_on_time(&q, "t", "n", due, 1_000).await;
    q.close().await;
}

/// The leader is SIGKILLed while jobs cross into the horizon: the standby
/// takes the partition over, arms and fires them, none early, none lost,
/// none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_leaves_no_job_early_or_lost() {
    let redis = RedisServer::start();
    let leader = DelayqProcess::start(&redis, &["--trigger-horizon", "4s"]);
    watermark(&redis).await;
    let q = horizon_queue(&redis);
    // Jobs due from 5 s to 11 s: beyond the horizon when pushed.
    let n = 60;
    let mut due = std::collections::HashMap::new();
    for i in 0..n {
        let p = q
            .push(&job(&format!("k{i}"), "t", 5_000 + i * 100, 60_000))
            .await
            .unwrap();
        due.insert(format!("k{i}"), p.due_ms);
    }
    // Killed as the first jobs come within the horizon.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    leader.kill9();
    // The standby arms the jobs as they come within the horizon: the last
    // one's key is written ahead of its due time.
    let last = due["k59"];
    assert_eq!(trigger_at(&redis, "k59").await, None, "armed at push");
    let armed = eventually(Duration::from_secs(20), "the last job's key", || async {
        trigger_at(&redis, "k59").await
    })
    .await;
    assert_eq!(armed, last);
    assert!(
        redis.time_ms().await < last,
        "armed only after its due time"
    );
    assert_eq!(due.len(), n as usize);
    each_fires_once_on_time(&q, &due).await;
    q.close().await;
}

/// A job an older build pushed (its trigger key set though it is due
/// beyond the horizon) still fires once, on time; rescheduled, it follows
/// the watermark like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_style_trigger_key_beyond_the_horizon_is_still_fine() {
    let redis = RedisServer::start();
    let q = horizon_queue(&redis);
    watermark(&redis).await;
    let old = q.push(&job("old", "t", 8_000, 60_000)).await.unwrap();
    let also = q.push(&job("moved", "t", 8_000, 60_000)).await.unwrap();
    // As an older build writes them: a key at push, whatever the due time.
    for (id, at) in [("old", old.due_ms), ("moved", also.due_ms)] {
        let _: () = redis
            .cmd(&["SET", &trigger(id), "1", "PXAT", &at.to_string()])
            .await;
    }
    let moved = q
        .reschedule("moved", Duration::from_secs(3600), None, None)
        .await
        .unwrap();
    assert!(moved > also.due_ms);
    assert_eq!(trigger_at(&redis, "moved").await, None);
    assert_eq!(trigger_at(&redis, "old").await, Some(old.due_ms));
    fires_on_time(&q, "t", "old", old.due_ms, 1_000).await;
    let again = q
        .pop(&topics(&["t"]), Duration::from_millis(1_500))
        .await
        .unwrap();
    assert!(again.is_none(), "fired twice");
    assert_eq!(trigger_at(&redis, "old").await, None);
    q.close().await;
}

/// A horizon out of its bounds is refused, naming it, before anything runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_horizon_out_of_bounds_is_refused() {
    let redis = RedisServer::start();
    for bad in [Duration::from_millis(999), Duration::from_secs(86_401)] {
        let e = Queue::connect(Config {
            trigger_horizon: bad,
            ..config(&redis)
        })
        .err()
        .expect("refused");
        assert!(
            matches!(e, delayq::Error::Invalid(ref m) if m.contains("trigger_horizon")),
            "{e}"
        );
    }
    assert_eq!(redis.data_keys().await, 0);
}

/// More jobs share one due time than a dispatch call takes: the sweep
/// arms them a batch at a time, resuming after the last id it armed, and
/// every one has its key before the due time and fires once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_sharing_a_due_time_beyond_a_batch_are_all_armed() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        trigger_horizon: HORIZON,
        dispatch_batch: 10,
        ..config(&redis)
    })
    .unwrap();
    watermark(&redis).await;
    let due = redis.time_ms().await + 9_000;
    let n = 35;
    let jobs: Vec<delayq::NewJob> = (0..n)
        .map(|i| delayq::NewJob {
            due_at_ms: Some(due),
            ..job(&format!("s{i:02}"), "t", 0, 60_000)
        })
        .collect();
    push_all(&q, &jobs).await;
    let keys = || async {
        let mut armed = 0;
        for i in 0..n {
            armed += usize::from(trigger_at(&redis, &format!("s{i:02}")).await == Some(due));
        }
        armed
    };
    assert_eq!(keys().await, 0, "armed at push");
    eventually(Duration::from_secs(20), "every key armed", || async {
        (keys().await == n).then_some(())
    })
    .await;
    assert!(redis.time_ms().await < due, "armed only after the due time");
    let mut seen = std::collections::HashSet::new();
    while seen.len() < n {
        let got = q
            .pop(&topics(&["t"]), Duration::from_secs(30))
            .await
            .unwrap()
            .expect("every job fires");
        assert!(got.popped_at_us >= due * 1000, "{} early", got.id);
        assert!(seen.insert(got.id.clone()), "{} twice", got.id);
    }
    q.close().await;
}

/// The ways an operator can break the watermark: garbage, a number that
/// is no time, far behind or far ahead, deleted, another type of key.
const BROKEN: [(&str, Option<&str>); 9] = [
    ("garbage", Some("garbage")),
    ("empty", Some("")),
    ("nan", Some("nan")),
    ("inf", Some("inf")),
    ("a colon only", Some("x:y")),
    ("far behind", Some("1")),
    ("far ahead", Some("99999999999999")),
    ("deleted", None),
    ("a hash", None),
];

/// An operator breaks the watermark while jobs wait on both sides of the
/// horizon: pushes go on, every job fires once and never early, and the
/// sweep writes a sound watermark again ("<ms>" within a horizon of now).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watermark_an_operator_broke_fires_nothing_early_and_is_written_again() {
    let redis = RedisServer::start();
    let q = horizon_queue(&redis);
    watermark(&redis).await;
    let mut due = std::collections::HashMap::new();
    for (i, (what, value)) in BROKEN.iter().enumerate() {
        // In one step: the sweep may write the watermark at any moment,
        // and an HSET after it would meet a string.
        const BREAK: &str = "redis.call('DEL', KEYS[1]) \
            if ARGV[1] == 'set' then redis.call('SET', KEYS[1], ARGV[2]) \
            elseif ARGV[1] == 'hash' then redis.call('HSET', KEYS[1], 'f', '1') end";
        let how = match (value, *what) {
            (Some(v), _) => ["set", v],
            (None, "a hash") => ["hash", ""],
            (None, _) => ["del", ""],
        };
        let _: () = redis
            .cmd(&["EVAL", BREAK, "1", "{dq}:armed", how[0], how[1]])
            .await;
        // One within the horizon, one beyond it.
        for (id, delay) in [(format!("near{i}"), 1_500), (format!("far{i}"), 6_000)] {
            let p = q
                .push(&job(&id, "t", delay, 60_000))
                .await
                .unwrap_or_else(|e| panic!("watermark {what}: push refused: {e}"));
            due.insert(id, p.due_ms);
        }
        // The near job is the new head: the sweep runs and arms.
        let sound = eventually(
            Duration::from_secs(20),
            &format!("the watermark ({what}) written again"),
            || async {
                let kind: String = redis.cmd(&["TYPE", "{dq}:armed"]).await;
                if kind != "string" {
                    return None;
                }
                let w: Option<String> = redis.cmd(&["GET", "{dq}:armed"]).await;
                let ms: i64 = w?.parse().ok()?;
                let now = redis.time_ms().await;
                (ms >= now && ms <= now + HORIZON.as_millis() as i64).then_some(ms)
            },
        )
        .await;
        assert!(sound > 0, "watermark {what}");
    }
    each_fires_once_on_time(&q, &due).await;
    q.close().await;
}

/// A tiny horizon (2 s), a small batch (50) and 2000 jobs due over 10 s,
/// 200 at each of ten milliseconds; while they wait (some armed, some
/// not) a tenth are deleted, a tenth rescheduled and a tenth replaced with
/// a new due time. Every job left fires once, at its latest due time,
/// never early; the deleted ones never; the last millisecond's jobs all
/// have their keys before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_jobs_sharing_due_times_beyond_a_tiny_horizon_fire_once() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        trigger_horizon: Duration::from_secs(2),
        dispatch_batch: 50,
        ..config(&redis)
    })
    .unwrap();
    watermark(&redis).await;
    let base = redis.time_ms().await + 4_000;
    let n = 2_000;
    let id = |i: usize| format!("m{i:04}");
    let mut due: std::collections::HashMap<String, i64> = (0..n)
        .map(|i| (id(i), base + (i % 10) as i64 * 1_000))
        .collect();
    let jobs: Vec<delayq::NewJob> = (0..n)
        .map(|i| delayq::NewJob {
            due_at_ms: Some(due[&id(i)]),
            ..job(&id(i), "t", 0, 60_000)
        })
        .collect();
    for chunk in jobs.chunks(500) {
        push_all(&q, chunk).await;
    }
    // Changed at the first due time: the next ones armed, the far ones not.
    while redis.time_ms().await < base {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // 32 at a time, so that the changes are done well before the last due
    // time even on a busy machine (one by one they took seconds there).
    let changes = (0..n).filter(|i| i % 10 != 0).map(|i| {
        let (q, id, was) = (q.clone(), id(i), due[&id(i)]);
        async move {
            match (i / 10) % 10 {
                1 => {
                    assert!(q.delete(&id).await.unwrap(), "{id} deleted");
                    (id, None)
                }
                2 => {
                    let at = was + 1_500;
                    let got = q.reschedule(&id, Duration::ZERO, Some(at), None).await;
                    assert_eq!(got.unwrap(), at);
                    (id, Some(at))
                }
                3 => {
                    // Earlier; if that is past already (a busy machine),
                    // it means now: the job's due is what the push says.
                    let at = was - 500;
                    let p = q
                        .push(&delayq::NewJob {
                            due_at_ms: Some(at),
                            ..job(&id, "t", 0, 60_000)
                        })
                        .await
                        .unwrap();
                    assert!(p.due_ms >= at, "{id}: due {} before {at}", p.due_ms);
                    (id, Some(p.due_ms))
                }
                _ => (id, Some(was)),
            }
        }
    });
    let changed: Vec<(String, Option<i64>)> =
        stream::iter(changes).buffer_unordered(32).collect().await;
    for (id, at) in changed {
        match at {
            Some(at) => due.insert(id, at),
            None => due.remove(&id),
        };
    }
    let last = base + 9_000;
    let last_ids: Vec<String> = (0..n)
        .map(id)
        .filter(|i| due.get(i) == Some(&last))
        .collect();
    eventually(Duration::from_secs(20), "the last jobs armed", || async {
        for i in &last_ids {
            if trigger_at(&redis, i).await != Some(last) {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(
        redis.time_ms().await < last,
        "armed only after the due time"
    );
    each_fires_once_on_time(&q, &due).await;
    q.close().await;
}

/// Two instances with different horizons on one Redis (2 s and an hour):
/// the first leads and arms, then stops; the other takes over with its own
/// horizon and the shared watermark. Every job fires once, never early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_with_different_horizons_share_the_watermark() {
    let redis = RedisServer::start();
    let short = DelayqProcess::start(&redis, &["--trigger-horizon", "2s"]);
    watermark(&redis).await;
    let q = Queue::connect(Config {
        trigger_horizon: Duration::from_secs(3600),
        ..config(&redis)
    })
    .unwrap();
    let mut due = std::collections::HashMap::new();
    for i in 0..100u64 {
        let p = q
            .push(&job(&format!("d{i}"), "t", 3_000 + i * 60, 60_000))
            .await
            .unwrap();
        due.insert(format!("d{i}"), p.due_ms);
    }
    // The short horizon's leader arms the first ones, then stops.
    eventually(Duration::from_secs(20), "the first job armed", || async {
        trigger_at(&redis, "d0").await
    })
    .await;
    short.terminate();
    each_fires_once_on_time(&q, &due).await;
    // The hour's horizon now leads: a job 30 min ahead is armed at push.
    let far = q.push(&job("later", "t", 1_800_000, 60_000)).await.unwrap();
    eventually(Duration::from_secs(20), "the far job armed", || async {
        (trigger_at(&redis, "later").await == Some(far.due_ms)).then_some(())
    })
    .await;
    q.close().await;
}

/// A horizon of 0 or beyond a day on the command line (or in its
/// variable) stops `serve` before it starts, naming the flag and its bounds.
#[test]
fn serve_refuses_a_trigger_horizon_out_of_bounds() {
    for (args, env) in [
        (vec!["serve", "--trigger-horizon", "0"], vec![]),
        (vec!["serve", "--trigger-horizon", "2d"], vec![]),
        (vec!["serve"], vec![("DELAYQ_TRIGGER_HORIZON", "500ms")]),
    ] {
        let out = crate::common::delayq_run(&args, &env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} {env:?} ran");
        assert!(
            err.contains("--trigger-horizon") && err.contains("from 1s to 1d"),
            "{args:?} {env:?}: {err}"
        );
    }
}

/// A trigger key that says the wrong time (left by an operator or another
/// tool, expiring long before its job's due time) publishes its expired
/// event early: the event's dispatch finds the job not yet due and leaves
/// it; the job fires at its own due time, once. A stale key of a job that
/// already fired, expiring after, fires nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_trigger_key_never_fires_its_job_early_or_twice() {
    let redis = RedisServer::start_with(&["--notify-keyspace-events", "Ex"]);
    let q = horizon_queue(&redis);
    watermark(&redis).await;
    let p = q.push(&job("st", "t", 6_000, 60_000)).await.unwrap();
    assert_eq!(trigger_at(&redis, "st").await, None, "armed at push");
    let _: () = redis.cmd(&["SET", &trigger("st"), "1", "PX", "100"]).await;
    // Read until Redis has expired it (and published its event), then watch
    // the job stay delayed until shortly before its due time.
    eventually(Duration::from_secs(10), "the stale key expired", || async {
        let v: Option<String> = redis.cmd(&["GET", &trigger("st")]).await;
        v.is_none().then_some(())
    })
    .await;
    while redis.time_ms().await < p.due_ms - 500 {
        let state = q.get("st").await.unwrap().unwrap().state;
        assert_eq!(state, JobState::Delayed, "fired early by a stale key");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fires_on_time(&q, "t", "st", p.due_ms, 1_000).await;
    let _: () = redis.cmd(&["SET", &trigger("st"), "1", "PX", "1"]).await;
    eventually(Duration::from_secs(10), "the late key expired", || async {
        let v: Option<String> = redis.cmd(&["GET", &trigger("st")]).await;
        v.is_none().then_some(())
    })
    .await;
    let again = q
        .pop(&topics(&["t"]), Duration::from_millis(1_500))
        .await
        .unwrap();
    assert!(again.is_none(), "fired twice");
    q.close().await;
}

/// Pops topic "t" until every job of `due` (id -> due ms) was handed out:
/// each once, at the due time it has, never before it; finishes each; then
/// nothing more comes (no job twice, no deleted job).
async fn each_fires_once_on_time(q: &Queue, due: &std::collections::HashMap<String, i64>) {
    let mut seen = std::collections::HashSet::new();
    while seen.len() < due.len() {
        let got = q
            .pop_many(&topics(&["t"]), 100, Duration::from_secs(30))
            .await
            .unwrap();
        assert!(!got.is_empty(), "{} of {} fired", seen.len(), due.len());
        for j in got {
            let want = due
                .get(&j.id)
                .unwrap_or_else(|| panic!("{} fired, not expected", j.id));
            assert_eq!(j.due_ms, *want, "{}", j.id);
            assert!(
                j.popped_at_us >= j.due_ms * 1000,
                "{} handed out {} us early",
                j.id,
                j.due_ms * 1000 - j.popped_at_us
            );
            assert!(seen.insert(j.id.clone()), "{} fired twice", j.id);
            q.finish(&j.id, &j.token).await.unwrap();
        }
    }
    let extra = q
        .pop(&topics(&["t"]), Duration::from_millis(1_500))
        .await
        .unwrap();
    assert!(
        extra.is_none(),
        "a job fired twice or a deleted one fired: {extra:?}"
    );
}

/// Layout 3: delayed jobs are in their topic schedules only, so the sweep's
/// arming walks the heads and each topic schedule. Jobs beyond the horizon
/// at push, in three topics (one with ':' in its name), many sharing one
/// due millisecond (more than a batch: the walk stops inside it), all get
/// their trigger keys ahead of their due time and fire once, on time,
/// through the expired events and the sweep; a job farther ahead gets its
/// key once the horizon reaches it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_layout_3_the_arming_walks_the_topic_schedules() {
    let redis = RedisServer::start_with(&["--notify-keyspace-events", "Ex"]);
    let _: () = redis.cmd(&["SET", "{dq}:layout", "3 held"]).await;
    let q = Queue::connect(Config {
        trigger_horizon: HORIZON,
        dispatch_batch: 10,
        ..config(&redis)
    })
    .unwrap();
    watermark(&redis).await;
    let due = redis.time_ms().await + 9_000;
    let names = ["t", "a:b", "u"];
    let mut jobs: Vec<delayq::NewJob> = Vec::new();
    for (k, topic) in names.iter().enumerate() {
        for i in 0..12 {
            jobs.push(delayq::NewJob {
                // Most at one millisecond, some a little later.
                due_at_ms: Some(due + if i < 9 { 0 } else { i as i64 }),
                ..job(&format!("j{k}-{i:02}"), topic, 0, 60_000)
            });
        }
    }
    let far_due = due + 8_000;
    jobs.push(delayq::NewJob {
        due_at_ms: Some(far_due),
        ..job("far", "u", 0, 60_000)
    });
    push_all(&q, &jobs).await;
    for j in &jobs {
        let shared: Option<i64> = redis.cmd(&["ZSCORE", "{dq}:schedule", &j.id]).await;
        assert_eq!(shared, None, "{} in the shared schedule", j.id);
        assert_eq!(
            trigger_at(&redis, &j.id).await,
            None,
            "{} armed at push",
            j.id
        );
    }
    let near = &jobs[..jobs.len() - 1];
    let armed = || async {
        let mut n = 0;
        for j in near {
            n += usize::from(trigger_at(&redis, &j.id).await == j.due_at_ms);
        }
        n
    };
    eventually(Duration::from_secs(20), "every near key armed", || async {
        (armed().await == near.len()).then_some(())
    })
    .await;
    let now = redis.time_ms().await;
    assert!(now < due, "armed only {} ms after the due time", now - due);
    assert_eq!(
        trigger_at(&redis, "far").await,
        None,
        "armed beyond the horizon"
    );
    let mut seen = std::collections::HashSet::new();
    for _ in near {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let got = q
            .pop(&names, Duration::from_secs(30))
            .await
            .unwrap()
            .expect("every near job fires");
        let want = near.iter().find(|j| j.id == got.id).unwrap();
        assert_eq!(Some(got.due_ms), want.due_at_ms);
        assert!(got.popped_at_us >= got.due_ms * 1000, "{} early", got.id);
        assert!(
            got.popped_at_us / 1000 - got.due_ms <= 1_000,
            "{} handed out {} ms late",
            got.id,
            got.popped_at_us / 1000 - got.due_ms
        );
        assert!(seen.insert(got.id.clone()), "{} twice", got.id);
    }
    let armed = eventually(Duration::from_secs(20), "the far key", || async {
        trigger_at(&redis, "far").await
    })
    .await;
    assert_eq!(armed, far_due);
    assert!(redis.time_ms().await <= far_due - 1_000, "far armed late");
    fires_on_time(&q, "u", "far", far_due, 1_000).await;
    q.close().await;
}
