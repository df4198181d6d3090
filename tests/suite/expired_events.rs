//! How expired events are dispatched: their ids looked up together,
//! and one call at a time per partition, the ids heard meanwhile going in
//! the next.

use std::time::Duration;

use delayq::{Config, Queue};

use crate::common::{arm_slowlog, command_calls, config, eventually, job, push_all, RedisServer};

/// Expired events name their ids many at a time, and after a burst most
/// name jobs the sweep has already moved: an event's dispatch looks its ids
/// up in one ZMSCORE, not with a ZSCORE per id (a command each, which was
/// about a twentieth of a burst's Redis time).
///
/// The sweep moves a burst at its instant and deletes the trigger keys
/// before Redis expires them, so whether the burst itself publishes
/// events depends on timing. The test makes the late events itself: once
/// every job fired, it sets each job's trigger key again with a 1 ms life
/// and reads it after, which expires it and publishes the event for an id
/// the sweep already moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_events_look_their_ids_up_in_one_command() {
    let redis = RedisServer::start();
    let cfg = config(&redis);
    let keys = delayq::testing::Keys::partitions(&cfg.prefix, cfg.partitions);
    let q = Queue::connect(cfg.clone()).unwrap();
    q.ping().await.unwrap();
    let n = 300u64;
    let jobs: Vec<_> = (0..n)
        .map(|i| job(&format!("e{i}"), "burst", 500 + i * 3, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    eventually(Duration::from_secs(60), "all fired", || async {
        let o = q.topics().await.unwrap();
        let ready = o.topics.get("burst").copied().unwrap_or_default().ready;
        (ready == n).then_some(())
    })
    .await;
    let triggers: Vec<String> = jobs
        .iter()
        .map(|j| keys[delayq::testing::partition_of(&j.id, cfg.partitions)].trigger(&j.id))
        .collect();
    // Commands counted from here: the late events' only (the reads of the
    // counts above check topic schedules with a ZSCORE of their own).
    let _: () = redis.cmd(&["CONFIG", "RESETSTAT"]).await;
    for key in &triggers {
        let _: () = redis.cmd(&["SET", key, "", "PX", "1"]).await;
    }
    eventually(
        Duration::from_secs(60),
        "late events dispatched",
        || async {
            // A read of a key past its time expires it and publishes the event.
            for key in &triggers {
                let _: Option<String> = redis.cmd(&["GET", key]).await;
            }
            let looked =
                command_calls(&redis, "zscore").await + command_calls(&redis, "zmscore").await;
            (looked > 0).then_some(())
        },
    )
    .await;
    assert_eq!(
        command_calls(&redis, "zscore").await,
        0,
        "an expired event's ids looked up one ZSCORE each"
    );
    let o = q.topics().await.unwrap();
    assert_eq!(
        o.topics.get("burst").copied().unwrap_or_default().ready,
        n,
        "a late event moved a job twice or lost it"
    );
    q.close().await;
}

/// The ids each expired-event dispatch call named (SLOWLOG, oldest first;
/// see `arm_slowlog`): a dispatch call with ids after its arguments.
async fn event_calls(redis: &RedisServer) -> Vec<Vec<String>> {
    let sha = delayq::testing::eval_script_of("dispatch").map(|(sha, _)| sha);
    let entries = crate::common::slowlog_entries(redis).await;
    (entries.into_iter().rev())
        .filter_map(|(_, args)| {
            let ours = (args[0] == "fcall" && args[1].starts_with("dq_dispatch_"))
                || (args[0] == "evalsha" && sha.is_some_and(|s| args[1] == s));
            // fcall, name, 1, schedule, ARGV[1..6] with no waiters (m = 0),
            // the ids, then the deadline and the events setting. (SLOWLOG
            // keeps 32 arguments: the tests name 20 ids at most.)
            (ours && args.len() > 12 && args[9] == "0").then(|| args[10..args.len() - 2].to_vec())
        })
        .collect()
}

/// Expired events heard while a dispatch call for them is out go in the
/// next call, together, not in calls beside it: calls sent side by side (a
/// task per chunk of events heard) each read their topic's head and queued
/// ahead of the sweep's and the pops' calls; at ten million pending a
/// burst of 100,000 ran hundreds of them for each call of the sweep.
///
/// Replies come 300 ms late (a proxy), expired events too. One event, then
/// 15 more one by one (a trigger key set with a 1 ms life and read after),
/// heard while the first one's call is out; for jobs a day away (past the
/// horizon, so no sweep arms their keys again): each call finds nothing
/// due, and only the calls are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_events_heard_during_a_call_wait_for_it_and_go_together() {
    let redis = RedisServer::start();
    let cfg = config(&redis);
    let keys = delayq::testing::Keys::partitions(&cfg.prefix, cfg.partitions);
    let trigger = |id: &str| keys[delayq::testing::partition_of(id, cfg.partitions)].trigger(id);
    let direct = Queue::connect(Config {
        dispatch: false,
        ..cfg.clone()
    })
    .unwrap();
    let ids: Vec<String> = (0..16).map(|i| format!("ev{i}")).collect();
    let mut jobs: Vec<_> = ids
        .iter()
        .map(|id| job(id, "later", 86_400_000, 60_000))
        .collect();
    jobs.push(job("probe", "later", 86_400_000, 60_000));
    push_all(&direct, &jobs).await;
    let proxy = crate::common::SlowProxy::start(&redis, Duration::ZERO).await;
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(proxy.url()),
        redis_timeout: Duration::from_secs(60),
        ..Config::default()
    })
    .unwrap();
    q.ping().await.unwrap();
    arm_slowlog(&redis, 10_000).await;
    let expire = |id: String| {
        let key = trigger(&id);
        let redis = &redis;
        async move {
            let _: () = redis.cmd(&["SET", &key, "", "PX", "1"]).await;
            // Read past its time, the key expires and the event goes out.
            eventually(Duration::from_secs(10), "the key expired", || async {
                let v: Option<String> = redis.cmd(&["GET", &key]).await;
                v.is_none().then_some(())
            })
            .await;
        }
    };
    // The instance listens (it dispatches the probe's event), and its
    // call for it has ended.
    eventually(
        Duration::from_secs(60),
        "the probe's event heard",
        || async {
            expire("probe".into()).await;
            let calls = event_calls(&redis).await;
            (calls.iter().any(|c| c.contains(&"probe".to_string()))).then_some(())
        },
    )
    .await;
    let _: () = redis.cmd(&["SLOWLOG", "RESET"]).await;
    proxy.set_delay(Duration::from_millis(300));
    // The first event, then the others one by one (about 10 ms each),
    // heard while its call is out (from 300 ms on, until its reply 300 ms
    // later).
    expire(ids[0].clone()).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    for id in &ids[1..] {
        expire(id.clone()).await;
    }
    let calls = eventually(Duration::from_secs(60), "every id named", || async {
        let calls = event_calls(&redis).await;
        let named: std::collections::HashSet<_> = calls.iter().flatten().collect();
        ids.iter().all(|id| named.contains(id)).then_some(calls)
    })
    .await;
    // The first one's call, then one for those heard while it was out (a
    // busy machine may be slow to make them all: a third).
    assert!(calls.len() <= 3, "{} event calls: {calls:?}", calls.len());
    q.close().await;
    direct.close().await;
}
