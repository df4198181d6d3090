//! The dashboard at `/ui/`: a page, a script and a style sheet compiled
//! into the binary (no Node build step), served with a Content-Security-
//! Policy that allows no inline script, and the login that turns the
//! server's bearer token into a cookie for the page.
//!
//! The cookie is HttpOnly and SameSite=Strict and holds an HMAC of the
//! token, not the token. The server accepts it only on requests that also
//! carry the `X-Delayq-UI` header, which the page's own requests send and a
//! page on another site cannot (it would need a CORS preflight that delayq
//! never grants): actions cannot be forged from elsewhere. In read-only
//! mode the dashboard's requests may only read.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::json;
use sha2::Sha256;

use super::auth::constant_time_eq;
use super::AppState;

const INDEX: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const STYLE: &str = include_str!("ui/app.css");

/// The header the dashboard's requests carry.
pub const UI_HEADER: &str = "x-delayq-ui";
/// The login cookie's name.
pub const COOKIE: &str = "delayq_ui";

/// Whether `delayq serve` shows the dashboard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UiMode {
    /// Shown, with its actions.
    #[default]
    On,
    /// Shown; it reads but changes nothing.
    ReadOnly,
    /// Not served (`/ui/` is 404).
    Off,
}

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

fn asset(content_type: &'static str, text: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        text,
    )
        .into_response()
}

/// The dashboard's routes (none when it is off).
pub fn routes(mode: UiMode) -> Router<AppState> {
    if mode == UiMode::Off {
        return Router::new();
    }
    Router::new()
        // Relative, so that it works under a proxy's path prefix.
        .route("/ui", get(|| async { Redirect::permanent("ui/") }))
        .route(
            "/ui/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/ui/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/ui/app.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/ui/config", get(config))
        .route("/ui/login", post(login))
}

async fn config(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({
        "read_only": state.server.ui == UiMode::ReadOnly,
        "auth": state.server.auth_token.is_some(),
    }))
}

/// The cookie value for `token`: an HMAC, so the cookie is not the token.
pub fn session(token: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("any key length");
    mac.update(b"delayq dashboard session");
    hex::encode(mac.finalize().into_bytes())
}

/// Whether a request comes from a signed-in dashboard.
pub fn signed_in(headers: &HeaderMap, token: &str) -> bool {
    if !headers.contains_key(UI_HEADER) {
        return false;
    }
    let expected = session(token);
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .any(|(k, v)| k == COOKIE && constant_time_eq(v.as_bytes(), expected.as_bytes()))
}

#[derive(Deserialize)]
struct Login {
    token: String,
    /// The path the dashboard's server is mounted at ("/" or a proxy's
    /// prefix such as "/delayq/"), for the cookie.
    #[serde(default)]
    path: String,
}

async fn login(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    let refused = |status: StatusCode, message: &str| {
        (
            status,
            Json(json!({"error": {"code": "unauthorized", "message": message}})),
        )
            .into_response()
    };
    if !headers.contains_key(UI_HEADER) {
        return refused(
            StatusCode::FORBIDDEN,
            "the dashboard signs in from its own page",
        );
    }
    let Ok(login) = serde_json::from_slice::<Login>(&body) else {
        return refused(StatusCode::BAD_REQUEST, "expected {\"token\": \"...\"}");
    };
    let Some(expected) = &state.server.auth_token else {
        return StatusCode::NO_CONTENT.into_response();
    };
    if !constant_time_eq(login.token.as_bytes(), expected.0.as_bytes()) {
        return refused(StatusCode::UNAUTHORIZED, "wrong token");
    }
    // A path of plain characters only, or the root.
    let path = if login.path.starts_with('/')
        && login.path.ends_with('/')
        && login
            .path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/-_.~".contains(&b))
    {
        login.path
    } else {
        "/".to_owned()
    };
    let cookie = format!(
        "{COOKIE}={}; Path={path}; HttpOnly; SameSite=Strict",
        session(&expected.0)
    );
    (
        StatusCode::NO_CONTENT,
        [(
            header::SET_COOKIE,
            HeaderValue::from_str(&cookie).expect("plain text"),
        )],
    )
        .into_response()
}
