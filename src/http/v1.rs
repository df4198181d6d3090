//! The native API under `/v1`: JSON in and out, proper status codes, and
//! errors as `{"error":{"code":"...","message":"..."}}`.
//!
//! | status | when |
//! |---|---|
//! | 200 / 201 / 204 | done / job created / done, nothing to say |
//! | 400 | the body is not JSON of the expected shape (`bad_request`) |
//! | 404 | no such job (`not_found`) or route (`no_route`) |
//! | 405 | the route exists, the method does not (`method_not_allowed`) |
//! | 409 | stale lease token (`stale_lease`), or the id exists and `if_exists` is `keep` (`exists`) |
//! | 413 | request body over the limit (`too_large`) |
//! | 422 | a value breaks a documented limit (`invalid`) |
//! | 503 | Redis unreachable or too slow (`unavailable`) |
//!
//! Every route is listed in [`ROUTES`], which the OpenAPI document
//! (`/v1/openapi.json`) is checked against by the tests.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::AppState;
use crate::error::Error;
use crate::job::{Delivery, IfExists, Job, NewJob, PushOutcome, Pushed};
use crate::retry::RetryPolicy;
use crate::store::TopicCounts;

/// Every native route: (method, path). The OpenAPI document lists exactly
/// these.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/jobs"),
    ("post", "/v1/jobs/batch"),
    ("get", "/v1/jobs/{id}"),
    ("delete", "/v1/jobs/{id}"),
    ("post", "/v1/jobs/{id}/reschedule"),
    ("post", "/v1/jobs/{id}/finish"),
    ("post", "/v1/jobs/{id}/nack"),
    ("post", "/v1/jobs/{id}/touch"),
    ("post", "/v1/pop"),
    ("get", "/v1/topics"),
    ("get", "/v1/topics/{topic}/dead"),
    ("post", "/v1/topics/{topic}/dead/requeue"),
    ("delete", "/v1/topics/{topic}/dead"),
    ("get", "/v1/openapi.json"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
];

/// The OpenAPI 3.1 description of the native API.
pub const OPENAPI: &str = include_str!("openapi.json");

/// Most jobs in one batch push.
pub const MAX_BATCH: usize = 1000;
/// Most jobs one pop may return.
pub const MAX_POP: usize = 100;
/// Longest long-poll a pop may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/jobs", post(push_one))
        .route("/v1/jobs/batch", post(push_batch))
        .route("/v1/jobs/{id}", get(get_job).delete(delete_job))
        .route("/v1/jobs/{id}/reschedule", post(reschedule))
        .route("/v1/jobs/{id}/finish", post(finish))
        .route("/v1/jobs/{id}/nack", post(nack))
        .route("/v1/jobs/{id}/touch", post(touch))
        .route("/v1/pop", post(pop))
        .route("/v1/topics", get(topics))
        .route("/v1/topics/{topic}/dead", get(dead_list).delete(dead_purge))
        .route("/v1/topics/{topic}/dead/requeue", post(dead_requeue))
        .route("/v1/openapi.json", get(openapi))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
}

/// An error reply of the native API.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", message)
    }
    fn body(&self) -> serde_json::Value {
        json!({"code": self.code, "message": self.message})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.body() }))).into_response()
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        match e {
            Error::Invalid(m) => ApiError::invalid(m),
            Error::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "not_found", e.to_string()),
            Error::StaleLease(_) => {
                ApiError::new(StatusCode::CONFLICT, "stale_lease", e.to_string())
            }
            Error::Full => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "redis_full", e.to_string())
            }
            Error::Evicting(_) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "redis_evicts",
                e.to_string(),
            ),
            Error::Timeout { .. } | Error::Late { .. } | Error::Redis { .. } => {
                tracing::warn!(error = %e, "redis unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    e.to_string(),
                )
            }
            Error::Protocol { .. } => {
                tracing::error!(error = %e, "unexpected reply");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            }
        }
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// Parses a JSON body strictly (unknown fields are errors: a typo in a
/// field name must not silently change what a job does).
fn parse<T: DeserializeOwned>(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<T> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "request body is larger than the limit of {} bytes",
                    state.server.max_request_bytes
                ),
            )
        } else {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("cannot read the request body: {e}"),
            )
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("invalid JSON: {e}"),
        )
    })
}

/// The one path parameter of a route (a job id or a topic), percent-decoded.
/// A path that is not UTF-8 once decoded gets a JSON 400 like every other
/// bad request.
pub struct Segment(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Segment {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(s)| Segment(s))
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("bad path {}: {}", parts.uri.path(), e.body_text()),
                )
            })
    }
}

/// Parses an RFC 3339 time (`2026-11-22T18:00:00Z`, `...+01:00`, fractions
/// of a second allowed) to Unix milliseconds.
pub fn parse_rfc3339_ms(s: &str) -> Result<i64, String> {
    let bad = |why: &str| format!("{s:?} is not an RFC 3339 time: {why}");
    // humantime reads UTC ("Z"); an offset is applied here.
    let (utc, offset_ms) = match s
        .len()
        .checked_sub(6)
        .and_then(|i| s.get(i..).map(|o| (i, o)))
    {
        Some((i, o)) if matches!(o.as_bytes()[0], b'+' | b'-') && o.as_bytes()[3] == b':' => {
            let h: i64 = o[1..3].parse().map_err(|_| bad("bad offset hours"))?;
            let m: i64 = o[4..6].parse().map_err(|_| bad("bad offset minutes"))?;
            if h > 23 || m > 59 {
                return Err(bad("offset out of range"));
            }
            let sign = if o.starts_with('-') { -1 } else { 1 };
            (format!("{}Z", &s[..i]), sign * (h * 60 + m) * 60_000)
        }
        _ => (s.replace(['z'], "Z"), 0),
    };
    let t = humantime::parse_rfc3339_weak(&utc).map_err(|e| bad(&e.to_string()))?;
    let ms = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).map_err(|_| bad("too far"))?,
        Err(e) => -i64::try_from(e.duration().as_millis()).map_err(|_| bad("too far"))?,
    };
    Ok(ms - offset_ms)
}

/// A due time: Unix milliseconds or an RFC 3339 timestamp.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum DueAt {
    UnixMs(i64),
    Rfc3339(String),
}

impl DueAt {
    fn to_ms(&self) -> ApiResult<i64> {
        match self {
            DueAt::UnixMs(ms) if *ms >= 0 => Ok(*ms),
            DueAt::UnixMs(ms) => Err(ApiError::invalid(format!("due_at {ms} is before 1970"))),
            DueAt::Rfc3339(s) => {
                let ms = parse_rfc3339_ms(s).map_err(ApiError::invalid)?;
                crate::job::check_due_at(ms).map_err(ApiError::invalid)?;
                Ok(ms)
            }
        }
    }
}

/// A retry interval: milliseconds, or a human duration ("2m").
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum Interval {
    Ms(u64),
    Text(String),
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RetrySpec {
    #[serde(default)]
    intervals: Vec<Interval>,
    max_attempts: Option<u32>,
}

impl RetrySpec {
    fn to_policy(&self) -> ApiResult<RetryPolicy> {
        let intervals = self
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
            max_attempts: self.max_attempts,
        };
        p.check().map_err(ApiError::invalid)?;
        Ok(p)
    }
}

#[derive(Deserialize, Debug, Clone, Copy, Default)]
#[serde(rename_all = "lowercase")]
enum IfExistsSpec {
    #[default]
    Replace,
    Keep,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct JobSpec {
    /// Generated (a UUID) when absent.
    id: Option<String>,
    topic: String,
    #[serde(default)]
    body: String,
    delay_ms: Option<u64>,
    due_at: Option<DueAt>,
    ttr_ms: Option<u64>,
    retry: Option<RetrySpec>,
    #[serde(default)]
    if_exists: IfExistsSpec,
}

const DEFAULT_TTR: Duration = Duration::from_secs(60);

impl JobSpec {
    fn to_job(&self) -> ApiResult<NewJob> {
        if self.delay_ms.is_some() && self.due_at.is_some() {
            return Err(ApiError::invalid("give delay_ms or due_at, not both"));
        }
        Ok(NewJob {
            id: self
                .id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
            topic: self.topic.clone(),
            body: self.body.clone(),
            delay: Duration::from_millis(self.delay_ms.unwrap_or(0)),
            due_at_ms: self.due_at.as_ref().map(DueAt::to_ms).transpose()?,
            ttr: self.ttr_ms.map_or(DEFAULT_TTR, Duration::from_millis),
            retry: self.retry.as_ref().map(RetrySpec::to_policy).transpose()?,
            if_exists: match self.if_exists {
                IfExistsSpec::Replace => IfExists::Replace,
                IfExistsSpec::Keep => IfExists::Keep,
            },
        })
    }
}

#[derive(Serialize)]
struct PushedView {
    id: String,
    due_at_ms: i64,
    /// "created" or "replaced".
    outcome: &'static str,
}

/// A push's result as the API reports it: 201 created, 200 replaced, 409
/// when the id exists and `if_exists` is keep.
fn pushed_view(job: &NewJob, pushed: Pushed) -> ApiResult<(StatusCode, PushedView)> {
    let (status, outcome) = match pushed.outcome {
        PushOutcome::Created => (StatusCode::CREATED, "created"),
        PushOutcome::Replaced => (StatusCode::OK, "replaced"),
        PushOutcome::Kept => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "exists",
                format!(
                    "job {:?} exists (due at {} ms) and if_exists is keep; nothing changed",
                    job.id, pushed.due_ms
                ),
            ))
        }
    };
    Ok((
        status,
        PushedView {
            id: job.id.clone(),
            due_at_ms: pushed.due_ms,
            outcome,
        },
    ))
}

async fn push_one(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let spec: JobSpec = parse(&state, body)?;
    let job = spec.to_job()?;
    let pushed = state.queue.push(&job).await?;
    let (status, view) = pushed_view(&job, pushed)?;
    Ok((status, Json(view)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchSpec {
    jobs: Vec<serde_json::Value>,
}

/// Valid jobs are pushed in one round trip (each still atomic on its own);
/// invalid ones are reported at their index. None is half-written.
async fn push_batch(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let batch: BatchSpec = parse(&state, body)?;
    if batch.jobs.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "{} jobs in one batch; the limit is {MAX_BATCH}",
            batch.jobs.len()
        )));
    }
    let specs: Vec<ApiResult<NewJob>> = batch
        .jobs
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
                .and_then(|spec| spec.to_job())
        })
        .collect();
    let jobs: Vec<NewJob> = specs
        .iter()
        .filter_map(|s| s.as_ref().ok().cloned())
        .collect();
    let mut pushed = state.queue.push_many(&jobs).await?.into_iter();
    let mut jobs = jobs.iter();
    let results: Vec<serde_json::Value> = specs
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let result = match spec {
                Err(e) => Err(ApiError::new(e.status, e.code, e.message.clone())),
                Ok(_) => {
                    let job = jobs.next().expect("one pushed result per valid job");
                    let r = pushed.next().expect("one pushed result per valid job");
                    r.map_err(ApiError::from).and_then(|p| pushed_view(job, p))
                }
            };
            match result {
                Ok((status, v)) => json!({"index": index, "status": status.as_u16(), "id": v.id, "due_at_ms": v.due_at_ms, "outcome": v.outcome}),
                Err(e) => json!({"index": index, "status": e.status.as_u16(), "error": e.body()}),
            }
        })
        .collect();
    let accepted = results.iter().filter(|r| r.get("error").is_none()).count();
    Ok(Json(
        json!({"accepted": accepted, "rejected": results.len() - accepted, "results": results}),
    )
    .into_response())
}

#[derive(Serialize)]
struct AttemptView {
    attempt: u32,
    at_ms: i64,
    error: String,
}

#[derive(Serialize)]
struct JobView {
    id: String,
    topic: String,
    body: String,
    state: &'static str,
    due_at_ms: i64,
    ttr_ms: u64,
    attempts: u32,
    retry: RetryView,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_until_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dead_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    history: Vec<AttemptView>,
}

#[derive(Serialize)]
struct RetryView {
    intervals_ms: Vec<u64>,
    max_attempts: Option<u32>,
}

impl From<Job> for JobView {
    fn from(j: Job) -> Self {
        JobView {
            state: j.state.as_str(),
            due_at_ms: j.due_ms,
            ttr_ms: j.ttr.as_millis() as u64,
            attempts: j.attempts,
            retry: RetryView {
                intervals_ms: j
                    .retry
                    .intervals
                    .iter()
                    .map(|d| d.as_millis() as u64)
                    .collect(),
                max_attempts: j.retry.max_attempts,
            },
            lease_until_ms: j.lease_until_ms,
            dead_at_ms: j.dead_at_ms,
            last_error: j.last_error,
            history: j
                .history
                .into_iter()
                .map(|h| AttemptView {
                    attempt: h.attempt,
                    at_ms: h.at_ms,
                    error: h.error,
                })
                .collect(),
            id: j.id,
            topic: j.topic,
            body: j.body,
        }
    }
}

fn not_found(id: &str) -> ApiError {
    Error::NotFound(id.to_owned()).into()
}

async fn get_job(State(state): State<AppState>, Segment(id): Segment) -> ApiResult<Json<JobView>> {
    let job = state.queue.get(&id).await?.ok_or_else(|| not_found(&id))?;
    Ok(Json(job.into()))
}

async fn delete_job(State(state): State<AppState>, Segment(id): Segment) -> ApiResult<StatusCode> {
    if state.queue.delete(&id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&id))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RescheduleSpec {
    delay_ms: Option<u64>,
    due_at: Option<DueAt>,
    body: Option<String>,
}

async fn reschedule(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let spec: RescheduleSpec = parse(&state, body)?;
    if spec.delay_ms.is_some() && spec.due_at.is_some() {
        return Err(ApiError::invalid("give delay_ms or due_at, not both"));
    }
    let due_at = spec.due_at.as_ref().map(DueAt::to_ms).transpose()?;
    let delay = Duration::from_millis(spec.delay_ms.unwrap_or(0));
    let due = state
        .queue
        .reschedule(&id, delay, due_at, spec.body.as_deref())
        .await?;
    Ok(Json(json!({"id": id, "due_at_ms": due})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenSpec {
    token: String,
}

async fn finish(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let spec: TokenSpec = parse(&state, body)?;
    state.queue.finish(&id, &spec.token).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NackSpec {
    token: String,
    delay_ms: Option<u64>,
    #[serde(default)]
    error: String,
}

async fn nack(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<serde_json::Value>> {
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
    Ok(Json(
        json!({"id": id, "state": n.state.as_str(), "due_at_ms": n.due_ms}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TouchSpec {
    token: String,
    ttr_ms: Option<u64>,
}

async fn touch(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let spec: TouchSpec = parse(&state, body)?;
    let until = state
        .queue
        .touch(&id, &spec.token, spec.ttr_ms.map(Duration::from_millis))
        .await?;
    Ok(Json(json!({"id": id, "lease_until_ms": until})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PopSpec {
    topics: Vec<String>,
    #[serde(default = "one")]
    max: usize,
    #[serde(default)]
    wait_ms: u64,
}

fn one() -> usize {
    1
}

#[derive(Serialize)]
struct DeliveryView {
    id: String,
    topic: String,
    body: String,
    token: String,
    attempts: u32,
    due_at_ms: i64,
    popped_at_ms: i64,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> Self {
        DeliveryView {
            popped_at_ms: d.popped_at_us / 1000,
            id: d.id,
            topic: d.topic,
            body: d.body,
            token: d.token,
            attempts: d.attempts,
            due_at_ms: d.due_ms,
        }
    }
}

async fn pop(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let spec: PopSpec = parse(&state, body)?;
    if !(1..=MAX_POP).contains(&spec.max) {
        return Err(ApiError::invalid(format!(
            "max {} is out of range 1 to {MAX_POP}",
            spec.max
        )));
    }
    let wait = Duration::from_millis(spec.wait_ms);
    if wait > MAX_WAIT {
        return Err(ApiError::invalid(format!(
            "wait_ms {} is over the limit of {}",
            spec.wait_ms,
            MAX_WAIT.as_millis()
        )));
    }
    let jobs = state.queue.pop_many(&spec.topics, spec.max, wait).await?;
    let jobs: Vec<DeliveryView> = jobs.into_iter().map(Into::into).collect();
    Ok(Json(json!({ "jobs": jobs })))
}

#[derive(Serialize)]
struct TopicsView {
    topics: BTreeMap<String, TopicCounts>,
    next_due_ms: Option<i64>,
    waiting_pops: usize,
}

async fn topics(State(state): State<AppState>) -> ApiResult<Json<TopicsView>> {
    let o = state.queue.topics().await?;
    Ok(Json(TopicsView {
        topics: o.topics,
        next_due_ms: o.next_due_ms,
        waiting_pops: state.queue.waiting_pops(),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Page {
    #[serde(default)]
    offset: usize,
    #[serde(default = "fifty")]
    limit: usize,
}

fn fifty() -> usize {
    50
}

async fn dead_list(
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

async fn dead_requeue(
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

async fn dead_purge(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<Json<serde_json::Value>> {
    let n = state.queue.purge_dead(&topic).await?;
    Ok(Json(json!({"topic": topic, "purged": n})))
}

async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
        .into_response()
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Ready to serve: Redis answers, the subscriber is connected, and Redis
/// can take new jobs: not at `maxmemory` (where pushes are refused, though
/// pops and finishes go on) and not set to evict keys that hold jobs.
async fn readyz(State(state): State<AppState>) -> Response {
    let q = &state.queue;
    let (redis, memory) = match q.memory().await {
        Ok(m) if m.evicting() => (true, "evicting"),
        Ok(m) if m.full() => (true, "full"),
        Ok(_) => (true, "ok"),
        // A server that keeps INFO from delayq's user: PING says enough.
        Err(_) => (q.ping().await.is_ok(), "unknown"),
    };
    let subscriber = q.subscriber_connected();
    let status = if redis && subscriber && matches!(memory, "ok" | "unknown") {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(json!({"redis": redis, "subscriber": subscriber, "memory": memory})),
    )
        .into_response()
}

/// Prometheus text format. Queue depths are read from Redis at scrape time
/// (and left out while Redis is away; `delayq_redis_errors_total` says so).
async fn metrics(State(state): State<AppState>) -> Response {
    let q = &state.queue;
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        q.metrics().render(&q.gauges().await),
    )
        .into_response()
}

/// A known path with a method it does not take: a JSON 405.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not take {method}", uri.path()),
    )
}

/// Unknown paths get a JSON 404 that says so (and not "no such job").
pub async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!("no route {}", uri.path()),
    )
}
