//! An idle queue: what it costs Redis, and that its dispatcher, which
//! sleeps and holds its lease up to the next due time, still hands over
//! and fires on time.

use std::time::Duration;

use crate::common::{eventually, job, post, queue, topics, DelayqProcess};
use crate::redis_server::RedisServer;

const HOUR: Duration = Duration::from_secs(3600);

/// The partition leader's term of the one partition: (holder, ms left).
async fn lease(redis: &RedisServer) -> Option<(String, i64)> {
    let keys: Vec<String> = redis.cmd(&["KEYS", "*dispatcher"]).await;
    let key = keys.first()?;
    let holder: Option<String> = redis.cmd(&["GET", key]).await;
    let left: i64 = redis.cmd(&["PTTL", key]).await;
    Some((holder?, left))
}

/// Calls Redis counted of the commands `counted` names (as
/// `cmdstat_<name>`).
async fn calls(redis: &RedisServer, counted: impl Fn(&str) -> bool) -> u64 {
    let info: String = redis.cmd(&["INFO", "commandstats"]).await;
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
        .filter(|(name, _)| counted(name))
        .filter_map(|(_, rest)| {
            rest.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Calls Redis counted, INFO (only this test reads it here) left out.
async fn commands(redis: &RedisServer) -> u64 {
    calls(redis, |name| name != "info").await
}

/// An idle instance `a` that holds the term (one job an hour away) and a
/// second, `b`, that dispatches nothing.
pub async fn idle_pair(redis: &RedisServer) -> (delayq::Queue, delayq::Queue) {
    let a = queue(redis);
    a.push(&job("later", "t", HOUR.as_millis() as u64, 60_000))
        .await
        .unwrap();
    idle_holder(redis).await;
    let b = delayq::Queue::connect(delayq::Config {
        dispatch: false,
        ..crate::common::config(redis)
    })
    .unwrap();
    (a, b)
}

/// Waits until the holder of the lease took it for longer than a busy
/// lease (the dispatcher is idle), and returns the holder.
pub async fn idle_holder(redis: &RedisServer) -> String {
    eventually(Duration::from_secs(30), "an idle-length lease", || async {
        lease(redis)
            .await
            .filter(|(_, left)| *left > 5_000)
            .map(|(h, _)| h)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_queue_with_waiting_consumers_costs_few_commands() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("later", "t", HOUR.as_millis() as u64, 60_000))
        .await
        .unwrap();
    let stop = delayq::Shutdown::new();
    let heartbeat = tokio::spawn(delayq::instances::run(
        q.clone(),
        delayq::instances::this_process("test", "", Vec::new(), false),
        stop.clone(),
    ));
    let pops: Vec<_> = (0..8)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.pop(&topics(&["t"]), HOUR).await })
        })
        .collect();
    eventually(Duration::from_secs(30), "8 pops waiting", || async {
        (q.waiting_pops() == 8).then_some(())
    })
    .await;
    // The window begins at once: the dispatcher's first looks (and the
    // lease's first short renewals) fall within it.
    let before = commands(&redis).await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let spent = commands(&redis).await - before;
    println!("idle: {spent} commands in 30 s");
    // Before: ~450 (lease renewals twice a second, a sweep, a recurring
    // look every second, heartbeats every 2 s, a look per pop every 30 s).
    assert!(spent <= 60, "{spent} commands in 30 s of idling");
    stop.trigger();
    heartbeat.await.unwrap();
    for p in pops {
        p.abort();
    }
    q.close().await;
}

/// The holder, idle, is killed with a job due in 8 s that it knew of and
/// a job its consumer leased for 4 s; then a job due in 3 s is pushed
/// through the other instance. Each fires (or comes back) at most ~2 s
/// late via the survivor: the lease ran only up to the earliest due time,
/// and the push ended it by its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_idle_dispatcher_hands_over_by_the_next_due_time() {
    let redis = RedisServer::start();
    let a = DelayqProcess::start(&redis, &[]);
    let b = DelayqProcess::start(&redis, &[]);
    let holder = idle_holder(&redis).await;
    let (victim, survivor) = if holder.starts_with(&format!("pid-{}-", a.pid())) {
        (a, b)
    } else {
        assert!(holder.starts_with(&format!("pid-{}-", b.pid())), "{holder}");
        (b, a)
    };
    let push = |base: String, id: &'static str, delay: u64, ttr: u64| async move {
        let body = format!(r#"{{"topic":"k","id":"{id}","delay":{delay},"ttr":{ttr}}}"#);
        let r = post(&base, "/push", &body).await;
        assert_eq!(r["code"], 0, "{r}");
    };
    push(victim.base.clone(), "leased", 1, 4).await;
    let v = post(&victim.base, "/pop", r#"{"topic":"k"}"#).await;
    assert_eq!(v["data"]["id"], "leased", "{v}");
    // Its lease began just before this (a local round trip).
    let leased_at = redis.time_ms().await;
    let before_at = redis.time_ms().await;
    push(victim.base.clone(), "before", 8, 60).await;
    victim.kill9();
    let after_at = redis.time_ms().await;
    push(survivor.base.clone(), "after", 3, 60).await;
    // Each job's due time (the leased one's: its lease end, at the latest).
    let mut due: std::collections::HashMap<&str, i64> = [
        ("leased", leased_at + 4000),
        ("before", before_at + 8000),
        ("after", after_at + 3000),
    ]
    .into();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !due.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "not fired in 60 s: {due:?}"
        );
        let v = post(&survivor.base, "/pop", r#"{"topic":"k"}"#).await;
        let Some(id) = v["data"]["id"].as_str() else {
            continue;
        };
        let late = redis.time_ms().await - due[id];
        println!("{id}: {late} ms after its due time");
        assert!(late <= 2_000 + 1_500, "{id} fired {late} ms late");
        due.remove(id);
        post(&survivor.base, "/finish", &format!(r#"{{"id":"{id}"}}"#)).await;
    }
}

/// While the dispatcher sleeps towards a job an hour away, a job pushed
/// through another instance (no in-process wake-up), due in 2 s, fires on
/// time: with expired events and without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_pushed_elsewhere_fires_on_time_while_the_dispatcher_idles() {
    for events in ["Ex", ""] {
        let redis = RedisServer::start_with(&["--notify-keyspace-events", events]);
        let (a, b) = idle_pair(&redis).await;
        b.push(&job("soon", "s", 2_000, 60_000)).await.unwrap();
        let got = a
            .pop(&topics(&["s"]), Duration::from_secs(20))
            .await
            .unwrap()
            .expect("the job fired");
        // Both on Redis's clock; the dispatcher idling towards the hour
        // would be an hour late, a wake-up lost to the backstop minutes.
        let late = got.popped_at_us / 1000 - got.due_ms;
        println!(
            "events {events:?}: {} handed over {late} ms after its due time",
            got.id
        );
        assert!(
            (0..=3_000).contains(&late),
            "events {events:?}: handed over {late} ms after its due time"
        );
        a.close().await;
        b.close().await;
    }
}

/// Commands a minute of an idle queue of 12 partitions on a three-master
/// cluster, over every master: the partitions' sweeps and leases at about
/// a call a minute each, the cluster's watches at their idle pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_queue_on_a_cluster_costs_few_commands() {
    let cluster = crate::redis_cluster::TestCluster::start_with(3, 0, &[]);
    let q = delayq::Queue::connect(crate::cluster::cluster_config(&cluster, 12)).unwrap();
    q.push(&job("later", "t", HOUR.as_millis() as u64, 60_000))
        .await
        .unwrap();
    let pops: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.pop(&topics(&["t"]), HOUR).await })
        })
        .collect();
    // Settled: every partition's lease taken at its idle length.
    eventually(Duration::from_secs(60), "12 idle-length leases", || async {
        let mut idle = 0;
        for n in &cluster.nodes {
            let keys: Vec<String> = n.cmd(&["KEYS", "*dispatcher"]).await;
            for k in keys {
                let left: i64 = n.cmd(&["PTTL", &k]).await;
                idle += usize::from(left > 5_000);
            }
        }
        (idle == 12 && q.waiting_pops() == 4).then_some(())
    })
    .await;
    // Every command, INFO included (delayq's health watch reads it): this
    // test's own reading before the window is taken off.
    let count = || async {
        let mut calls = std::collections::BTreeMap::<String, u64>::new();
        for n in &cluster.nodes {
            let info: String = n.cmd(&["INFO", "commandstats"]).await;
            for (name, rest) in info
                .lines()
                .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
            {
                let n = rest
                    .split(',')
                    .find_map(|f| f.strip_prefix("calls=")?.parse::<u64>().ok());
                *calls.entry(name.to_owned()).or_default() += n.unwrap_or(0);
            }
        }
        calls
    };
    let before = count().await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let mut after = count().await;
    *after.entry("info".into()).or_default() -= cluster.nodes.len() as u64;
    let spent: u64 = after
        .iter()
        .map(|(k, v)| v - before.get(k).copied().unwrap_or(0))
        .sum();
    let by: Vec<_> = after
        .iter()
        .map(|(k, v)| (k, v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect();
    println!("idle on a cluster: {spent} commands in 30 s: {by:?}");
    // What the cluster's watches cost (CLUSTER SLOTS and INFO): the
    // partitions' own calls come a minute apart at most and may or may not
    // fall inside the window on a busy machine, so they are not held here
    // (the single server's test holds a partition's). Before: ~180 in 30 s
    // (CLUSTER SLOTS three times a second, INFO replication of each master
    // every second); BullMQ's idle Worker makes ~31 commands in 30 s.
    let watches: u64 = by
        .iter()
        .filter(|(k, _)| k.starts_with("cluster") || k.starts_with("info"))
        .map(|(_, v)| v)
        .sum();
    assert!(
        watches <= 30,
        "{watches} CLUSTER and INFO calls in 30 s of idling ({spent} commands in all)"
    );
    for p in pops {
        p.abort();
    }
    q.close().await;
}

/// Calls of delayq's scripts (FCALL, or EVALSHA on a server without
/// functions).
async fn script_calls(redis: &RedisServer) -> u64 {
    calls(redis, |name| name == "fcall" || name == "evalsha").await
}

/// Pops waiting on the same topics share their backstop look: one that
/// found nothing stands for all, so eight waiting pops look about as
/// often as one. They still hear every ready notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pops_waiting_on_the_same_topics_share_one_backstop_look() {
    let redis = RedisServer::start();
    // Dispatch off: the pops' looks are the only script calls.
    let waiting = delayq::Queue::connect(delayq::Config {
        dispatch: false,
        wait_backstop: Duration::from_secs(1),
        ..crate::common::config(&redis)
    })
    .unwrap();
    // Spread over the backstop's second, so that their own looks would
    // not fall together into one call.
    let mut pops = Vec::new();
    for _ in 0..8 {
        let q = waiting.clone();
        pops.push(tokio::spawn(
            async move { q.pop(&topics(&["t"]), HOUR).await },
        ));
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    eventually(Duration::from_secs(30), "8 pops waiting", || async {
        (waiting.waiting_pops() == 8 && waiting.subscriber_connected()).then_some(())
    })
    .await;
    let before = script_calls(&redis).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let looks = script_calls(&redis).await - before;
    println!("8 waiting pops looked {looks} times in 8 s (backstop 1 s)");
    // Before: each looked every second on its own, ~64.
    assert!(looks <= 24, "{looks} looks in 8 s");
    // Each still hears its notice.
    let q = queue(&redis);
    for i in 0..8 {
        q.push(&job(&format!("j{i}"), "t", 0, 60_000))
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    for p in pops {
        let d = tokio::time::timeout(Duration::from_secs(60), p)
            .await
            .expect("a waiting pop got its job")
            .unwrap()
            .unwrap()
            .expect("a job");
        got.push(d.id);
    }
    got.sort();
    assert_eq!(got, (0..8).map(|i| format!("j{i}")).collect::<Vec<_>>());
    q.close().await;
    waiting.close().await;
}
