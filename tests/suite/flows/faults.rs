//! Flows through faults: trees whose jobs sit on three cluster masters,
//! the master holding parents' flows SIGKILLed while children finish
//! (replica acks 1). Each parent is released once, never before its last
//! child's finish was sent, with every child's result. A child's
//! finish its replica never had releases nothing. A push made again
//! after its lost reply, cut part way or whole.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delayq::testing::slot;
use delayq::{ChildOutcome, Config, Error, NewFlow, Queue};
use serde_json::json;

use super::{leaf, parent};
use crate::common::*;

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// What the consumers saw: when each finish was last sent, and
/// each first delivery of a parent with the children it carried.
#[derive(Default)]
struct Seen {
    finish_sent: HashMap<String, i64>,
    first_delivery: HashMap<String, (i64, delayq::Children)>,
    deliveries: HashMap<String, u32>,
}

/// Pops from every topic of the trees and finishes each job with its id
/// as its result, through the failover (calls that fail are made again
/// by the lease's end).
async fn consume(q: Queue, seen: Arc<Mutex<Seen>>, stop: Arc<AtomicBool>) {
    let topics = topics(&["refund", "send", "notify", "order"]);
    while !stop.load(Ordering::Relaxed) {
        let Ok(got) = q.pop_many(&topics, 50, Duration::from_millis(200)).await else {
            continue;
        };
        for d in got {
            let at = now_us();
            {
                let mut s = seen.lock().unwrap();
                *s.deliveries.entry(d.id.clone()).or_default() += 1;
                if let Some(c) = &d.children {
                    s.first_delivery
                        .entry(d.id.clone())
                        .or_insert((at, c.clone()));
                }
                // The last finish sent: an earlier one may have been lost.
                s.finish_sent.insert(d.id.clone(), now_us());
            }
            match q
                .finish_with_result(&d.id, &d.token, &json!({ "by": d.id }))
                .await
            {
                Ok(()) | Err(Error::NotFound(_)) => {}
                // Unknown or refused during the failover: the lease runs
                // out and the job comes again.
                Err(_) => {}
            }
        }
    }
}

/// Tree `n`: an order with two refunds and a notice sent three ways (a
/// parent of its own); leaves retried (a lease that runs out in the
/// failover is an attempt), leases of 5 s.
fn tree(n: usize) -> NewFlow {
    let patient = |mut f: NewFlow| {
        f.job.ttr = Duration::from_secs(5);
        f.job.retry = None;
        f
    };
    let sends: Vec<NewFlow> = (0..3)
        .map(|i| patient(leaf(&format!("t{n}-send-{i}"), "send")))
        .collect();
    let kids = vec![
        patient(leaf(&format!("t{n}-refund-0"), "refund")),
        patient(leaf(&format!("t{n}-refund-1"), "refund")),
        patient(parent(&format!("t{n}-notify"), "notify", sends)),
    ];
    patient(parent(&format!("t{n}-order"), "order", kids))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flows_over_cluster_masters_release_each_parent_once_through_a_master_killed() {
    let parts = 6;
    let (mut cluster, q) = crate::cluster::acked_queue(parts).await;
    let flows = 8;
    let trees: Vec<NewFlow> = (0..flows).map(tree).collect();
    let master = |id: &str| crate::cluster::master_of_job(&cluster, parts, id);
    // The children of the trees, together, sit on every master.
    let masters: std::collections::HashSet<usize> = trees
        .iter()
        .flat_map(|t| t.jobs())
        .map(|n| master(&n.job.id))
        .collect();
    assert_eq!(masters.len(), 3, "the trees' jobs on masters {masters:?}");
    // A push that failed for want of Redis (no answer in time, or, with
    // replica acks on a busy machine, a write the replica did not confirm
    // in time) is made again, as the book says: it finishes the flow.
    let until = std::time::Instant::now() + Duration::from_secs(120);
    for t in &trees {
        loop {
            match q.push_flow(t).await {
                Ok(_) => break,
                Err(e) if e.is_unavailable() && std::time::Instant::now() < until => {}
                Err(e) => panic!("push_flow {}: {e}", t.job.id),
            }
        }
    }
    // The master of the first root's flow goes down mid-way.
    let home = master("t0-order");

    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..2)
        .map(|_| tokio::spawn(consume(q.clone(), seen.clone(), stop.clone())))
        .collect();
    eventually(Duration::from_secs(60), "ten children finished", || async {
        (seen.lock().unwrap().finish_sent.len() >= 10).then_some(())
    })
    .await;
    cluster.nodes[home].kill();
    eventually(Duration::from_secs(60), "a replica takes over", || async {
        (cluster.masters().len() == 3 && cluster.settled()).then_some(())
    })
    .await;
    cluster.nodes[home].restart();
    eventually(
        Duration::from_secs(120),
        "every root handed out",
        || async {
            let s = seen.lock().unwrap();
            (0..flows)
                .all(|n| s.first_delivery.contains_key(&format!("t{n}-order")))
                .then_some(())
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        c.await.unwrap();
    }

    let s = std::mem::take(&mut *seen.lock().unwrap());
    for t in &trees {
        for p in t.jobs().into_iter().filter(|n| !n.children.is_empty()) {
            let id = &p.job.id;
            let (at, kids) = &s.first_delivery[id];
            assert_eq!(kids.len(), p.children.len(), "{id}: {kids:?}");
            for c in &p.children {
                let k = &kids[&c.job.id];
                assert_eq!(k.outcome, ChildOutcome::Finished, "{id}: {}", c.job.id);
                assert_eq!(k.result, Some(json!({ "by": c.job.id })));
                let sent = s.finish_sent[&c.job.id];
                assert!(
                    *at > sent,
                    "{id} handed out at {at} us, before {}'s finish was sent at {sent} us",
                    c.job.id
                );
            }
            // Released once: a second delivery of a parent is only a
            // lease that ran out in the failover, never a second parent.
            let flow = q.flow(id).await.unwrap().unwrap();
            assert_eq!(flow.state, delayq::FlowState::Released, "{id}");
        }
    }
    let again: Vec<(&String, &u32)> = s.deliveries.iter().filter(|(_, n)| **n > 1).collect();
    println!(
        "{flows} trees of 8 jobs over 3 masters, one killed: every parent released once; delivered again (leases run out in the failover): {again:?}"
    );
    q.close().await;
}

/// A child's finish that its master ran but its replica never had is no
/// end: its note goes home only once the child's replicas have it. The
/// child's master loses its replica (SIGSTOP) as the finish runs, then
/// dies; the replica takes over without the finish, the child runs
/// again, and its parent is handed out only after that second finish,
/// with its result. (The relay carried the note at once: the parent ran
/// on a finish the failover took back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_finish_its_replica_never_had_releases_no_parent() {
    use crate::redis_server::Stopped;
    let parts = 6;
    let (mut cluster, q) = crate::cluster::acked_queue(parts).await;
    let master = |id: &str| crate::cluster::master_of_job(&cluster, parts, id);
    // The child on another master than its parent's flow.
    let child = (0..)
        .map(|i| format!("refund-{i}"))
        .find(|c| master(c) != master("order-1"))
        .unwrap();
    let mut leaf = leaf(&child, "refund");
    leaf.job.ttr = Duration::from_secs(5);
    leaf.job.retry = None;
    let flow = parent("order-1", "order", vec![leaf]);
    retried("push_flow", || q.push_flow(&flow)).await;
    let d = eventually(Duration::from_secs(30), "the child", || async {
        q.pop(&topics(&["refund"]), Duration::from_millis(500))
            .await
            .ok()
            .flatten()
    })
    .await;
    assert_eq!(d.id, child);

    let b = master(&child);
    let replica = cluster.replica_of(b);
    // A stopped replica's kernel still takes in what its master sends:
    // 32 MiB written first fill the sockets' buffers, so what follows
    // stays in the master's memory, as behind a slow replica link.
    let filler = (0..)
        .map(|i| format!("filler-{i}"))
        .find(|k| crate::cluster::owner_of(&cluster, slot(k.as_bytes())) == b)
        .unwrap();
    let stalled = Stopped::new(cluster.nodes[replica].pid());
    let mut c = cluster.nodes[b].client().get_connection().unwrap();
    redis::cmd("SET")
        .arg(&filler)
        .arg(vec![b'x'; 32 << 20])
        .query::<()>(&mut c)
        .unwrap();
    let first = q
        .finish_with_result(&d.id, &d.token, &json!({ "by": "attempt 1" }))
        .await;
    assert!(first.is_err(), "a finish its replica never had: {first:?}");
    // The note is on the master alone: the relay must not carry it (it
    // did in milliseconds; 5 s for a busy machine).
    let released = async {
        loop {
            if let Ok(Some(f)) = q.flow("order-1").await {
                if f.state == delayq::FlowState::Released {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let early = tokio::time::timeout(Duration::from_secs(5), released).await;
    assert!(
        early.is_err(),
        "the parent released on a finish its child's replica never had"
    );
    cluster.nodes[b].kill();
    drop(stalled);
    eventually(
        Duration::from_secs(60),
        "the replica takes over",
        || async { (cluster.masters().len() == 3 && cluster.settled()).then_some(()) },
    )
    .await;
    // Back as the new master's replica: what replica acks wait for.
    cluster.nodes[b].restart();

    let mut last_finish = None;
    let until = std::time::Instant::now() + Duration::from_secs(120);
    let (at, p) = 'popping: loop {
        assert!(
            std::time::Instant::now() < until,
            "no parent within 120 s of the failover"
        );
        let got = q
            .pop_many(
                &topics(&["refund", "order"]),
                10,
                Duration::from_millis(200),
            )
            .await
            .unwrap_or_default();
        for d in got {
            if d.id != child {
                break 'popping (now_us(), d);
            }
            last_finish = Some(now_us());
            let by = json!({ "by": format!("attempt {}", d.attempts) });
            let _ = q.finish_with_result(&d.id, &d.token, &by).await;
        }
    };
    let sent = last_finish.unwrap_or_else(|| {
        panic!("the parent handed out at {at} us, before its child ran again (its finish went with its master)")
    });
    assert!(
        at > sent,
        "the parent handed out at {at} us, before the child's finish at {sent} us"
    );
    let kids = p.children.expect("the parent's children");
    let k = &kids[&child];
    assert_eq!(k.outcome, ChildOutcome::Finished);
    assert_ne!(k.result, Some(json!({ "by": "attempt 1" })), "{k:?}");
    q.close().await;
}

/// A push cut off by a Redis that stops answering (SIGSTOP) part way:
/// the error says so, nothing runs its parent, and the same push made
/// again once Redis answers takes the flow up where it was and finishes
/// it; every child runs once and the parent once, with all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_push_cut_off_by_a_stalled_redis_is_finished_by_the_same_push_made_again() {
    use crate::redis_server::Stopped;
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    let n = 5_000;
    let kids: Vec<NewFlow> = (0..n)
        .map(|i| leaf(&format!("line-{i:04}"), "lines"))
        .collect();
    let flow = parent("invoice-1", "invoice", kids);
    let push = {
        let (q, flow) = (q.clone(), flow.clone());
        tokio::spawn(async move { q.push_flow(&flow).await })
    };
    // Stalled once the flow exists, while its leaves are being pushed.
    eventually(Duration::from_secs(30), "the flow opened", || async {
        q.flow("invoice-1").await.ok().flatten().map(|_| ())
    })
    .await;
    let stalled = Stopped::new(redis.pid());
    let first = push.await.unwrap();
    drop(stalled);
    let Err(e) = first else {
        // The push finished before the stall: nothing to take up (rare).
        println!("the push finished before the stall; nothing cut off");
        q.close().await;
        return;
    };
    assert!(e.is_unavailable(), "{e}");
    let f = retried("flow", || q.flow("invoice-1")).await.unwrap();
    assert_eq!(f.state, delayq::FlowState::Adding, "{f:?}");
    let pushed = retried("push_flow again", || q.push_flow(&flow)).await;
    assert_eq!(pushed.jobs.len(), n + 1);
    let f = q.flow("invoice-1").await.unwrap().unwrap();
    assert_eq!(
        (f.state, f.children),
        (delayq::FlowState::Waiting, n as u64)
    );
    let mut seen = std::collections::HashSet::new();
    while seen.len() < n {
        let got = q
            .pop_many(&topics(&["lines"]), 500, Duration::from_secs(5))
            .await
            .unwrap();
        let leases: Vec<(&str, &str)> = got
            .iter()
            .map(|d| (d.id.as_str(), d.token.as_str()))
            .collect();
        for r in q.finish_many(&leases).await.unwrap() {
            r.unwrap();
        }
        for d in &got {
            assert!(seen.insert(d.id.clone()), "{} twice", d.id);
        }
    }
    let p = eventually(Duration::from_secs(30), "the parent", || async {
        q.pop(&topics(&["invoice"]), Duration::from_millis(200))
            .await
            .unwrap()
    })
    .await;
    assert_eq!(p.children.unwrap().len(), n);
    q.close().await;
}

/// A flow pushed whole whose reply was lost (on a busy cluster with
/// replica acks: its last close written, its confirmation late) is pushed
/// again by its caller, as the docs say: the same tree made again is taken
/// as pushed, not refused as an id in use, and nothing of it is written
/// twice. A different tree under the same root id is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_pushed_whole_and_made_again_is_taken_as_pushed_once() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let tree = || {
        parent(
            "again-root",
            "again",
            vec![
                leaf("again-a", "again-leaf"),
                parent("again-sub", "again", vec![leaf("again-b", "again-leaf")]),
            ],
        )
    };
    let first = q.push_flow(&tree()).await.unwrap();
    let made_again = q.push_flow(&tree()).await.unwrap();
    assert_eq!(made_again, first);
    let flow = q.flow("again-root").await.unwrap().unwrap();
    assert_eq!((flow.children, flow.pending), (2, 2), "{flow:?}");
    // Each leaf once.
    let got = q.try_pop(&topics(&["again-leaf"]), 10).await.unwrap();
    let mut ids: Vec<_> = got.iter().map(|d| d.id.clone()).collect();
    ids.sort();
    assert_eq!(ids, ["again-a", "again-b"]);
    // Another tree under the root's id: refused, nothing of it written.
    let other = parent("again-root", "again", vec![leaf("again-c", "again-leaf")]);
    let e = q.push_flow(&other).await.unwrap_err();
    assert!(
        matches!(&e, Error::Conflict(m) if m.contains("\"again-root\" is in use")),
        "{e:?}"
    );
    assert!(q.get("again-c").await.unwrap().is_none());
    q.close().await;
}

/// A flow push cut off between its closes (closed bottom up: a sub-flow
/// closed, its root not yet; the reply of the sub-flow's close lost) is
/// made again by its caller: the push takes the closed sub-flow as
/// pushed, closes the root, and writes nothing twice; the tree then runs
/// as one pushed once.
///
/// Replies come 1.5 s late through a proxy; once Redis ran the sub-flow's
/// close (SLOWLOG), every reply is held, so the root's close is never
/// sent and the push fails for want of Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_push_cut_off_between_its_closes_is_finished_by_the_same_push_made_again() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let tree = || {
        parent(
            "cut-root",
            "cut",
            vec![
                leaf("cut-a", "cut-leaf"),
                parent("cut-sub", "cut-mid", vec![leaf("cut-b", "cut-leaf")]),
            ],
        )
    };
    let proxy = SlowProxy::start(&redis, Duration::from_millis(1_500)).await;
    let slow = Queue::connect(Config {
        redis: delayq::Redis::Url(proxy.url()),
        redis_timeout: Duration::from_secs(6),
        dispatch: false,
        ..Config::default()
    })
    .unwrap();
    arm_slowlog(&redis, 10_000).await;
    let push = {
        let (slow, flow) = (slow.clone(), tree());
        tokio::spawn(async move { slow.push_flow(&flow).await })
    };
    let sub_batch = delayq::flow::flow_batch_id("cut-sub").to_lowercase();
    eventually(
        Duration::from_secs(120),
        "the sub-flow's close run",
        || async {
            let closes = slowlog_entries(&redis)
                .await
                .into_iter()
                .filter(|(_, args)| {
                    args.iter().any(|a| a == &sub_batch) && args.iter().any(|a| a == "close")
                });
            (closes.count() > 0).then_some(())
        },
    )
    .await;
    proxy.hold(true);
    let e = push.await.unwrap().unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    proxy.hold(false);
    let (root, sub) = (
        q.flow("cut-root").await.unwrap().unwrap(),
        q.flow("cut-sub").await.unwrap().unwrap(),
    );
    assert_eq!(root.state, delayq::FlowState::Adding, "{root:?}");
    assert_ne!(sub.state, delayq::FlowState::Adding, "{sub:?}");
    let again = tree();
    let pushed = retried("push_flow again", || q.push_flow(&again)).await;
    assert_eq!(pushed.jobs.len(), 4);
    let root = q.flow("cut-root").await.unwrap().unwrap();
    assert_eq!(
        (root.state, root.children),
        (delayq::FlowState::Waiting, 2),
        "{root:?}"
    );
    // Each leaf once, then the sub-flow's parent, then the root.
    let got = q.try_pop(&topics(&["cut-leaf"]), 10).await.unwrap();
    let mut ids: Vec<_> = got.iter().map(|d| d.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["cut-a", "cut-b"]);
    for d in &got {
        q.finish(&d.id, &d.token).await.unwrap();
    }
    for (topic, id) in [("cut-mid", "cut-sub"), ("cut", "cut-root")] {
        let d = eventually(Duration::from_secs(60), id, || async {
            q.pop(&topics(&[topic]), Duration::from_millis(200))
                .await
                .unwrap()
        })
        .await;
        assert_eq!(d.id, id);
        assert_eq!(
            d.children.as_ref().map(|c| c.len()),
            Some(if id == "cut-sub" { 1 } else { 2 })
        );
        q.finish(&d.id, &d.token).await.unwrap();
    }
    let none = q
        .try_pop(&topics(&["cut-leaf", "cut-mid", "cut"]), 10)
        .await
        .unwrap();
    assert!(none.is_empty(), "handed out twice: {none:?}");
    slow.close().await;
    q.close().await;
}
