//! One connection type for the store's calls, whichever Redis it talks to:
//! a single server (reconnecting for ever) or a cluster (routing each call
//! to the master of its first key's slot, following MOVED and ASK, and
//! retrying TRYAGAIN).

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    /// One node of a cluster, for calls that must not share the fate of
    /// the others: the cluster connection holds every call while it
    /// recovers from one node's failure.
    Node(MultiplexedConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Node(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipe: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipe, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipe, offset, count),
            Conn::Node(c) => c.req_packed_commands(pipe, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Node(c) => c.get_db(),
        }
    }
}
