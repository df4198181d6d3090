//! OTLP export of delayq's own spans (off unless asked for: `delayq serve
//! --otlp-endpoint URL`): a tracing [`Layer`] that takes the spans of
//! traced jobs' hops (target `delayq::trace`, see [`super::Hop`]) and POSTs
//! them in batches to `<URL>/v1/traces` in OTLP's JSON encoding, each with
//! the job's stored context as its parent, so a collector (Jaeger, Tempo)
//! shows push -> delivery in the producer's trace.
//!
//! A collector that is down or slow never slows delivery: a closed span is
//! handed to the exporter with a non-blocking send into a bounded buffer
//! ([`BUFFER`] spans); when it is full the span is dropped and counted
//! ([`dropped`]), and the exporter logs how many were lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Spans waiting for the exporter; beyond this they are dropped.
pub const BUFFER: usize = 4096;
/// Most spans in one export request.
pub const BATCH: usize = 512;
/// How long the exporter gathers spans before it sends what it has.
pub const GATHER: Duration = Duration::from_millis(500);
/// One export request may take this long.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The spans' target: the hops of traced jobs.
pub const TARGET: &str = "delayq::trace";

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Spans dropped so far: the buffer was full (the collector slow or down).
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// A span's fields as recorded.
#[derive(Default, Debug)]
struct Fields {
    trace_id: String,
    span_id: String,
    parent_id: String,
    tracestate: String,
    attrs: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field, format!("{value:?}"));
    }
}

impl Fields {
    fn set(&mut self, field: &Field, value: String) {
        match field.name() {
            "trace_id" => self.trace_id = value,
            "span_id" => self.span_id = value,
            "parent_id" => self.parent_id = value,
            "tracestate" => self.tracestate = value,
            "job_id" => self.attrs.push(("messaging.message.id", value)),
            "topic" => self.attrs.push(("messaging.destination.name", value)),
            name => self.attrs.push((name, value)),
        }
    }
}

/// An open span's record, in its extensions.
struct Open {
    fields: Fields,
    start_ns: u128,
}

/// A finished span, on its way to the collector.
#[derive(Debug)]
struct Finished {
    name: &'static str,
    fields: Fields,
    start_ns: u128,
    end_ns: u128,
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

/// The layer: records the hops' spans, hands each to the exporter when it
/// closes. Install it with a filter on [`TARGET`] (see [`start`]).
pub struct OtlpLayer {
    tx: mpsc::Sender<Msg>,
}

/// What the exporter is handed: a span, or a request to send what it has.
enum Msg {
    Span(Finished),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The exporter's queue, for [`flush`].
static EXPORTER: std::sync::OnceLock<mpsc::Sender<Msg>> = std::sync::OnceLock::new();

/// Sends the spans waiting for export now, and waits for that (at most
/// `limit`): for a delayq that is stopping.
pub async fn flush(limit: Duration) {
    let Some(tx) = EXPORTER.get() else { return };
    let (done, sent) = tokio::sync::oneshot::channel();
    let _ = tokio::time::timeout(limit, async {
        if tx.send(Msg::Flush(done)).await.is_ok() {
            let _ = sent.await;
        }
    })
    .await;
}

impl<S> Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().target() != TARGET {
            return;
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Open {
                fields,
                start_ns: now_ns(),
            });
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(open) = span.extensions_mut().get_mut::<Open>() {
                values.record(&mut open.fields);
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        let done = Finished {
            name: span.metadata().name(),
            fields: open.fields,
            start_ns: open.start_ns,
            end_ns: now_ns(),
        };
        // Never waits: a full buffer (a slow or absent collector) drops.
        if self.tx.try_send(Msg::Span(done)).is_err() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The URL export requests go to: `<endpoint>/v1/traces`. Errors name what
/// is wrong with the endpoint.
pub fn traces_url(endpoint: &str) -> Result<String, String> {
    let url =
        reqwest::Url::parse(endpoint).map_err(|e| format!("OTLP endpoint {endpoint:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("OTLP endpoint {endpoint:?}: only http and https"));
    }
    Ok(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
}

/// Starts export to `endpoint` (OTLP/HTTP, JSON): returns the layer to
/// install; the exporter runs as a task of the current tokio runtime until
/// the layer is dropped. From then on delayq's hops hand on their own span
/// as the parent ([`super::exporting`]).
pub fn start(endpoint: &str) -> Result<OtlpLayer, String> {
    let url = traces_url(endpoint)?;
    let client = crate::https::client_builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| format!("OTLP client: {e}"))?;
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(export(rx, client, url));
    let _ = EXPORTER.set(tx.clone());
    super::set_exporting();
    Ok(OtlpLayer { tx })
}

async fn export(mut rx: mpsc::Receiver<Msg>, client: reqwest::Client, url: String) {
    let mut reported = 0;
    let mut flushed = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut batch = Vec::new();
        // While a flush is asked for, batches go without waiting for more.
        let mut gather = flushed.is_empty();
        match first {
            Msg::Span(s) => batch.push(s),
            Msg::Flush(done) => {
                flushed.push(done);
                gather = false;
            }
        }
        let until = tokio::time::Instant::now() + GATHER;
        while batch.len() < BATCH {
            // Gathering waits; a flush takes only what is there already.
            let next = if gather {
                tokio::time::timeout_at(until, rx.recv())
                    .await
                    .ok()
                    .flatten()
            } else {
                rx.try_recv().ok()
            };
            match next {
                Some(Msg::Span(s)) => batch.push(s),
                Some(Msg::Flush(done)) => {
                    flushed.push(done);
                    gather = false;
                }
                None => break,
            }
        }
        if batch.is_empty() {
            flushed.drain(..).for_each(|d| {
                let _ = d.send(());
            });
            continue;
        }
        let n = batch.len();
        let sent = client
            .post(&url)
            .header("content-type", "application/json")
            .body(encode(batch).to_string())
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => tracing::warn!(
                status = r.status().as_u16(),
                spans = n,
                "OTLP export refused; spans dropped"
            ),
            Err(e) => {
                tracing::warn!(error = %e.without_url(), spans = n, "OTLP export failed; spans dropped")
            }
        }
        // A flush is done once what was waiting has gone.
        if rx.is_empty() {
            flushed.drain(..).for_each(|d| {
                let _ = d.send(());
            });
        }
        let lost = dropped();
        if lost > reported {
            tracing::warn!(
                dropped = lost - reported,
                "OTLP export buffer full (collector slow or down): spans dropped"
            );
            reported = lost;
        }
    }
}

/// OTLP JSON: trace and span ids as hex, times as decimal strings.
fn encode(spans: Vec<Finished>) -> serde_json::Value {
    let spans: Vec<serde_json::Value> = spans
        .into_iter()
        .map(|s| {
            let kind = match s.name {
                "push" => 2,    // SERVER
                "pop" => 4,     // PRODUCER
                "webhook" => 3, // CLIENT
                _ => 1,         // INTERNAL
            };
            let attributes: Vec<serde_json::Value> = s
                .fields
                .attrs
                .iter()
                .map(|(k, v)| serde_json::json!({"key": k, "value": {"stringValue": v}}))
                .chain([serde_json::json!({"key": "messaging.system", "value": {"stringValue": "delayq"}})])
                .collect();
            serde_json::json!({
                "traceId": s.fields.trace_id,
                "spanId": s.fields.span_id,
                "parentSpanId": s.fields.parent_id,
                "traceState": s.fields.tracestate,
                "name": format!("delayq {}", s.name),
                "kind": kind,
                "startTimeUnixNano": s.start_ns.to_string(),
                "endTimeUnixNano": s.end_ns.max(s.start_ns).to_string(),
                "attributes": attributes,
            })
        })
        .collect();
    serde_json::json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "delayq"}}
            ]},
            "scopeSpans": [{
                "scope": {"name": "delayq", "version": env!("CARGO_PKG_VERSION")},
                "spans": spans,
            }],
        }]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_gets_v1_traces_and_a_bad_one_is_named() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318/").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert!(traces_url("collector:4318").is_err());
        assert!(traces_url("ftp://x").unwrap_err().contains("only http"));
    }
}
