//! The native API's contract (`/v1`): every request and reply body, once.
//!
//! The server (`delayq::http::v1`) reads and writes these types, the
//! `delayq` client commands send and read them, and the OpenAPI document
//! (`/v1/openapi.json`, [`crate::http::v1::openapi`]) is derived from them:
//! a new field is a field here, seen by all three.
//!
//! Names: requests are `...Spec` (bodies) and `...Query`; a reply that
//! carries a model type's facts is `<model>Body` ([`JobBody`] for
//! [`crate::Job`], [`DeliveryBody`], [`PushedBody`], [`NackedBody`],
//! [`ShardBody`], [`RecurringStateBody`], [`GroupBody`] and
//! [`GroupPageBody`] for [`crate::Group`] and [`crate::GroupPage`],
//! [`RateLimitBody`] for [`crate::RateLimit`]), made from it by `From`, so
//! the two never share a name; its OpenAPI schema keeps the name it was
//! published under (`Job`, `Schedule`, `Group`, `RateLimit`, ...).
//!
//! Times are Unix milliseconds of the Redis clock.

pub mod batches;
pub mod due;
pub mod events;
pub mod flows;
pub mod groups;
pub mod jobs;
pub mod ops;
pub mod outcome;
pub mod pop;
pub mod pushes;
pub mod rate;
pub mod recurring;
pub mod running;
pub mod stats;
pub mod tags;
pub mod topics;

use serde::{Deserialize, Serialize};

pub use batches::{
    BatchBody, BatchCancelled, BatchCreated, BatchJobsSpec, BatchOnSpec, CallbackSpec, NewBatchSpec,
};
pub use due::{numeric_due_at_error, parse_rfc3339_ms, DueAt, MIN_NUMERIC_DUE_AT_MS};
pub use events::{Event, EventGap, EventsQuery};
pub use flows::{
    children_body, ChildBody, ChildDeadSpec, ChildrenBody, FlowBody, FlowCancelled, FlowPushedBody,
    FlowSpec,
};
pub use groups::{GroupBody, GroupPageBody, GroupSpec, GroupsQuery};
pub use jobs::{
    Attempt, Cancelled, DedupModeSpec, DedupSpec, IfExistsSpec, Interval, JobBody, JobSpec,
    NackSpec, NackedBody, Outcome, PushedBody, RescheduleSpec, Rescheduled, Retry, RetrySpec,
    TokenSpec, TouchSpec, Touched,
};
pub use ops::{Instance, Instances, WebhookConsumer, WebhookStatus, Webhooks};
pub use outcome::JobQuery;
pub use pop::{DeliveryBody, FinishReply, FinishResult, FinishSpec, LeaseSpec, PopSpec, Popped};
pub use pushes::{BatchReply, BatchResult, BatchSpec};
pub use rate::{Rate, RateLimitBody, RateSpec};
pub use recurring::{RecurringList, RecurringRun, RecurringSpec, RecurringStateBody};
pub use running::{FinishJobSpec, LogLineBody, LogSpec, ProgressSpec};
pub use stats::{Held, Lateness, MetricsQuery, Series, Throughput, ThroughputQuery};
pub use tags::{TagCancelSpec, TagChanged, TagJobs, TagJobsQuery, TagRescheduleSpec, TagSkipped};
pub use topics::{
    DeadPage, DeadQuery, JobsPage, JobsQuery, Paused, Purged, RequeueSpec, Requeued, TopicCounts,
    Topics, TopicsQuery, Upcoming, UpcomingQuery,
};

/// Every error reply of the native API: `{"error":{"code":..,"message":..}}`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Error))]
pub struct ErrorReply {
    pub error: ErrorBody,
}

/// What went wrong: a stable code and a message for people.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    #[cfg_attr(feature = "server", schema(example = "invalid"))]
    #[cfg_attr(feature = "server", schema(value_type = ErrorCode))]
    pub code: String,
    pub message: String,
}

/// The codes of [`ErrorBody::code`] (documentation only: clients keep
/// codes they do not know as text).
#[derive(Serialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum ErrorCode {
    BadRequest,
    Invalid,
    NotFound,
    NoRoute,
    StaleLease,
    Exists,
    TooLarge,
    Unavailable,
    MethodNotAllowed,
    RedisFull,
    RedisEvicts,
    Degraded,
    Internal,
    Unauthorized,
    ReadOnly,
    CrossSite,
}

/// `GET /healthz`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Health {
    /// Always `ok`.
    #[cfg_attr(feature = "server", schema(example = "ok"))]
    pub status: String,
    /// As `delayq --version` prints it.
    pub version: String,
}

/// `GET /readyz`: 200 when every part is ready, else 503 with the same body.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Readiness {
    pub redis: bool,
    pub subscriber: bool,
    /// The server runs delayq's scripts (by FCALL or EVALSHA), as the last
    /// script call found; false: `error` names the server and what is
    /// missing or refused.
    #[serde(default = "yes")]
    pub scripts: bool,
    /// full: Redis is at maxmemory (pushes refused); evicting: an
    /// allkeys-* maxmemory-policy (pushes refused); unknown: INFO is not
    /// allowed to delayq's Redis user.
    #[cfg_attr(feature = "server", schema(value_type = MemoryState))]
    pub memory: String,
    /// Expired events heard, as this instance's canary key found (true or
    /// false); null: not known yet, or no expired-events connection here (a
    /// standby). Readiness does not depend on it: the sweep is the clock.
    pub expired_events: Option<bool>,
    /// Why expired events cannot be heard: the ACL refuses their channel
    /// (what to add). Still ready: the sweep fires jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_events_error: Option<String>,
    /// Why Redis is not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Each shard (Sentinel or Cluster master) and its partitions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardBody>,
    /// Some shard is short of replicas or not answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<bool>,
    /// Each Cluster master's memory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub masters: Vec<MasterMemory>,
}

fn yes() -> bool {
    true
}

#[derive(Serialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum MemoryState {
    Ok,
    Full,
    Evicting,
    Unknown,
}

/// One shard in [`Readiness`].
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Shard))]
pub struct ShardBody {
    pub node: String,
    /// ok, degraded (fewer replicas than asked for) or down.
    pub state: String,
    /// Connected replicas (null: the master did not answer).
    pub replicas: Option<u64>,
    pub partitions: Vec<usize>,
}

impl From<crate::Shard> for ShardBody {
    fn from(s: crate::Shard) -> Self {
        ShardBody {
            node: s.node,
            state: s.state.into(),
            replicas: s.replicas.map(|r| r as u64),
            partitions: s.partitions,
        }
    }
}

/// One Cluster master's memory in [`Readiness`].
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct MasterMemory {
    pub node: String,
    #[cfg_attr(feature = "server", schema(value_type = MemoryState))]
    pub memory: String,
    pub used_bytes: u64,
    pub max_bytes: u64,
}

/// A reply with nothing to say (204).
#[derive(Deserialize, Debug, Clone, Copy, Default)]
pub struct NoContent {}
