//! `/v1/topics/{topic}/groups`: a topic's groups listed a page at a time;
//! one group's figures, its concurrency limit and its pause.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;

use super::{parse, ApiError, ApiResult, Segment};
use crate::http::AppState;
use crate::wire::{GroupBody, GroupPageBody, GroupSpec, GroupsQuery};
use crate::GroupChange;

/// The topic and group of a route, percent-decoded.
pub(super) struct TopicGroup(String, String);

impl<S: Send + Sync> FromRequestParts<S> for TopicGroup {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map(|Path((t, g))| TopicGroup(t, g))
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("bad path {}: {}", parts.uri.path(), e.body_text()),
                )
            })
    }
}

/// A page of a topic's groups
#[utoipa::path(get, tag = "schedules", path = "/v1/topics/{topic}/groups", operation_id = "listGroups",
    params(super::TopicName, GroupsQuery),
    responses((status = 200, description = "The groups with ready or reserved jobs or settings, by key", body = GroupPageBody)))]
pub(super) async fn list(
    State(state): State<AppState>,
    Segment(topic): Segment,
    q: Result<Query<GroupsQuery>, QueryRejection>,
) -> ApiResult<Json<GroupPageBody>> {
    let Query(q) =
        q.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))?;
    let page = state
        .queue
        .groups(&topic, q.after.as_deref().unwrap_or(""), q.limit)
        .await?;
    Ok(Json(page.into()))
}

/// A group's figures and settings
#[utoipa::path(get, tag = "schedules", path = "/v1/topics/{topic}/groups/{group}", operation_id = "getGroup",
    params(super::GroupPath),
    responses((status = 200, description = "The group (all zero for a group never seen)", body = GroupBody)))]
pub(super) async fn get_one(
    State(state): State<AppState>,
    TopicGroup(topic, group): TopicGroup,
) -> ApiResult<Json<GroupBody>> {
    Ok(Json(state.queue.group(&topic, &group).await?.into()))
}

/// Change a group's concurrency limit, pause or rate (those named)
#[utoipa::path(put, tag = "schedules", path = "/v1/topics/{topic}/groups/{group}", operation_id = "setGroup",
    params(super::GroupPath), request_body = GroupSpec,
    responses((status = 200, description = "The group after", body = GroupBody)))]
pub(super) async fn put(
    State(state): State<AppState>,
    TopicGroup(topic, group): TopicGroup,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<GroupBody>> {
    let spec: GroupSpec = parse(&state, body)?;
    let change = GroupChange {
        concurrency: spec.concurrency,
        paused: spec.paused,
        rate: spec.rate.map(|r| {
            r.map(|r| crate::RateLimit {
                per_second: r.per_second,
                burst: r
                    .burst
                    .unwrap_or_else(|| r.per_second.ceil().max(1.0) as u32),
            })
        }),
    };
    Ok(Json(
        state
            .queue
            .change_group(&topic, &group, change)
            .await?
            .into(),
    ))
}

/// Stop handing out a group's jobs
#[utoipa::path(post, tag = "schedules", path = "/v1/topics/{topic}/groups/{group}/pause", operation_id = "pauseGroup",
    params(super::GroupPath),
    responses((status = 200, description = "The group after", body = GroupBody)))]
pub(super) async fn pause(
    State(state): State<AppState>,
    TopicGroup(topic, group): TopicGroup,
) -> ApiResult<Json<GroupBody>> {
    Ok(Json(state.queue.pause_group(&topic, &group).await?.into()))
}

/// Hand out a paused group's jobs again
#[utoipa::path(post, tag = "schedules", path = "/v1/topics/{topic}/groups/{group}/resume", operation_id = "resumeGroup",
    params(super::GroupPath),
    responses((status = 200, description = "The group after", body = GroupBody)))]
pub(super) async fn resume(
    State(state): State<AppState>,
    TopicGroup(topic, group): TopicGroup,
) -> ApiResult<Json<GroupBody>> {
    Ok(Json(state.queue.resume_group(&topic, &group).await?.into()))
}
