//! What delayq reports about itself: a topic's counts, throughput and
//! lateness, the event stream's events, the running instances and their
//! webhooks. The store and the queue return these values and the native
//! API's replies carry them unchanged ([`crate::wire`] names them too), so
//! they sit below both. Also what the store reads and the API shapes in
//! replies of its own: the [`Overview`] of every topic, and the Redis delayq
//! runs on ([`Memory`], [`Settings`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod redis_info;

pub use redis_info::{evicting, Memory, Settings};

/// Job counts of one topic, and how far behind it is.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TopicCounts {
    pub delayed: u64,
    pub ready: u64,
    pub reserved: u64,
    pub dead: u64,
    /// Kept records of finished jobs (`--keep-finished`); a record whose
    /// window ran out leaves this count at the next trim (within a quarter
    /// of the window, 5 minutes at most).
    #[serde(default)]
    pub finished: u64,
    /// Jobs fall due but are not handed out.
    #[serde(default)]
    pub paused: bool,
    /// How long the oldest ready job has waited since it fell due, ms
    /// (null: none ready). A job retried at once counts from its first
    /// due time.
    #[serde(default)]
    pub oldest_ready_ms: Option<u64>,
    /// How long the oldest delayed job that is due but not yet moved to
    /// ready is overdue, ms (null: none among the earliest due entries
    /// looked at; see docs/observability.md).
    #[serde(default)]
    pub oldest_overdue_ms: Option<u64>,
    /// Why ready jobs wait: "paused", "rate" (no token left), or null.
    #[serde(default)]
    pub held: Option<Held>,
    /// Fire lateness of this topic, every instance, last hour.
    #[serde(default)]
    pub lateness_ms: Lateness,
    /// The topic's earliest due time among its delayed jobs, Unix ms (null:
    /// none delayed, or not known yet: a Redis an older build wrote to
    /// before its topic schedules are backfilled).
    #[serde(default)]
    pub next_due_ms: Option<i64>,
}

impl TopicCounts {
    /// No job of the topic is stored.
    pub fn is_empty(&self) -> bool {
        self.delayed + self.ready + self.reserved + self.dead + self.finished == 0
    }
}

/// Counts per topic and the earliest due time. Every topic the store
/// knows is listed, with no jobs too: paused or rate-limited ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overview {
    pub topics: BTreeMap<String, TopicCounts>,
    /// The earliest due time (or lease end) in the schedule and the heads,
    /// Unix ms.
    pub next_due_ms: Option<i64>,
    /// Partitions whose master did not answer: their jobs are not in the
    /// counts (the rest of the queue is).
    pub unavailable_partitions: Vec<usize>,
}

/// Why a topic's ready jobs are not handed out now.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Held {
    /// The topic is paused.
    Paused,
    /// Its rate limit has no token left now.
    Rate,
}

/// Fire lateness (hand-over time minus due time, Redis clock) over the
/// last hour, from every instance's histogram buckets merged. Each
/// percentile is the upper bound of the bucket it falls in (ms); null with
/// no samples or beyond the last bound (60 s).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Lateness {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub samples: u64,
    pub window_s: u64,
}

/// One count per point and kind.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Series {
    pub pushed: Vec<u64>,
    /// Handed to consumers (pops, long-polls, webhook deliveries).
    pub delivered: Vec<u64>,
    pub finished: Vec<u64>,
    /// Attempts that failed (nack or lease ran out) and were retried.
    pub failed: Vec<u64>,
    /// Attempts that failed and were the last.
    pub dead: Vec<u64>,
}

/// Events per point, oldest first, counted by every instance.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Throughput {
    /// 60 (minute) or 1 (second).
    pub resolution_s: u64,
    /// Start of the oldest point, Unix ms (Redis clock).
    pub from_ms: i64,
    /// End of the newest point (the current one, still filling), Unix ms.
    pub to_ms: i64,
    pub series: Series,
}

/// One event: an SSE message's `data:` (its `id:` is the position to
/// resume after).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Event {
    /// pushed, fired (due: moved to ready), delivered, finished, failed (an
    /// attempt: nack or lease ran out), retried (after failed: due again),
    /// dead (after failed: no attempts left), deleted (DELETE, tag cancel,
    /// dead-letter purge or retention), rescheduled (a new due time),
    /// requeued (dead back to ready), released (a reservation that never
    /// reached its consumer, back to ready uncounted), cancelled (gone,
    /// whatever its state; a running job's holder is told at its next
    /// touch, nack or finish), progress (its holder reported progress).
    pub event: String,
    /// The job's id.
    pub id: String,
    pub topic: String,
    /// Attempts so far (delivered: this delivery's number; failed, retried,
    /// dead, finished: the attempt concerned).
    pub attempt: u32,
    /// When it happened, Unix ms (Redis clock).
    pub at_ms: i64,
    /// pushed, fired, delivered: the job's due time; retried: when the
    /// next attempt is due; rescheduled: the new due time; requeued: when
    /// it became ready. Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_ms: Option<i64>,
    /// failed: the attempt's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// progress: the value its holder reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
    /// finished: the result its finish carried, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

/// One webhook topic an instance delivers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct WebhookConsumer {
    pub topic: String,
    /// Most deliveries in flight from this instance.
    pub concurrency: u64,
    /// The URL with its password and query values masked (`***`).
    pub url: String,
    pub timeout_ms: u64,
}

/// A running delayq, as its last heartbeat said.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Instance {
    /// host-pid-random, stable for the process.
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub version: String,
    pub started_at_ms: i64,
    /// The address it serves HTTP on.
    pub listen: String,
    /// Clients' pops waiting in it now (its webhook deliveries' not counted).
    pub waiting_pops: u64,
    pub webhook_consumers: Vec<WebhookConsumer>,
    /// The partitions it leads: their due jobs it
    /// moves (empty: a standby, or it does not dispatch).
    pub dispatching: Vec<usize>,
    /// Its last heartbeat; it is gone from the list 3 heartbeat periods
    /// after its last.
    pub last_seen_ms: i64,
    /// It writes the event stream (`--events`). Every instance of a queue
    /// has the same setting: one of another is refused at start. Null from
    /// an instance too old to say.
    #[serde(default)]
    pub events: Option<bool>,
    /// It keeps each topic's schedule of delayed jobs (`{p}:s:<topic>`).
    /// Null from an older build: while one runs, the leaders backfill
    /// the topic schedules again and again.
    #[serde(default)]
    pub topic_schedules: Option<bool>,
    /// The highest storage layout it reads (2: bodies in pieces too).
    /// Null from an older build, which reads layout 1 only: while one runs,
    /// the partition leaders keep layout 1 in force.
    #[serde(default)]
    pub layout: Option<u8>,
    /// Whether its scripts tell a batch's home of its jobs' ends. Null
    /// from an older build: while one runs, batches are not created (its
    /// finishes would leave them waiting for ever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batches: Option<bool>,
}

impl Instance {
    /// The highest storage layout it reads (1 when its heartbeat does not
    /// say: an older build).
    pub fn layout_read(&self) -> u8 {
        self.layout.unwrap_or(1)
    }
}

/// A webhook topic: where it goes and how its deliveries went, across the
/// instances that deliver it.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct WebhookStatus {
    pub topic: String,
    /// The URL with its password and query values masked (`***`).
    pub url: String,
    pub concurrency: u64,
    pub timeout_ms: u64,
    /// The last delivery's HTTP status (`"200"`, `"503"`), or what kept
    /// it from having one (`timeout`, `connection_error`); null before the
    /// first.
    pub last_status: Option<String>,
    pub last_at_ms: Option<i64>,
    /// The last failed delivery's error, if the last delivery failed.
    pub last_error: Option<String>,
    /// Deliveries answered 2xx in the last 60 minutes (whole minutes).
    pub delivered_last_hour: u64,
    /// Failed deliveries in the last 60 minutes.
    pub failures_last_hour: u64,
    /// How many running instances deliver it.
    pub instances: u64,
}

/// A topic's groups, as `/metrics` shows them: known (listed: with ready
/// or reserved jobs, or settings), in turn (may hand out a job now),
/// waiting for a token of their rate limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupGauges {
    pub known: u64,
    pub in_turn: u64,
    pub waiting_token: u64,
}
