//! `/v1/jobs`: push (one or a batch), read, delete, reschedule, and the
//! lease holder's finish, nack and touch.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{parse, ApiError, ApiResult, Segment};
use crate::error::Error;
use crate::http::AppState;
use crate::job::{IfExists, Job, NewJob, PushOutcome, Pushed};
use crate::retry::RetryPolicy;

/// Parses an RFC 3339 time (`2026-11-22T18:00:00Z`, `...+01:00`, fractions
/// of a second allowed) to Unix milliseconds.
pub fn parse_rfc3339_ms(s: &str) -> Result<i64, String> {
    let bad = |why: &str| format!("{s:?} is not an RFC 3339 time: {why}");
    match chrono::DateTime::parse_from_rfc3339(s) {
        Ok(t) => Ok(t.timestamp_millis()),
        // RFC 3339 requires a zone; a local time read as UTC fires hours
        // off, so one without a zone is refused with what to add.
        Err(_) if has_no_zone(s) => Err(bad(
            "it has no time zone; end it with Z (UTC) or an offset like +08:00",
        )),
        Err(e) => Err(bad(&e.to_string())),
    }
}

/// A date and time that would be RFC 3339 with a zone at its end.
fn has_no_zone(s: &str) -> bool {
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .any(|f| chrono::NaiveDateTime::parse_from_str(s, f).is_ok())
}

/// Numeric due times below this (Unix ms of March 1973) are refused: they
/// are Unix seconds far more often than a time in 1970-1973 (the Go
/// server's `/get` gives seconds), and read as ms they would fire now.
pub const MIN_NUMERIC_DUE_AT_MS: i64 = 100_000_000_000;

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
            DueAt::UnixMs(ms) if *ms >= MIN_NUMERIC_DUE_AT_MS => {
                crate::job::check_due_at(*ms).map_err(ApiError::invalid)?;
                Ok(*ms)
            }
            DueAt::UnixMs(ms) => Err(ApiError::invalid(numeric_due_at_error("due_at", *ms))),
            DueAt::Rfc3339(s) => {
                let ms = parse_rfc3339_ms(s).map_err(ApiError::invalid)?;
                crate::job::check_due_at(ms).map_err(ApiError::invalid)?;
                Ok(ms)
            }
        }
    }
}

/// Why a number is refused as a due time, with the unit it is read in.
pub fn numeric_due_at_error(field: &str, n: i64) -> String {
    let seconds = if n > 0 {
        format!(" If it is Unix seconds, send {n}000 (milliseconds).")
    } else {
        String::new()
    };
    format!(
        "{field} {n} is read as Unix milliseconds, which would be before 1973 (so due at once); \
         give Unix milliseconds (e.g. 1806224400000) or an RFC 3339 time (e.g. \
         \"2027-03-28T09:00:00Z\").{seconds}"
    )
}

/// A job's body is a string; JSON of another kind is refused with how to
/// send it (encoded into a string), not only "expected a string".
fn body_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error as _;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => Ok(s),
        other => {
            let encoded = serde_json::to_string(&other.to_string()).unwrap_or_default();
            let shown = if encoded.len() > 80 {
                "\"...\"".to_owned()
            } else {
                encoded
            };
            Err(D::Error::custom(format!(
                "body must be a string: to send JSON, encode it into one (\"body\": {shown})"
            )))
        }
    }
}

fn some_body_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    body_text(d).map(Some)
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
pub(super) struct RetrySpec {
    #[serde(default)]
    intervals: Vec<Interval>,
    max_attempts: Option<u32>,
}

impl RetrySpec {
    pub(super) fn to_policy(&self) -> ApiResult<RetryPolicy> {
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
pub(super) enum IfExistsSpec {
    #[default]
    Replace,
    Keep,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct JobSpec {
    /// Generated (a UUID) when absent.
    id: Option<String>,
    topic: String,
    #[serde(default, deserialize_with = "body_text")]
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
pub(super) struct PushedView {
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

pub(super) async fn push_one(
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
pub(super) struct BatchSpec {
    jobs: Vec<serde_json::Value>,
}

/// Valid jobs are pushed in one round trip (each still atomic on its own);
/// invalid ones are reported at their index. None is half-written.
pub(super) async fn push_batch(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let batch: BatchSpec = parse(&state, body)?;
    state
        .queue
        .limits()
        .check_batch(batch.jobs.len())
        .map_err(ApiError::invalid)?;
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
pub(super) struct AttemptView {
    attempt: u32,
    at_ms: i64,
    error: String,
}

#[derive(Serialize)]
pub(super) struct JobView {
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
pub(super) struct RetryView {
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

pub(super) async fn get_job(
    State(state): State<AppState>,
    Segment(id): Segment,
) -> ApiResult<Json<JobView>> {
    let job = state.queue.get(&id).await?.ok_or_else(|| not_found(&id))?;
    Ok(Json(job.into()))
}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RescheduleSpec {
    delay_ms: Option<u64>,
    due_at: Option<DueAt>,
    #[serde(default, deserialize_with = "some_body_text")]
    body: Option<String>,
}

pub(super) async fn reschedule(
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
pub(super) struct TokenSpec {
    token: String,
}

pub(super) async fn finish(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let spec: TokenSpec = parse(&state, body)?;
    state.queue.finish(&id, &spec.token).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Gives a leased job back, uncounted: for a consumer that took it but
/// cannot handle it (the CLI whose output was closed before the token got
/// out).
pub(super) async fn release(
    State(state): State<AppState>,
    Segment(id): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    let spec: TokenSpec = parse(&state, body)?;
    state.queue.release(&id, &spec.token).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NackSpec {
    token: String,
    delay_ms: Option<u64>,
    #[serde(default)]
    error: String,
}

pub(super) async fn nack(
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
pub(super) struct TouchSpec {
    token: String,
    ttr_ms: Option<u64>,
}

pub(super) async fn touch(
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

#[cfg(test)]
mod tests {
    use super::parse_rfc3339_ms;

    #[test]
    fn rfc3339_times_with_a_zone_read_as_the_same_instant() {
        let utc = 1_924_992_000_000;
        for s in [
            "2031-01-01T00:00:00Z",
            "2031-01-01t00:00:00z",
            "2031-01-01 00:00:00Z",
            "2031-01-01T01:00:00+01:00",
            "2030-12-31T21:30:00-02:30",
        ] {
            assert_eq!(parse_rfc3339_ms(s), Ok(utc), "{s}");
        }
        assert_eq!(parse_rfc3339_ms("2031-01-01T00:00:00.250Z"), Ok(utc + 250));
        for s in ["2031-01-01T00:00:00", "2031-01-01 00:00:00.5"] {
            let e = parse_rfc3339_ms(s).unwrap_err();
            assert!(e.contains("no time zone"), "{s}: {e}");
        }
        for s in [
            "yesterday",
            "2031-01-01T00:00:00+24:00",
            "2031-13-01T00:00:00Z",
        ] {
            let e = parse_rfc3339_ms(s).unwrap_err();
            assert!(e.contains("not an RFC 3339 time"), "{s}: {e}");
        }
    }
}
