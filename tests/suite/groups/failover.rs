//! Groups through a failover: the master SIGKILLed behind Sentinel (and
//! back as a replica once the replica took over) while
//! grouped jobs are reserved and ready, with replica acks. Every job still
//! comes, none is held by two consumers at once, each group's limit holds
//! throughout (counted by the consumers themselves and read from Redis), a
//! paused group stays paused, and every slot comes back once the jobs are
//! done.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use super::*;
use crate::sentinel::{master_and_replica, port_of, SentinelServer};
use delayq::{Redis, Sentinel};

const TOPIC: &str = "gf";
/// Each group and its limit; the last is paused until the others are done.
const GROUPS: [(&str, u32); 3] = [("a", 3), ("b", 2), ("p", 1)];
const PAUSED: usize = 2;
const TTR: Duration = Duration::from_secs(10);
/// What a handler takes over a job.
const WORK: Duration = Duration::from_millis(300);

/// A run of one answer to a job's finishes: ms since the test began, the
/// answer, how many in a row.
type Answers = Vec<(u128, String, usize)>;

/// What the consumers saw.
#[derive(Default)]
struct Ledger {
    /// Per id, each delivery's (hand-over, lease end), Redis ms.
    delivered: Mutex<HashMap<String, Vec<(i64, i64)>>>,
    /// Ids whose finish was answered (done, or found gone: a finish that
    /// got there before its reply was lost).
    done: Mutex<HashSet<String>>,
    /// Ids whose finish was answered Ok.
    finished: Mutex<HashSet<String>>,
    /// Deliveries of a job whose finish had been acknowledged.
    after_finish: Mutex<Vec<String>>,
    /// Deliveries of a job whose previous lease had not ended.
    at_once: Mutex<Vec<String>>,
    /// Per group, the consumers' handlers holding one of its jobs, and
    /// the most at once.
    holding: [AtomicI64; 3],
    peak: [AtomicI64; 3],
    /// Per group, the most slots in use Redis reported.
    reserved_peak: [AtomicI64; 3],
    /// Whether the paused group was resumed, and its jobs handed out
    /// before that.
    resumed: AtomicBool,
    while_paused: Mutex<Vec<String>>,
    /// Finishes answered only after their lease's end (Redis was away
    /// that long).
    after_lease: AtomicI64,
    /// Finishes sent again (the first met the outage), and those found
    /// gone (done by an earlier try whose reply was lost).
    sent_again: AtomicI64,
    found_gone: AtomicI64,
    /// Per id, its finishes' answers in order.
    answers: Mutex<HashMap<String, Answers>>,
    began: OnceLock<Instant>,
}

impl Ledger {
    /// Notes a finish's answer for a stall's report.
    fn answered(&self, id: &str, r: &Result<(), Error>) {
        let at = self.began.get().map_or(0, |b| b.elapsed().as_millis());
        let said = match r {
            Ok(()) => "ok".to_string(),
            Err(e) => e.to_string().chars().take(60).collect(),
        };
        let mut answers = self.answers.lock().unwrap();
        let trail = answers.entry(id.to_owned()).or_default();
        match trail.last_mut() {
            Some((_, last, n)) if *last == said => *n += 1,
            _ => trail.push((at, said, 1)),
        }
    }
}

fn group_index(group: &str) -> usize {
    GROUPS.iter().position(|(g, _)| *g == group).unwrap()
}

fn sentinel_config(sentinel: &SentinelServer, replica_acks: usize) -> Config {
    Config {
        redis: Redis::Sentinel(Sentinel {
            sentinels: vec![sentinel.url()],
            master: "m".into(),
            db: 0,
        }),
        replica_acks,
        redis_timeout: Duration::from_secs(2),
        ..Config::default()
    }
}

/// Pops up to 2 jobs at a time, holds them for WORK, then finishes each
/// as a careful consumer does: sent again while Redis is away, until it
/// is answered, past the lease's end too. A finish that got no answer may
/// have been done (its reply lost with the master, or held by a WAIT for a
/// replica the new master does not have yet): only an answer says whether
/// the job is finished (gone) or came back at its lease's end (stale: its
/// next delivery finishes it). A consumer that stopped at the lease's end
/// would leave a finished job counted by nobody.
async fn consume(q: Queue, ledger: Arc<Ledger>, stop: Arc<AtomicBool>) {
    let topics = topics(&[TOPIC]);
    while !stop.load(Ordering::Relaxed) {
        let got = match q.pop_many(&topics, 2, Duration::from_millis(500)).await {
            Ok(got) => got,
            // The outage: the next pop tries again (a refused connection
            // answers at once; the pause keeps this loop from spinning).
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let received = Instant::now();
        for d in &got {
            let g = group_of(&d.id);
            if g == PAUSED && !ledger.resumed.load(Ordering::SeqCst) {
                ledger.while_paused.lock().unwrap().push(d.id.clone());
            }
            let now = ledger.holding[g].fetch_add(1, Ordering::SeqCst) + 1;
            ledger.peak[g].fetch_max(now, Ordering::SeqCst);
            let popped_ms = d.popped_at_us / 1000;
            let mut delivered = ledger.delivered.lock().unwrap();
            let before = delivered.entry(d.id.clone()).or_default();
            if before.iter().any(|&(_, lease_end)| lease_end > popped_ms) {
                ledger.at_once.lock().unwrap().push(d.id.clone());
            }
            if ledger.finished.lock().unwrap().contains(&d.id) {
                ledger.after_finish.lock().unwrap().push(d.id.clone());
            }
            before.push((popped_ms, d.lease_until_ms));
        }
        tokio::time::sleep(WORK).await;
        // The handlers are done: the slots are Redis's until the finishes.
        for d in &got {
            ledger.holding[group_of(&d.id)].fetch_sub(1, Ordering::SeqCst);
        }
        let finishes = got.iter().map(|d| {
            let (q, ledger) = (q.clone(), ledger.clone());
            let (lease_end, stop) = (received + TTR, stop.clone());
            async move {
                let mut tries = 0;
                while !stop.load(Ordering::Relaxed) {
                    tries += 1;
                    if tries == 2 {
                        ledger.sent_again.fetch_add(1, Ordering::SeqCst);
                    }
                    let r = q.finish(&d.id, &d.token).await;
                    ledger.answered(&d.id, &r);
                    if !matches!(&r, Err(e) if e.is_unavailable()) && Instant::now() > lease_end {
                        ledger.after_lease.fetch_add(1, Ordering::SeqCst);
                    }
                    match r {
                        Ok(()) => {
                            ledger.finished.lock().unwrap().insert(d.id.clone());
                            ledger.done.lock().unwrap().insert(d.id.clone());
                            return;
                        }
                        Err(Error::NotFound(_)) => {
                            ledger.found_gone.fetch_add(1, Ordering::SeqCst);
                            ledger.done.lock().unwrap().insert(d.id.clone());
                            return;
                        }
                        // Its lease ended and it went back (or to another
                        // consumer already): its next delivery finishes it.
                        Err(Error::StaleLease(_)) => return,
                        Err(e) if e.is_unavailable() => {
                            tokio::time::sleep(Duration::from_millis(100)).await
                        }
                        Err(e) => panic!("finishing {}: {e}", d.id),
                    }
                }
            }
        });
        futures::future::join_all(finishes).await;
    }
}

/// The group of a job named `<group>-<n>`.
fn group_of(id: &str) -> usize {
    group_index(id.split('-').next().unwrap())
}

/// Reads each group's slots in use from Redis until `stop`, keeping the
/// most seen (reads that meet the outage are skipped).
async fn watch_slots(q: Queue, ledger: Arc<Ledger>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        for (i, (g, _)) in GROUPS.iter().enumerate() {
            if let Ok(read) = q.group(TOPIC, g).await {
                ledger.reserved_peak[i].fetch_max(read.reserved as i64, Ordering::SeqCst);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_killed_behind_sentinel_loses_no_grouped_job_and_no_slot() {
    let started = Instant::now();
    let (mut master, replica) = master_and_replica();
    let (master_port, replica_port) = (port_of(&master), port_of(&replica));
    let sentinel = SentinelServer::start_with(master_port, 1);
    wait_until(Duration::from_secs(20), "the sentinel to see both", || {
        sentinel.view() == Some((master_port, 1))
    });
    // Two instances, each following the sentinel, writes acknowledged by
    // the replica.
    let queues = [0, 1].map(|_| Queue::connect(sentinel_config(&sentinel, 1)).unwrap());
    let q = &queues[0];
    retried("the first call", || q.check_connection()).await;
    for (g, n) in GROUPS {
        limit(q, TOPIC, g, n).await;
    }
    let paused = GROUPS[PAUSED].0;
    retried("pause", || q.pause_group(TOPIC, paused)).await;
    // Per running group 30 jobs ready now and 6 due in 4 s (some fall due
    // during the outage or after it, on the new master); 4 of the paused
    // group ready.
    let mut jobs: Vec<NewJob> = (0..4)
        .map(|i| grouped(&format!("{paused}-{i:02}"), TOPIC, paused))
        .collect();
    for (g, _) in &GROUPS[..PAUSED] {
        for i in 0..36 {
            let delay_ms = if i < 30 { 0 } else { 4_000 };
            jobs.push(NewJob {
                group: Some(g.to_string()),
                ..job(
                    &format!("{g}-{i:02}"),
                    TOPIC,
                    delay_ms,
                    TTR.as_millis() as u64,
                )
            });
        }
    }
    push_all(q, &jobs).await;
    ready(q, TOPIC, 64).await;
    // The groups' limits and pause are settings, written without waiting
    // for a replica: on it before the kill.
    replicas_caught_up(&master);

    let ledger = Arc::new(Ledger::default());
    ledger.began.set(started).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for q in &queues {
        for _ in 0..3 {
            tasks.push(tokio::spawn(consume(
                q.clone(),
                ledger.clone(),
                stop.clone(),
            )));
        }
    }
    let watcher = tokio::spawn(watch_slots(q.clone(), ledger.clone(), stop.clone()));

    // The kill comes with every slot taken and jobs still ready behind them.
    let at_kill = eventually(LIMIT, "the groups full, jobs held", || async {
        if ledger.done.lock().unwrap().len() < 6 {
            return None;
        }
        let mut reads = Vec::new();
        for (g, n) in &GROUPS[..PAUSED] {
            let read = q.group(TOPIC, g).await.ok()?;
            (read.reserved == *n as u64 && read.held > 0).then_some(())?;
            reads.push(read);
        }
        let read = q.group(TOPIC, paused).await.ok()?;
        ((read.ready, read.reserved, read.held) == (4, 0, 4)).then_some(())?;
        reads.push(read);
        Some(reads)
    })
    .await;
    master.kill();
    let killed = Instant::now();
    eventually(Duration::from_secs(60), "the failover", || async {
        (sentinel.view().map(|v| v.0) == Some(replica_port)).then_some(())
    })
    .await;
    let failed_over = killed.elapsed();
    let kill_at = killed.duration_since(started).as_millis();
    // With replica acks a master without a replica hands nothing out: the
    // old master comes back as the new one's replica (Sentinel turns it).
    master.restart();
    // Until Sentinel has turned it and its full sync is done, the new
    // master has no replica and refuses every acknowledged call (by
    // design): the wait for progress below starts once it has one.
    eventually(
        Duration::from_secs(120),
        "the old master back as the new one's replica",
        || async {
            let mut c = master
                .client()
                .get_multiplexed_async_connection()
                .await
                .ok()?;
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut c)
                .await
                .ok()?;
            info.contains("master_link_status:up").then_some(())
        },
    )
    .await;

    let replica_up_at = started.elapsed().as_millis();
    let done = || async { Some(ledger.done.lock().unwrap().len() as u64) };
    let total = jobs.len() as u64;
    let drain = until_value(
        total - 4,
        Duration::from_secs(40),
        "every running group's job delivered and finished",
        done,
    );
    // A stall says which jobs were left, where Redis has them and what
    // their finishes were answered, before the test fails.
    if let Err(stalled) =
        futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(drain)).await
    {
        eprintln!(
            "killed at {kill_at} ms, failed over after {failed_over:?}, replica up at {replica_up_at} ms; \
             finishes sent again {}, found gone {}",
            ledger.sent_again.load(Ordering::SeqCst),
            ledger.found_gone.load(Ordering::SeqCst)
        );
        let finished = ledger.done.lock().unwrap().clone();
        for j in jobs.iter().filter(|j| !finished.contains(&j.id)) {
            let deliveries = ledger.delivered.lock().unwrap().get(&j.id).cloned();
            let stored = q.get(&j.id).await;
            eprintln!(
                "left: {} group {:?}: deliveries {deliveries:?}; in Redis {stored:?}; finishes {:?}",
                j.id,
                j.group,
                ledger.answers.lock().unwrap().get(&j.id)
            );
        }
        for (g, _) in &GROUPS {
            eprintln!("group {g}: {:?}", q.group(TOPIC, g).await);
        }
        std::panic::resume_unwind(stalled);
    }
    let drained = killed.elapsed();
    // The paused group kept its pause and its jobs through the failover;
    // resumed, it hands them out.
    let read = retried("the paused group", || q.group(TOPIC, paused)).await;
    assert_eq!(
        (read.paused, read.ready, read.reserved),
        (true, 4, 0),
        "the paused group after the failover"
    );
    ledger.resumed.store(true, Ordering::SeqCst);
    retried("resume", || q.resume_group(TOPIC, paused)).await;
    until_value(
        total,
        Duration::from_secs(30),
        "the resumed group's jobs",
        done,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    watcher.await.unwrap();

    let delivered = ledger.delivered.lock().unwrap().clone();
    let repeats: Vec<String> = delivered
        .iter()
        .filter(|(_, d)| d.len() > 1)
        .map(|(id, d)| format!("{id}: {d:?}"))
        .collect();
    println!(
        "groups failover: at the kill {:?}; failover {failed_over:?}, all done {drained:?} after the kill; \
         delivered {} jobs {} times, repeated after a lease end {repeats:?}; \
         finishes sent again {}, found gone {}, answered after their lease's end {}; \
         most held at once by consumers {:?}, most reserved read from Redis {:?}",
        at_kill
            .iter()
            .map(|r| (r.reserved, r.ready, r.held))
            .collect::<Vec<_>>(),
        delivered.len(),
        delivered.values().map(Vec::len).sum::<usize>(),
        ledger.sent_again.load(Ordering::SeqCst),
        ledger.found_gone.load(Ordering::SeqCst),
        ledger.after_lease.load(Ordering::SeqCst),
        ledger.peak,
        ledger.reserved_peak,
    );
    assert!(
        ledger.sent_again.load(Ordering::SeqCst) > 0,
        "no finish met the outage: the kill came with no job reserved"
    );
    assert_eq!(delivered.len(), jobs.len(), "every job delivered");
    assert_eq!(
        *ledger.while_paused.lock().unwrap(),
        Vec::<String>::new(),
        "handed out while its group was paused"
    );
    assert_eq!(
        *ledger.at_once.lock().unwrap(),
        Vec::<String>::new(),
        "handed out while an earlier lease of it was live"
    );
    assert_eq!(
        *ledger.after_finish.lock().unwrap(),
        Vec::<String>::new(),
        "handed out again after its finish was acknowledged"
    );
    for (i, (g, n)) in GROUPS.iter().enumerate() {
        let (held, reserved) = (
            ledger.peak[i].load(Ordering::SeqCst),
            ledger.reserved_peak[i].load(Ordering::SeqCst),
        );
        assert!(
            held <= *n as i64 && reserved <= *n as i64,
            "group {g} (limit {n}): {held} held by consumers at once, {reserved} reserved"
        );
        assert_eq!(held, *n as i64, "group {g} ran at its limit");
    }
    // No slot left taken: each group reads empty (a lease whose finish
    // came too late gave its slot back at its end)...
    for (g, _) in GROUPS {
        eventually(LIMIT + TTR, &format!("group {g}'s slots back"), || async {
            let read = q.group(TOPIC, g).await.ok()?;
            ((read.ready, read.reserved, read.held) == (0, 0, 0)).then_some(())
        })
        .await;
    }
    // ...and hands out its whole limit again (this instance without
    // replica acks).
    let after = Queue::connect(sentinel_config(&sentinel, 0)).unwrap();
    let (g, n) = GROUPS[0];
    let more: Vec<NewJob> = (0..=n)
        .map(|i| grouped(&format!("{g}-after-{i}"), TOPIC, g))
        .collect();
    push_all(&after, &more).await;
    eventually(LIMIT, "the new jobs ready", || async {
        (after.group(TOPIC, g).await.ok()?.ready == more.len() as u64).then_some(())
    })
    .await;
    let mut popped = Vec::new();
    for _ in 0..=n {
        popped.extend(after.try_pop(&topics(&[TOPIC]), 1).await.unwrap());
    }
    assert_eq!(
        popped.len(),
        n as usize,
        "group {g} hands out {n} at once after the failover: {popped:?}"
    );
    for d in &popped {
        after.finish(&d.id, &d.token).await.unwrap();
    }
    for q in queues.iter().chain([&after]) {
        q.close().await;
    }
    println!("run time {:?}", started.elapsed());
}
