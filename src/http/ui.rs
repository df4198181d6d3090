//! The dashboard at `/ui/`: a page, its scripts (the views, the strings of
//! each language, the SVG charts) and a style sheet compiled into the
//! binary (no Node build step), served with a Content-Security-Policy that
//! allows no inline script or style, and the login that turns the server's
//! bearer token into a cookie for the page.
//!
//! The cookie is HttpOnly and SameSite=Strict and holds a session, not the
//! token: a random id and an expiry, signed with an HMAC keyed by the
//! token. It differs at each sign-in, works on every instance with the same
//! token (no shared state to check it), stops working when it expires, when
//! the token changes, or at sign-out (`/ui/logout`, which records the id in
//! Redis until the expiry). The server accepts it only on requests that
//! also carry the `X-Delayq-UI` header, which the page's own requests send
//! and a page on another site cannot (it would need a CORS preflight that
//! delayq never grants): actions cannot be forged from elsewhere. In
//! read-only mode the dashboard's requests may only read.

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

use super::guard::constant_time_eq;
use super::AppState;

const INDEX: &str = include_str!("ui/index.html");
/// The views, one file per concern, served as one script: `app.js` last,
/// as it starts the page once every function above it is defined.
const APP: &str = concat!(
    include_str!("ui/app/common.js"),
    include_str!("ui/app/overview.js"),
    include_str!("ui/app/topics.js"),
    include_str!("ui/app/groups.js"),
    include_str!("ui/app/jobs.js"),
    include_str!("ui/app/batches.js"),
    include_str!("ui/app/flows.js"),
    include_str!("ui/app/server.js"),
    include_str!("ui/app.js"),
);
/// The scripts, each served at `/ui/<name>` with the same policy.
const SCRIPTS: &[(&str, &str)] = &[
    ("/ui/app.js", APP),
    ("/ui/i18n.js", include_str!("ui/i18n.js")),
    ("/ui/chart.js", include_str!("ui/chart.js")),
];
const STYLE: &str = include_str!("ui/app.css");

/// The header the dashboard's requests carry.
pub const UI_HEADER: &str = "x-delayq-ui";
/// The login cookie's name.
pub const COOKIE: &str = "delayq_ui";

/// Whether `delayq serve` shows the dashboard (its `--ui`, whose help
/// says what each does: the variants carry no doc comments, which clap
/// would add to the help): `On` shows it with its actions, `ReadOnly`
/// shows it and changes nothing, `Off` does not serve it (`/ui/` is 404).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum UiMode {
    #[default]
    On,
    ReadOnly,
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
    let mut router = Router::new();
    for &(path, text) in SCRIPTS {
        router = router.route(
            path,
            get(move || async move { asset("text/javascript; charset=utf-8", text) }),
        );
    }
    router
        // Relative, so that it works under a proxy's path prefix. The
        // root leads a browser to the dashboard (temporarily: the root is
        // no API of its own, and `--ui off` gives it back to 404).
        .route("/", get(|| async { Redirect::temporary("ui/") }))
        .route("/ui", get(|| async { Redirect::permanent("ui/") }))
        .route(
            "/ui/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/ui/app.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/ui/config", get(config))
        .route("/ui/login", post(login))
        .route("/ui/logout", post(logout))
}

async fn config(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(json!({
        "read_only": state.server.ui == UiMode::ReadOnly,
        "auth": state.server.auth_token.is_some(),
    }))
}

/// A dashboard session: a random id and when it expires (Unix ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub id: String,
    pub expires_ms: u64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn mac(token: &str, id: &str, expires_ms: u64) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(token.as_bytes()).expect("any key length");
    mac.update(format!("delayq dashboard session\n{id}\n{expires_ms}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

impl Session {
    /// A new session lasting `lifetime`.
    pub fn new(lifetime: std::time::Duration) -> Session {
        Session {
            id: uuid::Uuid::new_v4().simple().to_string(),
            expires_ms: now_ms().saturating_add(lifetime.as_millis() as u64),
        }
    }

    /// The cookie value: `id.expiry.hmac`.
    pub fn cookie(&self, token: &str) -> String {
        format!(
            "{}.{}.{}",
            self.id,
            self.expires_ms,
            mac(token, &self.id, self.expires_ms)
        )
    }

    /// The session a cookie value holds, if its signature is right and it
    /// has not expired (sign-out is checked in Redis, by the caller).
    pub fn from_cookie(value: &str, token: &str) -> Option<Session> {
        let mut parts = value.splitn(3, '.');
        let (id, expires, given) = (parts.next()?, parts.next()?, parts.next()?);
        let expires_ms: u64 = expires.parse().ok()?;
        if !constant_time_eq(given.as_bytes(), mac(token, id, expires_ms).as_bytes()) {
            return None;
        }
        (expires_ms > now_ms()).then(|| Session {
            id: id.to_owned(),
            expires_ms,
        })
    }

    /// What is left of its lifetime.
    pub fn left(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.expires_ms.saturating_sub(now_ms()))
    }
}

/// The session of a request from the dashboard (it carries the dashboard's
/// header and a valid, unexpired cookie), not yet checked for sign-out.
pub fn session(headers: &HeaderMap, token: &str) -> Option<Session> {
    if !headers.contains_key(UI_HEADER) {
        return None;
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .filter(|(k, _)| *k == COOKIE)
        .find_map(|(_, v)| Session::from_cookie(v, token))
}

/// A path of plain characters only, or the root.
fn cookie_path(path: &str) -> &str {
    if path.starts_with('/')
        && path.ends_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/-_.~".contains(&b))
    {
        path
    } else {
        "/"
    }
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
    let lifetime = state.server.ui_session;
    let cookie = format!(
        "{COOKIE}={}; Path={}; Max-Age={}; HttpOnly; SameSite=Strict",
        Session::new(lifetime).cookie(&expected.0),
        cookie_path(&login.path),
        lifetime.as_secs().max(1)
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

#[derive(Deserialize, Default)]
struct Logout {
    #[serde(default)]
    path: String,
}

/// Ends the request's session on every instance and clears its cookie.
async fn logout(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    if !headers.contains_key(UI_HEADER) {
        return (
            StatusCode::FORBIDDEN,
            Json(json!({"error": {"code": "unauthorized", "message": "the dashboard signs out from its own page"}})),
        )
            .into_response();
    }
    let logout: Logout = serde_json::from_slice(&body).unwrap_or_default();
    if let Some(token) = &state.server.auth_token {
        if let Some(s) = session(&headers, &token.0) {
            if let Err(e) = state.queue.end_dashboard_session(&s.id, s.left()).await {
                return super::error::ApiError::from(e).into_response();
            }
        }
    }
    let cookie = format!(
        "{COOKIE}=; Path={}; Max-Age=0; HttpOnly; SameSite=Strict",
        cookie_path(&logout.path)
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
