//! `/v1/topics`: counts per topic, a topic's jobs and dead letters, pause
//! and resume; `/v1/schedule`: what falls due next.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{JobBody, Lateness, RateLimitBody};

pub use crate::figures::TopicCounts;

/// `GET /v1/topics`.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Topics {
    pub topics: BTreeMap<String, TopicCounts>,
    /// Topics with a rate limit.
    #[serde(default)]
    pub rates: BTreeMap<String, RateLimitBody>,
    pub next_due_ms: Option<i64>,
    /// Clients' pops waiting for a job on this server (delayq's own
    /// webhook deliveries apart, in `webhook_pops`).
    pub waiting_pops: usize,
    /// This server's webhook deliveries waiting for a job.
    #[serde(default)]
    pub webhook_pops: usize,
    /// Topics this server delivers by webhook -> the URL's host and port
    /// (never its path, query or credentials).
    #[serde(default)]
    pub webhooks: BTreeMap<String, String>,
    /// Partitions whose master did not answer (left out of the counts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable_partitions: Vec<usize>,
    /// Fire lateness of all topics together, every instance, last hour.
    #[serde(default)]
    pub lateness_ms: Lateness,
    /// The next page's `cursor` (absent: this page was the last). Topics
    /// come a page at a time, in no order; `rates`, `webhooks` and the
    /// figures of all topics are whole on every page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `GET /v1/topics?cursor=&limit=`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
pub struct TopicsQuery {
    /// A previous page's `next_cursor` (absent: the first page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Topics a page holds, about (a page may hold a few more, as Redis's
    /// HSCAN returns them).
    #[serde(default = "topic_page")]
    #[cfg_attr(feature = "server", param(minimum = 1, maximum = 1000, default = topic_page))]
    pub limit: usize,
    /// Only this topic (listed with its counts even with no jobs): no
    /// paging.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
}

fn topic_page() -> usize {
    crate::defaults::TOPIC_PAGE
}

/// `GET /v1/topics/{topic}/dead?offset=&limit=`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
pub struct DeadQuery {
    #[serde(default)]
    #[cfg_attr(feature = "server", param(default = 0))]
    pub offset: usize,
    #[serde(default = "page")]
    #[cfg_attr(feature = "server", param(minimum = 1, maximum = 1000, default = page))]
    pub limit: usize,
}

fn page() -> usize {
    crate::defaults::PAGE
}

/// A page of dead jobs, oldest first.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct DeadPage {
    pub topic: String,
    pub offset: usize,
    pub jobs: Vec<JobBody>,
}

/// `POST /v1/topics/{topic}/dead/requeue` (an empty body: all of them).
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RequeueSpec {
    /// Ids to requeue; absent or empty = all dead jobs of the topic.
    #[serde(default)]
    pub ids: Vec<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Requeued {
    pub topic: String,
    pub requeued: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Purged {
    pub topic: String,
    pub purged: u64,
}

/// `GET /v1/topics/{topic}/jobs?state=&cursor=&limit=`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
pub struct JobsQuery {
    /// delayed (the default), ready, reserved, dead or finished (kept
    /// records, newest first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", param(value_type = Option<crate::job::JobState>, default = "delayed"))]
    pub state: Option<String>,
    /// The `next_cursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default = "page")]
    #[cfg_attr(feature = "server", param(minimum = 1, maximum = 1000, default = page))]
    pub limit: usize,
}

/// A page of a topic's jobs in one state.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct JobsPage {
    pub topic: String,
    pub state: crate::job::JobState,
    pub jobs: Vec<JobBody>,
    /// Absent or null on the last page.
    pub next_cursor: Option<String>,
}

/// `GET /v1/schedule?cursor=&limit=`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
pub struct UpcomingQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    #[serde(default = "page")]
    #[cfg_attr(feature = "server", param(minimum = 1, maximum = 1000, default = page))]
    pub limit: usize,
}

/// What falls due next, every topic, soonest first.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Upcoming {
    pub jobs: Vec<JobBody>,
    pub next_cursor: Option<String>,
}

/// A topic paused (`true`) or resumed.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Paused {
    pub topic: String,
    pub paused: bool,
}
