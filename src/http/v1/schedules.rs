//! `/v1/recurring`: recurring schedules; `/v1/topics/{topic}/rate`: rate
//! limits.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::jobs::RetrySpec;
use super::{parse, ApiError, ApiResult, Segment};
use crate::http::AppState;
use crate::recurring::{Missed, Recurring, RecurringState};
use crate::store::rate::RateLimit;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RecurringSpec {
    topic: String,
    cron: String,
    timezone: Option<String>,
    #[serde(default)]
    body: String,
    ttr_ms: Option<u64>,
    /// The config file's name (a duration text): refused naming `ttr_ms`.
    ttr: Option<serde_json::Value>,
    retry: Option<RetrySpec>,
    #[serde(default)]
    missed: Missed,
}

#[derive(Serialize)]
pub(super) struct RecurringView {
    name: String,
    topic: String,
    cron: String,
    timezone: String,
    body: String,
    ttr_ms: u64,
    retry: Option<serde_json::Value>,
    missed: Missed,
    last_tick_ms: i64,
    next_fire_ms: Option<i64>,
}

impl From<RecurringState> for RecurringView {
    fn from(s: RecurringState) -> Self {
        let r = s.schedule;
        RecurringView {
            name: s.name,
            retry: r.retry.map(|p| {
                json!({
                    "intervals_ms": p.intervals.iter().map(|d| d.as_millis() as u64).collect::<Vec<_>>(),
                    "max_attempts": p.max_attempts,
                })
            }),
            topic: r.topic,
            cron: r.cron,
            timezone: r.timezone,
            body: r.body,
            ttr_ms: r.ttr_ms,
            missed: r.missed,
            last_tick_ms: s.last_tick_ms,
            next_fire_ms: s.next_fire_ms,
        }
    }
}

fn no_limit(topic: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("topic {topic:?} has no rate limit"),
    )
}

fn not_found(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no recurring schedule {name:?}"),
    )
}

pub(super) async fn put(
    State(state): State<AppState>,
    Segment(name): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<RecurringView>> {
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
        ttr_ms: spec.ttr_ms.unwrap_or(60_000),
        retry: spec.retry.as_ref().map(RetrySpec::to_policy).transpose()?,
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

pub(super) async fn get_one(
    State(state): State<AppState>,
    Segment(name): Segment,
) -> ApiResult<Json<RecurringView>> {
    let s = state
        .queue
        .recurring(&name)
        .await?
        .ok_or_else(|| not_found(&name))?;
    Ok(Json(s.into()))
}

pub(super) async fn list(State(state): State<AppState>) -> ApiResult<Json<serde_json::Value>> {
    let all: Vec<RecurringView> = state
        .queue
        .list_recurring()
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    Ok(Json(json!({ "schedules": all })))
}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateSpec {
    per_second: f64,
    burst: Option<u32>,
}

pub(super) async fn rate_put(
    State(state): State<AppState>,
    Segment(topic): Segment,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let spec: RateSpec = parse(&state, body)?;
    let limit = RateLimit {
        per_second: spec.per_second,
        burst: spec
            .burst
            .unwrap_or_else(|| spec.per_second.ceil().max(1.0) as u32),
    };
    state.queue.set_rate(&topic, limit).await?;
    Ok(Json(
        json!({"topic": topic, "per_second": limit.per_second, "burst": limit.burst}),
    ))
}

pub(super) async fn rate_get(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<Json<serde_json::Value>> {
    match state.queue.rates().await?.get(&topic) {
        Some(l) => Ok(Json(
            json!({"topic": topic, "per_second": l.per_second, "burst": l.burst}),
        )),
        None => Err(no_limit(&topic)),
    }
}

pub(super) async fn rate_delete(
    State(state): State<AppState>,
    Segment(topic): Segment,
) -> ApiResult<StatusCode> {
    if state.queue.clear_rate(&topic).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(no_limit(&topic))
    }
}
