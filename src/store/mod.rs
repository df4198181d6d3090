//! The storage layer: everything delayq says to Redis.
//!
//! Each state transition is one Lua script with a Rust file beside it that
//! encodes its arguments and decodes its reply (`cancel.lua` and
//! `cancel.rs`, and so on). Every script is a type. One called once per
//! change implements [`script::Script`] (its name, flags, source,
//! arguments from a typed input, reply decoded into a typed output),
//! mostly declared as a row of `script!` (`rate.rs`, whose calls differ in
//! arity, implements it by hand); callers run it with
//! `store.run::<Cancel>(part, input)`, or build the call with
//! `store.call_of::<Pop>(part, input)` to set its deadline (pop,
//! dispatch), and a [`Store`] method stands beside a script only where a
//! call needs more than one script call (paging, pacing, the writes around
//! it). Scripts of one shape share one table and decode ([`sweeps`]:
//! purge, trim, history; [`tag_pages`]: tag_list, tag_cancel). A script
//! with modes has a type per mode sharing its one definition ([`group`]:
//! get, set, a page; [`list`]: sorted sets, next due times, ready lists,
//! groups' lines). The scripts over many jobs per call (push, remove,
//! hold, tick) implement [`batch`]'s `PerJob` and go through the
//! group-commit lanes. `lib/*.lua` hold the helpers they share and
//! [`layout`] names every key, field and state once. The scripts are
//! loaded as one Redis function library ([`library`], whose `ALL` lists
//! each script's `DEF`) and called by name; [`commands`] lists the
//! commands they (and the store) send, as probes of the user's ACL. Plain
//! reads (a job, the counts, a dead-letter page, memory) are in [`read`].
//!
//! A queue may be split into partitions (Redis Cluster), each a full set of
//! keys in one slot; [`parts`] picks a job's partition from its id, and the
//! per-queue work (pops, counts, dead letters) runs over all of them.
//!
//! Under the store is the Redis layer ([`crate::redis`]), which knows
//! nothing of jobs: the connections (one server, Sentinel, Cluster), plain
//! and script calls with their deadlines in Redis time, acknowledged
//! writes, health, the clock and the group-commit engine. The [`Store`]
//! holds its [`Client`] as the field `redis` and calls it by name; the
//! store assembles the script library ([`library`]) and gives it to the
//! client at start. [`call`] makes one script call on a partition (its
//! keys, the prefix, the events setting) and sends it through the client.
//! Batched pushes and removes are [`batch`]'s.
//!
//! One status protocol for every script: the first element of each reply is
//! a [`Status`], declared here and handed to the scripts as Lua constants.

mod batch;
pub(crate) mod batches;
mod body;
pub(crate) mod call;
pub mod commands;
pub(crate) mod counts;
pub(crate) mod instances;
pub mod layout;
pub mod library;
mod parts;
pub(crate) mod read;
pub mod relayout;
mod sessions;
pub mod settings;
pub(crate) mod stats;
mod topic_page;

pub mod cancel;
pub mod dispatch;
pub mod events;
pub mod group;
pub mod hold;
pub(crate) mod index;
pub(crate) mod leader;
pub mod list;
pub mod nack;
mod pause;
pub mod pop;
pub mod progress;
pub mod push;
pub mod rate;
pub mod recur;
pub mod recur_put;
pub mod release;
pub mod remove;
pub mod requeue;
pub mod reschedule;
mod script;
pub mod sweeps;
pub mod tag_pages;
pub mod tag_reschedule;
pub mod tick;
pub mod touch;
pub mod unpop;

pub mod testing;

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::redis::{health, Client, Observer, Redis, Tls};
pub use layout::Keys;
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
    /// A call of many items ran out of time: the results of the first
    /// items only, the others untouched (push.lua).
    Partial = 8,
}

impl Status {
    const ALL: [Status; 9] = [
        Status::Done,
        Status::Missing,
        Status::Stale,
        Status::Kept,
        Status::Replaced,
        Status::Deduplicated,
        Status::Debounced,
        Status::Cancelled,
        Status::Partial,
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
            Status::Partial => "PARTIAL",
        }
    }

    /// `local DONE = 0` ... for the function library.
    pub(crate) fn lua_prelude() -> String {
        Status::ALL
            .iter()
            .map(|s| format!("local {} = {}\n", s.lua_name(), *s as i64))
            .collect()
    }
}

impl crate::redis::Code for Status {
    fn from_code(code: i64) -> Option<Status> {
        Status::ALL.into_iter().find(|s| *s as i64 == code)
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
pub struct ScriptDef {
    pub name: &'static str,
    pub source: &'static str,
    pub when_full: bool,
    pub acked: bool,
    pub late_unknown: bool,
}

/// The script layer: one queue's keys and partitions, the policies its
/// scripts apply, its batched calls and rate-limit memory, over the
/// Redis [`Client`] it calls through.
pub(crate) struct Store {
    /// The connections and the calls made on them.
    pub(crate) redis: Client,
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
    pushes: crate::redis::coalesce::Coalescer<push::Pushes>,
    /// Finishes and deletes.
    removes: crate::redis::coalesce::Coalescer<remove::Removes>,
    /// Pops of a queue of one partition.
    pops: crate::redis::coalesce::Coalescer<pop::Pops>,
    /// Pops whose replies were lost, their jobs to give back.
    lost: unpop::Lost,
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
    /// How long a result is kept in a topic that keeps no records.
    pub result_retention: Duration,
    /// Events each partition's stream keeps (0: events off).
    pub events: u64,
}

impl Store {
    /// Redis need not be up yet: the connection is made lazily and re-made
    /// after every failure, so a store outlives Redis restarts.
    pub fn new(config: Options<'_>, observer: Arc<dyn Observer>) -> Result<Store> {
        let (prefix, partitions) = (config.prefix, config.partitions);
        if !(1..=crate::defaults::MAX_PARTITIONS).contains(&partitions) {
            return Err(Error::Invalid(format!(
                "partitions {partitions} is out of range: 1 to {}",
                crate::defaults::MAX_PARTITIONS
            )));
        }
        let parts = Keys::partitions(prefix, partitions);
        let redis = Client::new(
            crate::redis::Options {
                redis: config.redis,
                tls: config.tls,
                slots: parts
                    .iter()
                    .map(|k| layout::slot(k.schedule().as_bytes()))
                    .collect(),
                timeout: config.redis_timeout,
                replica_acks: config.replica_acks,
                degraded_pushes: config.degraded_pushes,
                library: library::library(),
            },
            observer,
        )?;
        Ok(Store {
            redis,
            lanes: Lanes {
                pushes: crate::redis::coalesce::Coalescer::new(parts.len()),
                removes: crate::redis::coalesce::Coalescer::new(parts.len()),
                pops: crate::redis::coalesce::Coalescer::new(parts.len()),
                lost: Default::default(),
            },
            parts: parts::Partitions::new(prefix, parts),
            keep: remove::Keep {
                default: config.keep_finished,
                topics: config.topic_keep_finished.clone(),
                results: config.result_retention,
            },
            events: config.events,
            limited: Default::default(),
        })
    }
}
