//! `/v1/topics`: counts per topic, a topic's jobs, its dead letters (list,
//! requeue, purge), pause and resume; `/v1/schedule`.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::Json;

use super::{parse, ApiError, ApiResult, Segment};
use crate::http::AppState;
use crate::wire::{
    DeadPage, DeadQuery, JobsPage, JobsQuery, Paused, Purged, RequeueSpec, Requeued, Topics,
    TopicsQuery, Upcoming, UpcomingQuery,
};

/// Job counts per topic and state, backlog ages and lateness, a page of
/// topics at a time
#[utoipa::path(get, path = "/v1/topics", operation_id = "listTopics",
    params(TopicsQuery),
    responses((status = 200, description = "A page of topics' counts", body = Topics)))]
pub(super) async fn topics(
    State(state): State<AppState>,
    page: Result<Query<TopicsQuery>, QueryRejection>,
) -> ApiResult<Json<Topics>> {
    let page = query(page)?;
    if !(1..=1000).contains(&page.limit) {
        return Err(ApiError::invalid(format!(
            "limit {} is out of range 1 to 1000",
            page.limit
        )));
    }
    let q = &state.queue;
    let hooks = webhook_hosts(q, &state.server.webhooks).await?;
    let (mut o, next_cursor) = match &page.topic {
        Some(t) => (q.topic_overview(t).await?, None),
        None => q.topics_page(page.cursor.as_deref(), page.limit).await?,
    };
    // Topics configured here are known with no jobs too: on the first
    // page, unless a page lists them with their jobs.
    if page.cursor.is_none() && page.topic.is_none() {
        for t in hooks.keys().chain(q.config().topic_retry.keys()) {
            if !o.topics.contains_key(t) && !q.topic_has_jobs(t).await? {
                o.topics.insert(t.clone(), Default::default());
            }
        }
    }
    let rates = q.rates().await?;
    let lateness_ms = q.topic_stats(&mut o, &rates).await?;
    let webhook_pops = q.waiting_webhook_pops();
    Ok(Json(Topics {
        rates: rates.into_iter().map(|(t, l)| (t, l.into())).collect(),
        topics: o.topics,
        next_due_ms: o.next_due_ms,
        waiting_pops: q.waiting_pops().saturating_sub(webhook_pops),
        webhook_pops,
        webhooks: hooks,
        unavailable_partitions: o.unavailable_partitions,
        lateness_ms,
        next_cursor,
    }))
}

/// The webhook topics of every running instance (their heartbeats), by
/// topic, each with its URL's host as the first instance by id has it:
/// the same whichever instance is asked. This instance's own are added
/// for the moment before its first heartbeat.
async fn webhook_hosts(
    q: &crate::Queue,
    own: &BTreeMap<String, String>,
) -> ApiResult<BTreeMap<String, String>> {
    let mut hosts = BTreeMap::new();
    for i in q.instances().await? {
        for c in i.webhook_consumers {
            hosts
                .entry(c.topic)
                .or_insert_with(|| crate::webhook::host_of(&c.url));
        }
    }
    for (topic, host) in own {
        hosts.entry(topic.clone()).or_insert_with(|| host.clone());
    }
    Ok(hosts)
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> ApiResult<T> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text()))
}

/// List dead jobs, oldest first
#[utoipa::path(get, path = "/v1/topics/{topic}/dead", operation_id = "listDeadJobs",
    params(super::TopicName, DeadQuery),
    responses((status = 200, description = "A page of dead jobs", body = DeadPage)))]
pub(super) async fn dead_list(
    State(state): State<AppState>,
    Segment(topic): Segment,
    page: Result<Query<DeadQuery>, QueryRejection>,
) -> ApiResult<Json<DeadPage>> {
    let page = query(page)?;
    if !(1..=1000).contains(&page.limit) {
        return Err(ApiError::invalid(format!(
            "limit {} is out of range 1 to 1000",
            page.limit
        )));
    }
    let jobs = state.queue.dead(&topic, page.offset, page.limit).await?;
    Ok(Json(DeadPage {
        topic,
        offset: page.offset,
        jobs: jobs.into_iter().map(Into::into).collect(),
    }))
}

/// Requeue dead jobs (the ids given, or all) with fresh attempts
#[utoipa::path(post, path = "/v1/topics/{topic}/dead/requeue", operation_id = "requeueDeadJobs",
    params(super::TopicName), request_body(content = Option<RequeueSpec>, description = "No body: every dead job of the topic"),
    responses((status = 200, description = "How many were requeued", body = Requeued)))]
pub(super) async fn dead_requeue(
    State(state): State<AppState>,
    Segment(topic): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Requeued>> {
    let spec: RequeueSpec = match &body {
        Ok(b) if b.is_empty() => RequeueSpec::default(),
        _ => parse(&state, body)?,
    };
    let requeued = state.queue.requeue_dead(&topic, &spec.ids).await?;
    Ok(Json(Requeued { topic, requeued }))
}

/// Delete every dead job of the topic
#[utoipa::path(delete, path = "/v1/topics/{topic}/dead", operation_id = "purgeDeadJobs",
    params(super::TopicName),
    responses((status = 200, description = "How many were deleted", body = Purged)))]
pub(super) async fn dead_purge(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<Json<Purged>> {
    let purged = state.queue.purge_dead(&topic).await?;
    Ok(Json(Purged { topic, purged }))
}

/// A page of a topic's jobs in one state
#[utoipa::path(get, path = "/v1/topics/{topic}/jobs", operation_id = "listJobs",
    params(super::TopicName, JobsQuery),
    responses((status = 200, description = "A page of jobs", body = JobsPage)))]
pub(super) async fn jobs(
    State(state): State<AppState>,
    Segment(topic): Segment,
    q: Result<Query<JobsQuery>, QueryRejection>,
) -> ApiResult<Json<JobsPage>> {
    let q = query(q)?;
    let job_state = match q.state.as_deref() {
        Some(name) => name.parse().map_err(ApiError::invalid)?,
        None => crate::JobState::Delayed,
    };
    let (jobs, next) = state
        .queue
        .list_jobs(&topic, job_state, q.cursor.as_deref(), q.limit)
        .await?;
    Ok(Json(JobsPage {
        topic,
        state: job_state,
        jobs: jobs.into_iter().map(Into::into).collect(),
        next_cursor: next,
    }))
}

/// What falls due next, every topic
#[utoipa::path(get, path = "/v1/schedule", operation_id = "listUpcoming",
    params(UpcomingQuery),
    responses((status = 200, description = "A page of jobs, soonest first", body = Upcoming)))]
pub(super) async fn schedule(
    State(state): State<AppState>,
    q: Result<Query<UpcomingQuery>, QueryRejection>,
) -> ApiResult<Json<Upcoming>> {
    let q = query(q)?;
    let (jobs, next) = state.queue.upcoming(q.cursor.as_deref(), q.limit).await?;
    Ok(Json(Upcoming {
        jobs: jobs.into_iter().map(Into::into).collect(),
        next_cursor: next,
    }))
}

/// Stop handing out a topic's jobs (they still fall due)
#[utoipa::path(post, path = "/v1/topics/{topic}/pause", operation_id = "pauseTopic",
    params(super::TopicName),
    responses((status = 200, description = "Paused", body = Paused)))]
pub(super) async fn pause(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<Json<Paused>> {
    state.queue.pause(&topic).await?;
    Ok(Json(Paused {
        topic,
        paused: true,
    }))
}

/// Hand out a paused topic's jobs again
#[utoipa::path(post, path = "/v1/topics/{topic}/resume", operation_id = "resumeTopic",
    params(super::TopicName),
    responses((status = 200, description = "Resumed", body = Paused)))]
pub(super) async fn resume(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<Json<Paused>> {
    state.queue.resume(&topic).await?;
    Ok(Json(Paused {
        topic,
        paused: false,
    }))
}
