//! `/v1/events`: the event stream, as Server-Sent Events.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `GET /v1/events?topics=&after=`.
#[derive(Serialize, Deserialize, IntoParams, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only these topics, comma-separated; absent: every topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topics: Option<String>,
    /// Resume after this event id (as `Last-Event-ID`, which wins): one
    /// `<ms>-<seq>` per partition, comma-separated; `0`: from the oldest
    /// kept. Absent: from now on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// One event: an SSE message's `data:` (its `id:` is the position to
/// resume after).
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// pushed, fired (due: moved to ready), delivered, finished, failed (an
    /// attempt: nack or lease ran out), retried (after failed: due again),
    /// dead (after failed: no attempts left), deleted (DELETE, tag cancel,
    /// dead-letter purge or retention), rescheduled (a new due time),
    /// requeued (dead back to ready), released (a reservation that never
    /// reached its consumer, back to ready uncounted).
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
}

/// The data of an SSE `event: gap`: the position asked for is older than
/// what the stream keeps, so events after it may be missing; the events
/// that follow start at the oldest kept.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone, PartialEq, Eq)]
pub struct EventGap {
    /// The partitions whose events may be missing.
    pub partitions: Vec<usize>,
    pub message: String,
}
