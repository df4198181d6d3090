//! `GET /v1/jobs/{id}?wait_ms=`: a read that waits for the job's outcome.

use serde::{Deserialize, Serialize};

/// `GET /v1/jobs/{id}` query.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
pub struct JobQuery {
    /// Wait up to this long (ms, at most 60000) for the job's outcome:
    /// the reply comes when it is finished (its record, with its result)
    /// or dead (200), or gone (404), or when the wait runs out, as the job
    /// stands then. Absent or 0: at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", param(maximum = 60000))]
    pub wait_ms: Option<u64>,
}
