//! The Redis client under the store: connections (one server, Sentinel
//! or Cluster), acknowledged writes (WAIT), the shards' health, the Redis
//! clock and the call timeout. It knows nothing of jobs, and tells an
//! [`Observer`] of each failure to reach Redis.

use std::sync::Arc;
use std::time::Duration;

use super::clock::Offset;
use super::conn::Conn;
use super::link::{client, Link};
use super::LATE_REPLY_GRACE;
use super::{cluster, coalesce, health, sentinel, Observer, Options, Redis, Tls};
use crate::error::Result;

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
    pub(super) fn new(config: &Options<'_>, observer: Arc<dyn Observer>) -> Result<Client> {
        let (tls, partitions) = (config.tls, config.partitions);
        let (timeout, replica_acks) = (config.redis_timeout, config.replica_acks);
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
                    super::link::client(&s.master_url(&host, port), tls)?,
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
            relinked: tokio::sync::Notify::new(),
        })
    }

    /// Why the server runs none of delayq's scripts, as the last script
    /// call found (None: it ran, or none was made yet).
    pub(crate) fn no_scripts(&self) -> Option<String> {
        self.route
            .no_scripts
            .lock()
            .unwrap()
            .as_ref()
            .map(|(_, why)| why.clone())
    }

    /// A script call ran: the server runs scripts (again).
    pub(super) fn scripts_ran(&self) {
        if self.route.no_scripts.lock().unwrap().take().is_some() {
            tracing::info!("redis runs delayq's scripts again");
        }
    }

    /// How the scripts are called on this server now.
    pub(crate) fn path(&self) -> super::library::Path {
        if self.route.eval.load(std::sync::atomic::Ordering::Relaxed) {
            super::library::Path::Eval
        } else {
            super::library::Path::Function
        }
    }
}
