//! The HTTP server: routes, limits, timeouts and graceful shutdown.

pub mod compat;
pub mod go_json;

use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use tokio::net::TcpListener;
use tower_http::timeout::RequestBodyTimeoutLayer;
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
    /// A client must send its whole body within this time.
    pub body_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            pop_timeout: Duration::from_secs(178),
            // A maximal job body, JSON-escaped, plus its other fields.
            max_request_bytes: 2 * 1024 * 1024 + 64 * 1024,
            body_timeout: Duration::from_secs(30),
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
    compat::routes()
        .with_state(state)
        .layer(DefaultBodyLimit::max(max))
        .layer(RequestBodyTimeoutLayer::new(body_timeout))
        .layer(TraceLayer::new_for_http())
}

/// Serves `state` on `listener` until `shutdown` fires, then stops accepting,
/// lets in-flight requests finish (waiting pops answer at once, because the
/// queue's own shutdown wakes them) and returns.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let queue = state.queue.clone();
    let app = router(state);
    let stop = async move {
        shutdown.wait().await;
        queue.close().await;
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
}
