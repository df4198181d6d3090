//! The ouqiang/delay-queue HTTP contract: `/push`, `/pop`, `/delete`,
//! `/finish`, `/get`, exactly as its clients expect them (see
//! docs/DESIGN.md, "The compatible API"): every reply is HTTP 200 with
//! `{"code":0|1,"message":...,"data":...}` and the original's messages.
//!
//! Where the original was wrong delayq is not: pushing an existing id
//! replaces the job, ids cannot touch other keys, topics are trimmed one by
//! one, jobs never fire early, and a pop whose client left takes no job.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use serde::Serialize;

use super::body::{read_body, BodyError};
use super::go_json::{self, Request};
use super::AppState;
use crate::error::Error;
use crate::job::NewJob;

const PUSHED: &str = "添加成功";
const OK: &str = "操作成功";
const BAD_JSON: &str = "解析json失败";
const BAD_BODY: &str = "读取request body失败";
const NO_ID: &str = "job id不能为空";
const NO_TOPIC_PUSH: &str = "topic 不能为空";
const NO_TOPIC_POP: &str = "topic不能为空";
const BAD_DELAY: &str = "delay 取值范围1 - (2^31 - 1)";
const BAD_TTR: &str = "ttr 取值范围1 - 86400";

/// The compatible endpoints. The original answers any method, so which
/// of them write is said here, by route.
pub fn routes() -> Router<AppState> {
    use super::guard::writes_any as writes;
    Router::new()
        .route("/push", writes(any(push)))
        .route("/pop", writes(any(pop)))
        .route("/finish", writes(any(finish)))
        .route("/delete", writes(any(delete)))
        .route("/get", any(get))
}

/// The paths [`routes`] serves.
pub fn is_compat_path(path: &str) -> bool {
    matches!(path, "/push" | "/pop" | "/finish" | "/delete" | "/get")
}

/// A code-1 reply (status 200, as the original gives it) with `message`.
pub fn refusal(message: &str) -> Response {
    reply::<()>(1, message, None)
}

#[derive(Serialize)]
struct Reply<T: Serialize> {
    code: u8,
    message: String,
    data: Option<T>,
}

fn reply<T: Serialize>(code: u8, message: impl Into<String>, data: Option<T>) -> Response {
    let body = go_json::to_string(&Reply {
        code,
        message: message.into(),
        data,
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body,
    )
        .into_response()
}

fn ok<T: Serialize>(message: &str, data: Option<T>) -> Result<Response, Refused> {
    Ok(reply(0, message, data))
}

/// A code-1 reply: the request was refused or could not be carried out.
struct Refused(String);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        reply::<()>(1, self.0, None)
    }
}

impl From<&str> for Refused {
    fn from(message: &str) -> Self {
        Refused(message.to_owned())
    }
}

/// A library error as the contract reports it: code 1, saying what failed.
fn failed(action: &'static str) -> impl FnOnce(Error) -> Refused {
    move |e| match e {
        Error::Invalid(msg) => Refused(msg),
        e => {
            tracing::warn!(error = %e, "{action} failed");
            Refused(format!("{action} failed: {e}"))
        }
    }
}

/// Reads and parses the request body as the original does.
fn parse(state: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Request, Refused> {
    let bytes = read_body(state, body).map_err(|e| match e {
        BodyError::TooLarge(message) => Refused(message),
        BodyError::Unreadable(_) => BAD_BODY.into(),
    })?;
    Request::parse(&bytes).ok_or(BAD_JSON.into())
}

/// The trimmed, non-empty id.
fn required_id(req: &Request) -> Result<String, Refused> {
    let id = req.id.as_deref().unwrap_or("").trim();
    if id.is_empty() {
        Err(NO_ID.into())
    } else {
        Ok(id.to_owned())
    }
}

async fn push(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Refused> {
    let req = parse(&state, body)?;
    let id = required_id(&req)?;
    let topic = req.topic.as_deref().unwrap_or("").trim();
    if topic.is_empty() {
        return Err(NO_TOPIC_PUSH.into());
    }
    let delay = req.delay.unwrap_or(0);
    if !(1..=(1 << 31) - 1).contains(&delay) {
        return Err(BAD_DELAY.into());
    }
    let ttr = req.ttr.unwrap_or(0);
    if !(1..=86400).contains(&ttr) {
        return Err(BAD_TTR.into());
    }
    let job = NewJob {
        id,
        topic: topic.to_owned(),
        body: req.body.as_deref().unwrap_or("").trim().to_owned(),
        delay: Duration::from_secs(delay as u64),
        ttr: Duration::from_secs(ttr as u64),
        ..NewJob::default()
    };
    // Trace context from the headers only (the original's body has no
    // field for it); invalid headers are ignored.
    let job = match crate::trace::from_headers(&headers) {
        Some((traceparent, tracestate)) => NewJob {
            traceparent: Some(traceparent),
            tracestate,
            ..job
        },
        None => job,
    };
    state.queue.push(&job).await.map_err(failed("push"))?;
    ok::<()>(PUSHED, None)
}

#[derive(Serialize)]
struct Popped {
    id: String,
    body: String,
}

async fn pop(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Refused> {
    let req = parse(&state, body)?;
    let topics: Vec<String> = req
        .topic
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    if topics.is_empty() {
        return Err(NO_TOPIC_POP.into());
    }
    let job = state
        .queue
        .pop(&topics, state.server.pop_timeout)
        .await
        .map_err(failed("pop"))?;
    ok(
        OK,
        job.map(|d| Popped {
            id: d.id,
            body: d.body,
        }),
    )
}

/// `/finish`: removes the job, whatever its state; success for unknown ids.
async fn finish(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Refused> {
    let id = required_id(&parse(&state, body)?)?;
    state
        .queue
        .finish_by_id(&id)
        .await
        .map_err(failed("finish"))?;
    ok::<()>(OK, None)
}

/// `/delete`: the same, counted as a cancellation.
async fn delete(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Refused> {
    let id = required_id(&parse(&state, body)?)?;
    state.queue.delete(&id).await.map_err(failed("delete"))?;
    ok::<()>(OK, None)
}

#[derive(Serialize)]
struct Got {
    topic: String,
    id: String,
    /// Absolute Unix time (s) at which the job was due, as the original.
    delay: i64,
    ttr: u64,
    body: String,
}

async fn get(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Refused> {
    let id = required_id(&parse(&state, body)?)?;
    let job = state.queue.get(&id).await.map_err(failed("get"))?;
    // The original forgets a finished job: a kept record is none here.
    let job = job.filter(|j| j.state != crate::JobState::Finished);
    ok(
        OK,
        job.map(|job| Got {
            topic: job.topic,
            id: job.id,
            delay: job.due_ms.div_euclid(1000),
            ttr: job.ttr.as_secs(),
            body: job.body,
        }),
    )
}
