//! Redis behind Sentinel: the sentinels name the master, and the store
//! follows it. Every second (and before a connection check) delayq asks the
//! sentinels, in turn, for the master's address; when it changes (a
//! failover), the store's client and shared connection are replaced, and
//! the subscriber reconnects to the new master by itself. A write that
//! reached the old master after it was demoted fails with READONLY and is
//! not acknowledged.
//!
//! Replication is asynchronous: a push acknowledged by the old master but
//! not yet copied to the replica that takes over is lost. With
//! `replica_acks` set, a push is acknowledged only once that many replicas
//! have it (WAIT).

use std::time::Duration;

use crate::error::{Error, Result};

/// The sentinels to ask, and which master.
#[derive(Clone, Debug)]
pub struct Sentinel {
    /// `redis://HOST:PORT` of each sentinel (a user and password in the
    /// URL are used for the sentinels and for the master).
    pub sentinels: Vec<String>,
    /// The master's name in the sentinels' configuration.
    pub master: String,
    /// Database on the master.
    pub db: i64,
}

impl Sentinel {
    pub(crate) fn check(&self) -> Result<()> {
        if self.sentinels.is_empty() || self.master.is_empty() {
            return Err(Error::Invalid(
                "sentinel needs at least one sentinel URL and a master name".into(),
            ));
        }
        for s in &self.sentinels {
            redis::Client::open(s.as_str())
                .map_err(|e| Error::Invalid(format!("sentinel URL {s:?}: {e}")))?;
        }
        Ok(())
    }

    /// The master's address, asked of the sentinels now (blocking, each
    /// for at most `timeout`): for the first connection, made before any
    /// runtime work.
    pub(crate) fn master_now(&self, timeout: Duration) -> Option<(String, u16)> {
        self.sentinels.iter().find_map(|url| {
            let mut c = redis::Client::open(url.as_str())
                .ok()?
                .get_connection_with_timeout(timeout)
                .ok()?;
            c.set_read_timeout(Some(timeout)).ok()?;
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.master)
                .query::<Option<(String, u16)>>(&mut c)
                .ok()?
        })
    }

    /// The master's URL at `host:port`, with the sentinels' credentials.
    pub(crate) fn master_url(&self, host: &str, port: u16) -> String {
        super::url::url_at(&self.sentinels[0], host, port, self.db)
    }
}

/// A client that reaches nothing, until the sentinels have been asked.
pub(crate) fn unresolved() -> redis::Client {
    redis::Client::open("redis://127.0.0.1:1/").expect("a valid URL")
}
