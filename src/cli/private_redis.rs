//! A private redis-server for `delayq serve` when no Redis is named: started
//! with `redis-conf/redis.conf` (compiled in), listening on a unix socket in
//! the data directory only.
//!
//! Its life follows delayq's: it is stopped with SHUTDOWN (which writes the
//! AOF out) whenever `serve` exits short of SIGKILL, start-up failures
//! included; if it dies while delayq runs, delayq starts it again on the
//! same data and says so. If delayq was killed and its redis-server lives
//! on, the next start finds it answering on the socket and adopts it
//! (stopping it, too, at the end).
//!
//! One `serve` per data directory: it holds a lock on `delayq.lock` there
//! while it runs (the kernel lets go when it dies, SIGKILL included), and a
//! second `serve` on the same directory is refused. Without the lock the
//! second adopted the first's server and stopped it on exit, under the
//! first.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

const CONF: &str = include_str!("../../redis-conf/redis.conf");

/// How often the supervisor looks at the server.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// What it takes to start the server (again).
struct Launch {
    binary: PathBuf,
    dir: PathBuf,
    socket: PathBuf,
    url: String,
}

pub struct PrivateRedis {
    /// Holds the data directory's lock while open.
    _lock: std::fs::File,
    launch: Arc<Launch>,
    /// The server process, when delayq started it (None: adopted).
    child: Arc<Mutex<Option<Child>>>,
    stop: CancellationToken,
    supervisor: Option<tokio::task::JoinHandle<()>>,
}

impl PrivateRedis {
    /// Starts (or adopts) the private redis-server for `data_dir`, and
    /// watches it until [`stop`](Self::stop).
    pub async fn start(data_dir: &Path) -> Result<PrivateRedis> {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
        let dir = data_dir.canonicalize()?;
        let lock = lock_data_dir(&dir)?;
        let socket = dir.join("redis.sock");
        // sun_path holds 107 bytes on Linux.
        if socket.as_os_str().len() > 100 {
            bail!(
                "data directory path {} is too long for a unix socket; use a shorter --data-dir",
                dir.display()
            );
        }
        let url = format!("redis+unix://{}", socket.display());
        let binary = find_redis_server().context(
            "no Redis to use: redis-server is not installed (nor valkey-server) and --redis (DELAYQ_REDIS) is \
             not set.\nInstall it (Debian/Ubuntu: sudo apt-get install -y redis-server) and delayq starts a \
             private one, or point delayq at your Redis: delayq serve --redis redis://HOST:PORT",
        );
        let adopted = ping(&url).await;
        let binary = match (binary, adopted) {
            (Ok(b), _) => b,
            // An adopted server can run without the binary on PATH; it just
            // cannot be started again.
            (Err(_), true) => PathBuf::from("redis-server"),
            (Err(e), false) => return Err(e),
        };
        let launch = Arc::new(Launch {
            binary,
            dir,
            socket,
            url,
        });
        let child = if adopted {
            tracing::info!(socket = %launch.socket.display(), "adopting the private redis-server already running on this data directory");
            None
        } else {
            let child = launch.spawn().await?;
            tracing::info!(socket = %launch.socket.display(), "private redis-server started");
            Some(child)
        };
        let child = Arc::new(Mutex::new(child));
        let stop = CancellationToken::new();
        let supervisor = tokio::spawn(supervise(launch.clone(), child.clone(), stop.clone()));
        Ok(PrivateRedis {
            _lock: lock,
            launch,
            child,
            stop,
            supervisor: Some(supervisor),
        })
    }

    pub fn url(&self) -> &str {
        &self.launch.url
    }

    /// Stops the server cleanly (SHUTDOWN writes the AOF out), whether
    /// delayq started it or adopted it, and waits until it is gone.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(s) = self.supervisor.take() {
            let _ = s.await;
        }
        if let Ok(client) = redis::Client::open(self.launch.url.as_str()) {
            let shutdown = async {
                let mut c = client.get_multiplexed_async_connection().await?;
                redis::cmd("SHUTDOWN").query_async::<()>(&mut c).await
            };
            let _ = tokio::time::timeout(Duration::from_secs(5), shutdown).await;
        }
        let mut child = self.child.lock().await;
        match child.as_mut() {
            Some(c) => {
                if tokio::time::timeout(Duration::from_secs(10), c.wait())
                    .await
                    .is_err()
                {
                    let _ = c.kill().await;
                }
                *child = None;
            }
            None => {
                for _ in 0..100 {
                    if !ping(&self.launch.url).await {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        tracing::info!("private redis-server stopped");
    }
}

impl Drop for PrivateRedis {
    /// A last resort for exits that skip [`stop`](Self::stop) (a panic):
    /// the server does not outlive delayq.
    fn drop(&mut self) {
        self.stop.cancel();
        if let Ok(mut child) = self.child.try_lock() {
            if let Some(c) = child.as_mut() {
                let _ = c.start_kill();
            }
        }
    }
}

impl Launch {
    /// Starts redis-server on the data directory and waits until it answers.
    async fn spawn(&self) -> Result<Child> {
        let conf = self.dir.join("redis.conf");
        std::fs::write(&conf, CONF)?;
        let _ = std::fs::remove_file(&self.socket);
        let log = self.dir.join("redis.log");
        let mut child = Command::new(&self.binary)
            .arg(&conf)
            .args(["--port", "0", "--unixsocketperm", "700"])
            .arg("--unixsocket")
            .arg(&self.socket)
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", self.binary.display()))?;
        // A large AOF takes a while to load; wait up to a minute.
        for _ in 0..600 {
            if ping(&self.url).await {
                return Ok(child);
            }
            if let Ok(Some(status)) = child.try_wait() {
                let tail = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<_> = tail.lines().rev().take(5).collect();
                bail!(
                    "redis-server exited ({status}); its log {} ends with:\n{}",
                    log.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "redis-server did not answer on {} within 60 s",
            self.socket.display()
        )
    }
}

/// Starts the server again whenever it is gone: our child exited, or an
/// adopted server stopped answering twice in a row.
async fn supervise(launch: Arc<Launch>, child: Arc<Mutex<Option<Child>>>, stop: CancellationToken) {
    let mut silent = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = stop.cancelled() => return,
        }
        let mut guard = child.lock().await;
        let gone = match guard.as_mut() {
            Some(c) => match c.try_wait() {
                Ok(Some(status)) => Some(format!("exited ({status})")),
                _ => None,
            },
            None => {
                silent = if ping(&launch.url).await {
                    0
                } else {
                    silent + 1
                };
                (silent >= 2).then(|| "stopped answering".to_owned())
            }
        };
        let Some(why) = gone else { continue };
        if stop.is_cancelled() {
            return;
        }
        tracing::warn!(
            why,
            "the private redis-server {why}; starting it again on the same data"
        );
        match launch.spawn().await {
            Ok(c) => {
                tracing::warn!("private redis-server restarted; jobs come back from its AOF");
                *guard = Some(c);
                silent = 0;
            }
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "cannot restart the private redis-server; trying again")
            }
        }
    }
}

/// Takes `dir`'s lock, or names the `serve` that holds it. The file is
/// opened close-on-exec: redis-server does not inherit (and keep) it.
fn lock_data_dir(dir: &Path) -> Result<std::fs::File> {
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsRawFd;
    let path = dir.join("delayq.lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: flock(2) on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(err).with_context(|| format!("cannot lock {}", path.display()));
        }
        let mut pid = String::new();
        let _ = file.read_to_string(&mut pid);
        let pid = match pid.trim() {
            "" => String::new(),
            p => format!(" (pid {p})"),
        };
        bail!(
            "another delayq serve{pid} is running on data directory {}: its private \
             redis-server is not shared. Stop that one first, or give this one its own \
             --data-dir (or --redis to use that one's Redis: redis+unix://{})",
            dir.display(),
            dir.join("redis.sock").display()
        );
    }
    file.set_len(0)?;
    file.rewind()?;
    write!(file, "{}", std::process::id())?;
    Ok(file)
}

async fn ping(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let attempt = async {
        let mut c = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut c).await
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Ok(_))
    )
}

/// redis-server, else valkey-server (the package recommends either; a
/// Valkey install need not provide the redis-server name).
fn find_redis_server() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["redis-server", "valkey-server"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}
