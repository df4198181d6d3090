//! `/v1/batches`: create a batch (with its first jobs), push jobs into it,
//! read, close and cancel it (see [`crate::batch`]).

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;

use super::jobs::{push_jobs, retry_policy};
use super::{parse, ApiError, ApiResult, Segment};
use crate::batch::{BatchCallback, BatchOn, NewBatch};
use crate::http::AppState;
use crate::wire::{
    BatchBody, BatchCancelled, BatchCreated, BatchJobsSpec, BatchOnSpec, BatchReply, NewBatchSpec,
};

/// Create a batch, push its jobs, close it
///
/// The batch is closed once its jobs are in, unless `open` is true or a
/// job was refused (then it stays open: push the rest, then close it).
#[utoipa::path(post, path = "/v1/batches", operation_id = "createBatch", request_body = NewBatchSpec,
    responses((status = 201, description = "Created, with its jobs' results", body = BatchCreated),
        (status = 409, description = "The id names a batch already")))]
pub(super) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<BatchCreated>)> {
    let spec: NewBatchSpec = parse(&state, body)?;
    // An id given is checked as given (an empty one is no request for a
    // UUID: that is leaving it out).
    if let Some(id) = &spec.id {
        crate::job::check_new_batch_id(id).map_err(ApiError::invalid)?;
    }
    // Checked before the batch exists: a refused request leaves nothing.
    state
        .queue
        .limits()
        .check_batch(spec.jobs.len())
        .map_err(ApiError::invalid)?;
    let cb = &spec.callback;
    let b = NewBatch {
        id: spec.id.clone().unwrap_or_default(),
        on: match spec.on {
            BatchOnSpec::Finished => BatchOn::Finished,
            BatchOnSpec::Settled => BatchOn::Settled,
        },
        callback: BatchCallback {
            topic: cb.topic.clone(),
            body: cb.body.clone(),
            ttr: cb
                .ttr_ms
                .map_or(crate::defaults::TTR, Duration::from_millis),
            retry: cb.retry.as_ref().map(retry_policy).transpose()?,
        },
    };
    let created = state.queue.create_batch(&b).await?;
    let header = crate::trace::from_headers(&headers);
    let jobs = if spec.jobs.is_empty() {
        BatchReply {
            accepted: 0,
            rejected: 0,
            results: Vec::new(),
        }
    } else {
        push_jobs(&state, spec.jobs, &header, Some(&created.id)).await?
    };
    if !spec.open && jobs.rejected == 0 {
        state.queue.close_batch(&created.id).await?;
    }
    let batch = state
        .queue
        .batch(&created.id)
        .await?
        .ok_or_else(|| crate::Error::NoBatch(created.id.clone()))?;
    Ok((
        StatusCode::CREATED,
        Json(BatchCreated {
            batch: batch.into(),
            jobs,
        }),
    ))
}

/// A batch's state and counts
#[utoipa::path(get, path = "/v1/batches/{id}", operation_id = "getBatch", params(super::BatchId),
    responses((status = 200, description = "The batch", body = BatchBody),
        (status = 404, description = "No such batch (or its retention ran out)")))]
pub(super) async fn get_one(
    State(state): State<AppState>,
    Segment(id): Segment,
) -> ApiResult<Json<BatchBody>> {
    read(&state, &id).await.map(Json)
}

/// Push jobs into a batch
///
/// Refused while the batch does not exist (404), or once it fired or was
/// cancelled (409); a running job of the batch may add jobs to it after
/// it was closed.
#[utoipa::path(post, path = "/v1/batches/{id}/jobs", operation_id = "pushBatchJobs",
    params(super::BatchId), request_body = BatchJobsSpec,
    responses((status = 200, description = "One result per job, in order", body = BatchReply)))]
pub(super) async fn push(
    State(state): State<AppState>,
    Segment(id): Segment,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<BatchReply>> {
    let spec: BatchJobsSpec = parse(&state, body)?;
    // Its existence first: a request for no batch is one 404, not one per job.
    read(&state, &id).await?;
    let header = crate::trace::from_headers(&headers);
    push_jobs(&state, spec.jobs, &header, Some(&id))
        .await
        .map(Json)
}

/// Close a batch: its pusher is done
#[utoipa::path(post, path = "/v1/batches/{id}/close", operation_id = "closeBatch",
    params(super::BatchId),
    responses((status = 200, description = "The batch after (fired, if its jobs were done)", body = BatchBody),
        (status = 409, description = "It was cancelled")))]
pub(super) async fn close(
    State(state): State<AppState>,
    Segment(id): Segment,
) -> ApiResult<Json<BatchBody>> {
    state.queue.close_batch(&id).await?;
    read(&state, &id).await.map(Json)
}

/// Cancel a batch: it never fires; its jobs not handed out are deleted
#[utoipa::path(post, path = "/v1/batches/{id}/cancel", operation_id = "cancelBatch",
    params(super::BatchId),
    responses((status = 200, description = "How many jobs were deleted, and the batch after", body = BatchCancelled),
        (status = 409, description = "It fired already")))]
pub(super) async fn cancel(
    State(state): State<AppState>,
    Segment(id): Segment,
) -> ApiResult<Json<BatchCancelled>> {
    let deleted = state.queue.cancel_batch(&id).await?;
    Ok(Json(BatchCancelled {
        deleted,
        batch: read(&state, &id).await?,
    }))
}

async fn read(state: &AppState, id: &str) -> ApiResult<BatchBody> {
    match state.queue.batch(id).await? {
        Some(b) => Ok(b.into()),
        None => Err(crate::Error::NoBatch(id.to_owned()).into()),
    }
}
