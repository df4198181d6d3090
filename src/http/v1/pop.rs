//! `/v1/pop`: lease up to `max` ready jobs, long-polling up to `wait_ms`.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{parse, ApiError, ApiResult};
use crate::http::AppState;
use crate::job::Delivery;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PopSpec {
    topics: Vec<String>,
    #[serde(default = "one")]
    max: usize,
    #[serde(default)]
    wait_ms: u64,
}

fn one() -> usize {
    1
}

#[derive(Serialize)]
pub(super) struct DeliveryView {
    id: String,
    topic: String,
    body: String,
    token: String,
    attempts: u32,
    due_at_ms: i64,
    popped_at_ms: i64,
    lease_until_ms: i64,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> Self {
        DeliveryView {
            popped_at_ms: d.popped_at_us / 1000,
            lease_until_ms: d.lease_until_ms,
            id: d.id,
            topic: d.topic,
            body: d.body,
            token: d.token,
            attempts: d.attempts,
            due_at_ms: d.due_ms,
        }
    }
}

pub(super) async fn pop(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let spec: PopSpec = parse(&state, body)?;
    let wait = Duration::from_millis(spec.wait_ms);
    state
        .queue
        .limits()
        .check_pop(spec.max, wait)
        .map_err(ApiError::invalid)?;
    let jobs = state.queue.pop_many(&spec.topics, spec.max, wait).await?;
    let jobs: Vec<DeliveryView> = jobs.into_iter().map(Into::into).collect();
    Ok(Json(json!({ "jobs": jobs })))
}
