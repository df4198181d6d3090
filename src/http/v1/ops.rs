//! Operations: `/healthz`, `/readyz`, `/metrics`, `/v1/openapi.json`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::OPENAPI;
use crate::http::AppState;

pub(super) async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
        .into_response()
}

/// Alive, and which build: the version `delayq --version` prints.
pub(super) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok", "version": crate::VERSION}))
}

/// Ready to serve: Redis answers, the subscriber is connected, and Redis
/// can take new jobs: not at `maxmemory` (where pushes are refused, though
/// pops and finishes go on) and not set to evict keys that hold jobs.
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    let q = &state.queue;
    let mut error = None;
    let (redis, memory) = match q.memory().await {
        Ok(m) if m.evicting() => (true, "evicting"),
        Ok(m) if m.full() => (true, "full"),
        Ok(_) => (true, "ok"),
        // A server that keeps INFO from delayq's user: PING says enough.
        Err(_) => match q.ping().await {
            Ok(()) => (true, "unknown"),
            Err(e) => {
                error = Some(e.to_string());
                (false, "unknown")
            }
        },
    };
    let subscriber = q.subscriber_connected();
    let status = if redis && subscriber && matches!(memory, "ok" | "unknown") {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = json!({"redis": redis, "subscriber": subscriber, "memory": memory});
    if let Some(e) = error {
        body["error"] = json!(e);
    }
    let shards = q.shards();
    if !shards.is_empty() {
        // A shard short of replicas or not answering is named, with its
        // partitions: the rest of the queue works on.
        body["shards"] = shards
            .iter()
            .map(|s| json!({"node": s.node, "state": s.state, "replicas": s.replicas, "partitions": s.partitions}))
            .collect();
        let troubled: Vec<&str> = shards
            .iter()
            .filter(|s| s.state != "ok")
            .map(|s| s.state)
            .collect();
        if !troubled.is_empty() {
            body["degraded"] = json!(true);
        }
    }
    if q.on_cluster() {
        // Each master's own state: the one that is full is named.
        if let Ok(masters) = q.memories().await {
            body["masters"] = masters
                .into_iter()
                .map(|(node, m)| {
                    let memory = if m.evicting() {
                        "evicting"
                    } else if m.full() {
                        "full"
                    } else {
                        "ok"
                    };
                    json!({"node": node, "memory": memory, "used_bytes": m.used_bytes, "max_bytes": m.max_bytes})
                })
                .collect();
        }
    }
    (status, Json(body)).into_response()
}

/// Prometheus text format. Queue depths are read from Redis at scrape time
/// (and left out while Redis is away; `delayq_redis_errors_total` says so).
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
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
