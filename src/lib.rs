//! delayq: a delay queue on Redis. Jobs fire on time, never early, and are
//! never lost; the HTTP server is a drop-in for ouqiang/delay-queue.
//!
//! How a job moves: [`Queue::push`] writes its hash, a schedule entry and a
//! trigger key that expires at the due time. When it is due, a dispatch
//! script moves it to its topic's ready list; [`Queue::pop`] leases it to a
//! consumer for its ttr; [`Queue::finish`] removes it. A nack or a lease
//! that runs out is a failed attempt: the job's retry policy sends it back
//! to ready, to delayed until its next interval, or to dead. Two paths call the dispatch script and race
//! harmlessly: the expired-event subscriber (cheap, but late or lost under
//! load and across disconnects) and the sweep, which sleeps until the
//! earliest due time and is the clock that makes jobs fire on time.
//!
//! Map of the crate:
//! - [`queue`]: `Queue`, the public engine; every operation is one script.
//! - [`consumer`]: `Consumer`, a handler loop with bounded concurrency.
//! - [`job`]: job types at each step of their life, and input limits.
//! - [`retry`]: retry policies (intervals, max attempts) and dead letters.
//! - [`keys`]: the Redis key layout (one prefix, one hash tag).
//! - [`scripts`]: the Lua scripts, one per state transition (`src/scripts/`),
//!   loaded into Redis as one function library and called by name.
//! - [`scheduler`]: the sweep that fires due jobs at the earliest due time,
//!   and dead-letter retention.
//! - [`clock`]: this process's estimate of Redis time, for call deadlines.
//! - [`subscriber`]: the pub/sub connection: expired events, ready and wake
//!   notices, reconnect and catch-up.
//! - [`waiters`]: long-polling consumers parked per topic, no Redis
//!   connection each.
//! - [`webhook`]: delayq consuming a topic itself, POSTing jobs to a URL.
//! - [`http`]: the HTTP server; [`http::compat`] is the ouqiang contract.
//! - [`metrics`]: Prometheus counters and histograms.
//! - [`shutdown`]: the one signal that stops everything gracefully.
//! - [`duration`]: human durations (`2m`, `1h`) for flags and config.
//! - [`error`]: the library's error type.

mod clock;
pub mod consumer;
pub mod duration;
pub mod error;
pub mod http;
pub mod job;
pub mod keys;
pub mod metrics;
pub mod queue;
pub mod retry;
mod scheduler;
pub mod scripts;
pub mod shutdown;
mod subscriber;
pub mod waiters;
pub mod webhook;

pub use consumer::Consumer;
pub use error::{Error, Result};
pub use job::{
    Delivery, FailedAttempt, IfExists, Job, JobState, Limits, Nacked, NewJob, PushOutcome, Pushed,
};
pub use queue::{Config, DispatchPath, Memory, Overview, Queue, Stats, TopicCounts};
pub use retry::RetryPolicy;
pub use shutdown::Shutdown;

/// The README's Rust examples, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeExamples;
