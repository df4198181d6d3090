//! One delivery: the signed POST and what its answer means.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tracing::Instrument;

use hyper::header::HeaderValue;

use super::client::{Answer, SendError, Sender};
use super::{note, sign, Seen, Webhook, ERROR_BODY_BYTES, ERROR_BODY_CHARS};
use crate::job::Delivery;
use crate::queue::Queue;

/// What a receiver gets, in the order of its keys (as a JSON object
/// built from a map always wrote them): written straight from the job,
/// with no tree of values between.
#[derive(serde::Serialize)]
struct Sent<'a> {
    attempt: u32,
    body: &'a str,
    due_at_ms: i64,
    id: &'a str,
    topic: &'a str,
}

/// One delivery: Ok on 2xx (with the job's result, JSON text, when the
/// hook takes the reply's body as one and it has one), otherwise the error
/// that goes into the job's history.
pub(super) async fn deliver(
    queue: &Queue,
    sender: &Sender,
    hook: &Webhook,
    job: Delivery,
    seen: &Seen,
) -> Result<Option<String>, String> {
    // Its lease outlasts the request: the check before sending extended
    // it if it would not.
    let body = serde_json::to_vec(&Sent {
        attempt: job.attempts,
        body: &job.body,
        due_at_ms: job.due_ms,
        id: &job.id,
        topic: &job.topic,
    })
    .expect("JSON of strings and numbers");
    // A traced job's request carries its context (W3C headers); the
    // request is a span of that trace.
    let (traceparent, span) = job.hand_over(crate::trace::HopKind::Webhook);
    let started = Instant::now();
    let result = match headers(hook, &job, traceparent, &body) {
        Ok(headers) => {
            sender
                .post(hook, started, headers, body)
                .instrument(span.clone())
                .await
        }
        Err(e) => Err(SendError::Other(e)),
    };
    let m = queue.metrics();
    m.webhook_duration
        .observe([&job.topic], started.elapsed().as_secs_f64());
    let mut status = None;
    let (outcome, verdict) = match result {
        Ok(resp) if resp.status().is_success() => {
            status = Some(resp.status().as_u16().to_string());
            let result = match hook.result {
                true => reply_result(resp, started + hook.timeout, &job.id).await,
                false => {
                    resp.done(started + hook.timeout).await;
                    None
                }
            };
            ("success", Ok(result))
        }
        Ok(resp) if resp.status().is_redirection() => {
            let code = resp.status().as_u16();
            status = Some(code.to_string());
            let to = resp
                .location()
                .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned())
                .unwrap_or_default();
            let to: String = to.chars().take(ERROR_BODY_CHARS).collect();
            (
                "http_error",
                Err(format!(
                    "HTTP {code}: redirect to {to:?} not followed (only a 2xx to the POST \
                     finishes a job)"
                )),
            )
        }
        Ok(resp) => {
            let code = resp.status().as_u16();
            status = Some(code.to_string());
            let body = error_body(resp, started + hook.timeout).await;
            ("http_error", Err(format!("HTTP {code}: {body}")))
        }
        Err(SendError::Timeout) => (
            "timeout",
            Err(format!("timed out after {:?}", hook.timeout)),
        ),
        // The URL as shown: the error is kept with the job and in the
        // webhook status, and the URL's query may hold a secret.
        Err(SendError::Other(why)) => (
            "connection_error",
            Err(format!("connection error: {}: {why}", hook.shown_url())),
        ),
    };
    m.webhook_deliveries.inc([&job.topic, outcome], 1);
    // Redis time as this process knows it from its replies: a round trip
    // per delivery for a status note was one more step each delivery
    // waited for before its slot was free.
    let at_ms = queue.clock().now_estimate_ms();
    let status = status.unwrap_or_else(|| outcome.to_owned());
    note(seen, at_ms, status, verdict.clone().err());
    tracing::debug!(parent: &span, id = %job.id, outcome, "webhook delivery");
    verdict
}

/// The request's headers besides its content type: the job's, its trace
/// context, and the signature over `body` when the hook has a secret. An
/// id or topic no header can carry is an error naming it.
fn headers(
    hook: &Webhook,
    job: &Delivery,
    traceparent: Option<String>,
    body: &[u8],
) -> Result<Vec<(&'static str, HeaderValue)>, String> {
    let value = |name: &str, v: &str| {
        HeaderValue::from_str(v).map_err(|_| format!("{name} {v:?} cannot be sent as a header"))
    };
    let mut h = Vec::with_capacity(7);
    h.push(("x-delayq-id", value("id", &job.id)?));
    h.push(("x-delayq-topic", value("topic", &job.topic)?));
    h.push(("x-delayq-attempt", HeaderValue::from(job.attempts)));
    if let Some(tp) = traceparent {
        h.push(("traceparent", value("traceparent", &tp)?));
        if let Some(ts) = &job.tracestate {
            h.push(("tracestate", value("tracestate", ts)?));
        }
    }
    if let Some(secret) = &hook.secret {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        h.push(("x-delayq-timestamp", HeaderValue::from(ts)));
        h.push((
            "x-delayq-signature",
            value("signature", &sign(&secret.0, ts, body))?,
        ));
    }
    Ok(h)
}

/// A 2xx reply's body as the job's result (JSON text): None when empty,
/// over [`MAX_RESULT_BYTES`](crate::defaults::MAX_RESULT_BYTES) or not read
/// whole by `deadline` (the job still finishes; the log says why).
async fn reply_result(mut resp: Answer<'_>, deadline: Instant, id: &str) -> Option<String> {
    use crate::defaults::MAX_RESULT_BYTES;
    let mut got = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(chunk))) if got.len() + chunk.len() <= MAX_RESULT_BYTES => {
                got.extend_from_slice(&chunk)
            }
            Ok(Ok(None)) => break,
            Ok(Ok(Some(_))) => {
                tracing::warn!(
                    id,
                    "webhook reply over {MAX_RESULT_BYTES} bytes: finished without a result"
                );
                return None;
            }
            Ok(Err(_)) | Err(_) => {
                tracing::warn!(
                    id,
                    "webhook reply body not read whole in time: finished without a result"
                );
                return None;
            }
        }
    }
    let text = String::from_utf8_lossy(&got);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let value =
        serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()));
    match crate::queue::check_result(&value) {
        Ok(json) => Some(json),
        Err(e) => {
            tracing::warn!(id, "webhook reply: {e}: finished without a result");
            None
        }
    }
}

/// The start of a failed reply's body, for its error: at most
/// [`ERROR_BODY_BYTES`] are read, none after `deadline` (the delivery's
/// timeout), and the connection is dropped with the rest unread.
async fn error_body(mut resp: Answer<'_>, deadline: Instant) -> String {
    let mut got = Vec::new();
    let mut unread = None;
    while got.len() < ERROR_BODY_BYTES {
        let next = tokio::time::timeout_at(deadline, resp.chunk()).await;
        match next {
            Ok(Ok(Some(chunk))) => {
                got.extend_from_slice(&chunk[..chunk.len().min(ERROR_BODY_BYTES - got.len())])
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) if !e.timeout => {
                unread = Some(format!("the body cut off: {}", e.why));
                break;
            }
            Ok(Err(_)) | Err(_) => {
                unread = Some("the rest of the body timed out".to_owned());
                break;
            }
        }
    }
    drop(resp);
    let text: String = String::from_utf8_lossy(&got)
        .chars()
        .take(ERROR_BODY_CHARS)
        .collect();
    match unread {
        Some(why) => format!("{text} ({why})"),
        None => text,
    }
}
