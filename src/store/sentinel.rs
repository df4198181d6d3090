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

use super::Client;
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
        super::url_at(&self.sentinels[0], host, port, self.db)
    }
}

/// A client that reaches nothing, until the sentinels have been asked.
pub(crate) fn unresolved() -> redis::Client {
    redis::Client::open("redis://127.0.0.1:1/").expect("a valid URL")
}

impl Client {
    /// Asks the sentinels where the master is; switches to it when it moved.
    /// True if it moved.
    pub(crate) async fn follow_master(&self) -> Result<bool> {
        let Some(s) = &self.route.sentinel else {
            return Ok(false);
        };
        let (host, port) = self.ask_sentinels(s).await?;
        let current = self.route.link.read().unwrap().master.clone();
        if current.as_ref() == Some(&(host.clone(), port)) {
            return Ok(false);
        }
        let client = super::client(&s.master_url(&host, port), &self.route.tls)?;
        let conn = Self::manager(&client, self.timeout)?;
        // The acknowledged writes' connection is replaced first: no call
        // made on the new link can find the old one (a dead master's, whose
        // manager keeps reconnecting while calls on it wait).
        if self.acks.wanted > 0 {
            let acks = Self::manager(&client, self.timeout)?;
            *self.acks.conn.write().unwrap() = Some(super::conn::Conn::Single(acks));
            self.acks.lane.reset();
        }
        {
            let mut link = self.route.link.write().unwrap();
            link.client = client;
            link.conn = super::conn::Conn::Single(conn);
            link.master = Some((host.clone(), port));
            std::mem::take(&mut link.gone).cancel();
        }
        // Another server: FUNCTION is tried again there first.
        self.route
            .eval
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self.relinked.notify_waiters();
        match current {
            None => {
                tracing::info!(master = %s.master, %host, port, "redis master found through sentinel")
            }
            Some((h, p)) => {
                tracing::warn!(master = %s.master, from = %format!("{h}:{p}"), to = %format!("{host}:{port}"), "redis master moved (failover); following it")
            }
        }
        Ok(true)
    }

    async fn ask_sentinels(&self, s: &Sentinel) -> Result<(String, u16)> {
        let mut last = String::from("no sentinel answered");
        for url in &s.sentinels {
            let Ok(client) = redis::Client::open(url.as_str()) else {
                continue;
            };
            let ask = async {
                let mut c = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&s.master)
                    .query_async::<Option<(String, u16)>>(&mut c)
                    .await
            };
            match tokio::time::timeout(self.timeout, ask).await {
                Ok(Ok(Some(addr))) => return Ok(addr),
                Ok(Ok(None)) => last = format!("sentinel {url} knows no master {:?}", s.master),
                Ok(Err(e)) => last = format!("sentinel {url}: {e}"),
                Err(_) => last = format!("sentinel {url}: no answer within {:?}", self.timeout),
            }
        }
        Err(Error::Redis {
            op: "ask sentinels",
            source: redis::RedisError::from((redis::ErrorKind::Io, "sentinel", last)),
        })
    }
}
