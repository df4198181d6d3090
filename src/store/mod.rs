//! The storage layer: everything delayq says to Redis.
//!
//! Each state transition is one Lua script with a Rust file beside it that
//! encodes its arguments and decodes its reply (`push.lua` and `push.rs`,
//! and so on); `lib/*.lua` hold the helpers they share and [`layout`] names
//! every key, field and state once. The scripts are loaded as one Redis
//! function library ([`library`]) and called by name. Plain reads (a job,
//! the counts, a dead-letter page, memory) are in [`read`].
//!
//! A queue may be split into partitions (Redis Cluster), each a full set of
//! keys in one slot; [`parts`] picks a job's partition from its id, and the
//! per-queue work (pops, counts, dead letters) runs over all of them.
//! [`cluster`] reaches the masters.
//!
//! The Redis client ([`Client`], `client.rs`) knows nothing of jobs: the
//! connections, acknowledged writes, health, clock and plain calls; the
//! [`Store`] over it holds the script layer (keys and partitions, policies,
//! batched calls, rate-limit memory).
//!
//! [`link`] holds the connections: where Redis is ([`Redis`]), TLS, the
//! shared link (replaced behind Sentinel by [`sentinel`]) and loading the
//! function library. [`exec`] sends every call bounded: each waits at most
//! the Redis timeout, and each script call carries a deadline in Redis time
//! (from [`clock`]) past which the script refuses to act, so a call this
//! process gave up on never takes effect later. Whether a script call waits
//! for replicas is its [`Script`]'s own property. [`coalesce`] is the one
//! group-commit engine: batched pushes and removes ([`batch`]), pops, and
//! acknowledged writes.
//!
//! One status protocol for every script: the first element of each reply is
//! a [`Status`], declared here and handed to the scripts as Lua constants.

pub mod acl;
mod batch;
mod body;
mod client;
pub mod clock;
pub mod cluster;
mod coalesce;
mod conn;
pub(crate) mod counts;
mod exec;
pub mod health;
pub(crate) mod instances;
pub mod layout;
pub mod library;
mod link;
mod parts;
pub(crate) mod read;
pub mod relayout;
mod reply;
pub mod sentinel;
mod sessions;
pub mod settings;
pub(crate) mod stats;
mod topic_page;

pub mod cancel;
pub mod dispatch;
pub mod events;
pub mod group;
pub mod history;
pub mod hold;
pub(crate) mod index;
pub(crate) mod leader;
pub mod list;
pub mod nack;
mod pause;
pub mod pop;
pub mod progress;
pub mod purge;
pub mod push;
pub mod rate;
pub mod recur;
pub mod recur_put;
pub mod release;
pub mod remove;
pub mod requeue;
pub mod reschedule;
pub mod tag_cancel;
pub mod tag_list;
pub mod tag_reschedule;
pub mod tick;
pub mod touch;
pub mod trim;
pub mod unpop;

/// What the test suite reaches inside the store; not part of the API.
pub mod testing {
    pub use super::layout::{partition_of, slot, Keys};
    pub use super::library::{call, eval_script_of, eval_shas, fcall, Path};
    pub use super::{dispatch, pop, push, relayout, remove, Script, Status};
}

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
pub(crate) use client::Client;
pub use layout::Keys;
pub(crate) use link::{client, url_at};
pub use link::{Redis, Tls};
pub use read::{Overview, TopicCounts};

/// What a script reports first, in every reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub enum Status {
    /// Done as asked (for push: created).
    Done = 0,
    /// No such job.
    Missing = 1,
    /// The lease token is not the job's current one; nothing changed.
    Stale = 2,
    /// Push in keep mode found the id: nothing changed.
    Kept = 3,
    /// Push replaced an existing job.
    Replaced = 4,
    /// Push with a dedup key found the key's job: nothing changed.
    Deduplicated = 5,
    /// Push with a debounce key replaced the key's pending job.
    Debounced = 6,
    /// The job was cancelled while its lease was held: the holder's call
    /// changed nothing.
    Cancelled = 7,
}

impl Status {
    const ALL: [Status; 8] = [
        Status::Done,
        Status::Missing,
        Status::Stale,
        Status::Kept,
        Status::Replaced,
        Status::Deduplicated,
        Status::Debounced,
        Status::Cancelled,
    ];

    fn lua_name(self) -> &'static str {
        match self {
            Status::Done => "DONE",
            Status::Missing => "MISSING",
            Status::Stale => "STALE",
            Status::Kept => "KEPT",
            Status::Replaced => "REPLACED",
            Status::Deduplicated => "DEDUPLICATED",
            Status::Debounced => "DEBOUNCED",
            Status::Cancelled => "CANCELLED",
        }
    }

    fn from_code(code: i64) -> Option<Status> {
        Status::ALL.into_iter().find(|s| *s as i64 == code)
    }

    /// `local DONE = 0` ... for the function library.
    pub(crate) fn lua_prelude() -> String {
        Status::ALL
            .iter()
            .map(|s| format!("local {} = {}\n", s.lua_name(), *s as i64))
            .collect()
    }
}

/// One script and what each of its calls is: its name (in the library,
/// and the op its errors name), its source, and
///
/// - `when_full`: whether it may run while Redis is at `maxmemory`
///   (function flag `allow-oom`). Transitions that free memory or barely
///   grow it must keep working when Redis is full: consumers finish and
///   delete jobs to make room, and due jobs still fall due. What adds jobs
///   is refused with an OOM error.
/// - `acked`: whether its calls wait for `replica_acks` replicas (what a
///   client was told happened: pushes, pops, finishes, nacks, schedules).
/// - `late_unknown`: whether a call of it that may have been sent and got
///   no reply in time leaves its caller not knowing what changed
///   ([`Error::Unknown`]): a change may have run. Not for reads, nor for
///   pops, whose late jobs delayq gives back itself (a timeout, then).
#[derive(Debug)]
pub struct Script {
    pub name: &'static str,
    pub source: &'static str,
    pub when_full: bool,
    pub acked: bool,
    pub late_unknown: bool,
}

/// How long a call that this process stopped waiting for may still bring
/// its reply: a pop's late reply is still read, so the jobs it reserved for
/// nobody go back to ready at once instead of after their ttr.
pub(crate) const LATE_REPLY_GRACE: Duration = Duration::from_secs(30);

/// The script layer: one queue's keys and partitions, the policies its
/// scripts apply, its batched calls and rate-limit memory, over the
/// Redis [`Client`] it calls through (its fields and calls reached
/// through `Deref`).
pub(crate) struct Store {
    /// The connections and the calls made on them.
    redis: Client,
    /// The queue's partitions, and where the next pop looks first.
    parts: parts::Partitions,
    /// Calls batched per partition while Redis is busy (group commit).
    lanes: Lanes,
    /// How long finished jobs' records are kept (none by default).
    pub(crate) keep: remove::Keep,
    /// Events each partition's stream keeps (0: events off).
    pub(crate) events: u64,
    /// Topics seen with a rate limit: on a partitioned queue, their pops
    /// take tokens from the topic's one bucket first (see `rate.rs`).
    pub(crate) limited: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// The store's group-commit lanes: single calls that arrive together go to
/// Redis as one script call per partition.
struct Lanes {
    pushes: coalesce::Coalescer<push::Pushes>,
    /// Finishes and deletes.
    removes: coalesce::Coalescer<remove::Removes>,
    /// Pops of a queue of one partition.
    pops: coalesce::Coalescer<pop::Pops>,
    /// Pops whose replies were lost, their jobs to give back.
    lost: unpop::Lost,
}

impl std::ops::Deref for Store {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.redis
    }
}

/// Told of every failure to reach Redis (the metrics count them), so the
/// store need not know who counts.
pub trait Observer: Send + Sync {
    fn redis_error(&self);
}

/// What a store is made from: the queue's settings that concern Redis.
pub struct Options<'a> {
    pub redis: &'a Redis,
    pub tls: &'a Tls,
    pub prefix: &'a str,
    pub partitions: usize,
    pub redis_timeout: Duration,
    pub replica_acks: usize,
    pub degraded_pushes: health::DegradedPushes,
    pub keep_finished: Option<Duration>,
    pub topic_keep_finished: &'a std::collections::HashMap<String, Duration>,
    /// Events each partition's stream keeps (0: events off).
    pub events: u64,
}

impl Store {
    /// Redis need not be up yet: the connection is made lazily and re-made
    /// after every failure, so a store outlives Redis restarts.
    pub fn new(config: Options<'_>, observer: Arc<dyn Observer>) -> Result<Store> {
        let (prefix, partitions) = (config.prefix, config.partitions);
        if !(1..=cluster::MAX_PARTITIONS).contains(&partitions) {
            return Err(Error::Invalid(format!(
                "partitions {partitions} is out of range: 1 to {}",
                cluster::MAX_PARTITIONS
            )));
        }
        let redis = Client::new(&config, observer)?;
        let parts = Keys::partitions(prefix, partitions);
        Ok(Store {
            redis,
            lanes: Lanes {
                pushes: coalesce::Coalescer::new(parts.len()),
                removes: coalesce::Coalescer::new(parts.len()),
                pops: coalesce::Coalescer::new(parts.len()),
                lost: Default::default(),
            },
            parts: parts::Partitions::new(prefix, parts),
            keep: remove::Keep {
                default: config.keep_finished,
                topics: config.topic_keep_finished.clone(),
            },
            events: config.events,
            limited: Default::default(),
        })
    }

    /// Whether the shards' health is watched: replicas counted for
    /// acknowledged writes, masters of a cluster's partitions looked at.
    pub(crate) fn watches_health(&self) -> bool {
        self.acks.wanted > 0 || self.cluster.is_some()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}
