//! Redis Cluster: a real local cluster of redis-server processes (three
//! masters with a replica each, loopback TCP), built by `redis-cli
//! --cluster create` the way users build theirs; one queue spread over all
//! its masters; failover, a master killed, a slot moved under load and a
//! master added, each under a ledger of every push and hand-over.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::redis_cluster::{addr, node_config, node_id, text, TestCluster};
use delayq::{Config, NewJob, Queue};

pub fn cluster_config(c: &TestCluster, partitions: usize) -> Config {
    Config {
        redis: delayq::Redis::Cluster(c.seeds()),
        partitions,
        redis_timeout: Duration::from_secs(2),
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_for_the_whole_queue_over_twelve_partitions() {
    let cluster = TestCluster::start_with(3, 0, &node_config());
    let q = Queue::connect(cluster_config(&cluster, 12)).unwrap();
    q.check_connection().await.unwrap();
    let limit = delayq::RateLimit {
        per_second: 1.0,
        burst: 1,
    };
    q.set_rate("sms", limit).await.unwrap();
    // Pops come from another instance, which learns of the limit from the
    // partitions.
    let b = Queue::connect(cluster_config(&cluster, 12)).unwrap();
    let jobs: Vec<NewJob> = (0..120)
        .map(|i| job(&format!("sms-{i}"), "sms", 0, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    eventually(Duration::from_secs(10), "120 ready", || async {
        (q.topics().await.ok()?.topics.get("sms")?.ready == 120).then_some(())
    })
    .await;
    // Ready jobs are listed over the twelve partitions, each once.
    let (mut listed, mut cursor) = (std::collections::BTreeSet::new(), None::<String>);
    loop {
        let (jobs, next) = q
            .list_jobs("sms", delayq::JobState::Ready, cursor.as_deref(), 7)
            .await
            .unwrap();
        for j in jobs {
            assert!(listed.insert(j.id.clone()), "{} listed twice", j.id);
        }
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(listed.len(), 120);
    let clock = cluster.nodes[0].client();
    let now_ms = || async {
        let mut c = clock
            .get_multiplexed_async_connection_with_config(&crate::redis_server::patient())
            .await
            .unwrap();
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
        s * 1000 + us / 1000
    };
    let topic = vec!["sms".to_string()];
    let start = now_ms().await;
    let begun = Instant::now();
    let mut times = Vec::new();
    // Greedy pops, and long-polls, for 4 s: each gets at most the burst.
    while begun.elapsed() < Duration::from_secs(4) {
        for got in [
            b.try_pop(&topic, 20).await.unwrap(),
            b.pop_many(&topic, 20, Duration::from_millis(700))
                .await
                .unwrap(),
        ] {
            assert!(got.len() <= 1, "one pop got {} jobs at once", got.len());
            times.extend(got.iter().map(|d| d.popped_at_us / 1000));
        }
    }
    times.sort();
    println!("1/s, burst 1, 12 partitions: {} jobs in 4 s", times.len());
    for (k, at) in times.iter().enumerate() {
        let allowed = 1.0 + (at - start) as f64 / 1000.0;
        assert!(
            (k + 1) as f64 <= allowed + 0.001,
            "job {} handed over {} ms in: over the limit",
            k + 1,
            at - start
        );
    }
    assert!(times.len() >= 2, "the limit lets jobs out: {}", times.len());
    // Tokens a pop took but did not use went back: the held jobs go on.
    assert!(b.metrics().rate_held.total() > 0);
    // Without the limit, the rest go at once.
    assert!(q.clear_rate("sms").await.unwrap());
    let rest = b
        .pop_many(&topic, 200, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(rest.len(), 120 - times.len());
    b.close().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_queue_spreads_over_every_master_and_two_instances_hand_each_job_out_once() {
    let cluster = TestCluster::start(3);
    let a = Queue::connect(cluster_config(&cluster, 6)).unwrap();
    let b = Queue::connect(cluster_config(&cluster, 6)).unwrap();
    a.check_connection().await.unwrap();
    let clock = cluster.nodes[0].client();
    let now_ms = || async {
        let mut c = clock
            .get_multiplexed_async_connection_with_config(&crate::redis_server::patient())
            .await
            .unwrap();
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
        s * 1000 + us / 1000
    };

    let n = 600;
    let start = now_ms().await;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| {
            job(
                &format!("order-{i}"),
                "close",
                1000 + (i as u64 % 20) * 100,
                30_000,
            )
        })
        .collect();
    for chunk in jobs.chunks(100) {
        push_all(&a, chunk).await;
    }
    let spread = cluster.keys_per_master();
    println!("keys per master after {n} pushes: {spread:?}");
    assert_eq!(spread.len(), 3);
    assert!(
        spread.iter().all(|(_, k)| *k >= (n as i64) / 2),
        "every master holds a share: {spread:?}"
    );
    // Nothing is popped yet: each job is delayed, or ready if it fell due
    // already (the first are due a second after the pushes began, which
    // a busy machine may take to get here).
    let o = b.topics().await.unwrap();
    assert_eq!(
        o.topics["close"].delayed + o.topics["close"].ready,
        n as u64
    );
    // Listed over the six partitions, a page at a time: every job, the
    // delayed in due order. Delayed first: a job falling due meanwhile is
    // listed again as ready, never missed.
    let mut listed = Vec::new();
    for state in [delayq::JobState::Delayed, delayq::JobState::Ready] {
        let (mut of_state, mut cursor) = (Vec::new(), None::<String>);
        loop {
            let (jobs, next) = b
                .list_jobs("close", state, cursor.as_deref(), 97)
                .await
                .unwrap();
            of_state.extend(jobs);
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
        if state == delayq::JobState::Delayed {
            let out_of_order: Vec<_> = of_state
                .windows(2)
                .filter(|w| w[0].due_ms > w[1].due_ms)
                .map(|w| [&w[0], &w[1]].map(|j| (j.id.clone(), j.state, j.due_ms)))
                .collect();
            assert!(
                out_of_order.is_empty(),
                "listed out of due order: {out_of_order:?}"
            );
        }
        listed.extend(of_state);
    }
    let unique: std::collections::HashSet<_> = listed.iter().map(|j| &j.id).collect();
    assert_eq!(unique.len(), n, "{} listed", listed.len());

    // Another partition count for the same queue is refused, plainly.
    let other = Queue::connect(cluster_config(&cluster, 4)).unwrap();
    let err = other.check_connection().await.unwrap_err().to_string();
    assert!(
        err.contains("has 6 partitions") && err.contains("--partitions 6"),
        "{err}"
    );
    other.close().await;

    // Greedy consumers on both instances.
    let topics = topics(&["close"]);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut early = 0;
    // A loss shows as a minute without a delivery (a busy machine is slow,
    // not stuck); a pop Redis did not answer in time changed nothing.
    let mut moved_at = Instant::now();
    while seen.len() < n && moved_at.elapsed() < Duration::from_secs(60) {
        let (ga, gb) = tokio::join!(
            a.pop_many(&topics, 7, Duration::from_millis(500)),
            b.pop_many(&topics, 7, Duration::from_millis(500))
        );
        let got = |r: delayq::Result<Vec<delayq::Delivery>>| match r {
            Ok(v) => v,
            Err(e) if e.is_unavailable() => Vec::new(),
            Err(e) => panic!("pop: {e}"),
        };
        for d in got(ga).into_iter().chain(got(gb)) {
            moved_at = Instant::now();
            let i: u64 = d.id.trim_start_matches("order-").parse().unwrap();
            if d.popped_at_us / 1000 < start + 1000 + (i % 20) as i64 * 100 {
                early += 1;
            }
            *seen.entry(d.id.clone()).or_default() += 1;
            let q = if seen.len().is_multiple_of(2) { &a } else { &b };
            q.finish(&d.id, &d.token).await.unwrap();
        }
    }
    let twice = seen.values().filter(|&&k| k > 1).count();
    println!(
        "delivered {} of {n}, twice {twice}, early {early}",
        seen.len()
    );
    assert_eq!((seen.len(), twice, early), (n, 0, 0));
    let o = a.topics().await.unwrap();
    assert_eq!(
        o.topics
            .get("close")
            .map_or(0, |c| c.delayed + c.ready + c.reserved),
        0
    );

    // Dead letters of every partition, in one list, oldest first; requeue
    // and purge reach them all.
    let failing: Vec<NewJob> = (0..12)
        .map(|i| NewJob {
            retry: Some(delayq::RetryPolicy {
                intervals: vec![],
                max_attempts: Some(1),
            }),
            ..job(&format!("sms-{i}"), "sms", 0, 30_000)
        })
        .collect();
    push_all(&a, &failing).await;
    let sms = vec!["sms".to_string()];
    let mut died = 0;
    while died < 12 {
        for d in a.pop_many(&sms, 12, Duration::from_secs(2)).await.unwrap() {
            a.nack(&d.id, &d.token, None, "provider down")
                .await
                .unwrap();
            died += 1;
        }
    }
    let dead = b.dead("sms", 0, 100).await.unwrap();
    assert_eq!(dead.len(), 12);
    assert!(dead.windows(2).all(|w| w[0].dead_at_ms <= w[1].dead_at_ms));
    let page: Vec<String> = b
        .dead("sms", 4, 4)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    let all: Vec<String> = dead.iter().map(|j| j.id.clone()).collect();
    assert_eq!(page, all[4..8]);
    assert_eq!(b.requeue_dead("sms", &all[..3]).await.unwrap(), 3);
    assert_eq!(b.topics().await.unwrap().topics["sms"].ready, 3);
    assert_eq!(b.purge_dead("sms").await.unwrap(), 9);
    assert_eq!(b.requeue_dead("sms", &[]).await.unwrap(), 0);

    // Every master's memory is reported.
    let masters = a.memories().await.unwrap();
    assert_eq!(masters.len(), 3, "{masters:?}");

    // A recurring schedule ticks on the cluster too: once a tick, on time.
    a.put_recurring(
        "beat",
        &delayq::Recurring {
            topic: "beat".into(),
            cron: "* * * * * *".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let beat = vec!["beat".to_string()];
    let mut ticks = Vec::new();
    while ticks.len() < 3 {
        for d in b.pop_many(&beat, 10, Duration::from_secs(3)).await.unwrap() {
            let tick = chrono::DateTime::parse_from_rfc3339(d.id.rsplit('/').next().unwrap())
                .unwrap()
                .timestamp_millis();
            assert!(d.popped_at_us / 1000 >= tick, "{} early", d.id);
            ticks.push(tick);
            b.finish(&d.id, &d.token).await.unwrap();
        }
    }
    ticks.sort();
    assert!(ticks.windows(2).all(|w| w[1] - w[0] == 1000), "{ticks:?}");
    assert!(a.delete_recurring("beat").await.unwrap());
    a.close().await;
    b.close().await;
}

/// Faults the cluster ledger runs through.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// `CLUSTER FAILOVER` on a master's replica: a planned switch.
    Failover,
    /// SIGKILL of a master; its replica takes over; the old master comes
    /// back as a replica.
    KillMaster,
    /// The slot of a busy partition moved to another master key by key
    /// (SETSLOT IMPORTING/MIGRATING, MIGRATE in small batches, SETSLOT
    /// NODE), while jobs flow.
    MigrateSlot,
    /// A new master (with a replica) joins and `redis-cli --cluster
    /// rebalance` moves slots to it, while jobs flow.
    AddMaster,
}

fn cli(args: &[&str]) -> String {
    let out = Command::new("redis-cli").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "redis-cli {args:?}: {text}");
    text
}

/// A fresh cluster of three masters (a replica each) and a queue of
/// `parts` partitions over it whose changes wait for one replica
/// (replica acks 1), its first call made.
pub async fn acked_queue(parts: usize) -> (TestCluster, Queue) {
    let cluster = TestCluster::start(3);
    let q = Queue::connect(Config {
        replica_acks: 1,
        ..cluster_config(&cluster, parts)
    })
    .unwrap();
    retried("the first call", || q.check_connection()).await;
    (cluster, q)
}

/// The master, by index, that serves the partition of job `id` in a
/// queue of `parts` partitions (prefix `dq`) now.
pub fn master_of_job(c: &TestCluster, parts: usize, id: &str) -> usize {
    use delayq::testing::{partition_of, slot, Keys};
    let keys = Keys::partitions("dq", parts);
    owner_of(c, slot(keys[partition_of(id, parts)].schedule().as_bytes()))
}

/// The node that serves `slot` now, by index.
pub fn owner_of(c: &TestCluster, slot: u16) -> usize {
    for i in c.masters() {
        let nodes = text(&c.nodes[i], &["CLUSTER", "NODES"]).unwrap();
        let mine = nodes.lines().find(|l| l.contains("myself")).unwrap();
        for range in mine.split(' ').skip(8) {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                if (a..=b).contains(&slot) {
                    return i;
                }
            }
        }
    }
    panic!("no master serves slot {slot}");
}

/// Moves `slot` from its owner to another master, a few keys at a time.
async fn migrate_slot(c: &TestCluster, slot: u16) {
    let from = owner_of(c, slot);
    let to = *c.masters().iter().find(|&&m| m != from).unwrap();
    let (src, dst) = (&c.nodes[from], &c.nodes[to]);
    let s = slot.to_string();
    let _: String = dst
        .cmd(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &node_id(src)])
        .await;
    let _: String = src
        .cmd(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &node_id(dst)])
        .await;
    let port = dst.port().unwrap().to_string();
    let mut batches = 0;
    loop {
        let keys: Vec<String> = src.cmd(&["CLUSTER", "GETKEYSINSLOT", &s, "3"]).await;
        if keys.is_empty() {
            break;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(&port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS");
        for k in &keys {
            migrate.arg(k);
        }
        let _: String = migrate.query_async(&mut src.conn().await).await.unwrap();
        batches += 1;
        // Let calls on the moving slot arrive in between.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    for n in c.masters() {
        let _: String = c.nodes[n]
            .cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &node_id(dst)])
            .await;
    }
    println!("moved slot {slot} in {batches} batches of up to 3 keys");
}

async fn cluster_scenario(faults: &[Fault]) -> crate::fault_suite::Figures {
    use crate::fault_suite::{consume, judge, produce, Ledger, WANT};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    let mut cluster = TestCluster::start(3);
    // The clock the ledger reads: a server on the same machine.
    let clock = RedisServer::start();
    let partitions = 6;
    let seeds = cluster.seeds().join(",");
    let args = [
        "--redis-cluster",
        seeds.as_str(),
        "--partitions",
        "6",
        "--replica-acks",
        "1",
        "--pop-timeout",
        "1s",
        "--redis-timeout",
        "1s",
    ];
    let delayqs = [DelayqProcess::spawn(&args), DelayqProcess::spawn(&args)];
    let q = Queue::connect(Config {
        dispatch: false,
        replica_acks: 1,
        redis_timeout: Duration::from_secs(1),
        ..cluster_config(&cluster, partitions)
    })
    .unwrap();
    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(consume(
                q.clone(),
                ledger.clone(),
                stop.clone(),
                clock.client(),
            ))
        })
        .collect();
    let bases = delayqs.iter().map(|d| d.base.clone()).collect();
    let faults_over = Arc::new(AtomicBool::new(false));
    let producer = produce(
        q.clone(),
        ledger.clone(),
        bases,
        clock.client(),
        WANT,
        faults_over.clone(),
    );

    let mut spare: Vec<RedisServer> = Vec::new();
    // Faults strike while the queue is full of delayed, ready and leased
    // jobs.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    for fault in faults {
        match fault {
            Fault::Failover => {
                let m = cluster.masters()[0];
                let r = cluster.replica_of(m);
                let _: String = cluster.nodes[r].cmd(&["CLUSTER", "FAILOVER"]).await;
                eventually(
                    Duration::from_secs(20),
                    "the replica takes over",
                    || async { cluster.masters().contains(&r).then_some(()) },
                )
                .await;
            }
            Fault::KillMaster => {
                let m = cluster.masters()[1 % cluster.masters().len()];
                cluster.nodes[m].kill();
                eventually(Duration::from_secs(30), "a replica takes over", || async {
                    (cluster.masters().len() == 3 && cluster.settled()).then_some(())
                })
                .await;
                cluster.nodes[m].restart();
            }
            Fault::MigrateSlot => {
                let busiest = delayq::testing::Keys::partitions("dq", partitions)
                    .into_iter()
                    .map(|k| delayq::testing::slot(k.schedule().as_bytes()))
                    .max_by_key(|&s| {
                        let owner = &cluster.nodes[owner_of(&cluster, s)];
                        let mut c = owner.client().get_connection().unwrap();
                        redis::cmd("CLUSTER")
                            .arg("COUNTKEYSINSLOT")
                            .arg(s)
                            .query::<i64>(&mut c)
                            .unwrap_or(0)
                    })
                    .unwrap();
                migrate_slot(&cluster, busiest).await;
            }
            Fault::AddMaster => {
                let master = RedisServer::start_cluster_node(&node_config());
                let replica = RedisServer::start_cluster_node(&node_config());
                let seed = addr(&cluster.nodes[cluster.masters()[0]]);
                cli(&["--cluster", "add-node", &addr(&master), &seed]);
                let id = node_id(&master);
                eventually(
                    Duration::from_secs(20),
                    "every node knows the new master",
                    || async {
                        cluster
                            .nodes
                            .iter()
                            .filter(|n| n.pid() != 0)
                            .all(|n| {
                                text(n, &["CLUSTER", "NODES"]).is_some_and(|t| t.contains(&id))
                            })
                            .then_some(())
                    },
                )
                .await;
                cli(&[
                    "--cluster",
                    "add-node",
                    &addr(&replica),
                    &seed,
                    "--cluster-slave",
                    "--cluster-master-id",
                    &id,
                ]);
                let rid = node_id(&replica);
                // Every node knows the replica, and every node, the new
                // ones included, says the cluster is up: a new master
                // answers CLUSTERDOWN for its first seconds (Redis waits
                // before it takes writes), and a rebalance that migrates
                // keys to it then fails.
                eventually(
                    Duration::from_secs(30),
                    "every node knows the new replica and says the cluster is ok",
                    || async {
                        (cluster
                            .nodes
                            .iter()
                            .chain([&master, &replica])
                            .filter(|n| n.pid() != 0)
                            .all(|n| {
                                text(n, &["CLUSTER", "NODES"]).is_some_and(|t| t.contains(&rid))
                                    && text(n, &["CLUSTER", "INFO"])
                                        .is_some_and(|t| t.contains("cluster_state:ok"))
                            }))
                        .then_some(())
                    },
                )
                .await;
                cli(&[
                    "--cluster",
                    "rebalance",
                    &seed,
                    "--cluster-use-empty-masters",
                    "--cluster-pipeline",
                    "5",
                ]);
                spare.push(master);
                spare.push(replica);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    faults_over.store(true, std::sync::atomic::Ordering::Relaxed);
    producer.await.unwrap();
    cluster.nodes.append(&mut spare);
    cluster.wait_settled();
    let mut f = judge(&q, &ledger, &stop, consumers, false, None).await;
    f.faults = faults.len();
    println!(
        "keys per master at the end: {:?}",
        cluster.keys_per_master()
    );
    q.close().await;
    drop(delayqs);
    f
}

async fn cluster_run(name: &str, faults: &[Fault]) {
    let f = cluster_scenario(faults).await;
    println!(
        "cluster fault suite [{name}]: jobs {}, faults {}, lost {}, duplicates {}, early {}, max lateness {:.1} ms",
        f.jobs, f.faults, f.lost, f.duplicates, f.early, f.max_late_ms
    );
    assert!(
        f.jobs >= crate::fault_suite::WANT,
        "only {} pushes were acknowledged",
        f.jobs
    );
    assert_eq!(
        (f.lost, f.duplicates, f.early),
        (0, 0, 0),
        "[{name}] promises broken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_and_a_killed_master_lose_nothing_with_replica_acks() {
    cluster_run(
        "CLUSTER FAILOVER, SIGKILL master",
        &[Fault::Failover, Fault::KillMaster],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_slot_moved_and_a_master_added_under_load_lose_nothing() {
    cluster_run(
        "slot migrated, master added",
        &[Fault::MigrateSlot, Fault::AddMaster],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_finish_over_twelve_partitions_settles_each_job() {
    let cluster = TestCluster::start_with(3, 0, &node_config());
    let q = Queue::connect(cluster_config(&cluster, 12)).unwrap();
    q.check_connection().await.unwrap();
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| job(&format!("bf-{i}"), "bf", 0, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    let topics = ["bf".to_string()];
    let mut got = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while got.len() < 60 && std::time::Instant::now() < until {
        got.extend(
            q.pop_many(&topics, 60, Duration::from_secs(1))
                .await
                .unwrap(),
        );
    }
    assert_eq!(got.len(), 60, "popped within a minute");
    // Every lease but the last, which is sent with another job's token.
    let mut leases: Vec<(&str, &str)> = got
        .iter()
        .map(|d| (d.id.as_str(), d.token.as_str()))
        .collect();
    leases[59].1 = got[0].token.as_str();
    let results = q.finish_many(&leases).await.unwrap();
    assert_eq!(results.len(), 60);
    assert!(results[..59].iter().all(|r| r.is_ok()), "{results:?}");
    assert!(
        matches!(results[59], Err(delayq::Error::StaleLease(_))),
        "{:?}",
        results[59]
    );
    for d in &got[..59] {
        assert!(q.get(&d.id).await.unwrap().is_none(), "{} finished", d.id);
    }
    let left = q.get(&got[59].id).await.unwrap().unwrap();
    assert_eq!(left.state, delayq::JobState::Reserved);
    q.close().await;
}

/// A master that does not answer (stopped: a machine hung, or a master
/// lost before the client learns of its replica) says nothing about the
/// eviction policy that pushes check: pushes to the other masters'
/// partitions go on. The policy read goes to every master, and one that
/// timed out used to refuse every push, to every partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_does_not_answer_holds_up_no_push_to_the_other_masters() {
    // The live masters serve their slots while one is out (no replica
    // here to take over).
    let mut config = node_config().to_vec();
    config.extend(["--cluster-require-full-coverage", "no"]);
    let cluster = TestCluster::start_with(3, 0, &config);
    let partitions = 12;
    let q = Queue::connect(cluster_config(&cluster, partitions)).unwrap();
    q.check_connection().await.unwrap();
    // A first push reads the policy from every master.
    q.push(&job("first", "t", 3_600_000, 60_000)).await.unwrap();
    let victim = cluster.masters()[0];
    let keys = delayq::testing::Keys::partitions("dq", partitions);
    let on_victim = |id: &str| {
        let part = delayq::testing::partition_of(id, partitions);
        owner_of(
            &cluster,
            delayq::testing::slot(keys[part].schedule().as_bytes()),
        ) == victim
    };
    let ids: Vec<String> = (0..60)
        .map(|i| format!("after-{i}"))
        .filter(|id| !on_victim(id))
        .take(12)
        .collect();
    assert_eq!(ids.len(), 12);
    let _stopped = Stopped::new(cluster.nodes[victim].pid());
    // The reading the first push made is over a second old, so a push
    // reads the policy again (the reading's age is the condition here).
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let mut refused = Vec::new();
    for id in &ids {
        if let Err(e) = q.push(&job(id, "t", 3_600_000, 60_000)).await {
            refused.push(format!("{id}: {e}"));
        }
    }
    assert!(
        refused.is_empty(),
        "pushes to live masters refused: {refused:?}"
    );
    drop(_stopped);
    q.close().await;
}
