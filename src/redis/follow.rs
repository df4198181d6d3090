//! Following the master behind Sentinel: asking the sentinels where it is,
//! and moving the client's link (and the acknowledged writes' connection)
//! to it when it moved.

use super::conn::Conn;
use super::sentinel::Sentinel;
use super::url::client;
use super::Client;
use crate::error::{Error, Result};

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
        let client = client(&s.master_url(&host, port), &self.route.tls)?;
        let conn = Self::manager(&client, self.timeout)?;
        // The acknowledged writes' connection is replaced first: no call
        // made on the new link can find the old one (a dead master's, whose
        // manager keeps reconnecting while calls on it wait).
        if self.acks.wanted > 0 {
            let acks = Self::manager(&client, self.timeout)?;
            *self.acks.conn.write().unwrap() = Some(Conn::Single(acks));
            self.acks.lane.reset();
        }
        {
            let mut link = self.route.link.write().unwrap();
            link.client = client;
            link.conn = Conn::Single(conn);
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
