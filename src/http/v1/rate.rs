//! `/v1/topics/{topic}/rate`: rate limits.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::{parse, ApiError, ApiResult, Segment};
use crate::http::AppState;
use crate::rate::RateLimit;
use crate::wire::{ErrorReply, Rate, RateSpec};

fn no_limit(topic: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("topic {topic:?} has no rate limit"),
    )
}

/// Limit how fast a topic's jobs are handed out
#[utoipa::path(put, tag = "schedules", path = "/v1/topics/{topic}/rate", operation_id = "setRateLimit",
    params(super::TopicName), request_body = RateSpec,
    responses((status = 200, description = "The limit set", body = Rate)))]
pub(super) async fn put(
    State(state): State<AppState>,
    Segment(topic): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Rate>> {
    let spec: RateSpec = parse(&state, body)?;
    let limit = RateLimit {
        per_second: spec.per_second,
        burst: spec
            .burst
            .unwrap_or_else(|| spec.per_second.ceil().max(1.0) as u32),
    };
    state.queue.set_rate(&topic, limit).await?;
    Ok(Json(Rate {
        topic,
        per_second: limit.per_second,
        burst: limit.burst,
    }))
}

/// Show a topic's rate limit
#[utoipa::path(get, tag = "schedules", path = "/v1/topics/{topic}/rate", operation_id = "getRateLimit",
    params(super::TopicName),
    responses(
        (status = 200, description = "The limit", body = Rate),
        (status = 404, description = "The topic has no limit (not_found)", body = ErrorReply),
    ))]
pub(super) async fn get(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<Json<Rate>> {
    match state.queue.rates().await?.remove(&topic) {
        Some(l) => Ok(Json(Rate {
            topic,
            per_second: l.per_second,
            burst: l.burst,
        })),
        None => Err(no_limit(&topic)),
    }
}

/// Remove a topic's rate limit
#[utoipa::path(delete, tag = "schedules", path = "/v1/topics/{topic}/rate", operation_id = "clearRateLimit",
    params(super::TopicName),
    responses(
        (status = 204, description = "Removed"),
        (status = 404, description = "The topic has no limit (not_found)", body = ErrorReply),
    ))]
pub(super) async fn delete(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<StatusCode> {
    if state.queue.clear_rate(&topic).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(no_limit(&topic))
    }
}
