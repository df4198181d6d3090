//! `/v1/events`: the event stream, as Server-Sent Events.

use serde::{Deserialize, Serialize};

pub use crate::figures::Event;

/// `GET /v1/events?topics=&after=`.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
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

/// The data of an SSE `event: gap`: the position asked for is older than
/// what the stream keeps, so events after it may be missing; the events
/// that follow start at the oldest kept.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct EventGap {
    /// The partitions whose events may be missing.
    pub partitions: Vec<usize>,
    pub message: String,
}
