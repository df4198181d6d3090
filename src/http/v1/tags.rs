//! `/v1/tags/{tag}`: a tag's jobs listed, cancelled or rescheduled, a page
//! per call; the reply's cursor resumes (over every partition).

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;

use super::jobs::due_ms;
use super::{parse, ApiError, ApiResult, Segment};
use crate::http::AppState;
use crate::queue::{TagMove, TAG_PAGE};
use crate::wire::{TagCancelSpec, TagChanged, TagJobs, TagJobsQuery, TagRescheduleSpec};

/// A page of a tag's jobs
#[utoipa::path(get, path = "/v1/tags/{tag}/jobs", operation_id = "listTagJobs",
    params(super::TagName, TagJobsQuery),
    responses((status = 200, description = "A page of the tag's jobs", body = TagJobs)))]
pub(super) async fn jobs(
    State(state): State<AppState>,
    Segment(tag): Segment,
    q: Result<Query<TagJobsQuery>, QueryRejection>,
) -> ApiResult<Json<TagJobs>> {
    let Query(q) =
        q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))?;
    let (jobs, cursor) = state
        .queue
        .tag_jobs(&tag, q.cursor.as_deref(), q.limit)
        .await?;
    Ok(Json(TagJobs {
        tag,
        jobs: jobs.into_iter().map(Into::into).collect(),
        cursor,
    }))
}

/// Cancel a page of a tag's jobs (reserved ones are reported, not changed)
#[utoipa::path(post, path = "/v1/tags/{tag}/cancel", operation_id = "cancelTagJobs",
    params(super::TagName), request_body(content = Option<TagCancelSpec>, description = "No body: the first page of 500"),
    responses((status = 200, description = "What was cancelled and left alone", body = TagChanged)))]
pub(super) async fn cancel(
    State(state): State<AppState>,
    Segment(tag): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<TagChanged>> {
    let spec: TagCancelSpec = match &body {
        Ok(b) if b.is_empty() => TagCancelSpec::default(),
        _ => parse(&state, body)?,
    };
    let changed = state
        .queue
        .cancel_tag(&tag, spec.cursor.as_deref(), spec.limit.unwrap_or(TAG_PAGE))
        .await?;
    Ok(Json(changed.into()))
}

/// Move a page of a tag's delayed and ready jobs to a new due time
#[utoipa::path(post, path = "/v1/tags/{tag}/reschedule", operation_id = "rescheduleTagJobs",
    params(super::TagName), request_body = TagRescheduleSpec,
    responses((status = 200, description = "What was moved and left alone", body = TagChanged)))]
pub(super) async fn reschedule(
    State(state): State<AppState>,
    Segment(tag): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<TagChanged>> {
    let spec: TagRescheduleSpec = parse(&state, body)?;
    let to = match (spec.shift_ms, &spec.due_at) {
        (Some(ms), None) => TagMove::Shift(ms),
        (None, Some(at)) => TagMove::At(due_ms(at)?),
        _ => return Err(ApiError::invalid("give shift_ms or due_at, one of them")),
    };
    let changed = state
        .queue
        .reschedule_tag(
            &tag,
            to,
            spec.cursor.as_deref(),
            spec.limit.unwrap_or(TAG_PAGE),
        )
        .await?;
    Ok(Json(changed.into()))
}
