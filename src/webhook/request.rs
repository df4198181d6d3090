//! One delivery: the signed POST and what its answer means.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;
use tracing::Instrument;

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
/// that goes into the job's history. `target`: the hook's URL, parsed once for all its deliveries
/// (None: it does not parse, and the request says so).
pub(super) async fn deliver(
    queue: &Queue,
    client: &reqwest::Client,
    hook: &Webhook,
    target: Option<&reqwest::Url>,
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
    let req = match target {
        Some(url) => client.post(url.clone()),
        None => client.post(&hook.url),
    };
    let mut req = req
        .header("content-type", "application/json")
        .header("x-delayq-id", &job.id)
        .header("x-delayq-topic", &job.topic)
        .header("x-delayq-attempt", job.attempts.to_string());
    // A traced job's request carries its context (W3C headers); the
    // request is a span of that trace.
    let (traceparent, span) = job.hand_over(crate::trace::HopKind::Webhook);
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
        if let Some(ts) = &job.tracestate {
            req = req.header("tracestate", ts);
        }
    }
    if let Some(secret) = &hook.secret {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        req = req
            .header("x-delayq-timestamp", ts.to_string())
            .header("x-delayq-signature", sign(&secret.0, ts, &body));
    }
    let started = Instant::now();
    let result = req.body(body).send().instrument(span.clone()).await;
    let m = queue.metrics();
    m.webhook_duration
        .observe([&job.topic], started.elapsed().as_secs_f64());
    let mut status = None;
    let (outcome, verdict) = match result {
        Ok(resp) if resp.status().is_success() => {
            status = Some(resp.status().as_u16().to_string());
            let result = match hook.result {
                true => reply_result(resp, started + hook.timeout, &job.id).await,
                false => None,
            };
            ("success", Ok(result))
        }
        Ok(resp) if resp.status().is_redirection() => {
            let code = resp.status().as_u16();
            status = Some(code.to_string());
            let to = resp
                .headers()
                .get(reqwest::header::LOCATION)
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
        Err(e) if e.is_timeout() => (
            "timeout",
            Err(format!("timed out after {:?}", hook.timeout)),
        ),
        Err(e) => {
            // The causes too: "invalid peer certificate: UnknownIssuer" is
            // what tells a user to set SSL_CERT_FILE. The URL as shown, not
            // reqwest's: the error is kept with the job and in the webhook
            // status, and the URL's query may hold a secret.
            let e = e.without_url();
            let mut why = format!("connection error: {}: {e}", hook.shown_url());
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                why = format!("{why}: {c}");
                cause = c.source();
            }
            ("connection_error", Err(why))
        }
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

/// A 2xx reply's body as the job's result (JSON text): None when empty,
/// over [`MAX_RESULT_BYTES`](crate::defaults::MAX_RESULT_BYTES) or not read
/// whole by `deadline` (the job still finishes; the log says why).
async fn reply_result(mut resp: reqwest::Response, deadline: Instant, id: &str) -> Option<String> {
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
async fn error_body(mut resp: reqwest::Response, deadline: Instant) -> String {
    let mut got = Vec::new();
    let mut unread = None;
    while got.len() < ERROR_BODY_BYTES {
        let next = tokio::time::timeout_at(deadline, resp.chunk()).await;
        match next {
            Ok(Ok(Some(chunk))) => {
                got.extend_from_slice(&chunk[..chunk.len().min(ERROR_BODY_BYTES - got.len())])
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) if !e.is_timeout() => {
                unread = Some(format!("the body cut off: {}", e.without_url()));
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
