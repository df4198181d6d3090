//! `/v1/jobs/{id}/...` for the lease holder: finish, release, nack, touch,
//! progress, log.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::{parse, ApiResult, Segment};
use crate::http::AppState;
use crate::wire::{
    ErrorReply, FinishJobSpec, LogSpec, NackSpec, NackedBody, ProgressSpec, TokenSpec, TouchSpec,
    Touched,
};

/// Finish a leased job, optionally with its result
///
/// A `result` (any JSON value, at most 64 KiB) stays on the job's finished
/// record, which `GET /v1/jobs/{id}` reads: as long as the topic keeps
/// records, otherwise for the result retention (24 h unless configured).
#[utoipa::path(post, path = "/v1/jobs/{id}/finish", operation_id = "finishJob",
    params(super::JobId), request_body = FinishJobSpec,
    responses(
        (status = 204, description = "Finished (deleted, or its record kept)"),
        (status = 422, description = "Bad token, or a result over its limit (invalid); nothing changed", body = ErrorReply),
        (status = 404, description = "No such job (not_found)", body = ErrorReply),
        (status = 409, description = "Stale lease token (stale_lease)", body = ErrorReply),
    ))]
pub(super) async fn finish(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let spec: FinishJobSpec = parse(&state, body)?;
    match &spec.result {
        Some(result) => {
            (state.queue)
                .finish_with_result(&id, &spec.token, result)
                .await?
        }
        None => state.queue.finish(&id, &spec.token).await?,
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Give a leased job back, its attempt uncounted
///
/// For a consumer that took it but cannot handle it (the CLI whose output
/// was closed before the token got out).
#[utoipa::path(post, path = "/v1/jobs/{id}/release", operation_id = "releaseJob",
    params(super::JobId), request_body = TokenSpec,
    responses(
        (status = 204, description = "Ready again"),
        (status = 404, description = "No such job (not_found)", body = ErrorReply),
        (status = 409, description = "Stale lease token (stale_lease)", body = ErrorReply),
    ))]
pub(super) async fn release(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let spec: TokenSpec = parse(&state, body)?;
    state.queue.release(&id, &spec.token).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Report a failed attempt; the retry policy decides what follows
#[utoipa::path(post, path = "/v1/jobs/{id}/nack", operation_id = "nackJob",
    params(super::JobId), request_body = NackSpec,
    responses(
        (status = 200, description = "Where the job went", body = NackedBody),
        (status = 404, description = "No such job (not_found)", body = ErrorReply),
        (status = 409, description = "Stale lease token (stale_lease)", body = ErrorReply),
    ))]
pub(super) async fn nack(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<NackedBody>> {
    let spec: NackSpec = parse(&state, body)?;
    let n = state
        .queue
        .nack(
            &id,
            &spec.token,
            spec.delay_ms.map(Duration::from_millis),
            &spec.error,
        )
        .await?;
    Ok(Json(NackedBody {
        id,
        state: n.state,
        due_at_ms: n.due_ms,
    }))
}

/// Extend a lease
#[utoipa::path(post, path = "/v1/jobs/{id}/touch", operation_id = "touchJob",
    params(super::JobId), request_body = TouchSpec,
    responses(
        (status = 200, description = "The lease's new end", body = Touched),
        (status = 404, description = "No such job (not_found)", body = ErrorReply),
        (status = 409, description = "Stale lease token (stale_lease)", body = ErrorReply),
    ))]
pub(super) async fn touch(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Touched>> {
    let spec: TouchSpec = parse(&state, body)?;
    let until = state
        .queue
        .touch(&id, &spec.token, spec.ttr_ms.map(Duration::from_millis))
        .await?;
    Ok(Json(Touched {
        id,
        lease_until_ms: until,
    }))
}

/// Report a running job's progress
///
/// Any JSON value but null (a number such as 42, or a small object), at
/// most 1024 bytes serialized and 64 levels deep; it replaces the last one and `GET
/// /v1/jobs/{id}` shows it. Fenced by the lease as touch is.
#[utoipa::path(post, path = "/v1/jobs/{id}/progress", operation_id = "reportProgress",
    params(super::JobId), request_body = ProgressSpec,
    responses(
        (status = 204, description = "Set"),
        (status = 422, description = "Too large, or null (invalid)", body = ErrorReply),
        (status = 404, description = "No such job (not_found)", body = ErrorReply),
        (status = 409, description = "Stale or ended lease (stale_lease), or cancelled (cancelled)", body = ErrorReply),
    ))]
pub(super) async fn progress(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let spec: ProgressSpec = parse(&state, body)?;
    state
        .queue
        .progress(&id, &spec.token, &spec.progress)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Append a line to a running job's log
///
/// At most 1024 bytes, no control character but tab; the job keeps its
/// last 100 lines, across attempts, as long as the job (or its finished
/// record). Fenced by the lease as touch is.
#[utoipa::path(post, path = "/v1/jobs/{id}/log", operation_id = "appendLog",
    params(super::JobId), request_body = LogSpec,
    responses(
        (status = 204, description = "Appended"),
        (status = 422, description = "Too long, or a control character (invalid)", body = ErrorReply),
        (status = 404, description = "No such job (not_found)", body = ErrorReply),
        (status = 409, description = "Stale or ended lease (stale_lease), or cancelled (cancelled)", body = ErrorReply),
    ))]
pub(super) async fn log(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let spec: LogSpec = parse(&state, body)?;
    state.queue.log(&id, &spec.token, &spec.line).await?;
    Ok(StatusCode::NO_CONTENT)
}
