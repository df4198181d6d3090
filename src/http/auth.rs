//! Optional bearer-token authentication for every endpoint but `/healthz`
//! and the dashboard's own files and login; the dashboard's requests may
//! show its login cookie instead (see [`super::ui`]), and in read-only mode
//! they may only read: each route says whether its handler writes
//! ([`writes`], in `guard.rs` with the other parts routes share), whatever the method (the compatible routes take any).
//!
//! The token is compared in constant time, so response timing does not
//! tell an attacker how many leading bytes were right. A refused request
//! gets 401 with a JSON error and changes nothing.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::guard::ReadOnlyDashboard;
pub use super::guard::{constant_time_eq, writes, writes_any};
use super::AppState;

pub async fn require_token(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    if req.headers().contains_key(super::ui::UI_HEADER)
        && state.server.ui == super::ui::UiMode::ReadOnly
    {
        req.extensions_mut().insert(ReadOnlyDashboard);
    }
    let Some(expected) = &state.server.auth_token else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    // The root only redirects to the dashboard, which asks for the token.
    let root = path == "/" && state.server.ui != super::ui::UiMode::Off;
    if root || path == "/healthz" || path == "/ui" || path.starts_with("/ui/") {
        return next.run(req).await;
    }
    if let Some(session) = super::ui::session(req.headers(), &expected.0) {
        // Signed out on some instance? One EXISTS in Redis.
        return match state.queue.dashboard_session_ended(&session.id).await {
            Ok(false) => next.run(req).await,
            Ok(true) => unauthorized(path, "signed out; sign in again"),
            Err(e) => ApiError::from(e).into_response(),
        };
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        // The scheme is case-insensitive (RFC 9110): "bearer" is as good.
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim_start());
    match given {
        Some(token) if constant_time_eq(token.as_bytes(), expected.0.as_bytes()) => {
            next.run(req).await
        }
        _ => unauthorized(
            req.uri().path(),
            "missing or wrong bearer token (Authorization: Bearer <token>)",
        ),
    }
}

/// 401 in the shape the route's clients read: the compatible routes'
/// clients (the Go server's) parse `{"code":1,"message":...}`.
fn unauthorized(path: &str, message: &str) -> Response {
    if super::compat::is_compat_path(path) {
        let mut resp = super::compat::refusal(message);
        *resp.status_mut() = StatusCode::UNAUTHORIZED;
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, "Bearer".parse().unwrap());
        return resp;
    }
    (
        [(header::WWW_AUTHENTICATE, "Bearer")],
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_whole_tokens() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
