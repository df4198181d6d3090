//! Many delayq instances on one Redis (sidecars): one dispatcher per
//! partition at a time, a lease the others take over.

use std::collections::HashMap;
use std::time::Duration;

use delayq::{Config, Queue};

use crate::common::*;

/// The leader's term key of the one partition of the default queue.
const LEASE_KEY: &str = "{dq}:dispatcher";

/// A queue that pushes and pops but dispatches nothing: the test's own
/// client, beside the instances under test.
fn client(redis: &RedisServer) -> Queue {
    Queue::connect(Config {
        dispatch: false,
        ..config(redis)
    })
    .unwrap()
}

async fn holder(redis: &RedisServer) -> Option<String> {
    redis.cmd::<Option<String>>(&["GET", LEASE_KEY]).await
}

/// Pops and finishes until `n` jobs came or `limit` passed; per id, how
/// many times it came and its lateness (ms, Redis time, pop minus due).
async fn consume(
    q: &Queue,
    topic: &str,
    n: usize,
    limit: Duration,
    mut on_pop: impl FnMut(usize),
) -> HashMap<String, Vec<i64>> {
    let mut got: HashMap<String, Vec<i64>> = HashMap::new();
    let deadline = std::time::Instant::now() + limit;
    let mut popped = 0;
    while popped < n && std::time::Instant::now() < deadline {
        for d in q
            .pop_many(&topics(&[topic]), 10, Duration::from_secs(1))
            .await
            .unwrap()
        {
            let late = d.popped_at_us / 1000 - d.due_ms;
            got.entry(d.id.clone()).or_default().push(late);
            q.finish(&d.id, &d.token).await.unwrap();
            popped += 1;
            on_pop(popped);
        }
    }
    got
}

#[tokio::test]
async fn one_instance_dispatches_a_partition_and_the_others_stand_by() {
    let redis = RedisServer::start();
    let (a, b, c) = (queue(&redis), queue(&redis), client(&redis));
    let n = 40;
    for i in 0..n {
        c.push(&job(&format!("s-{i}"), "side", 300, 60_000))
            .await
            .unwrap();
    }
    let got = consume(&c, "side", n, Duration::from_secs(20), |_| {}).await;
    assert_eq!(got.len(), n, "every job came");
    let (da, db) = (
        a.metrics().dispatched.total(),
        b.metrics().dispatched.total(),
    );
    assert_eq!(da + db, n as u64, "each job was dispatched once");
    assert!(
        da == 0 || db == 0,
        "one instance dispatches; the other stands by (dispatched {da} and {db})"
    );
    let (ha, hb) = (a.dispatching_partitions(), b.dispatching_partitions());
    assert_eq!(
        (ha.len() + hb.len(), if da > 0 { &ha } else { &hb }),
        (1, &vec![0]),
        "the dispatcher says so"
    );
    assert!(c.dispatching_partitions().is_empty(), "dispatch off: none");
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn a_closed_instance_gives_its_lease_up_and_a_standby_takes_it() {
    let redis = RedisServer::start();
    let a = queue(&redis);
    eventually(
        Duration::from_secs(10),
        "the first instance holds the lease",
        || async { (a.dispatching_partitions() == [0]).then_some(()) },
    )
    .await;
    let b = queue(&redis);
    let before = holder(&redis).await.unwrap();
    a.close().await;
    assert_ne!(
        holder(&redis).await.as_ref(),
        Some(&before),
        "closing gave the lease up (no waiting for it to lapse)"
    );
    eventually(
        Duration::from_secs(10),
        "the standby takes over",
        || async { (b.dispatching_partitions() == [0]).then_some(()) },
    )
    .await;
    b.close().await;
}

/// Three `delayq serve` processes; the dispatcher is SIGKILLed while jobs
/// fall due: a standby takes over within the lease's 2 s, and no job is
/// lost, early or delivered twice.
#[tokio::test]
async fn a_sigkilled_dispatcher_hands_over_within_its_lease_and_no_job_is_lost_early_or_twice() {
    let redis = RedisServer::start();
    let mut procs: Vec<Option<DelayqProcess>> = (0..3)
        .map(|_| Some(DelayqProcess::start(&redis, &[])))
        .collect();
    let first = eventually(
        Duration::from_secs(10),
        "an instance takes the lease",
        || async { holder(&redis).await },
    )
    .await;
    let pid_of = |h: &str| -> u32 {
        h.strip_prefix("pid-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("lease holder {h:?} names no pid"))
    };
    let killed = pid_of(&first);
    let at = procs
        .iter()
        .position(|p| p.as_ref().is_some_and(|p| p.pid() == killed))
        .expect("the holder is one of the three");

    let c = client(&redis);
    let n = 60;
    for i in 0..n {
        // Due over 0.5 to 4.5 s: before, across and after the handover.
        let delay = 500 + (i as u64) * 4000 / n as u64;
        c.push(&job(&format!("k-{i}"), "side", delay, 60_000))
            .await
            .unwrap();
    }
    let mut victim = procs[at].take();
    let got = consume(&c, "side", n, Duration::from_secs(30), |popped| {
        if popped == 5 {
            victim.take().unwrap().kill9();
        }
    })
    .await;
    let next = eventually(
        Duration::from_secs(10),
        "another instance holds the lease",
        || async { holder(&redis).await.filter(|h| pid_of(h) != killed) },
    )
    .await;
    assert!(
        procs.iter().flatten().any(|p| p.pid() == pid_of(&next)),
        "a live instance took over"
    );
    // Anything fired twice would come now.
    let extra = c
        .pop_many(&topics(&["side"]), 10, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(extra.is_empty(), "nothing comes twice: {extra:?}");
    assert_eq!(got.len(), n, "no job lost");
    let twice: Vec<_> = got.iter().filter(|(_, l)| l.len() > 1).collect();
    assert!(twice.is_empty(), "no job twice: {twice:?}");
    let late: Vec<i64> = got.values().map(|l| l[0]).collect();
    assert!(late.iter().all(|&l| l >= 0), "no job early: {late:?}");
    let worst = *late.iter().max().unwrap();
    // The lease's 2 s, and a margin for a busy machine.
    assert!(
        worst <= 3_500,
        "the handover cost {worst} ms (lease 2000 ms)"
    );
    println!("worst lateness across the SIGKILL: {worst} ms");
}

/// RPOP calls so far (only pop.lua pops a ready list): one per look.
async fn rpops(redis: &RedisServer) -> u64 {
    let info: String = redis.cmd(&["INFO", "commandstats"]).await;
    info.lines()
        .find_map(|l| {
            l.strip_prefix("cmdstat_rpop:calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_job_made_ready_wakes_one_waiter_across_instances_not_one_per_instance() {
    let redis = RedisServer::start();
    let instances: Vec<Queue> = (0..3).map(|_| queue(&redis)).collect();
    eventually(
        Duration::from_secs(10),
        "one instance dispatches",
        || async {
            instances
                .iter()
                .any(|q| !q.dispatching_partitions().is_empty())
                .then_some(())
        },
    )
    .await;
    // Two waiting consumers in every instance.
    let got: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let mut consumers = Vec::new();
    for q in &instances {
        for _ in 0..2 {
            let (q, got) = (q.clone(), got.clone());
            consumers.push(tokio::spawn(async move {
                loop {
                    if let Some(d) = q
                        .pop(&topics(&["wake"]), Duration::from_secs(30))
                        .await
                        .unwrap()
                    {
                        q.finish(&d.id, &d.token).await.unwrap();
                        got.lock().unwrap().push(d.id);
                    }
                }
            }));
        }
    }
    eventually(Duration::from_secs(10), "every consumer waits", || async {
        instances
            .iter()
            .all(|q| q.waiting_pops() == 2)
            .then_some(())
    })
    .await;
    redis.cmd::<String>(&["CONFIG", "RESETSTAT"]).await;
    let n = 20;
    let c = client(&redis);
    for i in 0..n {
        // One at a time: each its own dispatch and wake-up.
        c.push(&job(&format!("w-{i}"), "wake", 300 + 60 * i as u64, 60_000))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(20), "every job came", || async {
        (got.lock().unwrap().len() >= n).then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(10),
        "every consumer waits again",
        || async {
            instances
                .iter()
                .all(|q| q.waiting_pops() == 2)
                .then_some(())
        },
    )
    .await;
    let looks = rpops(&redis).await;
    for c in consumers {
        c.abort();
    }
    let mut ids = got.lock().unwrap().clone();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "each job once");
    // Per job: the look that takes it, and its consumer's next look before
    // it waits again: 2. One look per instance per job would be 4. A busy
    // machine adds stray looks (a waiter woken for a job another consumer
    // took first: 52 for 20 jobs beside two CPU hogs and builds), so the
    // bound is 3, still well apart from 4.
    assert!(
        looks <= (n as u64) * 3,
        "{looks} looks for {n} jobs: a ready job woke waiters in every instance"
    );
    for q in &instances {
        q.close().await;
    }
}
