//! `/v1/pop`: lease up to `max` ready jobs, long-polling up to `wait_ms`.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;

use super::{parse, ApiError, ApiResult};
use crate::http::AppState;
use crate::job::Delivery;
use crate::trace::HopKind;
use crate::wire::{self, PopSpec, Popped};

/// Lease ready jobs, waiting up to wait_ms for one
#[utoipa::path(post, path = "/v1/pop", operation_id = "pop", request_body = PopSpec,
    responses((status = 200, description = "The jobs leased (none when nothing was ready in time)", body = Popped)))]
pub(super) async fn pop(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Popped>> {
    let spec: PopSpec = parse(&state, body)?;
    let wait = Duration::from_millis(spec.wait_ms);
    state
        .queue
        .limits()
        .check_pop(spec.max, wait)
        .map_err(ApiError::invalid)?;
    let jobs = state.queue.pop_many(&spec.topics, spec.max, wait).await?;
    Ok(Json(Popped {
        jobs: jobs
            .into_iter()
            .map(|d| {
                // A traced job's hand-over is a span of its trace.
                let (traceparent, _span) = crate::trace::hand_over(&d, HopKind::Pop);
                wire::Delivery {
                    traceparent,
                    ..d.into()
                }
            })
            .collect(),
    }))
}

impl From<Delivery> for wire::Delivery {
    fn from(d: Delivery) -> Self {
        wire::Delivery {
            popped_at_ms: d.popped_at_us / 1000,
            lease_until_ms: d.lease_until_ms,
            id: d.id,
            topic: d.topic,
            body: d.body,
            token: d.token,
            attempts: d.attempts,
            due_at_ms: d.due_ms,
            traceparent: d.traceparent,
            tracestate: d.tracestate,
        }
    }
}
