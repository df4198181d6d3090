//! What the routes and the gate in front of them ([`super::auth`]) share:
//! the mark of a route that writes, which a read-only dashboard's request
//! may not pass, and the constant-time comparison of secrets.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// Equal without an early exit on the first differing byte (a length
/// difference still shows: the length of a token is no secret worth hiding).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

/// Marks a request from a read-only dashboard: routes that write refuse it.
#[derive(Clone, Copy)]
pub(super) struct ReadOnlyDashboard;

/// `handler` changes the queue: a read-only dashboard gets 403 from it,
/// whatever the method.
pub fn writes<S: Clone + Send + Sync + 'static>(
    handler: axum::routing::MethodRouter<S>,
) -> axum::routing::MethodRouter<S> {
    handler.route_layer(axum::middleware::from_fn(refuse_read_only))
}

/// [`writes`] for a handler of any method (`any(...)`, which has no
/// per-method routes to layer).
pub fn writes_any<S: Clone + Send + Sync + 'static>(
    handler: axum::routing::MethodRouter<S>,
) -> axum::routing::MethodRouter<S> {
    handler.layer(axum::middleware::from_fn(refuse_read_only))
}

async fn refuse_read_only(req: Request, next: Next) -> Response {
    if req.extensions().get::<ReadOnlyDashboard>().is_some() {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "read_only",
            "the dashboard is read-only here (--ui read-only)",
        )
        .into_response();
    }
    next.run(req).await
}
