//! The Redis client: connections (one server, Sentinel or Cluster),
//! acknowledged writes (WAIT), the shards' health, the Redis clock and the
//! call timeout, and the script library it was given. It knows nothing of
//! jobs, and tells an [`Observer`] of each failure to reach Redis.

use std::sync::Arc;
use std::time::Duration;

use super::conn::{Conn, Manager};
use super::health::DegradedPushes;
use super::library::Library;
use super::link::{Link, Redis};
use super::offset::Offset;
use super::url::{client, Tls};
use super::{cluster, coalesce, health, sentinel, Observer, LATE_REPLY_GRACE};
use crate::error::{Error, Result};

/// What a client is made from.
pub(crate) struct Options<'a> {
    pub redis: &'a Redis,
    pub tls: &'a Tls,
    /// Each partition's slot: a partition's keys all hash to it, so one
    /// master holds them (on a cluster); calls name their partition.
    pub slots: Vec<u16>,
    pub timeout: Duration,
    pub replica_acks: usize,
    pub degraded_pushes: DegradedPushes,
    /// The scripts its calls run, loaded when Redis lacks them.
    pub library: &'static Library,
}

/// One queue's connections to Redis, and what goes with them.
pub(crate) struct Client {
    /// Where calls go, and how to reach it again.
    pub(super) route: Route,
    /// The cluster's nodes and slots, on a cluster.
    pub(crate) cluster: Option<cluster::Cluster>,
    /// Writes acknowledged by replicas (WAIT), when asked for.
    pub(super) acks: Acks,
    /// Which partitions answer, and which shards lack replicas.
    pub(crate) health: health::Health,
    pub(super) time_offset: Offset,
    pub(super) timeout: Duration,
    /// Told of each failure to reach Redis.
    pub(super) observer: Arc<dyn Observer>,
    /// The scripts its calls run.
    pub(super) library: &'static Library,
    /// Each partition's slot.
    pub(super) slots: Vec<u16>,
    /// Fires when the link moved to another master (Sentinel), so that
    /// connections of their own (the subscriber's) move too.
    pub(crate) relinked: tokio::sync::Notify,
}

/// Where calls go: the current link (replaced when Sentinel names another
/// master), what a new one needs, and what the server was found to lack.
pub(super) struct Route {
    pub(super) link: std::sync::RwLock<Link>,
    pub(super) tls: Tls,
    pub(super) sentinel: Option<sentinel::Sentinel>,
    /// On a cluster with replica acks, a connection to each master by
    /// address: acknowledged batches go straight to their partition's
    /// master, so one master's death holds up no other partition.
    pub(super) node_conns:
        std::sync::Mutex<std::collections::HashMap<String, redis::aio::MultiplexedConnection>>,
    /// Why the last connection attempt failed (the subscriber connects on
    /// its own and notes it); None once one succeeds.
    pub(super) connect_error: std::sync::Mutex<Option<String>>,
    /// The server refused FCALL (no FUNCTION, or not for this user): the
    /// scripts go by EVALSHA. Asked again of a new master (Sentinel).
    pub(super) eval: std::sync::atomic::AtomicBool,
    /// The server ran neither FCALL nor EVALSHA at the last script call:
    /// the server as named then, and why. Cleared by the next call that
    /// runs, so readiness knows it without asking Redis.
    pub(super) no_scripts: std::sync::Mutex<Option<(String, String)>>,
}

/// Acknowledged writes: batched per partition behind one WAIT each, on a
/// connection of their own so that their WAITs hold up nothing else.
pub(super) struct Acks {
    /// Replicas that must have a write before it is acknowledged (0: off).
    pub(super) wanted: usize,
    pub(super) lane: coalesce::Coalescer<coalesce::Acked>,
    /// Their connection (None: no replica acks); replaced with the master.
    pub(super) conn: std::sync::RwLock<Option<Conn>>,
}

impl Client {
    /// Redis need not be up yet: the connection is made lazily and re-made
    /// after every failure.
    pub(crate) fn new(config: Options<'_>, observer: Arc<dyn Observer>) -> Result<Client> {
        let (tls, partitions) = (config.tls, config.slots.len());
        let (timeout, replica_acks) = (config.timeout, config.replica_acks);
        let mut cluster = None;
        let (client, sentinel) = match config.redis {
            Redis::Url(url) => (client(url, tls)?, None),
            Redis::Sentinel(s) => {
                s.check()?;
                (sentinel::unresolved(), Some(s.clone()))
            }
            Redis::Cluster(seeds) => {
                let c = cluster::Cluster::new(seeds.clone(), tls, timeout + LATE_REPLY_GRACE)?;
                let first = c.seed_client()?;
                cluster = Some(c);
                (first, None)
            }
        };
        // Behind Sentinel, ask once now, so that the first calls go to the
        // master; if no sentinel answers, the follower keeps asking.
        let (client, master) = match &sentinel {
            Some(s) => match s.master_now(timeout) {
                Some((host, port)) => (
                    super::url::client(&s.master_url(&host, port), tls)?,
                    Some((host, port)),
                ),
                None => (client, None),
            },
            None => (client, None),
        };
        let conn = match &cluster {
            Some(c) => Conn::Cluster(c.connection()),
            None => Conn::Single(Self::manager(&client, timeout)?),
        };
        // Acknowledged writes get connections of their own: their WAITs
        // hold up nothing else.
        let ack_conn = match (&cluster, replica_acks) {
            (_, 0) => None,
            (Some(c), _) => Some(Conn::Cluster(c.connection())),
            (None, _) => Some(Conn::Single(Self::manager(&client, timeout)?)),
        };
        Ok(Client {
            route: Route {
                link: std::sync::RwLock::new(Link {
                    client,
                    conn,
                    master,
                    gone: Default::default(),
                }),
                tls: tls.clone(),
                sentinel,
                node_conns: Default::default(),
                connect_error: std::sync::Mutex::new(None),
                eval: Default::default(),
                no_scripts: Default::default(),
            },
            cluster,
            acks: Acks {
                wanted: replica_acks,
                lane: coalesce::Coalescer::new(partitions),
                conn: std::sync::RwLock::new(ack_conn),
            },
            health: health::Health::new(partitions, replica_acks, config.degraded_pushes),
            time_offset: Offset::default(),
            timeout,
            observer,
            library: config.library,
            slots: config.slots,
            relinked: tokio::sync::Notify::new(),
        })
    }

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

    /// Whether the shards' health is watched: replicas counted for
    /// acknowledged writes, masters of a cluster's partitions looked at.
    pub(crate) fn watches_health(&self) -> bool {
        self.acks.wanted > 0 || self.cluster.is_some()
    }

    /// How long a call waits for its reply, unless told.
    pub fn timeout(&self) -> Duration {
        self.timeout
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

    /// Connects once, on a connection of its own, and PINGs: the real cause
    /// when that fails (refused, unknown host, wrong password, TLS), where
    /// the shared connection, which retries for ever, can only time out.
    /// On a cluster, each master.
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
            return Ok(());
        }
        let client = self.client();
        let attempt = async {
            let mut c = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            redis::cmd("PING").query_async::<String>(&mut c).await
        };
        self.call("connect", attempt).await.map(drop)
    }
}
