//! `/v1/instances` and `/v1/webhooks`: the running delayq instances and the
//! webhook topics they deliver, the same from every instance.

use axum::extract::State;
use axum::Json;

use super::ApiResult;
use crate::http::AppState;
use crate::wire::{Instances, Webhooks};

/// List the running delayq instances
///
/// From their heartbeats in Redis (every 20 s, and within 2 s of a change);
/// an instance that died is gone within 60 s, one stopped cleanly at once.
#[utoipa::path(get, path = "/v1/instances", operation_id = "listInstances",
    responses((status = 200, description = "Every running instance, by id", body = Instances)))]
pub(super) async fn list(State(state): State<AppState>) -> ApiResult<Json<Instances>> {
    let instances = state.queue.instances().await?;
    Ok(Json(Instances { instances }))
}

/// List the webhook topics with their last delivery and failures
///
/// The topics the running instances deliver; URLs with passwords and query
/// values masked; counts over the last hour, from every instance.
#[utoipa::path(get, path = "/v1/webhooks", operation_id = "listWebhooks",
    responses((status = 200, description = "Every webhook topic, by topic", body = Webhooks)))]
pub(super) async fn webhooks(State(state): State<AppState>) -> ApiResult<Json<Webhooks>> {
    let webhooks = state.queue.webhooks().await?;
    Ok(Json(Webhooks { webhooks }))
}
