//! Batches under faults (issue 53's adversaries): a Sentinel failover with
//! replica acks, a Redis Cluster whose masters hold one batch's jobs, a
//! holder SIGKILLed mid-batch, and 20,000 batches open at once. Each
//! batch's callback is pushed once, never before its last job's outcome.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayq::testing::Keys;
use delayq::{
    BatchOn, BatchState, Config, Delivery, Error, NewJob, Queue, Redis, RetryPolicy, Sentinel,
};
use futures::StreamExt;
use serde_json::Value;

use super::{callbacks, fired, member, new_batch, read, FIRE_WITHIN};
use crate::common::*;
use crate::sentinel::{master_and_replica, port_of, SentinelServer};

mod open_many;

/// Now, us since the epoch: the clock Redis's TIME reads on this machine.
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// A member whose lease may run out in an outage and be retried (one
/// attempt would make it dead).
fn patient_member(id: &str, batch: &str, ttr_ms: u64) -> NewJob {
    NewJob {
        batch: Some(batch.into()),
        retry: Some(RetryPolicy {
            intervals: vec![],
            max_attempts: Some(10),
        }),
        ..job(id, "close", 0, ttr_ms)
    }
}

/// What a finish's answer says of the job's outcome, us since the epoch:
/// written after `sent` (the try that took, or the first of this lease's
/// tries when one found the job gone) and acknowledged at `acked`.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    sent: i64,
    acked: i64,
}

/// Finishes a lease as a careful consumer does: sent again while Redis
/// is away; an answer says whether it took (Ok), took on an earlier try
/// whose reply was lost (gone), or the lease ran out (stale: the job's
/// next delivery finishes it, None).
async fn finish_carefully(q: &Queue, d: &Delivery, stop: &AtomicBool) -> Option<Outcome> {
    let first = now_us();
    while !stop.load(Ordering::Relaxed) {
        let sent = now_us();
        match q.finish(&d.id, &d.token).await {
            Ok(()) => {
                return Some(Outcome {
                    sent,
                    acked: now_us(),
                })
            }
            Err(Error::NotFound(_)) => {
                return Some(Outcome {
                    sent: first,
                    acked: now_us(),
                })
            }
            Err(Error::StaleLease(_)) => return None,
            Err(e) if e.is_unavailable() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("finishing {}: {e}", d.id),
        }
    }
    None
}

/// What the consumers saw.
#[derive(Default)]
struct Ledger {
    /// Per member id, its outcome as its finish's answer told it.
    outcomes: Mutex<HashMap<String, Outcome>>,
    /// Per callback id, every delivery as (report, Redis's pop time in
    /// us, attempt). Attempt 1 comes once a push: a second one is a
    /// second push. A first pop whose reply the outage lost (its write
    /// kept by the promoted replica) is seen only as attempt 2, after its
    /// lease ran out.
    callbacks: Mutex<HashMap<String, Vec<Handed>>>,
}

/// A callback's delivery.
#[derive(Debug)]
struct Handed {
    report: Value,
    popped_us: i64,
    attempt: u32,
}

impl Ledger {
    /// How many callbacks were handed out, each counted once.
    fn handed_out(&self) -> usize {
        self.callbacks.lock().unwrap().len()
    }

    /// Checks `callback_id`'s deliveries: one push (at most one first
    /// attempt), each telling `batch`'s report; its earliest pop time.
    fn pushed_once(&self, callback_id: &str, batch: &str, jobs: usize) -> i64 {
        let cbs = self.callbacks.lock().unwrap();
        let seen = cbs.get(callback_id).map_or(&[][..], |v| &v[..]);
        assert!(!seen.is_empty(), "{batch}'s callback never handed out");
        let firsts = seen.iter().filter(|h| h.attempt == 1).count();
        assert!(
            firsts <= 1,
            "{batch}'s callback pushed {firsts} times: {seen:?}"
        );
        for h in seen {
            assert_eq!(h.report["batch"], batch);
            assert_eq!(h.report["finished"], jobs);
        }
        seen.iter().map(|h| h.popped_us).min().unwrap()
    }

    /// Callback deliveries after a first one (a lease lost in the outage).
    fn redelivered(&self) -> usize {
        let cbs = self.callbacks.lock().unwrap();
        cbs.values().flatten().filter(|h| h.attempt > 1).count()
    }
}

/// Pops jobs of `topic` (members, or callbacks) until `stop`, finishing
/// each.
async fn consume(q: Queue, topic: &'static str, ledger: Arc<Ledger>, stop: Arc<AtomicBool>) {
    let topics = topics(&[topic]);
    while !stop.load(Ordering::Relaxed) {
        let got = match q.pop_many(&topics, 2, Duration::from_millis(500)).await {
            Ok(got) => got,
            // The outage: a refused connection answers at once.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        for d in got.iter().filter(|d| d.topic == "settle") {
            let report: Value = serde_json::from_str(&d.body).unwrap();
            let mut cbs = ledger.callbacks.lock().unwrap();
            let seen = cbs.entry(d.id.clone()).or_default();
            seen.push(Handed {
                report,
                popped_us: d.popped_at_us,
                attempt: d.attempts,
            });
        }
        // The work.
        tokio::time::sleep(Duration::from_millis(40)).await;
        let finishes = got.iter().map(|d| {
            let (q, ledger, stop) = (&q, &ledger, &stop);
            async move {
                if let Some(o) = finish_carefully(q, d, stop).await {
                    if d.topic == "close" {
                        ledger.outcomes.lock().unwrap().insert(d.id.clone(), o);
                    }
                }
            }
        });
        futures::future::join_all(finishes).await;
    }
}

fn sentinel_config(sentinel: &SentinelServer) -> Config {
    Config {
        redis: Redis::Sentinel(Sentinel {
            sentinels: vec![sentinel.url()],
            master: "m".into(),
            db: 0,
        }),
        replica_acks: 1,
        partitions: 4,
        redis_timeout: Duration::from_secs(2),
        ..Config::default()
    }
}

/// Creates batch `id`, a call made again while Redis misses its timeout
/// (a busy machine's cluster with replica acks can miss it several times
/// running): a try that got there before its reply was lost is found
/// (Conflict). Gives up after 90 s.
async fn create_retried(q: &Queue, id: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let mut attempt = 0;
    loop {
        match q.create_batch(&new_batch(id, BatchOn::Settled)).await {
            Ok(_) => return,
            Err(Error::Conflict(_)) if attempt > 0 => return,
            Err(e) if e.is_unavailable() => {}
            Err(e) => panic!("creating {id}: {e}"),
        }
        attempt += 1;
        assert!(
            std::time::Instant::now() < deadline,
            "creating {id}: Redis did not answer in 90 s ({attempt} tries)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Pushes `jobs` (of batches) until each is in, calls that Redis could not
/// acknowledge made again (a replica not yet connected after a start or a
/// failover, a master that did not answer in time): a job of a batch pushed
/// again is the same member, kept.
async fn push_acked(q: &Queue, jobs: &[NewJob]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    for chunk in jobs.chunks(500) {
        loop {
            let replies = match q.push_many(chunk).await {
                Ok(r) => r,
                Err(e) if e.is_unavailable() || matches!(e, Error::Unknown { .. }) => Vec::new(),
                Err(e) => panic!("a push of batch jobs: {e}"),
            };
            let all_in = !replies.is_empty()
                && replies.iter().all(|r| match r {
                    Ok(_) => true,
                    Err(e) if e.is_unavailable() || matches!(e, Error::Unknown { .. }) => false,
                    Err(e) => panic!("a push of a batch job: {e}"),
                });
            if all_in {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the pushes were never acknowledged"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// 20 batches of 10 jobs over 4 partitions behind Sentinel with replica
/// acks; the master SIGKILLed while consumers finish them; Sentinel
/// promotes the replica and the old master comes back as its replica.
/// Every batch fires once, counting its 10 finishes, and no callback is
/// handed out before its batch's last finish was sent. A callback whose
/// first pop's reply the kill cut off (the pop kept by the promoted
/// replica) is handed out again when its lease ends: still one push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_with_replica_acks_fires_each_batch_once_and_never_early() {
    let (batches, per_batch) = (20, 10);
    let (mut master, replica) = master_and_replica();
    let (master_port, replica_port) = (port_of(&master), port_of(&replica));
    let sentinel = SentinelServer::start_with(master_port, 1);
    wait_until(Duration::from_secs(20), "the sentinel to see both", || {
        sentinel.view() == Some((master_port, 1))
    });
    let queues = [0, 1].map(|_| Queue::connect(sentinel_config(&sentinel)).unwrap());
    let q = &queues[0];
    retried("the first call", || q.check_connection()).await;
    let mut members = Vec::new();
    for b in 0..batches {
        let id = format!("fo-{b}");
        create_retried(q, &id).await;
        members.extend((0..per_batch).map(|j| patient_member(&format!("fo-{b}-{j}"), &id, 10_000)));
    }
    push_acked(q, &members).await;
    for b in 0..batches {
        let id = format!("fo-{b}");
        let state = retried("close", || q.close_batch(&id)).await;
        assert_eq!(state, BatchState::Closed);
    }

    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    // Two consumers of members and one of callbacks on each instance.
    let consumers: Vec<_> = queues
        .iter()
        .flat_map(|q| [(q, "close"), (q, "close"), (q, "settle")])
        .map(|(q, t)| tokio::spawn(consume(q.clone(), t, ledger.clone(), stop.clone())))
        .collect();
    // The kill comes with a third of the jobs finished and a few batches
    // fired, the rest running or waiting.
    let total = batches * per_batch;
    eventually(
        Duration::from_secs(60),
        "a third finished, two batches fired",
        || async {
            let finished = ledger.outcomes.lock().unwrap().len();
            let fired = ledger.handed_out();
            (finished >= total / 3 && fired >= 2).then_some(())
        },
    )
    .await;
    let finished_at_kill = ledger.outcomes.lock().unwrap().len();
    let fired_at_kill = ledger.handed_out();
    master.kill();
    eventually(Duration::from_secs(60), "the failover", || async {
        (sentinel.view().map(|v| v.0) == Some(replica_port)).then_some(())
    })
    .await;
    // With replica acks a master without a replica acknowledges nothing:
    // the old master comes back as the new one's replica.
    master.restart();
    let all_fired = until_value(
        batches as u64,
        Duration::from_secs(90),
        "every batch's callback handed out",
        || async { Some(ledger.handed_out() as u64) },
    );
    all_fired.await;
    // Every callback finished, every note relayed (on the promoted
    // replica): nothing more can fire.
    eventually(FIRE_WITHIN, "callbacks finished, notes relayed", || async {
        let mut notes = 0;
        for k in Keys::partitions("dq", 4) {
            notes += replica.cmd::<i64>(&["XLEN", &k.notes()]).await;
        }
        (notes == 0 && callbacks(q).await == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        c.await.unwrap();
    }

    let outcomes = ledger.outcomes.lock().unwrap().clone();
    let mut after_last_ack = 0;
    let mut closest_us = i64::MAX;
    for b in 0..batches {
        let id = format!("fo-{b}");
        let batch = retried("read", || q.batch(&id)).await.expect("the batch");
        assert_eq!(
            (batch.state, batch.jobs, batch.finished, batch.dead),
            (BatchState::Fired, per_batch as u64, per_batch as u64, 0),
            "{id}"
        );
        let popped_us = ledger.pushed_once(&batch.callback_id, &id, per_batch);
        let mine: Vec<Outcome> = (0..per_batch)
            .map(|j| {
                *outcomes
                    .get(&format!("{id}-{j}"))
                    .unwrap_or_else(|| panic!("{id}-{j} has no finish answered"))
            })
            .collect();
        let last_sent = mine.iter().map(|o| o.sent).max().unwrap();
        let last_acked = mine.iter().map(|o| o.acked).max().unwrap();
        // The last outcome was written after its finish was sent: a
        // callback handed out before that fired early.
        assert!(
            popped_us > last_sent,
            "{id}'s callback handed out at {popped_us} us, before its last finish was sent at {last_sent} us"
        );
        if popped_us >= last_acked {
            after_last_ack += 1;
        }
        closest_us = closest_us.min(popped_us - last_sent);
    }
    let redelivered = ledger.redelivered();
    println!(
        "sentinel failover: {finished_at_kill} of {total} finished and {fired_at_kill} of {batches} callbacks out at the kill; \
         every batch fired once; {after_last_ack} of {batches} callbacks handed out after their last finish's \
         acknowledgement arrived (the rest between its sending and its reply), the closest {closest_us} us after \
         the send; {redelivered} callbacks delivered again after a lost lease"
    );
    for q in queues {
        q.close().await;
    }
}

/// Finishes every delivery of `topic` until `want` distinct ids were
/// finished (a pop or finish a busy machine's Redis did not answer in time
/// is made again); the deliveries.
async fn finish_all(q: &Queue, topic: &str, want: usize) -> Vec<Delivery> {
    let topics = topics(&[topic]);
    let mut got: Vec<Delivery> = Vec::new();
    let mut ids = HashSet::new();
    let mut moved_at = Instant::now();
    while ids.len() < want {
        assert!(
            moved_at.elapsed() < Duration::from_secs(60),
            "{} of {want} {topic} jobs finished, none for a minute",
            ids.len()
        );
        let Ok(batch) = q.pop_many(&topics, 500, Duration::from_millis(200)).await else {
            continue;
        };
        if batch.is_empty() {
            continue;
        }
        let leases: Vec<(&str, &str)> = batch
            .iter()
            .map(|d| (d.id.as_str(), d.token.as_str()))
            .collect();
        for (d, r) in batch
            .iter()
            .zip(retried("finish_many", || q.finish_many(&leases)).await)
        {
            match r {
                Ok(()) | Err(Error::NotFound(_)) => {
                    ids.insert(d.id.clone());
                }
                Err(e) => panic!("finishing {}: {e}", d.id),
            }
        }
        moved_at = Instant::now();
        got.extend(batch);
    }
    got
}

/// The masters (node indexes) that serve the partitions of `ids`.
fn masters_of(
    cluster: &crate::redis_cluster::TestCluster,
    ids: &[&str],
    parts: usize,
) -> HashSet<usize> {
    ids.iter()
        .map(|id| crate::cluster::master_of_job(cluster, parts, id))
        .collect()
}

/// A queue of 6 partitions over a cluster of 3 masters: each batch's jobs
/// sit on two masters or more (its home on one of them); every batch
/// fires once; a running job adding jobs to its closed batch holds the
/// callback back until they too have finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_over_three_cluster_masters_fire_once_and_an_adding_job_holds_its_batch_back() {
    use crate::redis_cluster::{node_config, TestCluster};
    let cluster = TestCluster::start_with(3, 0, &node_config());
    let parts = 6;
    let q = Queue::connect(crate::cluster::cluster_config(&cluster, parts)).unwrap();
    retried("the first call", || q.check_connection()).await;
    let (batches, per_batch) = (10, 12);
    let mut members = Vec::new();
    for b in 0..batches {
        let id = format!("cl-{b}");
        q.create_batch(&new_batch(&id, BatchOn::Settled))
            .await
            .unwrap();
        let jobs: Vec<NewJob> = (0..per_batch)
            .map(|j| member(&format!("cl-{b}-{j}"), &id))
            .collect();
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        let on = masters_of(&cluster, &ids, parts);
        assert!(on.len() >= 2, "{id}'s jobs on masters {on:?}");
        members.extend(jobs);
    }
    push_all(&q, &members).await;
    for b in 0..batches {
        assert_eq!(
            q.close_batch(&format!("cl-{b}")).await.unwrap(),
            BatchState::Closed
        );
    }
    finish_all(&q, "close", batches * per_batch).await;
    let cbs = finish_all(&q, "settle", batches).await;
    let mut reported = HashSet::new();
    for d in &cbs {
        assert_eq!(d.attempts, 1, "{} delivered again", d.id);
        let r: Value = serde_json::from_str(&d.body).unwrap();
        assert_eq!(
            (r["jobs"].as_u64(), r["finished"].as_u64()),
            (Some(12), Some(12))
        );
        assert!(
            reported.insert(r["batch"].as_str().unwrap().to_owned()),
            "{r} twice"
        );
    }
    assert_eq!((cbs.len(), reported.len()), (batches, batches));
    for b in 0..batches {
        let read = read(&q, &format!("cl-{b}")).await;
        assert_eq!((read.state, read.finished), (BatchState::Fired, 12));
    }

    // A running job adds six jobs to its closed batch, then finishes.
    q.create_batch(&new_batch("settlement", BatchOn::Settled))
        .await
        .unwrap();
    q.push(&member("root", "settlement")).await.unwrap();
    q.close_batch("settlement").await.unwrap();
    let root = super::pop_one(&q, "close").await;
    let more: Vec<NewJob> = (0..6)
        .map(|i| member(&format!("child-{i}"), "settlement"))
        .collect();
    let ids: Vec<&str> = more.iter().map(|j| j.id.as_str()).collect();
    let on = masters_of(&cluster, &ids, parts);
    assert!(on.len() >= 2, "the children on masters {on:?}");
    for r in q.push_many(&more).await.unwrap() {
        r.unwrap();
    }
    q.finish(&root.id, &root.token).await.unwrap();
    eventually(FIRE_WITHIN, "root's outcome counted", || async {
        (read(&q, "settlement").await.finished == 1).then_some(())
    })
    .await;
    let b = read(&q, "settlement").await;
    assert_eq!((b.state, b.jobs, b.pending), (BatchState::Closed, 7, 6));
    let children = finish_all(&q, "close", 6).await;
    assert!(children.iter().all(|d| d.id.starts_with("child-")));
    let b = fired(&q, "settlement").await;
    assert_eq!((b.jobs, b.finished), (7, 7));
    let cb = finish_all(&q, "settle", 1).await;
    assert_eq!(cb[0].id, b.callback_id);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(callbacks(&q).await, 0, "one callback a batch");
    q.close().await;
}

/// `delayq work` children, each in a process group of its own, SIGKILLed
/// with their commands when dropped.
struct Worker(std::process::Child);

impl Worker {
    fn start(base: &str, concurrency: usize, script: &str) -> Worker {
        use std::os::unix::process::CommandExt;
        Worker(
            std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
                .args(["work", "close", "--concurrency"])
                .arg(concurrency.to_string())
                .args(["--server", base, "--", "sh", "-c", script])
                .stderr(std::process::Stdio::null())
                .process_group(0)
                .spawn()
                .unwrap(),
        )
    }

    /// SIGKILL to the worker and the command it runs.
    fn kill9(&mut self) {
        // SAFETY: a signal to our own child's process group.
        unsafe {
            libc::kill(-(self.0.id() as i32), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A `delayq work` holding a batch's last job (its command never ends)
/// is SIGKILLed: the batch waits; the lease runs out and a second worker
/// finishes the job; the batch fires once, every job counted finished
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_sigkilled_mid_batch_leaves_its_job_to_another_worker_and_the_batch_fires_once() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let q = &s.queue;
    q.create_batch(&new_batch("nightly", BatchOn::Settled))
        .await
        .unwrap();
    let jobs: Vec<NewJob> = [("n1", "ok"), ("n2", "ok"), ("held", "hang")]
        .iter()
        .map(|(id, body)| NewJob {
            body: (*body).into(),
            ..patient_member(id, "nightly", 2_000)
        })
        .collect();
    push_all(q, &jobs).await;
    q.close_batch("nightly").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let holding = dir.path().join("holding");
    let script = format!(
        "body=$(cat); if [ \"$body\" = hang ]; then echo \"$DELAYQ_JOB_ATTEMPT\" >> {}; exec sleep 600; fi",
        holding.display()
    );
    let mut holder = Worker::start(&s.base, 3, &script);
    eventually(
        Duration::from_secs(30),
        "the others finished, held running",
        || async {
            let b = read(q, "nightly").await;
            (b.finished == 2 && holding.exists()).then_some(())
        },
    )
    .await;
    let held = q.get("held").await.unwrap().unwrap();
    assert_eq!(held.state, delayq::JobState::Reserved);
    holder.kill9();
    // The holder's lease (kept while its command ran) runs out; the batch
    // waits for it.
    let b = read(q, "nightly").await;
    assert_eq!((b.state, b.finished, b.pending), (BatchState::Closed, 2, 1));
    let _other = Worker::start(&s.base, 1, "cat >/dev/null");
    let b = fired(q, "nightly").await;
    assert_eq!(
        (b.jobs, b.finished, b.dead, b.deleted),
        (3, 3, 0, 0),
        "every job counted once"
    );
    assert_eq!(std::fs::read_to_string(&holding).unwrap(), "1\n");
    let d = super::pop_one(q, "settle").await;
    assert_eq!((d.id.as_str(), d.attempts), (b.callback_id.as_str(), 1));
    let r: Value = serde_json::from_str(&d.body).unwrap();
    assert_eq!(
        (r["jobs"].as_u64(), r["finished"].as_u64()),
        (Some(3), Some(3))
    );
    q.finish(&d.id, &d.token).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(callbacks(q).await, 0, "one callback");
    drop(_other);
    s.stop().await;
}

/// One batch of 30 jobs over 6 partitions on 3 cluster masters with a
/// replica each, replica acks 1; the master holding the batch's home
/// SIGKILLed while its jobs are being finished; its replica takes over
/// and the old master comes back as the new one's replica. The batch
/// fires once, counting its 30 finishes, not before the last was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_through_a_cluster_master_killed_fires_once_and_never_early() {
    let parts = 6;
    let (mut cluster, q) = crate::cluster::acked_queue(parts).await;
    create_retried(&q, "through").await;
    let members: Vec<NewJob> = (0..30)
        .map(|i| patient_member(&format!("through-{i}"), "through", 5_000))
        .collect();
    let ids: Vec<&str> = members.iter().map(|j| j.id.as_str()).collect();
    assert!(masters_of(&cluster, &ids, parts).len() >= 2);
    push_acked(&q, &members).await;
    retried("close", || q.close_batch("through")).await;
    let home = masters_of(&cluster, &["through"], parts);
    let home = *home.iter().next().unwrap();

    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = ["close", "close", "settle"]
        .into_iter()
        .map(|t| tokio::spawn(consume(q.clone(), t, ledger.clone(), stop.clone())))
        .collect();
    eventually(Duration::from_secs(60), "ten finished", || async {
        (ledger.outcomes.lock().unwrap().len() >= 10).then_some(())
    })
    .await;
    let finished_at_kill = ledger.outcomes.lock().unwrap().len();
    cluster.nodes[home].kill();
    eventually(Duration::from_secs(60), "a replica takes over", || async {
        (cluster.masters().len() == 3 && cluster.settled()).then_some(())
    })
    .await;
    cluster.nodes[home].restart();
    until_value(
        1,
        Duration::from_secs(90),
        "the callback handed out",
        || async { Some(ledger.handed_out() as u64) },
    )
    .await;
    let b = eventually(FIRE_WITHIN, "the callback finished", || async {
        let b = q.batch("through").await.ok()??;
        (callbacks(&q).await == 0).then_some(b)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        c.await.unwrap();
    }
    assert_eq!(
        (b.state, b.jobs, b.finished, b.dead),
        (BatchState::Fired, 30, 30, 0)
    );
    let popped_us = ledger.pushed_once(&b.callback_id, "through", 30);
    let outcomes = ledger.outcomes.lock().unwrap().clone();
    let last_sent = ids
        .iter()
        .map(|id| {
            outcomes
                .get(*id)
                .unwrap_or_else(|| panic!("{id} unfinished"))
                .sent
        })
        .max()
        .unwrap();
    assert!(
        popped_us > last_sent,
        "the callback handed out at {popped_us} us, before the last finish was sent at {last_sent} us"
    );
    println!(
        "cluster master killed: {finished_at_kill} of 30 finished at the kill; the batch fired once, {} us after its last finish was sent; {} deliveries again after a lost lease",
        popped_us - last_sent,
        ledger.redelivered()
    );
    q.close().await;
}
