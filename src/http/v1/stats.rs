//! `/v1/stats/throughput`: what every instance did, per second or minute.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;

use super::{ApiError, ApiResult};
use crate::http::AppState;
use crate::queue::Resolution;
use crate::wire::{Throughput, ThroughputQuery};

/// Pushed, delivered, finished, failed and dead over time, every instance
#[utoipa::path(get, path = "/v1/stats/throughput", operation_id = "getThroughput",
    params(ThroughputQuery),
    responses((status = 200, description = "Counts per point, oldest first", body = Throughput)))]
pub(super) async fn throughput(
    State(state): State<AppState>,
    q: Result<Query<ThroughputQuery>, QueryRejection>,
) -> ApiResult<Json<Throughput>> {
    // A query that cannot be served is a bad request (400), as one that
    // does not parse.
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m);
    let Query(q) = q.map_err(|e| bad(e.body_text()))?;
    let r = match q.resolution.as_deref() {
        None => Resolution::Minute,
        Some(r) => r.parse().map_err(bad)?,
    };
    if let Some(t) = &q.topic {
        state.queue.limits().check_topic(t).map_err(bad)?;
    }
    Ok(Json(state.queue.throughput(q.topic.as_deref(), r).await?))
}
