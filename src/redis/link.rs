//! Where Redis is ([`Redis`]), and the client and shared connection each
//! call goes on ([`Link`], replaced behind Sentinel when the master moves:
//! see [`super::follow`]).

use super::conn::Conn;
use super::sentinel::Sentinel;

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
    /// master with [`Cluster::node_client`](super::cluster::Cluster::node_client) instead).
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
