//! The ouqiang/delay-queue HTTP contract: `/push`, `/pop`, `/delete`,
//! `/finish`, `/get`, exactly as its clients expect them (see
//! `shared/compat-ouqiang.md`): every reply is HTTP 200 with
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

/// The compatible endpoints. The original answers any method.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/push", any(push))
        .route("/pop", any(pop))
        .route("/finish", any(remove))
        .route("/delete", any(remove))
        .route("/get", any(get))
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

fn ok<T: Serialize>(message: &str, data: Option<T>) -> Response {
    reply(0, message, data)
}

fn fail(message: impl Into<String>) -> Response {
    reply::<()>(1, message, None)
}

/// A library error as the contract reports it: code 1, saying what failed.
fn failed(action: &str, e: Error) -> Response {
    match e {
        Error::Invalid(msg) => fail(msg),
        e => {
            tracing::warn!(error = %e, "{action} failed");
            fail(format!("{action} failed: {e}"))
        }
    }
}

/// Reads and parses the request, or the reply the original gives instead.
fn parse(state: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Request, Response> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            fail(format!(
                "request body is larger than the limit of {} bytes",
                state.server.max_request_bytes
            ))
        } else {
            fail(BAD_BODY)
        }
    })?;
    Request::parse(&bytes).ok_or_else(|| fail(BAD_JSON))
}

/// The trimmed id, or the reply for a missing one.
fn required_id(req: &Request) -> Result<String, Response> {
    let id = req.id.as_deref().unwrap_or("").trim();
    if id.is_empty() {
        Err(fail(NO_ID))
    } else {
        Ok(id.to_owned())
    }
}

async fn push(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let req = match parse(&state, body) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let id = match required_id(&req) {
        Ok(id) => id,
        Err(resp) => return resp,
    };
    let topic = req.topic.as_deref().unwrap_or("").trim();
    if topic.is_empty() {
        return fail(NO_TOPIC_PUSH);
    }
    let delay = req.delay.unwrap_or(0);
    if !(1..=(1 << 31) - 1).contains(&delay) {
        return fail(BAD_DELAY);
    }
    let ttr = req.ttr.unwrap_or(0);
    if !(1..=86400).contains(&ttr) {
        return fail(BAD_TTR);
    }
    let job = NewJob {
        id,
        topic: topic.to_owned(),
        body: req.body.as_deref().unwrap_or("").trim().to_owned(),
        delay: Duration::from_secs(delay as u64),
        ttr: Duration::from_secs(ttr as u64),
    };
    match state.queue.push(&job).await {
        Ok(_) => ok::<()>(PUSHED, None),
        Err(e) => failed("push", e),
    }
}

#[derive(Serialize)]
struct Popped {
    id: String,
    body: String,
}

async fn pop(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let req = match parse(&state, body) {
        Ok(r) => r,
        Err(resp) => return resp,
    };
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
        return fail(NO_TOPIC_POP);
    }
    match state.queue.pop(&topics, state.server.pop_timeout).await {
        Ok(Some(d)) => ok(
            OK,
            Some(Popped {
                id: d.id,
                body: d.body,
            }),
        ),
        Ok(None) => ok::<()>(OK, None),
        Err(e) => failed("pop", e),
    }
}

/// `/finish` and `/delete`: both remove the job, whatever its state.
async fn remove(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let id = match parse(&state, body).and_then(|r| required_id(&r)) {
        Ok(id) => id,
        Err(resp) => return resp,
    };
    match state.queue.remove(&id, None).await {
        Ok(_) => ok::<()>(OK, None),
        Err(e) => failed("remove", e),
    }
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

async fn get(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    let id = match parse(&state, body).and_then(|r| required_id(&r)) {
        Ok(id) => id,
        Err(resp) => return resp,
    };
    match state.queue.get(&id).await {
        Ok(Some(job)) => ok(
            OK,
            Some(Got {
                topic: job.topic,
                id: job.id,
                delay: job.due_ms.div_euclid(1000),
                ttr: job.ttr.as_secs(),
                body: job.body,
            }),
        ),
        Ok(None) => ok::<()>(OK, None),
        Err(e) => failed("get", e),
    }
}
