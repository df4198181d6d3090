//! The store's connections: where Redis is ([`Redis`]), the client and
//! shared connection each call goes on ([`Link`], replaced behind Sentinel
//! when the master moves: see [`super::sentinel`]), TLS, the connection
//! to each cluster master for acknowledged writes, and loading the
//! scripts (the function library, or one script).

use std::time::Duration;

use super::conn::{Conn, Manager};
use super::sentinel::Sentinel;
use super::{library, Client, Store, LATE_REPLY_GRACE};
use crate::error::{Error, Result};

/// Where a queue's Redis is: one server, the master that sentinels name,
/// or a Redis Cluster.
#[derive(Clone, Debug)]
pub enum Redis {
    /// One server: `redis://host:port/db`, `rediss://...` (TLS),
    /// `redis+unix:///path/to/sock`.
    Url(String),
    /// The master that these sentinels name, followed through failovers.
    Sentinel(Sentinel),
    /// Seed URLs of a Redis Cluster (credentials and TLS come from the
    /// first): the queue's partitions are spread over its masters.
    Cluster(Vec<String>),
}

impl Default for Redis {
    fn default() -> Self {
        Redis::Url(crate::defaults::REDIS_URL.into())
    }
}

/// Where the store's calls go: a client and its shared connection. Behind
/// Sentinel both are replaced when the master changes.
pub(crate) struct Link {
    /// One node's client: the server's, the master's behind Sentinel, the
    /// first seed's on a cluster (where the subscriber connects to each
    /// master with [`cluster::Cluster::node_client`] instead).
    pub client: redis::Client,
    pub conn: Conn,
    /// The master's address, behind Sentinel.
    pub master: Option<(String, u16)>,
    /// Cancelled when this link is replaced: calls still waiting on it
    /// are abandoned at once instead of at their timeout (a connection to
    /// a master that died answers nothing; their deadlines make a late
    /// arrival harmless).
    pub gone: tokio_util::sync::CancellationToken,
}

/// TLS to Redis (`rediss://` URLs). By default the server's certificate is
/// checked against the system's roots.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    /// Check the server's certificate against this CA (PEM) instead.
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate and its key (PEM), for servers that ask.
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
    /// Accept any certificate: for self-signed test setups only.
    pub insecure: bool,
}

impl Tls {
    pub(crate) fn is_set(&self) -> bool {
        self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.insecure
    }
}

/// The client for `url`, with `tls` applied to a `rediss://` URL.
pub(crate) fn client(url: &str, tls: &Tls) -> Result<redis::Client> {
    let invalid = Error::Invalid;
    if !url.contains("://") {
        // "localhost:6379" is the usual slip; the crate only says it did not parse.
        return Err(invalid(format!(
            "redis URL {url:?} has no scheme: write redis://{url} (rediss:// for TLS, \
             redis+unix:///PATH for a socket)"
        )));
    }
    if !url.starts_with("rediss://") {
        if tls.is_set() {
            return Err(invalid(
                "TLS options (CA, client certificate, insecure) need a rediss:// URL".into(),
            ));
        }
        return redis::Client::open(url).map_err(|e| invalid(format!("redis URL: {e}")));
    }
    // The crate reads "#insecure" on a rediss:// URL as "skip verification".
    let url = if tls.insecure && !url.contains('#') {
        format!("{url}#insecure")
    } else {
        url.to_owned()
    };
    redis::Client::build_with_tls(url.as_str(), tls.certificates()?)
        .map_err(|e| invalid(format!("redis TLS setup: {e}")))
}

impl Tls {
    /// The CA and client certificate, read from their files.
    pub(crate) fn certificates(&self) -> Result<redis::TlsCertificates> {
        let invalid = Error::Invalid;
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(invalid(
                "a client certificate needs its key, and a key its certificate".into(),
            ));
        }
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| invalid(format!("cannot read {}: {e}", p.display())))
        };
        Ok(redis::TlsCertificates {
            client_tls: match (&self.cert_file, &self.key_file) {
                (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                    client_cert: read(c)?,
                    client_key: read(k)?,
                }),
                _ => None,
            },
            root_cert: self.ca_file.as_deref().map(read).transpose()?,
        })
    }
}

/// `template` (a Redis URL) with its host and port replaced and database
/// `db`: the URL of another node, with the same scheme and credentials.
pub(crate) fn url_at(template: &str, host: &str, port: u16, db: i64) -> String {
    let (scheme, _) = template.split_once("://").unwrap_or(("redis", ""));
    let creds = template
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .map(|(c, _)| format!("{c}@"))
        .unwrap_or_default();
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    format!("{scheme}://{creds}{host}:{port}/{db}")
}

impl Client {
    /// The shared connection to `client`, made again for ever after it
    /// breaks: an outage of any length ends with a working connection.
    /// Callers are not kept waiting meanwhile: every call is bounded by
    /// `timeout`.
    pub(crate) fn manager(client: &redis::Client, timeout: Duration) -> Result<Manager> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            // The connection waits longer than callers, so that a reply
            // that comes late is still read (and acted on) rather than lost
            // with a reconnect.
            .set_response_timeout(Some(timeout + LATE_REPLY_GRACE));
        Ok(Manager::new(client.clone(), config))
    }

    pub fn behind_sentinel(&self) -> bool {
        self.route.sentinel.is_some()
    }

    /// The client calls go through (the current master's, behind
    /// Sentinel); the subscriber makes its own connection with it.
    pub fn client(&self) -> redis::Client {
        self.route.link.read().unwrap().client.clone()
    }

    pub(crate) fn conn(&self) -> Conn {
        self.route.link.read().unwrap().conn.clone()
    }

    /// Notes why connecting failed (None: it worked), for the errors of
    /// calls that time out meanwhile.
    pub fn note_connect_error(&self, error: Option<String>) {
        *self.route.connect_error.lock().unwrap() = error;
    }

    /// On a cluster, a connection to the master of partition `part` as the
    /// health watch last saw it (None: not a cluster, or not known yet:
    /// the cluster connection routes it then). A master that no longer
    /// owns the slot answers MOVED, and the watch corrects the map within
    /// a second.
    pub(crate) async fn node_conn(&self, part: usize) -> Option<Conn> {
        self.cluster.as_ref()?;
        let node = self.health.node(part)?;
        if let Some(c) = self.route.node_conns.lock().unwrap().get(&node) {
            return Some(Conn::Node(c.clone()));
        }
        let (host, port) = node.rsplit_once(':')?;
        let client = self.node_client(host, port.parse().ok()?).ok()?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout + LATE_REPLY_GRACE));
        let c = tokio::time::timeout(
            self.timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .ok()?
        .ok()?;
        self.route
            .node_conns
            .lock()
            .unwrap()
            .insert(node, c.clone());
        Some(Conn::Node(c))
    }

    /// Forgets the connection to a master that failed.
    pub(crate) fn drop_node_conn(&self, part: usize) {
        if let Some(node) = self.health.node(part) {
            self.route.node_conns.lock().unwrap().remove(&node);
        }
    }
}

impl Store {
    /// Makes every script callable on `path` ([`library::load_cmds`]):
    /// the function library, or every script, in one pipeline (on a
    /// cluster each SCRIPT LOAD goes to every master on its own, a
    /// pipeline routes by key and these have none); loads that race all
    /// succeed.
    pub(crate) async fn load_scripts(&self, path: library::Path) -> Result<()> {
        let cmds = library::load_cmds(path);
        let loaded: redis::RedisResult<()> = if self.cluster.is_some() {
            futures::future::try_join_all(cmds.iter().map(|c| {
                let mut conn = self.conn();
                async move { c.query_async::<redis::Value>(&mut conn).await }
            }))
            .await
            .map(drop)
        } else {
            let mut pipe = redis::pipe();
            for c in cmds {
                pipe.add_command(c).ignore();
            }
            pipe.query_async(&mut self.conn()).await
        };
        match loaded {
            Ok(()) => {
                tracing::info!(path = ?path, "loaded delayq's scripts into redis");
                Ok(())
            }
            Err(e) => Err(Error::redis("load scripts", e)),
        }
    }

    /// Connects once, on a connection of its own, and PINGs: the real cause
    /// when that fails (refused, unknown host, wrong password, TLS), where
    /// the shared connection, which retries for ever, can only time out.
    pub async fn probe(&self) -> Result<()> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        if self.route.sentinel.is_some() {
            self.follow_master().await?;
        }
        if self.cluster.is_some() {
            // Each master, on a connection of its own: the first failure
            // is named with its address.
            for (host, port) in self.masters().await? {
                let client = self.node_client(&host, port)?;
                let attempt = async {
                    let mut c = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?;
                    redis::cmd("PING").query_async::<String>(&mut c).await
                };
                self.call("connect", attempt)
                    .await
                    .map_err(|e| Error::Invalid(format!("cluster master {host}:{port}: {e}")))?;
            }
            return self.check_partitions().await;
        }
        let client = self.client();
        let attempt = async {
            let mut c = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("PING").query_async::<String>(&mut c).await
        };
        self.call("connect", attempt).await?;
        self.check_partitions().await
    }
}
