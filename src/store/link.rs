//! Where Redis is.

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
        Redis::Url("redis://127.0.0.1:6379/".into())
    }
}
