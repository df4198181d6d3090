//! delayq: a delay queue on Redis. Jobs fire on time, never early, and are
//! never lost; the HTTP server is a drop-in for ouqiang/delay-queue.
//!
//! How a job moves: [`Queue::push`] writes its hash, a schedule entry and a
//! trigger key that expires at the due time. When it is due, a dispatch
//! script moves it to its topic's ready list; [`Queue::pop`] leases it to a
//! consumer for its ttr; [`Queue::finish`] removes it. A nack or a lease
//! that runs out is a failed attempt: the job's retry policy sends it back
//! to ready, to delayed until its next interval, or to dead. Two paths call
//! the dispatch script and race harmlessly: the expired-event subscriber
//! (cheap, but late or lost under load and across disconnects) and the
//! sweep, which sleeps until the earliest due time and is the clock that
//! makes jobs fire on time. docs/DESIGN.md has the design and the job's
//! life as a table of states and transitions.
//!
//! The cargo feature `server` (on by default) is the binary's: the HTTP
//! server (`http`), the https client roots (`https`), webhook delivery
//! (`webhook::run`), OTLP export (`trace::otlp`) and the OpenAPI
//! derives of [`wire`]. A service that only pushes and consumes jobs
//! depends on `delayq = { ..., default-features = false }` and keeps the
//! queue, the consumer, [`webhook::verify`] and the wire types, with
//! tokio's `rt`, `net`, `time`, `sync` and `macros` (it brings the runtime
//! that runs them).
//!
//! Map of the crate, in layers: each module imports only from the layers
//! below its own (`src/layers.rs` lists them and a test holds it): base
//! (`defaults`, `duration`, `error`, `shutdown`, `backoff`, `retry`,
//! `https`) <- `redis` <- model (`trace`, `job`, `batch`, `flow`, `rate`,
//! `group`, `recurring`, `figures`) <- `store` <- engine (`stats`, `metrics`,
//! `waiters`, `loops`, `queue`, `instances`, `consumer`, `webhook`) <- api
//! (`wire`, `http`) <- the binary's `cli`. No two files import each other,
//! even through others (`layers::circles` holds it).
//! - [`queue`]: `Queue`, the public engine: limits, retry policy, metrics,
//!   waiting pops; every change is one call into `store`. One file per
//!   concept: its `Config`, pushes, pops, settling a job (finish, nack,
//!   ...), reading jobs, recurring schedules, administration.
//! - `store`: everything delayq says to Redis. One Lua script per state
//!   transition, each with a Rust type (its arguments and typed reply):
//!   in a file of the script's name, or, for scripts of one shape, a row
//!   of a table (`sweeps.rs`: purge, trim, history; `tag_pages.rs`;
//!   `progress.rs` holds log too, `relayout.rs` layout_swap); the key
//!   layout and its partitions (a job's keys: `JOB.keys` in
//!   `lib/job.lua`); the function library, assembled from the scripts and
//!   given to the Redis client.
//! - `redis`: reaching Redis and calling it, knowing nothing of jobs: the
//!   single-server, Sentinel and Cluster connections (and following the
//!   master the sentinels name); plain and script calls (FCALL, or
//!   EVALSHA), each bounded, a script call with its deadline in Redis
//!   time; acknowledged (replicated) writes; the shards' health; the
//!   group-commit engine; loading the script library it is given.
//! - [`loops`]: the background loops, all started and stopped with
//!   their queue here: the sweep (and dead-letter retention); the
//!   subscriber, and on a cluster the master follower (one expired-events
//!   connection per master, kept as masters come and go); the recurring
//!   loop (pushes each schedule's next tick when its last one falls due);
//!   the store's upkeep (the Sentinel follower, which asks the sentinels
//!   where the master is every second, the shards' health watch, the trim
//!   of finished records, the stats flush).
//! - [`consumer`]: `Consumer`, a handler loop with bounded concurrency.
//! - [`job`]: job types at each step of their life, and input limits.
//! - [`batch`]: batches of jobs and the callback pushed once when they
//!   are done (the store's `batches` and lib/batches.lua keep them).
//! - [`flow`]: flows, a parent job that waits for its children: a batch
//!   of the children whose callback is the parent (lib/flows.lua).
//! - [`rate`]: a topic's (or a group's) rate limit.
//! - [`group`]: a topic's groups: a group's figures and settings, a change
//!   to some of them, a page of groups.
//! - [`retry`]: retry policies (intervals, max attempts).
//! - [`recurring`]: recurring schedules (cron rules that push a job per
//!   tick, once, however many instances run); the loop that pushes them is
//!   [`loops::recurring`].
//! - [`waiters`]: long-polling consumers parked per topic, no Redis
//!   connection each.
//! - [`webhook`]: delayq consuming a topic itself, POSTing jobs to a URL;
//!   [`https`]: the roots its (and the CLI's) https trusts.
//! - [`http`]: the HTTP server; [`http::compat`] is the ouqiang contract,
//!   [`http::v1`] the native API, [`http::ui`] the dashboard.
//! - [`wire`]: the native API's request and reply types, shared by the
//!   server, the CLI client and the derived OpenAPI document; a body that
//!   mirrors a model type is named `<model>Body` and made from it with
//!   `From` (`wire::JobBody`, `wire::GroupBody`, `wire::RateLimitBody`):
//!   the model types carry no API contract, so either can change alone.
//! - [`figures`]: what delayq reports about itself (topic counts,
//!   throughput, lateness, events, instances), returned by the store and
//!   the queue, carried unchanged by [`wire`]; the overview of every topic,
//!   and the Redis it runs on (memory, settings), as the store reads them.
//! - [`metrics`]: typed Prometheus counters and histograms.
//! - [`stats`]: throughput and lateness of every instance, kept in Redis.
//! - [`shutdown`]: the one signal that stops everything gracefully.
//! - `backoff`: the wait between a failing loop's tries.
//! - [`defaults`]: every default and bound, written once.
//! - [`duration`]: human durations (`2m`, `1h`) for flags and config.
//! - [`error`]: the library's error type.
//! - [`trace`]: W3C trace context kept with jobs and handed on; optional
//!   OTLP export of delayq's spans.

#![forbid(unsafe_code)]
// The library alone (no `server` feature) has no `http`, `https` or OTLP
// export, so doc links to them resolve only in the whole build; `./dev
// test` documents both with warnings as errors, so a link broken in the
// whole build still fails it.
#![cfg_attr(not(feature = "server"), allow(rustdoc::broken_intra_doc_links))]

pub(crate) mod backoff;
pub mod batch;
pub mod consumer;
pub mod defaults;
pub mod duration;
pub mod error;
pub mod figures;
pub mod flow;
pub mod group;
#[cfg(feature = "server")]
pub mod http;
#[cfg(feature = "server")]
pub mod https;
pub mod instances;
pub mod job;
#[cfg(test)]
mod layers;
pub mod loops;
pub mod metrics;
pub mod queue;
pub mod rate;
pub mod recurring;
pub(crate) mod redis;
pub mod retry;
pub mod shutdown;
pub mod stats;
pub(crate) mod store;
pub mod trace;
pub mod waiters;
pub mod webhook;
pub mod wire;

/// delayq's version, as `delayq --version` prints it (in `/healthz` and
/// `delayq_build_info`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What delayq's Redis user may run: the commands delayq sends, asked of
/// the ACL (`serve` at start, `doctor`), and what to add for a refusal.
pub use crate::redis::acl;
/// Each slot range of a CLUSTER SLOTS reply with its master (`doctor`'s
/// cluster check reads the slots as a queue does).
#[doc(hidden)]
pub use crate::redis::cluster::owners_of as cluster_slot_owners;
#[doc(hidden)]
pub use crate::redis::library::engine_of;
pub use crate::redis::{
    health::{DegradedPushes, Shard},
    sentinel::Sentinel,
    Redis, Tls,
};
pub use batch::{Batch, BatchCallback, BatchOn, BatchState, NewBatch};
pub use consumer::Consumer;
pub use defaults::MAX_PARTITIONS;
pub use error::{Error, Result};
pub use figures::{Memory, Overview, Settings};
pub use flow::{ChildDead, Flow, FlowPushed, FlowState, NewFlow};
pub use group::{Group, GroupChange, GroupPage, GroupSettings};
pub use job::{
    Child, ChildOutcome, Children, Dedup, DedupMode, Delivery, FailedAttempt, IfExists, Job,
    JobState, Limits, LogLine, Nacked, NewJob, PushOutcome, Pushed,
};
pub use loops::DispatchPath;
pub use queue::{Config, Queue, Resolution, TagChange, TagMove};
pub use rate::RateLimit;
pub use recurring::{Missed, Recurring, RecurringState};
pub use retry::RetryPolicy;
pub use shutdown::Shutdown;
/// The commands a queue sends, as the probes [`acl`] asks of the ACL.
pub use store::commands as queue_commands;
pub use store::TopicCounts;
#[doc(hidden)]
pub use store::{
    layout::{validate_prefix, Keys as StoreKeys},
    relayout::layout_keys,
    testing,
};

/// The client for a Redis URL (`redis://`, `rediss://` with `tls` applied,
/// `redis+unix://`), made as a queue makes its own: `delayq doctor`
/// connects with it.
pub fn redis_client(url: &str, tls: &Tls) -> Result<::redis::Client> {
    crate::redis::client(url, tls)
}

/// The README's Rust examples, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;

/// The book's pages that hold Rust code (docs/), likewise (a test checks
/// every such page is here).
#[cfg(doctest)]
#[doc = include_str!("../docs/library.md")]
pub struct LibraryPageExamples;

#[cfg(doctest)]
#[doc = include_str!("../docs/webhooks.md")]
pub struct WebhooksPageExamples;

#[cfg(doctest)]
#[doc = include_str!("../docs/batches.md")]
pub struct BatchesPageExamples;

#[cfg(doctest)]
#[doc = include_str!("../docs/flows.md")]
pub struct FlowsPageExamples;
