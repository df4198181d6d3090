//! The HTTP server: routes, limits, timeouts and graceful shutdown.
//!
//! - [`compat`]: the ouqiang/delay-queue endpoints (`/push`, `/pop`, ...).
//! - [`v1`]: the native API (`/v1/...`, `/healthz`, `/readyz`).
//! - [`go_json`]: JSON read and written the way the Go original does.
//! - [`ui`]: the dashboard at `/ui/`.

pub mod auth;
mod body;
pub mod compat;
mod error;
pub mod go_json;
mod guard;
pub mod origin;
pub mod ui;
pub mod v1;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::trace::TraceLayer;

use crate::queue::Queue;
use crate::shutdown::Shutdown;

/// HTTP-side settings.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// How long `/pop` holds a request when nothing is ready (the original
    /// holds about 178 s).
    pub pop_timeout: Duration,
    /// Largest request body accepted.
    pub max_request_bytes: usize,
    /// A client must send its whole body within this time, counted from
    /// the end of its headers (not between chunks: a client trickling a
    /// byte now and then must not hold a connection slot for ever).
    pub body_timeout: Duration,
    /// A client must send a request's headers within this time.
    pub header_timeout: Duration,
    /// Most open client connections; past it, new ones wait to be accepted.
    /// Each long-poll holds one, and no Redis connection.
    pub max_connections: usize,
    /// When set, every endpoint but `/healthz` needs
    /// `Authorization: Bearer <token>`.
    pub auth_token: Option<crate::webhook::Secret>,
    /// The dashboard at `/ui/`.
    pub ui: ui::UiMode,
    /// How long a dashboard sign-in lasts.
    pub ui_session: Duration,
    /// Names browsers may call this server by, besides addresses and
    /// `localhost` (see [`origin`]).
    pub allowed_hosts: origin::AllowedHosts,
    /// Topics this server delivers by webhook -> the URL's host (never its
    /// path, query or credentials), for `/v1/topics`.
    pub webhooks: std::collections::BTreeMap<String, String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            pop_timeout: crate::defaults::POP_TIMEOUT.value,
            // A maximal job body, JSON-escaped, plus its other fields.
            max_request_bytes: 2 * 1024 * 1024 + 64 * 1024,
            body_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(30),
            max_connections: crate::defaults::MAX_CONNECTIONS,
            auth_token: None,
            ui: ui::UiMode::On,
            allowed_hosts: origin::AllowedHosts::default(),
            ui_session: Duration::from_secs(12 * 3600),
            webhooks: Default::default(),
        }
    }
}

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub queue: Queue,
    pub server: ServerConfig,
}

/// All routes with their limits applied.
pub fn router(state: AppState) -> Router {
    let max = state.server.max_request_bytes;
    let body_timeout = state.server.body_timeout;
    let auth = axum::middleware::from_fn_with_state(state.clone(), auth::require_token);
    let same_site = axum::middleware::from_fn_with_state(state.clone(), origin::same_site_only);
    compat::routes()
        .merge(v1::routes())
        .merge(ui::routes(state.server.ui))
        .fallback(v1::no_route)
        .method_not_allowed_fallback(v1::method_not_allowed)
        .layer(auth)
        .layer(same_site)
        .with_state(state)
        .layer(DefaultBodyLimit::max(max))
        .layer(axum::middleware::map_request(move |req| {
            body::with_deadline(req, body_timeout)
        }))
        .layer(TraceLayer::new_for_http())
}

/// Serves `state` on `listener` until `shutdown` fires, then stops
/// accepting, answers waiting pops at once (the queue's own shutdown wakes
/// them), lets requests in flight finish and returns.
///
/// hyper is driven directly (not through `axum::serve`) to set a header read
/// timeout: a client that opens a connection and trickles its headers must
/// not hold it for ever.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let queue = state.queue.clone();
    let header_timeout = state.server.header_timeout;
    let slots = Arc::new(Semaphore::new(state.server.max_connections));
    let app = router(state);
    let graceful = GracefulShutdown::new();
    loop {
        // A free connection slot first: at the limit, new clients wait in
        // the kernel's backlog instead of exhausting memory or descriptors.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = shutdown.wait() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait, don't spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.wait() => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    queue.close().await;
    if tokio::time::timeout(Duration::from_secs(30), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight 30 s after shutdown began; stopping anyway");
    }
    Ok(())
}
