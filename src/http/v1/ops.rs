//! Operations: `/healthz`, `/readyz`, `/metrics`.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::ApiError;
use crate::http::AppState;
use crate::wire::{Health, MasterMemory, MetricsQuery, Readiness, ShardBody};

/// The process is alive, and its version
#[utoipa::path(get, path = "/healthz", operation_id = "healthz",
    responses((status = 200, description = "Alive", body = Health)))]
pub(super) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: crate::VERSION.into(),
    })
}

/// Redis answers and runs delayq's scripts, the subscriber is connected,
/// and Redis can take jobs
///
/// Not at `maxmemory` (where pushes are refused, though pops and finishes
/// go on) and not set to evict keys that hold jobs.
#[utoipa::path(get, path = "/readyz", operation_id = "readyz",
    responses(
        (status = 200, description = "Ready", body = Readiness),
        (status = 503, description = "Not ready", body = Readiness),
    ))]
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    let q = &state.queue;
    let mut body = Readiness::default();
    let memory = match q.memory().await {
        Ok(m) if m.evicting() => "evicting",
        Ok(m) if m.full() => "full",
        Ok(_) => "ok",
        // A server that keeps INFO from delayq's user: PING says enough.
        Err(_) => match q.ping().await {
            Ok(()) => "unknown",
            Err(e) => {
                body.error = Some(e.to_string());
                "unknown"
            }
        },
    };
    body.redis = body.error.is_none();
    body.memory = memory.into();
    body.subscriber = q.subscriber_connected();
    body.expired_events = q.expired_events_heard();
    body.expired_events_error = q.expired_events_refused();
    // As the last script call found: no command of its own.
    let refused = q.scripts_refused();
    body.scripts = refused.is_none();
    if let Some(why) = refused {
        body.error = Some(match body.error.take() {
            Some(e) => format!("{e}; {why}"),
            None => why,
        });
    }
    let ready = body.redis && body.subscriber && body.scripts;
    let status = if ready && matches!(memory, "ok" | "unknown") {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    // A shard short of replicas or not answering is named, with its
    // partitions: the rest of the queue works on.
    body.shards = q.shards().into_iter().map(ShardBody::from).collect();
    if body.shards.iter().any(|s| s.state != "ok") {
        body.degraded = Some(true);
    }
    if q.on_cluster() {
        // Each master's own state: the one that is full is named.
        if let Ok(masters) = q.memories().await {
            body.masters = masters
                .into_iter()
                .map(|(node, m)| {
                    let memory = if m.evicting() {
                        "evicting"
                    } else if m.full() {
                        "full"
                    } else {
                        "ok"
                    };
                    MasterMemory {
                        node,
                        memory: memory.into(),
                        used_bytes: m.used_bytes,
                        max_bytes: m.max_bytes,
                    }
                })
                .collect();
        }
    }
    (status, Json(body)).into_response()
}

/// Prometheus metrics (text exposition format)
///
/// Queue depths are read from Redis at scrape time (and left out while
/// Redis is away; `delayq_redis_errors_total` says so): every topic's
/// counts, in bounded calls. `redis=false` leaves them out and makes no
/// Redis call (the dashboard's overview, which shows only this process's
/// lateness and dispatch paths, asks so).
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", params(MetricsQuery),
    responses((status = 200, description = "Metrics", body = String, content_type = "text/plain")))]
pub(super) async fn metrics(
    State(state): State<AppState>,
    q: Result<Query<MetricsQuery>, QueryRejection>,
) -> Response {
    let q_redis = match q {
        Ok(Query(m)) => m.redis.unwrap_or(true),
        Err(e) => {
            return ApiError::new(StatusCode::BAD_REQUEST, "bad_request", e.body_text())
                .into_response()
        }
    };
    let q = &state.queue;
    let gauges = if q_redis {
        q.gauges().await
    } else {
        q.local_gauges()
    };
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        q.metrics().render(&gauges),
    )
        .into_response()
}
