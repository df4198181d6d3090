//! `/v1/pop`: lease up to `max` ready jobs, long-polling up to `wait_ms`;
//! `/v1/finish`: finish what a pop gave, all in one request.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::{parse, ApiError, ApiResult};
use crate::http::AppState;
use crate::job::Delivery;
use crate::trace::HopKind;
use crate::wire::{self, FinishReply, FinishResult, FinishSpec, PopSpec, Popped};

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
                let (traceparent, _span) = d.hand_over(HopKind::Pop);
                wire::DeliveryBody {
                    traceparent,
                    ..d.into()
                }
            })
            .collect(),
    }))
}

/// Finish many leased jobs in one request
///
/// Each job is finished on its own, under its own token, with its own
/// result: a stale token or an unknown id fails that job only. One round
/// trip to Redis per partition, however many jobs.
#[utoipa::path(post, path = "/v1/finish", operation_id = "finishJobs", request_body = FinishSpec,
    responses((status = 200, description = "One result per job, in order", body = FinishReply)))]
pub(super) async fn finish(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<FinishReply>> {
    let spec: FinishSpec = parse(&state, body)?;
    if spec.jobs.is_empty() {
        return Err(ApiError::invalid("jobs: give at least one job to finish"));
    }
    state
        .queue
        .limits()
        .check_batch(spec.jobs.len())
        .map_err(ApiError::invalid)?;
    let leases: Vec<(&str, &str)> = spec
        .jobs
        .iter()
        .map(|j| (j.id.as_str(), j.token.as_str()))
        .collect();
    let done = state.queue.finish_many(&leases).await?;
    let results: Vec<FinishResult> = spec
        .jobs
        .iter()
        .zip(done)
        .enumerate()
        .map(|(index, (job, r))| {
            let (status, error) = match r {
                Ok(()) => (StatusCode::NO_CONTENT, None),
                Err(e) => {
                    let e = ApiError::from(e);
                    (e.status, Some(e.body()))
                }
            };
            FinishResult {
                index,
                id: job.id.clone(),
                status: status.as_u16(),
                error,
            }
        })
        .collect();
    let finished = results.iter().filter(|r| r.error.is_none()).count();
    Ok(Json(FinishReply {
        finished,
        failed: results.len() - finished,
        results,
    }))
}

impl From<Delivery> for wire::DeliveryBody {
    fn from(d: Delivery) -> Self {
        wire::DeliveryBody {
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
            children: d.children.map(wire::children_body),
        }
    }
}
