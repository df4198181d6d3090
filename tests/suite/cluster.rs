//! Redis Cluster: a real local cluster of redis-server processes (three
//! masters with a replica each, loopback TCP), built by `redis-cli
//! --cluster create` the way users build theirs; one queue spread over all
//! its masters; failover, a master killed, a slot moved under load and a
//! master added, each under a ledger of every push and hand-over.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use delayq::{Config, NewJob, Queue};

/// The test cluster. Dropping it stops every node.
pub struct TestCluster {
    pub nodes: Vec<RedisServer>,
}

fn node_config() -> [&'static str; 6] {
    // No fsync per write: six servers share two cores; what a failover
    // keeps is the replicas' business here, not the disk's.
    ["--appendfsync", "everysec", "--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0"]
}

impl TestCluster {
    /// `masters` masters with one replica each, every slot assigned.
    pub fn start(masters: usize) -> TestCluster {
        let nodes: Vec<RedisServer> = (0..masters * 2)
            .map(|_| RedisServer::start_cluster_node(&node_config()))
            .collect();
        let cluster = TestCluster { nodes };
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for n in &cluster.nodes {
            cmd.arg(addr(n));
        }
        cmd.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = cmd.output().expect("redis-cli must be installed");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        cluster.wait_settled();
        cluster
    }

    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.pid() != 0)
            .map(|n| format!("redis://{}/", addr(n)))
            .collect()
    }

    /// Waits until every running node says the cluster is ok, all slots are
    /// served, every master that serves slots has a replica in sync, and
    /// they agree on who serves what.
    pub fn wait_settled(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.settled() {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster did not settle");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn settled(&self) -> bool {
        let mut views = HashSet::new();
        for n in self.nodes.iter().filter(|n| n.pid() != 0) {
            let Some(info) = text(n, &["CLUSTER", "INFO"]) else {
                return false;
            };
            if !info.contains("cluster_state:ok") || !info.contains("cluster_slots_ok:16384") {
                return false;
            }
            let Some(nodes) = text(n, &["CLUSTER", "NODES"]) else {
                return false;
            };
            let mut masters: Vec<String> = nodes
                .lines()
                .filter(|l| l.contains("master") && !l.contains("fail") && l.split(' ').count() > 8)
                .map(|l| l.split(' ').nth(1).unwrap_or("").to_owned())
                .collect();
            masters.sort();
            views.insert(masters);
            let Some(repl) = text(n, &["INFO", "replication"]) else {
                return false;
            };
            if repl.contains("role:slave") && !repl.contains("master_link_status:up") {
                return false;
            }
        }
        views.len() == 1
    }

    /// Indexes of the nodes that are masters serving slots now.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                let n = &self.nodes[i];
                n.pid() != 0
                    && text(n, &["INFO", "replication"]).is_some_and(|r| r.contains("role:master"))
                    && text(n, &["CLUSTER", "NODES"]).is_some_and(|nodes| {
                        nodes
                            .lines()
                            .any(|l| l.contains("myself") && l.split(' ').count() > 8)
                    })
            })
            .collect()
    }

    /// The replica of master `m`.
    pub fn replica_of(&self, m: usize) -> usize {
        let id = text(&self.nodes[m], &["CLUSTER", "MYID"]).unwrap();
        (0..self.nodes.len())
            .find(|&i| {
                self.nodes[i].pid() != 0
                    && text(&self.nodes[i], &["CLUSTER", "NODES"]).is_some_and(|nodes| {
                        nodes
                            .lines()
                            .any(|l| l.contains("myself") && l.contains(id.trim()))
                            .then_some(())
                            .is_none()
                            && nodes.lines().any(|l| {
                                l.contains("myself,slave") && l.split(' ').nth(3) == Some(id.trim())
                            })
                    })
            })
            .expect("every master has a replica")
    }

    /// Keys on each master now (DBSIZE), by address.
    pub fn keys_per_master(&self) -> Vec<(String, i64)> {
        self.masters()
            .into_iter()
            .map(|i| {
                let n = &self.nodes[i];
                let mut c = n.client().get_connection().unwrap();
                let size: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
                (addr(n), size)
            })
            .collect()
    }
}

pub fn addr(n: &RedisServer) -> String {
    format!("127.0.0.1:{}", n.port().unwrap())
}

/// A command's reply as text, or None if the node does not answer.
fn text(n: &RedisServer, args: &[&str]) -> Option<String> {
    let mut c = n.client().get_connection_with_timeout(Duration::from_secs(1)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query::<String>(&mut c).ok()
}

pub fn cluster_config(c: &TestCluster, partitions: usize) -> Config {
    Config {
        redis_cluster: c.seeds(),
        partitions,
        redis_timeout: Duration::from_secs(2),
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_queue_spreads_over_every_master_and_two_instances_hand_each_job_out_once() {
    let cluster = TestCluster::start(3);
    let a = Queue::connect(cluster_config(&cluster, 6)).unwrap();
    let b = Queue::connect(cluster_config(&cluster, 6)).unwrap();
    a.check_connection().await.unwrap();
    let clock = cluster.nodes[0].client();
    let now_ms = || async {
        let mut c = clock.get_multiplexed_async_connection().await.unwrap();
        let (s, us): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
        s * 1000 + us / 1000
    };

    let n = 600;
    let start = now_ms().await;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| job(&format!("order-{i}"), "close", 1000 + (i as u64 % 20) * 100, 30_000))
        .collect();
    for chunk in jobs.chunks(100) {
        for r in a.push_many(chunk).await.unwrap() {
            r.unwrap();
        }
    }
    let spread = cluster.keys_per_master();
    println!("keys per master after {n} pushes: {spread:?}");
    assert_eq!(spread.len(), 3);
    assert!(
        spread.iter().all(|(_, k)| *k >= (n as i64) / 2),
        "every master holds a share: {spread:?}"
    );
    let o = b.topics().await.unwrap();
    assert_eq!(o.topics["close"].delayed, n as u64);

    // Another partition count for the same queue is refused, plainly.
    let other = Queue::connect(cluster_config(&cluster, 4)).unwrap();
    let err = other.check_connection().await.unwrap_err().to_string();
    assert!(err.contains("has 6 partitions") && err.contains("--partitions 6"), "{err}");
    other.close().await;

    // Greedy consumers on both instances.
    let topics = topics(&["close"]);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut early = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < n && Instant::now() < deadline {
        let (ga, gb) = tokio::join!(
            a.pop_many(&topics, 7, Duration::from_millis(500)),
            b.pop_many(&topics, 7, Duration::from_millis(500))
        );
        for d in ga.unwrap().into_iter().chain(gb.unwrap()) {
            let i: u64 = d.id.trim_start_matches("order-").parse().unwrap();
            if d.popped_at_us / 1000 < start + 1000 + (i % 20) as i64 * 100 {
                early += 1;
            }
            *seen.entry(d.id.clone()).or_default() += 1;
            let q = if seen.len() % 2 == 0 { &a } else { &b };
            q.finish(&d.id, &d.token).await.unwrap();
        }
    }
    let twice = seen.values().filter(|&&k| k > 1).count();
    println!("delivered {} of {n}, twice {twice}, early {early}", seen.len());
    assert_eq!((seen.len(), twice, early), (n, 0, 0));
    let o = a.topics().await.unwrap();
    assert_eq!(o.topics.get("close").map_or(0, |c| c.delayed + c.ready + c.reserved), 0);
    a.close().await;
    b.close().await;
}
