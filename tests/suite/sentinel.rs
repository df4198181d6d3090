//! Redis behind Sentinel: a master, a replica and a sentinel started here;
//! the master SIGKILLed; delayq follows the failover by itself. The ledger
//! counts acknowledged pushes that the new master does not have, with and
//! without waiting for a replica (`replica_acks`).

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use delayq::{Config, Error, Queue};
use delayq::{Redis, Sentinel};

/// A sentinel process watching master `m`, killed on drop.
pub struct SentinelServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl SentinelServer {
    fn start(master_port: u16) -> SentinelServer {
        Self::start_with(master_port, 1)
    }

    /// A sentinel that needs `quorum` sentinels to agree the master is down.
    /// A master is down after 3 s without an answer: with 1 s, a busy
    /// machine's newly promoted master was taken for down and the sentinel
    /// failed back over to the old one as it restarted.
    pub fn start_with(master_port: u16, quorum: usize) -> SentinelServer {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor m 127.0.0.1 {master_port} {quorum}\n\
                 sentinel down-after-milliseconds m 3000\n\
                 sentinel failover-timeout m 5000\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        SentinelServer {
            child,
            port,
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port the sentinel names as m's master, and how many replicas
    /// it knows.
    pub fn view(&self) -> Option<(u16, usize)> {
        let mut c = redis::Client::open(self.url())
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(500))
            .ok()?;
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg("m")
            .query(&mut c)
            .ok()?;
        let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg("m")
            .query(&mut c)
            .ok()?;
        Some((port, replicas.len()))
    }
}

impl SentinelServer {
    /// How many other sentinels watching m this one knows.
    pub fn peers(&self) -> Option<usize> {
        let mut c = redis::Client::open(self.url())
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(500))
            .ok()?;
        let peers: Vec<redis::Value> = redis::cmd("SENTINEL")
            .arg("SENTINELS")
            .arg("m")
            .query(&mut c)
            .ok()?;
        Some(peers.len())
    }
}

impl Drop for SentinelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn port_of(redis: &RedisServer) -> u16 {
    redis
        .url()
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// A master on TCP and a replica of it whose first sync has finished.
pub fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start_tcp(&[]);
    let replica =
        RedisServer::start_tcp(&["--replicaof", "127.0.0.1", &port_of(&master).to_string()]);
    // The first full sync waits for repl-diskless-sync-delay (5 s).
    wait_until(Duration::from_secs(30), "the replica in sync", || {
        let mut c = replica.client().get_connection().unwrap();
        let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
        info.contains("master_link_status:up")
    });
    // And the master hears the replica's acknowledgements: a link that is
    // up can still leave a first WAIT unanswered for a while on a busy
    // machine, and an acknowledged write then fails as degraded.
    wait_until(Duration::from_secs(30), "the replica's acks", || {
        let mut c = master.client().get_connection().unwrap();
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(1000).query(&mut c).unwrap();
        acked >= 1
    });
    (master, replica)
}

/// Pushes through a failover; returns (acknowledged, lost).
async fn failover_ledger(replica_acks: usize) -> (usize, usize) {
    let (mut master, replica) = master_and_replica();
    let (master_port, replica_port) = (port_of(&master), port_of(&replica));
    let sentinel = SentinelServer::start(master_port);
    wait_until(Duration::from_secs(20), "the sentinel to see both", || {
        sentinel.view() == Some((master_port, 1))
    });

    let q = Queue::connect(Config {
        redis: Redis::Sentinel(Sentinel {
            sentinels: vec![sentinel.url()],
            master: "m".into(),
            db: 0,
        }),
        replica_acks,
        redis_timeout: Duration::from_secs(1),
        ..Config::default()
    })
    .unwrap();
    retried("the first call", || q.check_connection()).await;

    let acked = Arc::new(Mutex::new(Vec::new()));
    let reached_new_master = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (q, acked, reached, killed, stop) = (
            q.clone(),
            acked.clone(),
            reached_new_master.clone(),
            killed.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let id = format!("j{i}");
                let r = q.push(&job(&id, "ledger", 3_600_000, 60_000)).await;
                let after_kill = killed.load(Ordering::Relaxed);
                match r {
                    Ok(_) => {
                        acked.lock().unwrap().push(id);
                        if after_kill {
                            reached.store(true, Ordering::Relaxed);
                        }
                    }
                    // The new master has no replica to wait for: the push
                    // got there unacknowledged, or was refused for it
                    // (delayq saw the new master's replicas).
                    Err(Error::Unreplicated { .. } | Error::Degraded { .. }) if after_kill => {
                        reached.store(true, Ordering::Relaxed)
                    }
                    Err(_) => {}
                }
            }
        })
    };
    eventually(
        Duration::from_secs(20),
        "300 acknowledged pushes",
        || async { (acked.lock().unwrap().len() >= 300).then_some(()) },
    )
    .await;
    master.kill();
    killed.store(true, Ordering::Relaxed);
    eventually(Duration::from_secs(60), "the failover", || async {
        (sentinel.view().map(|v| v.0) == Some(replica_port)).then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "pushes reaching the new master",
        || async { reached_new_master.load(Ordering::Relaxed).then_some(()) },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    producer.await.unwrap();

    let acked = acked.lock().unwrap().clone();
    let mut lost = 0;
    for id in &acked {
        // The ledger asks about loss, not availability: a read that times
        // out on a loaded machine right after the failover is asked again.
        let found = eventually(Duration::from_secs(20), "a ledger read", || async {
            match q.get(id).await {
                Ok(j) => Some(j.is_some()),
                Err(e) if e.is_unavailable() => None,
                Err(e) => panic!("reading {id}: {e}"),
            }
        })
        .await;
        if !found {
            lost += 1;
        }
    }
    q.close().await;
    println!(
        "sentinel failover, replica_acks {replica_acks}: acknowledged {}, lost {lost}",
        acked.len()
    );
    (acked.len(), lost)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_is_followed_and_replica_acks_lose_nothing() {
    let (acked, lost) = failover_ledger(1).await;
    assert!(acked >= 300);
    assert_eq!(lost, 0, "acknowledged pushes lost despite a replica's ack");
    // Without waiting for a replica, the loss is what asynchronous
    // replication allows (printed, for the record); the failover is still
    // followed.
    let (acked, _lost) = failover_ledger(0).await;
    assert!(acked >= 300);
}

/// A library user's `Config::replica_acks` holds behind Sentinel too: a
/// master without replicas refuses pushes that ask for one.
#[tokio::test(flavor = "multi_thread")]
async fn config_replica_acks_hold_behind_sentinel() {
    let master = RedisServer::start_tcp(&[]);
    let sentinel = SentinelServer::start_with(port_of(&master), 1);
    wait_until(
        Duration::from_secs(20),
        "the sentinel to see the master",
        || sentinel.view() == Some((port_of(&master), 0)),
    );
    let q = Queue::connect(Config {
        redis: Redis::Sentinel(Sentinel {
            sentinels: vec![sentinel.url()],
            master: "m".into(),
            db: 0,
        }),
        replica_acks: 1,
        ..Config::default()
    })
    .unwrap();
    let pushed = q.push(&job("a", "t", 60_000, 30_000)).await;
    assert!(
        matches!(
            pushed,
            Err(Error::Unreplicated { .. } | Error::Degraded { .. })
        ),
        "a push that asked for a replica the master lacks: {pushed:?}"
    );
}
