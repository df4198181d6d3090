//! An idle queue's faults: its holder sleeps and holds each partition's
//! term up to the partition's earliest due time, and on a cluster the
//! health watch looks every 30 s, yet a killed master or holder, a cut
//! subscriber or a vanished consumer still loses nothing and fires due jobs
//! about on time.

use std::time::{Duration, Instant};

use crate::common::{eventually, job, post, topics, DelayqProcess};
use crate::idle::{idle_holder, idle_pair};
use crate::redis_server::RedisServer;

const HOUR: Duration = Duration::from_secs(3600);

/// Pushes `id` to topic `topic` through `base`, due in `delay_s` seconds.
async fn push(base: &str, id: &str, topic: &str, delay_s: u64, ttr_s: u64) {
    let body = format!(r#"{{"topic":"{topic}","id":"{id}","delay":{delay_s},"ttr":{ttr_s}}}"#);
    let r = post(base, "/push", &body).await;
    assert_eq!(r["code"], 0, "{r}");
}

/// Pops (a long-poll) through `base` until a job of `topic` comes, within
/// `limit`; returns its id.
async fn pop_one(base: &str, topic: &str, limit: Duration) -> String {
    let body = format!(r#"{{"topic":"{topic}"}}"#);
    tokio::time::timeout(limit, async {
        loop {
            let v = post(base, "/pop", &body).await;
            if let Some(id) = v["data"]["id"].as_str() {
                return id.to_owned();
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no job of {topic} in {limit:?}"))
}

/// The holder of the only partition, idle, is SIGKILLed a few ms after the
/// other instance's push of a job due in 3 s answered: before its sweep
/// (or its term keeper) could look. The push itself ended the term by the
/// job's due time, and the survivor, asleep until the old term's end
/// (a minute away), heard the wake notice and asked again: the job fires
/// through it at most ~2 s late, every round, whoever holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_just_after_a_push_elsewhere_hands_over_by_the_due_time() {
    const ROUNDS: u64 = 8;
    let redis = RedisServer::start();
    let mut procs = [
        DelayqProcess::start(&redis, &[]),
        DelayqProcess::start(&redis, &[]),
    ];
    let mut lateness = Vec::new();
    for round in 0..ROUNDS {
        let holder = idle_holder(&redis).await;
        let h = procs
            .iter()
            .position(|p| holder.starts_with(&format!("pid-{}-", p.pid())))
            .unwrap_or_else(|| panic!("holder {holder} is neither instance"));
        let survivor = procs[1 - h].base.clone();
        let id = format!("race-{round}");
        let before = redis.time_ms().await;
        push(&survivor, &id, "race", 3, 60).await;
        // 0 to 3 ms after the push answered: the holder's sweep and term
        // keeper hear the wake notice about then.
        if round % 4 > 0 {
            tokio::time::sleep(Duration::from_millis(round % 4)).await;
        }
        procs[h].kill9_in_place();
        let got = pop_one(&survivor, "race", Duration::from_secs(30)).await;
        assert_eq!(got, id);
        // Counted from before the push: an upper bound of its lateness.
        let late = redis.time_ms().await - (before + 3000);
        lateness.push(late);
        post(&survivor, "/finish", &format!(r#"{{"id":"{id}"}}"#)).await;
        procs[h] = DelayqProcess::start(&redis, &[]);
    }
    println!("a holder killed after a push elsewhere: fired late by (ms) {lateness:?}");
    // The term's floor (2 s) after the due time at worst, and a busy
    // machine's margin.
    let worst = *lateness.iter().max().unwrap();
    assert!(
        worst <= 2_000 + 1_500,
        "fired {worst} ms late: {lateness:?}"
    );
}

/// CLUSTER SLOTS calls so far, over every running node (the health watch
/// is their one reader in a queue).
fn slot_reads(cluster: &crate::redis_cluster::TestCluster) -> u64 {
    cluster
        .nodes
        .iter()
        .filter(|n| n.pid() != 0)
        .filter_map(|n| crate::redis_cluster::text(n, &["INFO", "commandstats"]))
        .flat_map(|info| {
            info.lines()
                .filter_map(|l| l.strip_prefix("cmdstat_cluster|slots:"))
                .filter_map(|rest| {
                    rest.split(',')
                        .find_map(|f| f.strip_prefix("calls=")?.parse::<u64>().ok())
                })
                .collect::<Vec<_>>()
        })
        .sum()
}

/// A field of a node's INFO replication.
fn repl_offset(n: &RedisServer, field: &str) -> Option<i64> {
    let info = crate::redis_cluster::text(n, &["INFO", "replication"])?;
    info.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .trim()
            .parse()
            .ok()
    })
}

/// A queue idles on a cluster (its health watch at the 30 s pace), with
/// jobs due in 2 s (within the failover) and 15 s on one master's slots and
/// two pops waiting on an instance that dispatches nothing; that master is SIGKILLed and its replica takes over.
/// Each job fires (not lost), not early, and within 5 s of the later of its
/// due time and the failover's end; a job pushed after the failover is
/// delivered as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_while_the_queue_idles_loses_no_job_and_fires_it_in_time() {
    use crate::cluster::{cluster_config, owner_of};
    use crate::redis_cluster::TestCluster;
    let partitions = 3;
    let mut cluster = TestCluster::start(3);
    // The clock: a server on the same machine, as the nodes.
    let clock = RedisServer::start();
    let q = delayq::Queue::connect(cluster_config(&cluster, partitions)).unwrap();
    q.push(&job("later", "t", HOUR.as_millis() as u64, 60_000))
        .await
        .unwrap();
    // The consumers wait on an instance that dispatches nothing: it hears
    // of the master's death only through its own calls and notices.
    let consumers = delayq::Queue::connect(delayq::Config {
        dispatch: false,
        ..cluster_config(&cluster, partitions)
    })
    .unwrap();
    let (tx, mut fired) = tokio::sync::mpsc::unbounded_channel();
    let pops: Vec<_> = (0..2)
        .map(|_| {
            let (c, tx) = (consumers.clone(), tx.clone());
            tokio::spawn(async move {
                loop {
                    match c.pop(&topics(&["t"]), HOUR).await {
                        Ok(Some(j)) => {
                            let _ = tx.send(j.id.clone());
                        }
                        Ok(None) => {}
                        Err(e) => {
                            // A call to the dead master: the consumer
                            // tries again, as a worker would.
                            println!("pop failed: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            })
        })
        .collect();
    // Idle: no CLUSTER SLOTS read for 3 s (the watch looks once a second
    // while anything hints at a change, every 30 s otherwise).
    let (mut reads, mut since) = (slot_reads(&cluster), Instant::now());
    eventually(Duration::from_secs(90), "the health watch idles", || {
        let now = slot_reads(&cluster);
        if now != reads {
            (reads, since) = (now, Instant::now());
        }
        let idle = since.elapsed() > Duration::from_secs(3) && consumers.waiting_pops() == 2;
        async move { idle.then_some(()) }
    })
    .await;
    println!("{reads} CLUSTER SLOTS reads; none in the last 3 s");
    let victim = cluster.masters()[0];
    let replica = cluster.replica_of(victim);
    let keys = delayq::testing::Keys::partitions("dq", partitions);
    let ids: Vec<String> = (0..200)
        .map(|i| format!("idle-{i}"))
        .filter(|id| {
            let part = delayq::testing::partition_of(id, partitions);
            owner_of(
                &cluster,
                delayq::testing::slot(keys[part].schedule().as_bytes()),
            ) == victim
        })
        .take(3)
        .collect();
    assert_eq!(ids.len(), 3, "too few ids on the victim's partition");
    // One job falls due while its master is out, one after the failover.
    let before = clock.time_ms().await;
    let due: std::collections::HashMap<String, i64> = [(&ids[0], 2_000), (&ids[1], 15_000)]
        .into_iter()
        .map(|(id, delay)| (id.clone(), before + delay))
        .collect();
    for (id, delay) in [(&ids[0], 2_000), (&ids[1], 15_000)] {
        q.push(&job(id, "t", delay, 60_000)).await.unwrap();
    }
    // What the replica has is what survives: the pushes, replicated.
    let offset = repl_offset(&cluster.nodes[victim], "master_repl_offset").unwrap();
    eventually(
        Duration::from_secs(10),
        "the replica has the pushes",
        || {
            let caught_up = repl_offset(&cluster.nodes[replica], "slave_repl_offset")
                .is_some_and(|o| o >= offset);
            async move { caught_up.then_some(()) }
        },
    )
    .await;
    cluster.nodes[victim].kill();
    let killed = Instant::now();
    eventually(Duration::from_secs(30), "the replica takes over", || {
        let done = cluster.masters().contains(&replica) && cluster.settled();
        async move { done.then_some(()) }
    })
    .await;
    let failover = Instant::now() - killed;
    let failed_over_at = clock.time_ms().await;
    println!("failover took {failover:?}");
    for _ in 0..2 {
        let got = tokio::time::timeout(Duration::from_secs(60), fired.recv())
            .await
            .expect("each job fired within a minute")
            .unwrap();
        let at = clock.time_ms().await;
        let due = due[&got];
        println!(
            "{got} came {} ms after its due time, {} ms after the failover",
            at - due,
            at - failed_over_at
        );
        assert!(at >= due, "{got} fired {} ms early", due - at);
        assert!(
            at - due.max(failed_over_at) <= 5_000,
            "{got} fired {} ms after its due time, {} ms after the failover",
            at - due,
            at - failed_over_at
        );
    }
    // A push after the failover, on the new master's slots.
    let before = clock.time_ms().await;
    q.push(&job(&ids[2], "t", 1_000, 60_000)).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), fired.recv())
        .await
        .expect("the job pushed after the failover fired")
        .unwrap();
    let late = clock.time_ms().await - (before + 1_000);
    println!("after the failover: a job due in 1 s came {late} ms late");
    assert_eq!(got, ids[2]);
    assert!(late <= 5_000, "{late} ms late");
    for p in pops {
        p.abort();
    }
    consumers.close().await;
    q.close().await;
}

/// Which of `procs` holds the only partition's idle term.
async fn holder_of(redis: &RedisServer, procs: &[DelayqProcess; 2]) -> usize {
    let holder = idle_holder(redis).await;
    procs
        .iter()
        .position(|p| holder.starts_with(&format!("pid-{}-", p.pid())))
        .unwrap_or_else(|| panic!("holder {holder} is neither instance"))
}

/// Every subscriber connection is cut (the standby's among them) just
/// before a third instance pushes a job due in 3 s, so the standby may
/// never hear that wake notice; then the idle holder is SIGKILLed. The
/// standby asks about the term after its reconnect, finds it ends by the
/// job's due time, and fires the job at most ~2 s late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_whose_subscriber_was_cut_takes_over_by_the_due_time() {
    let redis = RedisServer::start();
    let mut procs = [
        DelayqProcess::start(&redis, &[]),
        DelayqProcess::start(&redis, &[]),
    ];
    let h = holder_of(&redis, &procs).await;
    // Pushes only; dispatches nothing.
    let pusher = delayq::Queue::connect(delayq::Config {
        dispatch: false,
        ..crate::common::config(&redis)
    })
    .unwrap();
    pusher.check_connection().await.unwrap();
    let cut: i64 = redis.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    assert!(cut >= 2, "{cut} subscriber connections cut");
    let before = redis.time_ms().await;
    pusher.push(&job("cut", "c", 3_000, 60_000)).await.unwrap();
    procs[h].kill9_in_place();
    let survivor = &procs[1 - h].base;
    assert_eq!(pop_one(survivor, "c", Duration::from_secs(30)).await, "cut");
    let late = redis.time_ms().await - (before + 3_000);
    println!("a standby whose subscriber was cut: fired {late} ms late");
    assert!(late <= 2_000 + 1_500, "fired {late} ms late");
    pusher.close().await;
}

/// A consumer pops a job through the standby and is gone with it (that
/// instance SIGKILLed, nothing finished) while the holder idles towards a
/// job an hour away: the lease end, the schedule's new earliest, ends the
/// idle term's sleep, and the job comes back at its lease end, not before
/// and at most ~1.5 s after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_consumer_vanished_comes_back_at_its_lease_end_on_an_idle_queue() {
    let redis = RedisServer::start();
    let mut procs = [
        DelayqProcess::start(&redis, &[]),
        DelayqProcess::start(&redis, &[]),
    ];
    push(&procs[0].base, "later", "v", HOUR.as_secs(), 60).await;
    push(&procs[0].base, "held", "v", 1, 3).await;
    let h = holder_of(&redis, &procs).await;
    let standby = procs[1 - h].base.clone();
    let before = redis.time_ms().await;
    assert_eq!(
        pop_one(&standby, "v", Duration::from_secs(30)).await,
        "held"
    );
    let popped = redis.time_ms().await;
    procs[1 - h].kill9_in_place();
    let holder = &procs[h].base;
    assert_eq!(pop_one(holder, "v", Duration::from_secs(30)).await, "held");
    let back = redis.time_ms().await;
    println!(
        "a vanished consumer's job came back {} ms after its lease end",
        back - (popped + 3_000)
    );
    assert!(
        back >= before + 3_000,
        "back {} ms early",
        before + 3_000 - back
    );
    assert!(
        back - (popped + 3_000) <= 1_500,
        "back {} ms after its lease end",
        back - (popped + 3_000)
    );
}

/// How late (ms) the first tick of a schedule ticking every second is
/// popped after its time: put through an instance that dispatches
/// nothing, so the dispatching instance learns of it by the put's wake
/// notice only (`cut`: every subscriber connection cut just before the
/// put, so that notice may go unheard).
async fn first_tick_of_a_schedule_put_elsewhere(cut: bool) -> i64 {
    let redis = RedisServer::start();
    let a = crate::common::queue(&redis);
    // Settled: its recurring loop has looked, found no schedule, and sleeps.
    idle_holder(&redis).await;
    let putter = delayq::Queue::connect(delayq::Config {
        dispatch: false,
        ..crate::common::config(&redis)
    })
    .unwrap();
    putter.check_connection().await.unwrap();
    if cut {
        let cut: i64 = redis.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).await;
        assert!(cut >= 2, "{cut} subscriber connections cut");
    }
    let put_at = redis.time_ms().await;
    putter
        .put_recurring(
            "beat",
            &delayq::Recurring {
                topic: "beat".into(),
                cron: "* * * * * *".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let got = a
        .pop(&topics(&["beat"]), Duration::from_secs(20))
        .await
        .unwrap()
        .expect("a tick within 20 s");
    let popped = redis.time_ms().await;
    let tick = chrono::DateTime::parse_from_rfc3339(got.id.rsplit('/').next().unwrap())
        .unwrap()
        .timestamp_millis();
    assert!(tick > put_at - 1_000, "{} is older than the put", got.id);
    assert!(
        popped >= tick,
        "{} popped {} ms early",
        got.id,
        tick - popped
    );
    let late = popped - tick;
    println!("cut {cut}: {} popped {late} ms after its tick", got.id);
    putter.close().await;
    a.close().await;
    late
}

/// With no recurring schedule, the recurring loop sleeps until a put's
/// wake notice (a minute at most); the loop that hears it finds the
/// schedule in the index of names, written before the notice: the first
/// tick comes within ~2 s, not a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_put_through_an_instance_that_dispatches_nothing_ticks_at_once() {
    let late = first_tick_of_a_schedule_put_elsewhere(false).await;
    assert!(late <= 2_500, "the first tick came {late} ms late");
}

/// The put's wake notice is published while the dispatching instance's
/// subscriber reconnects: the reconnect makes the recurring loop look, as
/// it makes the sweeps look, and the first tick comes within ~2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_put_while_the_subscriber_reconnects_ticks_at_once() {
    let late = first_tick_of_a_schedule_put_elsewhere(true).await;
    assert!(late <= 2_500, "the first tick came {late} ms late");
}

/// A topic paused on an idle queue: its job falls due and waits in ready
/// while a pop of another instance waits (it looks every 5 minutes
/// otherwise); resuming hands it to that pop at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_topic_wakes_a_waiting_pop_of_another_instance_at_once() {
    let redis = RedisServer::start();
    let (a, b) = idle_pair(&redis).await;
    a.pause("p").await.unwrap();
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.pop(&topics(&["p"]), HOUR).await })
    };
    eventually(Duration::from_secs(10), "the pop waits", || async {
        (b.waiting_pops() == 1).then_some(())
    })
    .await;
    a.push(&job("paused", "p", 1_000, 60_000)).await.unwrap();
    eventually(Duration::from_secs(10), "the job is ready", || async {
        let j = a.get("paused").await.unwrap()?;
        (j.state == delayq::JobState::Ready).then_some(())
    })
    .await;
    assert!(
        !waiting.is_finished(),
        "a paused topic's job was handed out"
    );
    let resumed = Instant::now();
    a.resume("p").await.unwrap();
    // Woken by the resume, not by the backstop (minutes away).
    let got = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiting pop got the job within 30 s")
        .unwrap()
        .unwrap()
        .expect("a job");
    println!("resumed: the waiting pop got it in {:?}", resumed.elapsed());
    assert_eq!(got.id, "paused");
    assert!(resumed.elapsed() < Duration::from_secs(30));
    a.close().await;
    b.close().await;
}

/// On a cluster: two instances, the holder of a partition idle; the other
/// pushes a job due in 3 s onto it (the wake notice crosses the cluster
/// bus) and the holder is SIGKILLed at once. The survivor takes the term
/// over by the job's due time and fires it at most ~2 s late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_holder_killed_after_a_push_elsewhere_hands_over_by_the_due_time() {
    use crate::cluster::owner_of;
    use crate::redis_cluster::TestCluster;
    let cluster = TestCluster::start_with(3, 0, &crate::redis_cluster::node_config());
    let clock = RedisServer::start();
    let seeds = cluster.seeds().join(",");
    let args = ["--redis-cluster", seeds.as_str(), "--partitions", "3"];
    let mut procs = [DelayqProcess::spawn(&args), DelayqProcess::spawn(&args)];
    let id = "cluster-race";
    let keys = delayq::testing::Keys::partitions("dq", 3);
    let part = &keys[delayq::testing::partition_of(id, 3)];
    let term = format!(
        "{}dispatcher",
        part.schedule().strip_suffix("schedule").unwrap()
    );
    let node =
        &cluster.nodes[owner_of(&cluster, delayq::testing::slot(part.schedule().as_bytes()))];
    let holder = eventually(Duration::from_secs(60), "an idle-length term", || async {
        let left: i64 = node.cmd(&["PTTL", &term]).await;
        let holder: Option<String> = node.cmd(&["GET", &term]).await;
        holder.filter(|_| left > 5_000)
    })
    .await;
    let h = procs
        .iter()
        .position(|p| holder.starts_with(&format!("pid-{}-", p.pid())))
        .unwrap_or_else(|| panic!("holder {holder} is neither instance"));
    let survivor = procs[1 - h].base.clone();
    let before = clock.time_ms().await;
    push(&survivor, id, "race", 3, 60).await;
    procs[h].kill9_in_place();
    assert_eq!(
        pop_one(&survivor, "race", Duration::from_secs(30)).await,
        id
    );
    let late = clock.time_ms().await - (before + 3_000);
    println!("on a cluster, a holder killed after a push elsewhere: fired {late} ms late");
    assert!(late <= 2_000 + 1_500, "fired {late} ms late");
}

/// The dispatching instance's subscriber (and its expired-events
/// connection) cannot reconnect (its Redis user may no longer SUBSCRIBE,
/// as behind a proxy without pub/sub), so it hears no wake notice; its
/// sweep idles towards a job an hour away. A job pushed through another
/// instance, due in 3 s, still fires about on time: while the subscriber
/// is down, the sweep looks at least every half second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_subscriber_cannot_reconnect_a_job_pushed_elsewhere_fires_on_time() {
    let redis = RedisServer::start();
    let _: String = redis
        .cmd(&["ACL", "SETUSER", "dq", "on", ">pw", "~*", "&*", "+@all"])
        .await;
    let a = delayq::Queue::connect(delayq::Config {
        redis: delayq::Redis::Url(redis.url_as("dq", "pw")),
        ..crate::common::config(&redis)
    })
    .unwrap();
    a.push(&job("later", "t", HOUR.as_millis() as u64, 60_000))
        .await
        .unwrap();
    idle_holder(&redis).await;
    let b = delayq::Queue::connect(delayq::Config {
        dispatch: false,
        ..crate::common::config(&redis)
    })
    .unwrap();
    b.check_connection().await.unwrap();
    let _: String = redis
        .cmd(&["ACL", "SETUSER", "dq", "-subscribe", "-psubscribe"])
        .await;
    let cut: i64 = redis
        .cmd(&["CLIENT", "KILL", "USER", "dq", "TYPE", "pubsub"])
        .await;
    assert!(cut >= 1, "{cut} subscriber connections cut");
    let before = redis.time_ms().await;
    b.push(&job("soon", "s", 3_000, 60_000)).await.unwrap();
    let got = a
        .pop(&topics(&["s"]), Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the job fired within 30 s");
    let late = redis.time_ms().await - (before + 3_000);
    println!("subscriber down: {} fired {late} ms late", got.id);
    assert!(late <= 1_500, "fired {late} ms late");
    a.close().await;
    b.close().await;
}

/// A standby whose subscriber cannot reconnect (its Redis user may no
/// longer SUBSCRIBE) hears no wake notice; a job due in 3 s pushed through
/// a third instance ends the idle holder's term by its due time, and the
/// holder is SIGKILLed. The standby, asking at least every 2 s while its
/// subscriber is down, takes over and fires the job at most ~2 s late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_whose_subscriber_cannot_reconnect_takes_over_by_the_due_time() {
    let redis = RedisServer::start();
    let _: String = redis
        .cmd(&["ACL", "SETUSER", "dq", "on", ">pw", "~*", "&*", "+@all"])
        .await;
    let mut holder = DelayqProcess::start(&redis, &[]);
    let h = idle_holder(&redis).await;
    assert!(h.starts_with(&format!("pid-{}-", holder.pid())), "{h}");
    let standby = DelayqProcess::spawn(&["--redis", &redis.url_as("dq", "pw")]);
    let pusher = delayq::Queue::connect(delayq::Config {
        dispatch: false,
        ..crate::common::config(&redis)
    })
    .unwrap();
    pusher.check_connection().await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the standby subscribed",
        || async {
            let clients: String = redis.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]).await;
            clients.contains("user=dq").then_some(())
        },
    )
    .await;
    let _: String = redis
        .cmd(&["ACL", "SETUSER", "dq", "-subscribe", "-psubscribe"])
        .await;
    let cut: i64 = redis
        .cmd(&["CLIENT", "KILL", "USER", "dq", "TYPE", "pubsub"])
        .await;
    assert!(cut >= 1, "{cut} subscriber connections cut");
    let before = redis.time_ms().await;
    pusher.push(&job("deaf", "d", 3_000, 60_000)).await.unwrap();
    holder.kill9_in_place();
    assert_eq!(
        pop_one(&standby.base, "d", Duration::from_secs(30)).await,
        "deaf"
    );
    let late = redis.time_ms().await - (before + 3_000);
    println!("a standby whose subscriber is down: fired {late} ms late");
    assert!(late <= 2_000 + 1_500, "fired {late} ms late");
    pusher.close().await;
}
