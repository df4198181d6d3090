//! A local Redis Cluster for the tests and the benchmark: redis-server
//! processes on loopback TCP, joined by `redis-cli --cluster create` the
//! way users build theirs, stopped when dropped. The nodes are the run's
//! server binary (`DELAYQ_TEST_SERVER`); the distribution's redis-cli joins
//! Valkey nodes too.

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::redis_server::RedisServer;

/// The test cluster. Dropping it stops every node.
pub struct TestCluster {
    pub nodes: Vec<RedisServer>,
}

pub fn node_config() -> [&'static str; 6] {
    // No fsync per write: six servers share two cores; what a failover
    // keeps is the replicas' business here, not the disk's.
    [
        "--appendfsync",
        "everysec",
        "--repl-diskless-sync-delay",
        "0",
        "--cluster-replica-validity-factor",
        "0",
    ]
}

impl TestCluster {
    /// `masters` masters with one replica each, every slot assigned.
    pub fn start(masters: usize) -> TestCluster {
        Self::start_with(masters, 1, &node_config())
    }

    /// `masters` masters with `replicas` replicas each, every node with
    /// `config`.
    pub fn start_with(masters: usize, replicas: usize, config: &[&str]) -> TestCluster {
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| RedisServer::start_cluster_node(config))
            .collect();
        let cluster = TestCluster { nodes };
        let mut cmd = Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for n in &cluster.nodes {
            cmd.arg(addr(n));
        }
        cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
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

    pub fn settled(&self) -> bool {
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
        let id = node_id(&self.nodes[m]);
        (0..self.nodes.len())
            .find(|&i| {
                self.nodes[i].pid() != 0
                    && text(&self.nodes[i], &["CLUSTER", "NODES"]).is_some_and(|nodes| {
                        nodes.lines().any(|l| {
                            let f: Vec<&str> = l.split(' ').collect();
                            f.len() > 3
                                && f[2].contains("myself")
                                && f[2].contains("slave")
                                && f[3] == id
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
pub fn text(n: &RedisServer, args: &[&str]) -> Option<String> {
    let mut c = n
        .client()
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query::<String>(&mut c).ok()
}

pub fn node_id(n: &RedisServer) -> String {
    text(n, &["CLUSTER", "MYID"]).unwrap().trim().to_owned()
}
