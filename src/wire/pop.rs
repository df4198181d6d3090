//! `/v1/pop`: lease up to `max` ready jobs, long-polling up to `wait_ms`.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PopSpec {
    /// Tried in order.
    #[cfg_attr(feature = "server", schema(min_items = 1, max_items = 32))]
    pub topics: Vec<String>,
    /// Most jobs.
    #[serde(default = "one")]
    #[cfg_attr(feature = "server", schema(minimum = 1, maximum = 100, default = 1))]
    pub max: usize,
    /// Longest wait for a job (0: answer at once).
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(maximum = 600_000, default = 0))]
    pub wait_ms: u64,
}

fn one() -> usize {
    1
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Popped {
    pub jobs: Vec<DeliveryBody>,
}

/// A leased job: settle it with its token (finish, nack, touch, release)
/// before `lease_until_ms`, or it is handed out again.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Delivery))]
pub struct DeliveryBody {
    pub id: String,
    pub topic: String,
    pub body: String,
    pub token: String,
    /// This delivery included.
    pub attempts: u32,
    pub due_at_ms: i64,
    pub popped_at_ms: i64,
    pub lease_until_ms: i64,
    /// W3C trace context of the job's push (only for a job pushed with
    /// one): the push's own, or, when delayq exports its spans (OTLP),
    /// delayq's hand-over span's (same trace id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// A flow's parent only (`POST /v1/flows`): each child's outcome and
    /// result, by child id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<std::collections::BTreeMap<String, super::ChildBody>>,
}

/// `POST /v1/finish`: finish the jobs of a pop at once, each under its own
/// lease token.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FinishSpec {
    #[cfg_attr(feature = "server", schema(min_items = 1, max_items = 1000))]
    pub jobs: Vec<LeaseSpec>,
}

/// A job and the lease token its pop gave.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LeaseSpec {
    pub id: String,
    pub token: String,
}

/// One result per job, in the order sent.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct FinishReply {
    pub finished: usize,
    pub failed: usize,
    pub results: Vec<FinishResult>,
}

/// One job's finish: the status a finish of it alone would have had (204
/// finished, 404 not_found, 409 stale_lease, 400 invalid), and the error.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct FinishResult {
    pub index: usize,
    pub id: String,
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<super::ErrorBody>,
}
