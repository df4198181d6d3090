//! `/v1/recurring`: recurring schedules.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::jobs::retry_policy;
use super::{parse, ApiError, ApiResult, Segment};
use crate::http::AppState;
use crate::recurring::{Recurring, RecurringState};
use crate::wire::{ErrorReply, RecurringList, RecurringRun, RecurringSpec, RecurringStateBody};

impl From<RecurringState> for RecurringStateBody {
    fn from(s: RecurringState) -> Self {
        let r = s.schedule;
        RecurringStateBody {
            name: s.name,
            retry: r.retry.as_ref().map(Into::into),
            topic: r.topic,
            cron: r.cron,
            timezone: r.timezone,
            body: r.body,
            ttr_ms: r.ttr_ms,
            missed: r.missed,
            last_tick_ms: s.last_tick_ms,
            next_fire_ms: s.next_fire_ms,
            next_runs_ms: s.next_runs_ms,
            paused: s.paused_at_ms.is_some(),
            paused_at_ms: s.paused_at_ms,
        }
    }
}

fn not_found(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no recurring schedule {name:?}"),
    )
}

/// Create or replace a recurring schedule
#[utoipa::path(put, tag = "schedules", path = "/v1/recurring/{name}", operation_id = "putRecurring",
    params(super::ScheduleName), request_body = RecurringSpec,
    responses((status = 200, description = "The schedule with its next fire time", body = RecurringStateBody)))]
pub(super) async fn put(
    State(state): State<AppState>,
    Segment(name): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<RecurringStateBody>> {
    let spec: RecurringSpec = parse(&state, body)?;
    if let Some(t) = &spec.ttr {
        let ms = t
            .as_str()
            .and_then(|t| crate::duration::parse_duration(t).ok());
        let ms = ms.map_or("MILLISECONDS".into(), |d| d.as_millis().to_string());
        return Err(ApiError::invalid(format!(
            "\"ttr\" is the config file's name; over HTTP send \"ttr_ms\": {ms}"
        )));
    }
    let schedule = Recurring {
        topic: spec.topic,
        cron: spec.cron,
        timezone: spec.timezone.unwrap_or_else(|| "UTC".into()),
        body: spec.body,
        ttr_ms: spec
            .ttr_ms
            .unwrap_or(crate::defaults::TTR.as_millis() as u64),
        retry: spec.retry.as_ref().map(retry_policy).transpose()?,
        missed: spec.missed,
    };
    state.queue.put_recurring(&name, &schedule).await?;
    let s = state
        .queue
        .recurring(&name)
        .await?
        .ok_or_else(|| not_found(&name))?;
    Ok(Json(s.into()))
}

/// Show one recurring schedule
#[utoipa::path(get, tag = "schedules", path = "/v1/recurring/{name}", operation_id = "getRecurring",
    params(super::ScheduleName),
    responses(
        (status = 200, description = "The schedule", body = RecurringStateBody),
        (status = 404, description = "No such schedule (not_found)", body = ErrorReply),
    ))]
pub(super) async fn get_one(
    State(state): State<AppState>,
    Segment(name): Segment,
) -> ApiResult<Json<RecurringStateBody>> {
    let s = state
        .queue
        .recurring(&name)
        .await?
        .ok_or_else(|| not_found(&name))?;
    Ok(Json(s.into()))
}

/// List the recurring schedules with their next fire times
#[utoipa::path(get, tag = "schedules", path = "/v1/recurring", operation_id = "listRecurring",
    responses((status = 200, description = "Every schedule", body = RecurringList)))]
pub(super) async fn list(State(state): State<AppState>) -> ApiResult<Json<RecurringList>> {
    let schedules = state
        .queue
        .list_recurring()
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    Ok(Json(RecurringList { schedules }))
}

/// Delete a recurring schedule
#[utoipa::path(delete, tag = "schedules", path = "/v1/recurring/{name}", operation_id = "deleteRecurring",
    params(super::ScheduleName),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such schedule (not_found)", body = ErrorReply),
    ))]
pub(super) async fn delete(
    State(state): State<AppState>,
    Segment(name): Segment,
) -> ApiResult<StatusCode> {
    if state.queue.delete_recurring(&name).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&name))
    }
}

/// Push one job of a recurring schedule now
///
/// As a tick would (its topic, body, time to run and retries), due at
/// once, under an id of its own; the schedule's ticks are unchanged.
#[utoipa::path(post, tag = "schedules", path = "/v1/recurring/{name}/run", operation_id = "runRecurring",
    params(super::ScheduleName),
    responses(
        (status = 201, description = "The job pushed", body = RecurringRun),
        (status = 404, description = "No such schedule (not_found)", body = ErrorReply),
    ))]
pub(super) async fn run(
    State(state): State<AppState>,
    Segment(name): Segment,
) -> ApiResult<(StatusCode, Json<RecurringRun>)> {
    let s = state
        .queue
        .recurring(&name)
        .await?
        .ok_or_else(|| not_found(&name))?;
    let r = state
        .queue
        .run_recurring(&name)
        .await?
        .ok_or_else(|| not_found(&name))?;
    Ok((
        StatusCode::CREATED,
        Json(RecurringRun {
            name,
            id: r.id,
            topic: s.schedule.topic,
            due_ms: r.due_ms,
        }),
    ))
}

/// Pause a recurring schedule
///
/// No ticks until resumed; the job of its next tick is dropped if not yet
/// handed over. The pause is kept in Redis (a restart or a put keeps it).
#[utoipa::path(post, tag = "schedules", path = "/v1/recurring/{name}/pause", operation_id = "pauseRecurring",
    params(super::ScheduleName),
    responses(
        (status = 200, description = "The schedule, paused", body = RecurringStateBody),
        (status = 404, description = "No such schedule (not_found)", body = ErrorReply),
    ))]
pub(super) async fn pause(
    State(state): State<AppState>,
    Segment(name): Segment,
) -> ApiResult<Json<RecurringStateBody>> {
    pause_or_resume(state, name, true).await
}

/// Resume a paused recurring schedule
///
/// Its ticks count from now: those missed while paused do not fire.
#[utoipa::path(post, tag = "schedules", path = "/v1/recurring/{name}/resume", operation_id = "resumeRecurring",
    params(super::ScheduleName),
    responses(
        (status = 200, description = "The schedule, running", body = RecurringStateBody),
        (status = 404, description = "No such schedule (not_found)", body = ErrorReply),
    ))]
pub(super) async fn resume(
    State(state): State<AppState>,
    Segment(name): Segment,
) -> ApiResult<Json<RecurringStateBody>> {
    pause_or_resume(state, name, false).await
}

async fn pause_or_resume(
    state: AppState,
    name: String,
    pause: bool,
) -> ApiResult<Json<RecurringStateBody>> {
    let q = &state.queue;
    let found = if pause {
        q.pause_recurring(&name).await?
    } else {
        q.resume_recurring(&name).await?
    };
    if !found {
        return Err(not_found(&name));
    }
    let s = q.recurring(&name).await?.ok_or_else(|| not_found(&name))?;
    Ok(Json(s.into()))
}
