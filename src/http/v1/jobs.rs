//! `/v1/jobs`: push (one or a batch), read, delete and reschedule. The
//! lease holder's finish, release, nack and touch are in [`super::lease`].

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{parse, ApiError, ApiResult, Segment};
use crate::error::Error;
use crate::http::AppState;
use crate::job::{Dedup, DedupMode, IfExists, NewJob, PushOutcome, Pushed};
use crate::retry::RetryPolicy;
use crate::wire::{
    self, BatchReply, BatchResult, BatchSpec, Cancelled, DedupModeSpec, DueAt, ErrorReply,
    IfExistsSpec, Interval, JobSpec, Outcome, PushedBody, RescheduleSpec, Rescheduled, RetrySpec,
};

/// A due time as Unix ms, checked against the documented limits.
pub(super) fn due_ms(due: &DueAt) -> ApiResult<i64> {
    let ms = due.to_ms("due_at").map_err(ApiError::invalid)?;
    crate::job::check_due_at(ms).map_err(ApiError::invalid)?;
    Ok(ms)
}

/// A retry policy from the API's form, checked.
pub(super) fn retry_policy(spec: &RetrySpec) -> ApiResult<RetryPolicy> {
    let intervals = spec
        .intervals
        .iter()
        .map(|i| match i {
            Interval::Ms(ms) => Ok(Duration::from_millis(*ms)),
            Interval::Text(t) => crate::duration::parse_duration(t),
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::invalid)?;
    let p = RetryPolicy {
        intervals,
        max_attempts: spec.max_attempts,
    };
    p.check().map_err(ApiError::invalid)?;
    Ok(p)
}

/// W3C trace context headers of a push (for the OpenAPI document).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub(super) struct TraceHeaders {
    /// W3C traceparent, kept with the job(s) and handed on; an invalid one
    /// is ignored (W3C). A job's own `traceparent` field overrides it.
    traceparent: Option<String>,
    /// W3C tracestate (at most 512 bytes), with `traceparent`.
    tracestate: Option<String>,
}

/// A request's trace context headers (see [`crate::trace::from_headers`]).
pub(super) type HeaderTrace = Option<(String, Option<String>)>;

/// A job's trace context: its own fields (checked: 400 naming the field),
/// else the request's headers (already checked; invalid ones were
/// ignored, as W3C asks).
fn job_trace(spec: &JobSpec, header: &HeaderTrace) -> ApiResult<(Option<String>, Option<String>)> {
    match (&spec.traceparent, &spec.tracestate) {
        (None, None) => Ok(header
            .clone()
            .map_or((None, None), |(tp, ts)| (Some(tp), ts))),
        (None, Some(_)) => Err(ApiError::invalid(
            "tracestate needs a traceparent in the same job",
        )),
        (Some(tp), ts) => {
            let tp = crate::trace::check_traceparent(tp).map_err(ApiError::invalid)?;
            if let Some(ts) = ts {
                crate::trace::check_tracestate(ts).map_err(ApiError::invalid)?;
            }
            Ok((Some(tp), ts.clone()))
        }
    }
}

/// `job` joining batch `into` (if given): a job naming another is refused.
fn joined(mut job: NewJob, into: Option<&str>) -> ApiResult<NewJob> {
    let Some(b) = into else { return Ok(job) };
    match &job.batch {
        Some(named) if named != b => Err(ApiError::invalid(format!(
            "job names batch {named:?}, pushed into batch {b:?}"
        ))),
        _ => {
            job.batch = Some(b.to_owned());
            Ok(job)
        }
    }
}

pub(super) fn new_job(spec: &JobSpec, header: &HeaderTrace) -> ApiResult<NewJob> {
    if spec.delay_ms.is_some() && spec.due_at.is_some() {
        return Err(ApiError::invalid("give delay_ms or due_at, not both"));
    }
    let dedup = spec.dedup.as_ref().map(|d| Dedup {
        key: d.key.clone(),
        mode: match d.mode {
            DedupModeSpec::Simple => DedupMode::Simple,
            DedupModeSpec::Throttle => DedupMode::Throttle,
            DedupModeSpec::Debounce => DedupMode::Debounce,
        },
        window: d.window_ms.map(Duration::from_millis),
        max_wait: d.max_wait_ms.map(Duration::from_millis),
    });
    let (traceparent, tracestate) = job_trace(spec, header)?;
    Ok(NewJob {
        traceparent,
        tracestate,
        // With dedup or a group and no id, the queue picks one in the key's
        // or the group's partition.
        id: match &spec.id {
            Some(id) => id.clone(),
            None if dedup.is_some() || spec.group.is_some() => String::new(),
            None => uuid::Uuid::new_v4().to_string(),
        },
        topic: spec.topic.clone(),
        body: spec.body.clone(),
        delay: Duration::from_millis(spec.delay_ms.unwrap_or(0)),
        due_at_ms: spec.due_at.as_ref().map(due_ms).transpose()?,
        ttr: spec
            .ttr_ms
            .map_or(crate::defaults::TTR, Duration::from_millis),
        retry: spec.retry.as_ref().map(retry_policy).transpose()?,
        if_exists: match spec.if_exists {
            IfExistsSpec::Replace => IfExists::Replace,
            IfExistsSpec::Keep => IfExists::Keep,
        },
        dedup,
        priority: spec
            .priority
            .map(crate::job::check_priority)
            .transpose()
            .map_err(ApiError::invalid)?
            .unwrap_or(0),
        tags: spec.tags.clone(),
        group: spec.group.clone(),
        batch: spec.batch.clone(),
    })
}

/// A push's result as the API reports it: 201 created, 200 replaced, 409
/// when the id exists and `if_exists` is keep (or it is a member of the
/// push's batch, pending). Deduplicated and debounced
/// are 200 with the key's job id: what a dedup push asks for happened, and
/// the caller learns which job stands for it (a 409 names the caller's own
/// id, which a dedup push need not have).
fn pushed(job: &NewJob, pushed: Pushed) -> ApiResult<(StatusCode, PushedBody)> {
    let (status, outcome) = match pushed.outcome {
        PushOutcome::Created => (StatusCode::CREATED, Outcome::Created),
        PushOutcome::Replaced => (StatusCode::OK, Outcome::Replaced),
        PushOutcome::Deduplicated => (StatusCode::OK, Outcome::Deduplicated),
        PushOutcome::Debounced => (StatusCode::OK, Outcome::Debounced),
        PushOutcome::Kept => {
            // A job of a batch is pushed with keep whatever if_exists says,
            // and only a member still pending comes back kept.
            let why = match &job.batch {
                Some(batch) => format!(
                    "job {:?} is already in batch {batch:?}, pending (due at {} ms); nothing changed",
                    job.id, pushed.due_ms
                ),
                None => format!(
                    "job {:?} exists (due at {} ms) and if_exists is keep; nothing changed",
                    job.id, pushed.due_ms
                ),
            };
            return Err(ApiError::new(StatusCode::CONFLICT, "exists", why));
        }
    };
    Ok((
        status,
        PushedBody {
            id: pushed.id,
            due_at_ms: pushed.due_ms,
            outcome,
        },
    ))
}

/// Push a job
#[utoipa::path(post, path = "/v1/jobs", operation_id = "pushJob", request_body = JobSpec,
    params(TraceHeaders),
    responses(
        (status = 201, description = "Created", body = PushedBody),
        (status = 200, description = "Replaced an existing job with the same id, or deduplicated or debounced by the dedup key (id: the key's job)", body = PushedBody),
        (status = 409, description = "The id exists and if_exists is keep, or is already in the job's batch, pending (exists)", body = ErrorReply),
    ))]
pub(super) async fn push_one(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let spec: JobSpec = parse(&state, body)?;
    let job = new_job(&spec, &crate::trace::from_headers(&headers))?;
    let done = state.queue.push(&job).await?;
    let (status, view) = pushed(&job, done)?;
    Ok((status, Json(view)).into_response())
}

/// Push several jobs in one round trip
///
/// Valid jobs are pushed (each atomic on its own); invalid ones are
/// reported at their index. None is half-written.
#[utoipa::path(post, path = "/v1/jobs/batch", operation_id = "pushJobs", request_body = BatchSpec,
    params(TraceHeaders),
    responses((status = 200, description = "One result per job, in order", body = BatchReply)))]
pub(super) async fn push_batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<BatchReply>> {
    let batch: BatchSpec = parse(&state, body)?;
    let header = crate::trace::from_headers(&headers);
    push_jobs(&state, batch.jobs, &header, None).await.map(Json)
}

/// Pushes raw jobs (each read on its own), with `into`: into that batch
/// (a job naming another is refused at its index). One result per job.
pub(super) async fn push_jobs(
    state: &AppState,
    raw: Vec<serde_json::Value>,
    header: &HeaderTrace,
    into: Option<&str>,
) -> ApiResult<BatchReply> {
    state
        .queue
        .limits()
        .check_batch(raw.len())
        .map_err(ApiError::invalid)?;
    let specs: Vec<ApiResult<NewJob>> = raw
        .into_iter()
        .map(|raw| {
            serde_json::from_value::<JobSpec>(raw)
                .map_err(|e| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "bad_request",
                        format!("invalid job: {e}"),
                    )
                })
                .and_then(|spec| new_job(&spec, header))
                .and_then(|job| joined(job, into))
        })
        .collect();
    let jobs: Vec<NewJob> = specs
        .iter()
        .filter_map(|s| s.as_ref().ok().cloned())
        .collect();
    let mut done = state.queue.push_many(&jobs).await?.into_iter();
    let mut jobs = jobs.iter();
    let results: Vec<BatchResult> = specs
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let result = match spec {
                Err(e) => Err(ApiError::new(e.status, e.code, e.message.clone())),
                Ok(_) => {
                    let job = jobs.next().expect("one pushed result per valid job");
                    let r = done.next().expect("one pushed result per valid job");
                    r.map_err(ApiError::from).and_then(|p| pushed(job, p))
                }
            };
            match result {
                Ok((status, v)) => BatchResult {
                    index,
                    status: status.as_u16(),
                    id: Some(v.id),
                    due_at_ms: Some(v.due_at_ms),
                    outcome: Some(v.outcome),
                    error: None,
                },
                Err(e) => BatchResult {
                    index,
                    status: e.status.as_u16(),
                    id: None,
                    due_at_ms: None,
                    outcome: None,
                    error: Some(e.body()),
                },
            }
        })
        .collect();
    let accepted = results.iter().filter(|r| r.error.is_none()).count();
    Ok(BatchReply {
        accepted,
        rejected: results.len() - accepted,
        results,
    })
}

pub(super) fn not_found(id: &str) -> ApiError {
    Error::NotFound(id.to_owned()).into()
}

/// Show a job, or wait for its outcome
///
/// With `wait_ms`, the reply waits until the job is finished (its record,
/// with its result), dead or gone, or until the wait runs out (the job as
/// it stands then). One instance reads every job its waiters wait on once
/// per 100 ms, whatever their number.
#[utoipa::path(get, path = "/v1/jobs/{id}", operation_id = "getJob",
    params(super::JobId, wire::JobQuery),
    responses(
        (status = 200, description = "The job", body = wire::JobBody),
        (status = 400, description = "A wait_ms that is no number or over 60000 (bad_request)", body = ErrorReply),
        (status = 404, description = "No such job (not_found)", body = ErrorReply),
    ))]
pub(super) async fn get_job(
    State(state): State<AppState>,
    Segment(id): Segment,
    q: Result<Query<wire::JobQuery>, QueryRejection>,
) -> ApiResult<Json<wire::JobBody>> {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m);
    let Query(q) = q.map_err(|e| bad(e.body_text()))?;
    let wait = Duration::from_millis(q.wait_ms.unwrap_or(0));
    if wait > crate::defaults::MAX_OUTCOME_WAIT {
        return Err(bad(format!(
            "wait_ms {} is too long: at most {}",
            wait.as_millis(),
            crate::defaults::MAX_OUTCOME_WAIT.as_millis()
        )));
    }
    let job = (state.queue.wait_outcome(&id, wait).await?).ok_or_else(|| not_found(&id))?;
    // Bounded: at most 100 lines of 1 KiB.
    let logs = state.queue.logs(&id).await?;
    let mut body: wire::JobBody = job.into();
    body.logs = Some(logs.into_iter().map(Into::into).collect());
    Ok(Json(body))
}

/// Delete a job from any state
#[utoipa::path(delete, path = "/v1/jobs/{id}", operation_id = "deleteJob", params(super::JobId),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such job (not_found)", body = ErrorReply),
    ))]
pub(super) async fn delete_job(
    State(state): State<AppState>,
    Segment(id): Segment,
) -> ApiResult<StatusCode> {
    if state.queue.delete(&id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&id))
    }
}

/// Cancel a job, whatever its state: it is gone and never handed out
/// again; a running job's holder hears `cancelled` (409) at its next
/// touch, nack or finish, which change nothing
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", operation_id = "cancelJob",
    params(super::JobId),
    responses(
        (status = 200, description = "Cancelled; `was` is the state it was in", body = Cancelled),
        (status = 404, description = "No such job (not_found)", body = ErrorReply),
    ))]
pub(super) async fn cancel(
    State(state): State<AppState>,
    Segment(id): Segment,
) -> ApiResult<Json<Cancelled>> {
    match state.queue.cancel(&id).await? {
        Some(was) => Ok(Json(Cancelled { id, was })),
        None => Err(not_found(&id)),
    }
}

/// Give a job a new due time (and optionally a new body)
#[utoipa::path(post, path = "/v1/jobs/{id}/reschedule", operation_id = "rescheduleJob",
    params(super::JobId), request_body = RescheduleSpec,
    responses(
        (status = 200, description = "The new due time", body = Rescheduled),
        (status = 404, description = "No such job (not_found)", body = ErrorReply),
    ))]
pub(super) async fn reschedule(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Rescheduled>> {
    let spec: RescheduleSpec = parse(&state, body)?;
    if spec.delay_ms.is_some() && spec.due_at.is_some() {
        return Err(ApiError::invalid("give delay_ms or due_at, not both"));
    }
    let due_at = spec.due_at.as_ref().map(due_ms).transpose()?;
    let delay = Duration::from_millis(spec.delay_ms.unwrap_or(0));
    let due = state
        .queue
        .reschedule(&id, delay, due_at, spec.body.as_deref())
        .await?;
    Ok(Json(Rescheduled { id, due_at_ms: due }))
}

impl From<crate::job::Job> for wire::JobBody {
    fn from(j: crate::job::Job) -> Self {
        wire::JobBody {
            state: j.state,
            due_at_ms: j.due_ms,
            ttr_ms: j.ttr.as_millis() as u64,
            attempts: j.attempts,
            retry: (&j.retry).into(),
            lease_until_ms: j.lease_until_ms,
            dead_at_ms: j.dead_at_ms,
            finished_at_ms: j.finished_at_ms,
            cancelled_at_ms: j.cancelled_at_ms,
            last_error: j.last_error,
            traceparent: j.traceparent,
            tracestate: j.tracestate,
            history: j
                .history
                .into_iter()
                .map(|h| wire::Attempt {
                    attempt: h.attempt,
                    at_ms: h.at_ms,
                    error: h.error,
                })
                .collect(),
            id: j.id,
            topic: j.topic,
            body: j.body,
            priority: (j.priority > 0).then_some(j.priority),
            tags: j.tags,
            group: j.group,
            flow: (j.batch.as_deref())
                .and_then(|b| b.strip_prefix(crate::flow::FLOW_MARK))
                .map(str::to_owned),
            batch: j.batch.filter(|b| !b.starts_with(crate::flow::FLOW_MARK)),
            progress: j.progress,
            result: j.result,
            children: j.children.map(wire::children_body),
            logs: None,
            body_left_out: j.body_left_out,
        }
    }
}

impl From<&RetryPolicy> for wire::Retry {
    fn from(p: &RetryPolicy) -> Self {
        wire::Retry {
            intervals_ms: p.intervals.iter().map(|d| d.as_millis() as u64).collect(),
            max_attempts: p.max_attempts,
        }
    }
}
