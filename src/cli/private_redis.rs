//! A private redis-server for `delayq serve` when no Redis is named: started
//! with `redis-conf/redis.conf` (compiled in), listening on a unix socket in
//! the data directory only, stopped with SHUTDOWN (which writes the AOF out)
//! when delayq stops.
//!
//! If delayq was killed and its redis-server lives on, the next start finds
//! it answering on the socket and adopts it instead of starting another on
//! the same data.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::process::{Child, Command};

const CONF: &str = include_str!("../../redis-conf/redis.conf");

pub struct PrivateRedis {
    child: Option<Child>,
    url: String,
}

impl PrivateRedis {
    /// Starts (or adopts) the private redis-server for `data_dir`.
    pub async fn start(data_dir: &Path) -> Result<PrivateRedis> {
        std::fs::create_dir_all(data_dir)
            .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
        let dir = data_dir.canonicalize()?;
        let socket = dir.join("redis.sock");
        // sun_path holds 107 bytes on Linux.
        if socket.as_os_str().len() > 100 {
            bail!(
                "data directory path {} is too long for a unix socket; use a shorter --data-dir",
                dir.display()
            );
        }
        let url = format!("redis+unix://{}", socket.display());
        if ping(&url).await {
            tracing::info!(socket = %socket.display(), "adopting the private redis-server already running on this data directory");
            return Ok(PrivateRedis { child: None, url });
        }
        let binary = find_redis_server().context(
            "no Redis to use: redis-server is not installed and --redis (DELAYQ_REDIS) is not set.\n\
             Install it (Debian/Ubuntu: sudo apt-get install -y redis-server) and delayq starts a \
             private one, or point delayq at your Redis: delayq serve --redis redis://HOST:PORT",
        )?;
        let conf = dir.join("redis.conf");
        std::fs::write(&conf, CONF)?;
        let _ = std::fs::remove_file(&socket);
        let log = dir.join("redis.log");
        let child = Command::new(&binary)
            .arg(&conf)
            .args(["--port", "0", "--unixsocketperm", "700"])
            .arg("--unixsocket")
            .arg(&socket)
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        let mut redis = PrivateRedis {
            child: Some(child),
            url,
        };
        // A large AOF takes a while to load; wait up to a minute.
        for _ in 0..600 {
            if ping(&redis.url).await {
                tracing::info!(socket = %socket.display(), "private redis-server started");
                return Ok(redis);
            }
            if let Some(status) = redis
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
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
            socket.display()
        )
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server we started (not an adopted one) cleanly.
    pub async fn stop(mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(client) = redis::Client::open(self.url.as_str()) {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query_async(&mut c).await;
            }
        }
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
    }
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

fn find_redis_server() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
}
