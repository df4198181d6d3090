//! The processes: a master (AOF, `appendfsync always`), its replica, three
//! sentinels (quorum 2) and two delayq instances behind `--redis-sentinel`,
//! each in a namespace of its own (see [`crate::net`]). Configs, data and
//! logs go in a temporary directory; every process is killed on drop.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::net::Net;

/// The nodes, by index in the network.
pub const MASTER: usize = 0;
pub const REPLICA: usize = 1;
pub const SENTINELS: [usize; 3] = [2, 3, 4];
pub const DELAYQ: [usize; 2] = [5, 6];

/// Sentinel's failure detector: short, so a failover starts within a
/// nemesis's seconds.
pub const DOWN_AFTER_MS: u64 = 1500;
/// The cluster's failure detector, as short.
const CLUSTER_NODE_TIMEOUT_MS: u64 = 1500;

/// Debian's libfaketime (package faketime), the thread-safe build.
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
];

pub struct Topology {
    // Declared first: the processes die before their namespaces go.
    procs: Vec<(usize, Child)>,
    pub net: Net,
    dir: tempfile::TempDir,
    /// The delayq instances' base URLs, on the clients' network.
    pub delayq: Vec<String>,
    /// Their nodes.
    pub delayq_nodes: Vec<usize>,
}

/// Polls `check` every 50 ms until it holds, for at most `limit`.
pub fn wait_for(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Which Redis the delayq instances use.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Redis {
    /// A master, a replica and three sentinels; `stepped`: the second
    /// delayq runs under libfaketime, its realtime clock offset by what
    /// [`Topology::step_clock`] writes.
    Sentinel { stepped: bool },
    /// A Redis Cluster of three masters, each with a replica.
    Cluster,
}

/// The Redis Cluster's nodes, and its delayq instances.
pub const CLUSTER_NODES: [usize; 6] = [0, 1, 2, 3, 4, 5];
const CLUSTER_DELAYQ: [usize; 2] = [6, 7];

impl Topology {
    pub async fn start(k: u8, redis: Redis, replica_acks: bool) -> Topology {
        let delayq_nodes = match redis {
            Redis::Sentinel { .. } => DELAYQ,
            Redis::Cluster => CLUSTER_DELAYQ,
        };
        let count = delayq_nodes[1] + 1;
        let clients: Vec<bool> = (0..count).map(|n| delayq_nodes.contains(&n)).collect();
        let net = Net::new(k, &clients);
        let dir = tempfile::tempdir().unwrap();
        let mut t = Topology {
            procs: Vec::new(),
            net,
            dir,
            delayq: Vec::new(),
            delayq_nodes: delayq_nodes.to_vec(),
        };
        let (mut args, stepped) = match redis {
            Redis::Sentinel { stepped } => (t.start_sentinel_redis(), stepped),
            Redis::Cluster => (t.start_cluster(), false),
        };
        args.splice(
            0..0,
            ["serve", "--listen", "0.0.0.0:9277"].map(String::from),
        );
        if replica_acks {
            args.extend(["--replica-acks", "1"].map(String::from));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        for n in delayq_nodes {
            let clock = (stepped && n == delayq_nodes[1]).then(|| t.clock_env());
            let program = env!("CARGO_BIN_EXE_delayq");
            t.spawn(n, program, &args, clock.unwrap_or_default());
            t.delayq.push(format!("http://{}:9277", t.net.client_ip(n)));
        }
        let http = reqwest::Client::new();
        for base in t.delayq.clone() {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let r = http
                    .get(format!("{base}/readyz"))
                    .timeout(Duration::from_secs(2))
                    .send()
                    .await;
                if r.is_ok_and(|r| r.status() == 200) {
                    break;
                }
                let up = Instant::now() < deadline;
                assert!(up, "delayq at {base} not ready in 60 s");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        t
    }

    /// The master, its replica and the sentinels; returns delayq's flags.
    fn start_sentinel_redis(&mut self) -> Vec<String> {
        let t = self;
        let master_ip = t.net.data_ip(MASTER);
        t.redis(MASTER, &[]);
        t.redis(REPLICA, &["--replicaof", &master_ip, "6379"]);
        wait_for(Duration::from_secs(30), "the replica in sync", || {
            t.cli(REPLICA, 6379, &["INFO", "replication"])
                .is_some_and(|s| s.contains("master_link_status:up"))
        });
        t.wait_acks(MASTER);
        for n in SENTINELS {
            t.sentinel(n, &master_ip);
        }
        // Each sentinel knows the replica and its two peers: a failover
        // can then be agreed on.
        wait_for(Duration::from_secs(60), "the sentinels to meet", || {
            SENTINELS.iter().all(|&n| {
                let peers = t.cli(n, 26379, &["SENTINEL", "SENTINELS", "m"]);
                let replicas = t.cli(n, 26379, &["SENTINEL", "REPLICAS", "m"]);
                let count = |s: Option<String>| s.map_or(0, |s| s.matches("\nname\n").count());
                count(peers.map(|s| format!("\n{s}"))) == 2
                    && count(replicas.map(|s| format!("\n{s}"))) == 1
            })
        });
        let sentinels: Vec<String> = SENTINELS
            .iter()
            .map(|&n| format!("redis://{}:26379", t.net.data_ip(n)))
            .collect();
        let sentinels = sentinels.join(",");
        ["--redis-sentinel", &sentinels, "--sentinel-master", "m"]
            .map(String::from)
            .to_vec()
    }

    /// Waits until `n`'s replica acknowledges its writes: a link that is
    /// up can still leave a first WAIT unanswered for a while.
    fn wait_acks(&self, n: usize) {
        wait_for(Duration::from_secs(30), "the replica's acks", || {
            self.cli(n, 6379, &["WAIT", "1", "1000"])
                .is_some_and(|s| s.trim() == "1")
        });
    }

    /// Six nodes joined by `redis-cli --cluster create`, three masters each
    /// with a replica; returns delayq's flags.
    fn start_cluster(&mut self) -> Vec<String> {
        let timeout = CLUSTER_NODE_TIMEOUT_MS.to_string();
        for n in CLUSTER_NODES {
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                &timeout,
            ];
            self.redis(n, &args);
        }
        let addrs: Vec<String> = CLUSTER_NODES
            .iter()
            .map(|&n| format!("{}:6379", self.net.data_ip(n)))
            .collect();
        let out = self
            .net
            .command(0, "redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "redis-cli --cluster create: {text}");
        wait_for(
            Duration::from_secs(60),
            "the cluster ok on every node",
            || {
                CLUSTER_NODES.iter().all(|&n| {
                    self.cli(n, 6379, &["CLUSTER", "INFO"])
                        .is_some_and(|s| s.contains("cluster_state:ok"))
                })
            },
        );
        for n in self.cluster_masters() {
            self.wait_acks(n);
        }
        let urls: Vec<String> = addrs.iter().map(|a| format!("redis://{a}")).collect();
        vec![
            "--redis-cluster".to_owned(),
            urls.join(","),
            "--partitions".to_owned(),
            "3".to_owned(),
        ]
    }

    /// The cluster's masters now, by node.
    pub fn cluster_masters(&self) -> Vec<usize> {
        CLUSTER_NODES
            .iter()
            .copied()
            .filter(|&n| {
                self.cli(n, 6379, &["ROLE"])
                    .is_some_and(|s| s.starts_with("master"))
            })
            .collect()
    }

    fn node_dir(&self, n: usize) -> std::path::PathBuf {
        let d = self.dir.path().join(format!("n{n}"));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The environment that runs a process under libfaketime, reading its
    /// offset from a file on every call (no cache), the monotonic clock
    /// left alone (tokio's timers run on it).
    fn clock_env(&self) -> Vec<(&'static str, String)> {
        let lib = LIBFAKETIME
            .iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or_else(|| {
                panic!(
                    "the clock scenario needs libfaketime ({}): apt-get install faketime, \
                     as ./dev test does",
                    LIBFAKETIME.join(" or ")
                )
            });
        let file = self.dir.path().join("clock");
        std::fs::write(&file, "+0s\n").unwrap();
        vec![
            ("LD_PRELOAD", (*lib).to_owned()),
            ("FAKETIME_TIMESTAMP_FILE", file.to_str().unwrap().to_owned()),
            ("FAKETIME_NO_CACHE", "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ]
    }

    /// Steps the stepped delayq's realtime clock to `offset` from the true
    /// time (libfaketime's form: "+30s", "-30s").
    pub fn step_clock(&self, offset: &str) {
        std::fs::write(self.dir.path().join("clock"), format!("{offset}\n")).unwrap();
    }

    fn spawn(&mut self, n: usize, program: &str, args: &[&str], env: Vec<(&str, String)>) {
        let dir = self.node_dir(n);
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = self
            .net
            .command(n, program)
            .args(args)
            .current_dir(&dir)
            .env("DELAYQ_LOG", "info")
            .envs(env)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.procs.push((n, child));
    }

    fn redis(&mut self, n: usize, extra: &[&str]) {
        let dir = self.node_dir(n);
        let dir = dir.to_str().unwrap().to_owned();
        let mut args = vec![
            "--port",
            "6379",
            "--bind",
            "0.0.0.0",
            "--protected-mode",
            "no",
            "--dir",
            &dir,
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
            "--repl-diskless-sync-delay",
            "0",
            "--notify-keyspace-events",
            "Ex",
        ];
        args.extend_from_slice(extra);
        self.spawn(n, "redis-server", &args, Vec::new());
        wait_for(Duration::from_secs(20), "redis-server to answer", || {
            self.cli(n, 6379, &["PING"])
                .is_some_and(|s| s.contains("PONG"))
        });
    }

    fn sentinel(&mut self, n: usize, master_ip: &str) {
        let dir = self.node_dir(n);
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port 26379\nbind 0.0.0.0\nprotected-mode no\ndir {}\n\
                 sentinel monitor m {master_ip} 6379 2\n\
                 sentinel down-after-milliseconds m {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout m 6000\n",
                dir.display()
            ),
        )
        .unwrap();
        self.spawn(
            n,
            "redis-server",
            &[conf.to_str().unwrap(), "--sentinel"],
            Vec::new(),
        );
    }

    /// `redis-cli` inside node `n`'s namespace, against its own server on
    /// `port`; None when it fails or takes over 3 s.
    pub fn cli(&self, n: usize, port: u16, args: &[&str]) -> Option<String> {
        let ip = self.net.data_ip(n);
        let port = port.to_string();
        let out = self
            .net
            .command(n, "timeout")
            .args(["3", "redis-cli", "-h", &ip, "-p", &port])
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && !text.starts_with("ERR")).then_some(text)
    }

    /// The pid of node `n`'s process (`ip netns exec` execs it).
    fn pid(&self, n: usize) -> i32 {
        self.procs.iter().find(|(m, _)| *m == n).unwrap().1.id() as i32
    }

    /// SIGSTOP (`true`) or SIGCONT node `n`'s process.
    pub fn pause(&self, n: usize, stop: bool) {
        let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) on a child of this process.
        unsafe {
            libc::kill(self.pid(n), sig);
        }
    }

    /// Where the majority's sentinels say the master is, once two agree.
    pub fn agreed_master(&self) -> Option<String> {
        let views: Vec<String> = SENTINELS
            .iter()
            .filter_map(|&n| self.cli(n, 26379, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m"]))
            .filter_map(|s| s.lines().next().map(str::to_owned))
            .collect();
        views
            .iter()
            .find(|v| views.iter().filter(|w| w == v).count() >= 2)
            .cloned()
    }

    /// Every delayq instance's log, for a failure's message.
    pub fn delayq_log_tail(&self, n: usize, lines: usize) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join(format!("n{n}/log"))).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for (_, child) in &mut self.procs {
            // A stopped process dies on SIGKILL too.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
