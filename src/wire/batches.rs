//! `/v1/batches`: batches of jobs with a callback (see [`crate::batch`]).

use serde::{Deserialize, Serialize};

use super::{BatchReply, RetrySpec};

/// When a batch fires.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum BatchOnSpec {
    /// Once every job of it has finished (a dead one holds it back).
    Finished,
    /// Once every job of it has finished or died.
    #[default]
    Settled,
}

/// The job a batch pushes once it is done: ready at once, its body a JSON
/// report `{"batch","jobs","finished","dead","deleted","body"}`.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CallbackSpec {
    #[cfg_attr(feature = "server", schema(min_length = 1, max_length = 128))]
    pub topic: String,
    /// Given back as the report's `body`.
    #[serde(default)]
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySpec>,
}

/// `POST /v1/batches`: a batch, and jobs pushed into it in the same
/// request. Closed once they are in, unless `open` (push more with `POST
/// /v1/batches/{id}/jobs`, then `POST /v1/batches/{id}/close`); a batch
/// some of whose jobs were refused stays open, so it never fires without
/// them.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewBatchSpec {
    /// Generated (a UUID) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(min_length = 1, max_length = 200))]
    pub id: Option<String>,
    #[serde(default)]
    pub on: BatchOnSpec,
    pub callback: CallbackSpec,
    /// Jobs of the batch (as `POST /v1/jobs/batch` takes them; `batch` may
    /// be left out).
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(value_type = Vec<super::JobSpec>, max_items = 1000))]
    pub jobs: Vec<serde_json::Value>,
    #[serde(default)]
    pub open: bool,
}

/// `POST /v1/batches/{id}/jobs`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchJobsSpec {
    #[cfg_attr(feature = "server", schema(value_type = Vec<super::JobSpec>, max_items = 1000))]
    pub jobs: Vec<serde_json::Value>,
}

/// A batch: its state and counts.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Batch))]
pub struct BatchBody {
    pub id: String,
    /// open, closed, fired or cancelled.
    pub state: String,
    /// finished or settled.
    pub on: String,
    pub callback_id: String,
    pub callback_topic: String,
    /// Jobs taken in; of them finished, dead, deleted, and pending (no
    /// outcome yet).
    pub jobs: u64,
    pub finished: u64,
    pub dead: u64,
    pub deleted: u64,
    pub pending: u64,
    pub created_at_ms: i64,
    /// When it fired or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<i64>,
}

impl From<crate::batch::Batch> for BatchBody {
    fn from(b: crate::batch::Batch) -> Self {
        BatchBody {
            id: b.id,
            state: b.state.as_str().to_owned(),
            on: b.on.as_str().to_owned(),
            callback_id: b.callback_id,
            callback_topic: b.callback_topic,
            jobs: b.jobs,
            finished: b.finished,
            dead: b.dead,
            deleted: b.deleted,
            pending: b.pending,
            created_at_ms: b.created_ms,
            ended_at_ms: b.ended_ms,
        }
    }
}

/// `POST /v1/batches`' reply: the batch after, and its jobs' results.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct BatchCreated {
    pub batch: BatchBody,
    pub jobs: BatchReply,
}

/// `POST /v1/batches/{id}/cancel`'s reply.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct BatchCancelled {
    /// Jobs deleted (those not handed out yet).
    pub deleted: u64,
    pub batch: BatchBody,
}
