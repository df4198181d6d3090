//! `POST /v1/jobs/batch`: many jobs pushed in one request, and the reply
//! with each job's outcome (also what `POST /v1/batches` and `POST
//! /v1/batches/{id}/jobs` answer for their jobs).

use serde::{Deserialize, Serialize};

use super::{ErrorBody, Outcome};
// For the doc links only.
#[cfg(doc)]
use crate::job::Pushed;

/// `POST /v1/jobs/batch`. Each job is read on its own: a broken one is
/// reported at its index, the others are pushed.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchSpec {
    #[cfg_attr(feature = "server", schema(value_type = Vec<super::JobSpec>, max_items = 1000))]
    pub jobs: Vec<serde_json::Value>,
}

/// A batch's results, one per job in the order sent.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct BatchReply {
    pub accepted: usize,
    pub rejected: usize,
    pub results: Vec<BatchResult>,
}

/// One job of a batch: its [`Pushed`] fields, or an error.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct BatchResult {
    pub index: usize,
    /// The status a push of this job alone would have had.
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}
