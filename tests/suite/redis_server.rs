//! A real redis-server for one test or one benchmark run, configured from
//! `redis-conf/redis.conf`, in a temp dir of its own, killed when dropped.
//!
//! Tests listen on a unix socket (no port to collide on); the benchmark
//! listens on a free loopback port, because BullMQ's Node client needs
//! TCP. The one launcher serves both (`bench/main.rs` includes this file).
//!
//! `DELAYQ_TEST_SERVER` names another server binary to start instead of
//! `redis-server` (the conformance run: `valkey-server`), with the same
//! config.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub const REDIS_CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/redis-conf/redis.conf");

/// The server binary the tests start: `DELAYQ_TEST_SERVER`, else
/// `redis-server` from PATH.
pub fn server_binary() -> String {
    std::env::var("DELAYQ_TEST_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".to_string())
}

/// Where a server listens.
#[derive(Clone, Copy, Debug)]
enum Listen {
    Socket,
    Port(u16),
    /// TLS only, on this port (the caller gives the certificates).
    Tls(u16),
}

pub struct RedisServer {
    /// The server binary (see [`server_binary`]).
    binary: String,
    dir: TempDir,
    listen: Listen,
    extra: Vec<String>,
    child: Option<Child>,
    /// "?user=..&pass=.." for servers that require a login.
    login: String,
    /// The test that started it (see [`note_time`]).
    test: String,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts with extra config, e.g. `["--appendfsync", "everysec"]`.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        Self::launch(Listen::Socket, extra, String::new())
    }

    /// Like [`start_with`](Self::start_with), from another server binary
    /// (a path) than the run's.
    pub fn start_binary(binary: &str, extra: &[&str]) -> RedisServer {
        Self::launch_binary(binary.to_string(), Listen::Socket, extra, String::new())
    }

    /// On a free loopback TCP port (for clients that cannot use a socket).
    pub fn start_tcp(extra: &[&str]) -> RedisServer {
        Self::on_free_ports(|| (free_port(), extra.iter().map(|s| s.to_string()).collect()))
    }

    /// Starts a server on the port (and arguments) `pick` chooses, picking
    /// again if it exits at start: a port found free may be taken by
    /// another test before the server binds it.
    fn on_free_ports(pick: impl Fn() -> (u16, Vec<String>)) -> RedisServer {
        for _ in 0..4 {
            let (port, args) = pick();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Self::launch(Listen::Port(port), &args, String::new())
            }));
            match started {
                Ok(server) => return server,
                Err(e) => {
                    let said = e
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| e.downcast_ref::<&str>().copied())
                        .unwrap_or("");
                    if !said.contains("exited at start") {
                        std::panic::resume_unwind(e);
                    }
                }
            }
        }
        panic!("redis-server exited at start four times: no free port held");
    }

    /// A Redis Cluster node on a free loopback port (its bus on another),
    /// not yet part of any cluster. `extra` as for [`start_with`].
    /// Redis before 7.0 has no `--cluster-port`: its bus is the port plus
    /// 10000, so both are chosen free.
    pub fn start_cluster_node(extra: &[&str]) -> RedisServer {
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "1500",
        ];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Self::on_free_ports(|| {
            let mut args = args.clone();
            let port = if has_cluster_port() {
                let port = free_port();
                // Not the same port found free twice.
                let bus = std::iter::repeat_with(free_port)
                    .find(|&b| b != port)
                    .unwrap();
                args.extend(["--cluster-port".into(), bus.to_string()]);
                port
            } else {
                free_port_with_bus()
            };
            (port, args)
        })
    }

    /// The TCP port (None on a unix socket).
    pub fn port(&self) -> Option<u16> {
        match self.listen {
            Listen::Socket => None,
            Listen::Port(p) | Listen::Tls(p) => Some(p),
        }
    }

    /// TLS only, on a free loopback port; `extra` names the certificates
    /// (`--tls-cert-file`, `--tls-key-file`, `--tls-ca-cert-file`, ...).
    pub fn start_tls(extra: &[&str]) -> RedisServer {
        Self::launch(Listen::Tls(free_port()), extra, String::new())
    }

    /// A server whose default user needs `password`, with `extra` config.
    pub fn start_with_password(password: &str, extra: &[&str]) -> RedisServer {
        let mut args = vec!["--requirepass", password];
        args.extend_from_slice(extra);
        Self::launch(Listen::Socket, &args, format!("?pass={password}"))
    }

    fn launch(listen: Listen, extra: &[&str], login: String) -> RedisServer {
        Self::launch_binary(server_binary(), listen, extra, login)
    }

    fn launch_binary(binary: String, listen: Listen, extra: &[&str], login: String) -> RedisServer {
        let test = std::thread::current().name().unwrap_or("").to_owned();
        note_time("start", &test);
        let mut r = RedisServer {
            binary,
            dir: tempfile::Builder::new().prefix("dq").tempdir().unwrap(),
            listen,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
            login,
            test,
        };
        r.spawn();
        r
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    pub fn url(&self) -> String {
        match self.listen {
            Listen::Socket => format!("redis+unix://{}{}", self.socket().display(), self.login),
            Listen::Port(port) => format!("redis://127.0.0.1:{port}/{}", self.login),
            Listen::Tls(port) => format!("rediss://localhost:{port}/"),
        }
    }

    /// The socket URL with another login.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "redis+unix://{}?user={user}&pass={password}",
            self.socket().display()
        )
    }

    fn spawn(&mut self) {
        // A copy: CONFIG REWRITE (Sentinel sends it to a replica it
        // promotes) must not touch the repository's file.
        let conf = self.dir.path().join("redis.conf");
        std::fs::copy(REDIS_CONF, &conf).unwrap();
        let mut cmd = Command::new(&self.binary);
        cmd.arg(&conf).arg("--dir").arg(self.dir.path());
        match self.listen {
            Listen::Socket => cmd
                .args(["--port", "0"])
                .arg("--unixsocket")
                .arg(self.socket()),
            Listen::Port(port) => cmd.args(["--port", &port.to_string()]),
            Listen::Tls(port) => cmd.args(["--port", "0", "--tls-port", &port.to_string()]),
        };
        let child = cmd
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{} must be installed (apt-get install -y redis-server): {e}",
                    self.binary
                )
            });
        self.child = Some(child);
        self.wait_ready();
    }

    /// Whether the server exited before it answered (a port it was given
    /// was taken meanwhile by another test's connection or server).
    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        if let Listen::Tls(port) = self.listen {
            // Whether a client gets in depends on its certificates: wait
            // for the port.
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    !self.exited(),
                    "redis-server exited at start (port {port} taken?)"
                );
                assert!(Instant::now() < deadline, "redis-server did not start");
                std::thread::sleep(Duration::from_millis(10));
            }
            return;
        }
        let client = redis::Client::open(self.url()).unwrap();
        loop {
            if let Ok(mut c) = client.get_connection() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            assert!(
                !self.exited(),
                "redis-server exited at start (a port taken?)"
            );
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The process id of the running server (0 when stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// SIGKILL: no shutdown, no final fsync.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// Starts again on the same data directory (the AOF) and address.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// A connection for a test's own reads and writes. Patient: redis-rs
    /// gives up on a reply after 500 ms by default, and a test that reads
    /// Redis beside delayq on a busy machine (a SLOWLOG of thousands of
    /// entries, a KEYS while a burst runs) must wait for its answer, not
    /// fail for the machine's speed.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection_with_config(&patient())
            .await
            .unwrap()
    }

    /// Redis TIME in milliseconds (the clock delayq's promises are in).
    pub async fn time_ms(&self) -> i64 {
        let (s, us): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.conn().await)
            .await
            .unwrap();
        s * 1000 + us / 1000
    }

    pub async fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query_async(&mut self.conn().await).await.unwrap()
    }

    /// Keys holding data (DBSIZE less what a running delayq keeps for its
    /// own running: the partition leader's term, instance heartbeats, the
    /// expired-events canary, which lives 50 ms, the trigger keys'
    /// watermark, the topic schedules' backfill mark, the storage layout's
    /// flag, the counter of ties' push order): what a refused request must
    /// leave as it was.
    pub async fn data_keys(&self) -> i64 {
        const COUNT: &str = "local n = 0 \
            for _, k in ipairs(redis.call('KEYS', '*')) do \
              if not (string.find(k, ':dispatcher$') or string.find(k, ':instance') \
                      or string.find(k, ':canary:') or string.find(k, ':armed$') \
                      or string.find(k, ':indexed$') or string.find(k, ':layout$') \
                      or string.find(k, ':seq$')) then n = n + 1 end \
            end return n";
        self.cmd(&["EVAL", COUNT, "0"]).await
    }

    /// One numeric field of `INFO section`.
    pub fn info(&self, section: &str, field: &str) -> f64 {
        let mut c = self.client().get_connection().unwrap();
        let info: String = redis::cmd("INFO").arg(section).query(&mut c).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A free port whose cluster bus port (+10000) is free too.
fn free_port_with_bus() -> u16 {
    loop {
        let port = free_port();
        let Some(bus) = port.checked_add(10000) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok() {
            return port;
        }
    }
}

/// Whether the run's server takes `--cluster-port` (Redis 7.0+, Valkey):
/// from its `--version` line ("Redis server v=6.2.14 ..."), asked once.
fn has_cluster_port() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let binary = server_binary();
        let out = Command::new(&binary)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{binary} --version: {e}"));
        let line = String::from_utf8_lossy(&out.stdout).to_string();
        let major: u32 = line
            .split("v=")
            .nth(1)
            .and_then(|v| v.split('.').next())
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("{binary} --version said {line:?}"));
        line.starts_with("Valkey") || major >= 7
    })
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        note_time("end", &self.test);
    }
}

/// With `DELAYQ_TEST_TIMES` set to a file (`./dev test` sets it), appends
/// `<start|end> <unix ms> <test>` when a test's server starts and stops, so
/// `tests/times.py` can sum the suite's time by module: libtest names a
/// test's thread after the test, and has no stable timing of its own.
fn note_time(what: &str, test: &str) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("DELAYQ_TEST_TIMES") else {
        return;
    };
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    // One write of one line: appends from parallel tests do not interleave.
    let line = format!("{what} {ms} {test}\n");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// Connection settings for a test's own calls: a minute for a reply, ten
/// seconds to connect (see [`RedisServer::conn`]).
pub fn patient() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_secs(60)))
        .set_connection_timeout(Some(Duration::from_secs(10)))
}

/// Sends SIGCONT to a stopped redis-server when dropped, also when the
/// test fails.
pub struct Stopped(u32);
impl Stopped {
    pub fn new(pid: u32) -> Stopped {
        let ok = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "SIGSTOP {pid}");
        Stopped(pid)
    }
}
impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}
