//! The native API under `/v1`: JSON in and out, proper status codes, and
//! errors as `{"error":{"code":"...","message":"..."}}`.
//!
//! | status | when |
//! |---|---|
//! | 200 / 201 / 204 | done / job created / done, nothing to say |
//! | 400 | the body is not JSON of the expected shape (`bad_request`) |
//! | 404 | no such job (`not_found`) or route (`no_route`) |
//! | 405 | the route exists, the method does not (`method_not_allowed`) |
//! | 409 | stale lease token (`stale_lease`), the id exists and `if_exists` is `keep` (`exists`), or a batch's state refuses the request (`conflict`) |
//! | 413 | request body over the limit (`too_large`) |
//! | 422 | a value breaks a documented limit (`invalid`) |
//! | 503 | Redis unreachable or too slow, nothing changed (`unavailable`) |
//! | 504 | a change sent to Redis got no reply in time: it may or may not have been applied (`outcome_unknown`) |
//!
//! Request and reply bodies are the types of [`crate::wire`]. One module per
//! resource: [`jobs`] (push, get, delete, reschedule), [`lease`] (finish,
//! release, nack, touch), [`pop`], [`topics`] (counts, listings, dead
//! letters, pause), [`recurring`] (recurring schedules), [`rate`] (rate
//! limits), [`batches`] (batches of jobs with a callback), [`flows`]
//! (a parent job that waits for its children),
//! [`ops`] (health, readiness, metrics, the OpenAPI document). Every route
//! is one row of [`ROUTES`]: the router is built from it, and the tests
//! check the OpenAPI document ([`openapi`], derived from the handlers and
//! the wire types) against it.

pub mod batches;
pub mod events;
pub mod flows;
pub mod groups;
pub mod instances;
pub mod jobs;
pub mod lease;
pub mod openapi;
pub mod ops;
pub mod pop;
pub mod rate;
pub mod recurring;
pub mod stats;
pub mod tags;
pub mod topics;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::routing::{delete, get, post, put, MethodRouter};
use axum::Router;
use serde::de::DeserializeOwned;

use super::body::{read_body, BodyError};
pub use super::error::ApiError;
pub(crate) use super::error::ApiResult;
use super::AppState;

/// One route: method, path, the handler that serves it, and whether that
/// handler changes the queue (a read-only dashboard may not call it).
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub writes: bool,
    handler: fn() -> MethodRouter<AppState>,
}

/// A route that only reads.
const fn route(
    method: &'static str,
    path: &'static str,
    handler: fn() -> MethodRouter<AppState>,
) -> Route {
    Route {
        method,
        path,
        writes: false,
        handler,
    }
}

/// A route whose handler changes the queue.
const fn write(
    method: &'static str,
    path: &'static str,
    handler: fn() -> MethodRouter<AppState>,
) -> Route {
    Route {
        method,
        path,
        writes: true,
        handler,
    }
}

/// Every native route. The OpenAPI document lists exactly these.
pub const ROUTES: &[Route] = &[
    write("post", "/v1/jobs", || post(jobs::push_one)),
    write("post", "/v1/jobs/batch", || post(jobs::push_batch)),
    route("get", "/v1/jobs/{id}", || get(jobs::get_job)),
    write("delete", "/v1/jobs/{id}", || delete(jobs::delete_job)),
    write("post", "/v1/jobs/{id}/cancel", || post(jobs::cancel)),
    write("post", "/v1/jobs/{id}/reschedule", || {
        post(jobs::reschedule)
    }),
    write("post", "/v1/jobs/{id}/finish", || post(lease::finish)),
    write("post", "/v1/jobs/{id}/nack", || post(lease::nack)),
    write("post", "/v1/jobs/{id}/release", || post(lease::release)),
    write("post", "/v1/jobs/{id}/touch", || post(lease::touch)),
    write("post", "/v1/pop", || post(pop::pop)),
    write("post", "/v1/finish", || post(pop::finish)),
    route("get", "/v1/topics", || get(topics::topics)),
    route("get", "/v1/topics/{topic}/dead", || get(topics::dead_list)),
    write("post", "/v1/topics/{topic}/dead/requeue", || {
        post(topics::dead_requeue)
    }),
    write("delete", "/v1/topics/{topic}/dead", || {
        delete(topics::dead_purge)
    }),
    route("get", "/v1/topics/{topic}/jobs", || get(topics::jobs)),
    write("post", "/v1/topics/{topic}/pause", || post(topics::pause)),
    write("post", "/v1/topics/{topic}/resume", || post(topics::resume)),
    route("get", "/v1/topics/{topic}/groups", || get(groups::list)),
    route("get", "/v1/topics/{topic}/groups/{group}", || {
        get(groups::get_one)
    }),
    write("put", "/v1/topics/{topic}/groups/{group}", || {
        put(groups::put)
    }),
    write("post", "/v1/topics/{topic}/groups/{group}/pause", || {
        post(groups::pause)
    }),
    write("post", "/v1/topics/{topic}/groups/{group}/resume", || {
        post(groups::resume)
    }),
    route("get", "/v1/schedule", || get(topics::schedule)),
    route("get", "/v1/stats/throughput", || get(stats::throughput)),
    route("get", "/v1/topics/{topic}/rate", || get(rate::get)),
    write("put", "/v1/topics/{topic}/rate", || put(rate::put)),
    write("delete", "/v1/topics/{topic}/rate", || delete(rate::delete)),
    route("get", "/v1/recurring", || get(recurring::list)),
    route("get", "/v1/recurring/{name}", || get(recurring::get_one)),
    write("put", "/v1/recurring/{name}", || put(recurring::put)),
    write("delete", "/v1/recurring/{name}", || {
        delete(recurring::delete)
    }),
    write("post", "/v1/recurring/{name}/run", || post(recurring::run)),
    write("post", "/v1/recurring/{name}/pause", || {
        post(recurring::pause)
    }),
    write("post", "/v1/recurring/{name}/resume", || {
        post(recurring::resume)
    }),
    write("post", "/v1/batches", || post(batches::create)),
    route("get", "/v1/batches/{id}", || get(batches::get_one)),
    write("post", "/v1/batches/{id}/jobs", || post(batches::push)),
    write("post", "/v1/batches/{id}/close", || post(batches::close)),
    write("post", "/v1/batches/{id}/cancel", || post(batches::cancel)),
    write("post", "/v1/flows", || post(flows::push)),
    route("get", "/v1/flows/{id}", || get(flows::get_one)),
    write("post", "/v1/flows/{id}/cancel", || post(flows::cancel)),
    route("get", "/v1/tags/{tag}/jobs", || get(tags::jobs)),
    write("post", "/v1/tags/{tag}/cancel", || post(tags::cancel)),
    write("post", "/v1/tags/{tag}/reschedule", || {
        post(tags::reschedule)
    }),
    route("get", "/v1/instances", || get(instances::list)),
    route("get", "/v1/webhooks", || get(instances::webhooks)),
    route("get", "/v1/events", || get(events::events)),
    route("get", "/v1/openapi.json", || get(openapi::openapi)),
    route("get", "/healthz", || get(ops::healthz)),
    route("get", "/readyz", || get(ops::readyz)),
    route("get", "/metrics", || get(ops::metrics)),
    write("post", "/v1/jobs/{id}/progress", || post(lease::progress)),
    write("post", "/v1/jobs/{id}/log", || post(lease::log)),
];

/// The path segments routes take, for the OpenAPI document.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct JobId {
    #[param(max_length = 256)]
    id: String,
}

#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct TopicName {
    #[param(max_length = 128)]
    topic: String,
}

#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct GroupPath {
    #[param(max_length = 128)]
    topic: String,
    #[param(max_length = 128)]
    group: String,
}

#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct BatchId {
    #[param(max_length = 200)]
    id: String,
}

#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct TagName {
    #[param(max_length = 128)]
    tag: String,
}

#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct ScheduleName {
    #[param(max_length = 128)]
    name: String,
}

/// The router, built from [`ROUTES`] (methods of one path merged).
pub fn routes() -> Router<AppState> {
    let mut paths: Vec<(&str, MethodRouter<AppState>)> = Vec::new();
    for r in ROUTES {
        let handler = if r.writes {
            crate::http::guard::writes((r.handler)())
        } else {
            (r.handler)()
        };
        match paths.iter_mut().find(|(p, _)| *p == r.path) {
            Some((_, m)) => *m = std::mem::take(m).merge(handler),
            None => paths.push((r.path, handler)),
        }
    }
    paths
        .into_iter()
        .fold(Router::new(), |router, (path, m)| router.route(path, m))
}

/// Parses a JSON body strictly (unknown fields are errors: a typo in a
/// field name must not silently change what a job does).
pub(crate) fn parse<T: DeserializeOwned>(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<T> {
    let bytes = read_body(state, body).map_err(|e| match e {
        BodyError::TooLarge(message) => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
        }
        BodyError::Unreadable(message) => {
            ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("invalid JSON: {e}"),
        )
    })
}

/// The one path parameter of a route (a job id or a topic), percent-decoded.
/// A path that is not UTF-8 once decoded gets a JSON 400 like every other
/// bad request.
pub struct Segment(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Segment {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(s)| Segment(s))
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("bad path {}: {}", parts.uri.path(), e.body_text()),
                )
            })
    }
}

/// A known path with a method it does not take: a JSON 405.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not take {method}", uri.path()),
    )
}

/// Unknown paths get a JSON 404 that says so (and not "no such job").
pub async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!("no route {}", uri.path()),
    )
}
