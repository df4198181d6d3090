//! `/v1/topics`: counts per topic, and each topic's dead letters (list,
//! requeue, purge).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::jobs::JobView;
use super::{parse, ApiError, ApiResult, Segment};
use crate::http::AppState;
use crate::store::TopicCounts;

#[derive(Serialize)]
pub(super) struct TopicsView {
    topics: BTreeMap<String, TopicCounts>,
    rates: BTreeMap<String, crate::store::rate::RateLimit>,
    next_due_ms: Option<i64>,
    /// Clients' pops waiting (delayq's own webhook deliveries apart).
    waiting_pops: usize,
    webhook_pops: usize,
    /// Topics delivered by webhook -> the URL's host.
    webhooks: BTreeMap<String, String>,
    /// Partitions whose master did not answer (left out of the counts).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unavailable_partitions: Vec<usize>,
}

pub(super) async fn topics(State(state): State<AppState>) -> ApiResult<Json<TopicsView>> {
    let (q, hooks) = (&state.queue, &state.server.webhooks);
    let mut o = q.topics().await?;
    // Topics configured here are known with no jobs too.
    for t in hooks.keys().chain(q.config().topic_retry.keys()) {
        o.topics.entry(t.clone()).or_default();
    }
    let webhook_pops = q.waiting_webhook_pops();
    Ok(Json(TopicsView {
        rates: q.rates().await?,
        topics: o.topics,
        next_due_ms: o.next_due_ms,
        waiting_pops: q.waiting_pops().saturating_sub(webhook_pops),
        webhook_pops,
        webhooks: hooks.clone(),
        unavailable_partitions: o.unavailable_partitions,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Page {
    #[serde(default)]
    offset: usize,
    #[serde(default = "fifty")]
    limit: usize,
}

fn fifty() -> usize {
    50
}

pub(super) async fn dead_list(
    State(state): State<AppState>,
    Segment(topic): Segment,
    page: Result<Query<Page>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let Query(page) =
        page.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))?;
    if !(1..=1000).contains(&page.limit) {
        return Err(ApiError::invalid(format!(
            "limit {} is out of range 1 to 1000",
            page.limit
        )));
    }
    let jobs = state.queue.dead(&topic, page.offset, page.limit).await?;
    let jobs: Vec<JobView> = jobs.into_iter().map(Into::into).collect();
    Ok(Json(
        json!({"topic": topic, "offset": page.offset, "jobs": jobs}),
    ))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RequeueSpec {
    /// Ids to requeue; absent or empty = all dead jobs of the topic.
    #[serde(default)]
    ids: Vec<String>,
}

pub(super) async fn dead_requeue(
    State(state): State<AppState>,
    Segment(topic): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let spec: RequeueSpec = match &body {
        Ok(b) if b.is_empty() => RequeueSpec::default(),
        _ => parse(&state, body)?,
    };
    let n = state.queue.requeue_dead(&topic, &spec.ids).await?;
    Ok(Json(json!({"topic": topic, "requeued": n})))
}

pub(super) async fn dead_purge(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<Json<serde_json::Value>> {
    let n = state.queue.purge_dead(&topic).await?;
    Ok(Json(json!({"topic": topic, "purged": n})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Listing {
    state: Option<String>,
    cursor: Option<String>,
    #[serde(default = "fifty")]
    limit: usize,
}

fn query<T>(q: Result<Query<T>, axum::extract::rejection::QueryRejection>) -> ApiResult<T> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))
}

/// `GET /v1/topics/{topic}/jobs?state=delayed|ready|reserved|dead`: a page.
pub(super) async fn jobs(
    State(state): State<AppState>,
    Segment(topic): Segment,
    q: Result<Query<Listing>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let q = query(q)?;
    let name = q.state.as_deref().unwrap_or("delayed");
    let job_state = crate::JobState::parse(name).ok_or_else(|| {
        ApiError::invalid(format!(
            "state {name:?} is not one of delayed, ready, reserved, dead"
        ))
    })?;
    let (jobs, next) = state
        .queue
        .list_jobs(&topic, job_state, q.cursor.as_deref(), q.limit)
        .await?;
    let jobs: Vec<JobView> = jobs.into_iter().map(Into::into).collect();
    Ok(Json(
        json!({"topic": topic, "state": name, "jobs": jobs, "next_cursor": next}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Upcoming {
    cursor: Option<String>,
    #[serde(default = "fifty")]
    limit: usize,
}

/// `GET /v1/schedule`: what falls due next, every topic.
pub(super) async fn schedule(
    State(state): State<AppState>,
    q: Result<Query<Upcoming>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let q = query(q)?;
    let (jobs, next) = state.queue.upcoming(q.cursor.as_deref(), q.limit).await?;
    let jobs: Vec<JobView> = jobs.into_iter().map(Into::into).collect();
    Ok(Json(json!({"jobs": jobs, "next_cursor": next})))
}

pub(super) async fn pause(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<Json<serde_json::Value>> {
    state.queue.pause(&topic).await?;
    Ok(Json(json!({"topic": topic, "paused": true})))
}

pub(super) async fn resume(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<Json<serde_json::Value>> {
    state.queue.resume(&topic).await?;
    Ok(Json(json!({"topic": topic, "paused": false})))
}
