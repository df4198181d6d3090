//! The Redis layer: how delayq reaches Redis and calls it, knowing nothing
//! of jobs, topics or key layouts. The store above it gives it a script
//! library to load and names each call's function, keys and arguments.
//!
//! Its files, lowest first (each imports only those above it):
//!
//! - [`url`]: a client for a Redis URL, TLS applied.
//! - [`sentinel`], [`cluster`], [`link`]: where Redis is ([`Redis`]: one
//!   server, the master the sentinels name, or a Cluster's seeds) and the
//!   link each call goes on.
//! - [`conn`]: the shared connection, made again for ever after it breaks.
//! - [`offset`], [`health`], [`library`], [`reply`], [`acl`], [`coalesce`]:
//!   the client's parts: Redis time's readings, the shards' health (down,
//!   degraded), the script library it is given and the FCALL or EVALSHA
//!   paths, reply decoding ([`Fields`]), what an ACL refusal asks to add,
//!   and the one group-commit engine (batched calls per partition).
//! - [`client`](mod@client): the [`Client`]: connections, acknowledged writes, health,
//!   clock, timeout and library, made from its [`Options`].
//! - The client's calls: [`exec`] (plain calls, bounded, and Redis's
//!   refusals as errors), [`script`] (script calls, each with a deadline
//!   in Redis time, acknowledged by replicas when its function is),
//!   [`clock`] (Redis time), [`follow`] (the master behind Sentinel),
//!   [`topology`] (a cluster's masters and slots), [`shards`] (the health
//!   watch's look at each shard).

pub mod acl;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod coalesce;
pub mod conn;
pub mod exec;
pub mod follow;
pub mod health;
pub mod library;
pub mod link;
pub mod offset;
pub mod reply;
pub mod script;
pub mod sentinel;
pub mod shards;
pub mod topology;
pub mod url;

use std::time::Duration;

pub(crate) use client::{Client, Options};
pub use link::Redis;
pub(crate) use reply::{Code, Fields};
pub(crate) use script::ScriptCall;
pub(crate) use url::client;
pub use url::Tls;

/// How long a call that this process stopped waiting for may still bring
/// its reply: a pop's late reply is still read, so the jobs it reserved for
/// nobody go back to ready at once instead of after their ttr.
pub(crate) const LATE_REPLY_GRACE: Duration = Duration::from_secs(30);

/// Told of every failure to reach Redis (the metrics count them), so the
/// client need not know who counts.
pub trait Observer: Send + Sync {
    fn redis_error(&self);
}
