//! The OpenAPI 3.1 document of the native API, derived from the handlers'
//! `#[utoipa::path]` attributes and the wire types ([`crate::wire`]).
//!
//! What every route shares is added here by rule rather than at each
//! route: 401 on every route but `/healthz` (the token guards them all),
//! 503 on every route that reads Redis, 504 on every route that changes
//! the queue (a change whose outcome is unknown), 400 and 422 on every route that
//! reads a path segment, a query or a body, and 413 on every one that reads
//! a body.

use std::sync::LazyLock;

use axum::response::{IntoResponse, Response as HttpResponse};

use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::{batches, events, flows, groups, stats};
use super::{instances, jobs, lease, ops, pop, rate, recurring, tags, topics};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "delayq native API",
        version = "1",
        description = "Delay queue on Redis: jobs fire on time, never early, never lost. Times are Unix milliseconds of the Redis clock."
    ),
    paths(
        jobs::push_one, jobs::push_batch, jobs::get_job, jobs::delete_job, jobs::reschedule,
        jobs::cancel,
        lease::finish, lease::release, lease::nack, lease::touch,
        pop::pop, pop::finish,
        topics::topics, topics::dead_list, topics::dead_requeue, topics::dead_purge,
        topics::jobs, topics::pause, topics::resume, topics::schedule,
        rate::get, rate::put, rate::delete,
        recurring::list, recurring::get_one, recurring::put, recurring::delete,
        recurring::run, recurring::pause, recurring::resume,
        instances::list, instances::webhooks,
        openapi, ops::healthz, ops::readyz, ops::metrics,
        stats::throughput,
        events::events,
        tags::jobs, tags::cancel, tags::reschedule,
        groups::list, groups::get_one, groups::put, groups::pause, groups::resume,
        lease::progress, lease::log,
        batches::create, batches::get_one, batches::push, batches::close, batches::cancel,
        flows::push, flows::get_one, flows::cancel,
    ),
    components(schemas(crate::wire::ErrorReply, crate::wire::EventGap)),
    modifiers(&Shared),
    security(("bearer" = []))
)]
struct Document;

/// The document.
pub fn document() -> utoipa::openapi::OpenApi {
    Document::openapi()
}

/// The document as served at `/v1/openapi.json`, built once.
pub fn json() -> &'static str {
    static JSON: LazyLock<String> = LazyLock::new(|| {
        document()
            .to_pretty_json()
            .expect("the OpenAPI document serializes")
    });
    &JSON
}

/// The responses every route shares, and the bearer scheme.
struct Shared;

impl Modify for Shared {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("--auth-token on the server (DELAYQ_AUTH_TOKEN)"))
                    .build(),
            ),
        );
        for (path, item) in doc.paths.paths.iter_mut() {
            let ops = [
                ("get", &mut item.get),
                ("put", &mut item.put),
                ("post", &mut item.post),
                ("delete", &mut item.delete),
            ];
            for (method, op) in ops {
                if let Some(op) = op {
                    shared_responses(path, method, op);
                }
            }
        }
    }
}

fn error(description: &str) -> RefOr<Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                utoipa::openapi::ContentBuilder::new()
                    .schema(Some(utoipa::openapi::Ref::from_schema_name("Error")))
                    .build(),
            )
            .build(),
    )
}

fn shared_responses(path: &str, method: &str, op: &mut Operation) {
    if path == "/healthz" {
        // Open to all: load balancers probe it without a token.
        op.security = Some(Vec::new());
        return;
    }
    let responses = &mut op.responses.responses;
    let mut add = |status: &str, description: &str| {
        responses
            .entry(status.to_owned())
            .or_insert_with(|| error(description));
    };
    let reads_input =
        op.request_body.is_some() || op.parameters.as_ref().is_some_and(|p| !p.is_empty());
    if op.request_body.is_some() {
        add("413", "Body over the limit (too_large)");
    }
    if reads_input {
        add("400", "Not JSON of the expected shape (bad_request)");
        add("422", "A value breaks a documented limit (invalid)");
    }
    if path.starts_with("/v1/") && path != "/v1/openapi.json" {
        add("503", "Redis unreachable (unavailable)");
    }
    let writes = super::ROUTES
        .iter()
        .any(|r| r.path == path && r.method == method && r.writes);
    if writes {
        add(
            "504",
            "Sent to Redis, no reply in time: the change may or may not have been applied (outcome_unknown)",
        );
    }
    add(
        "401",
        "The server requires a bearer token and the request had none or another (unauthorized)",
    );
}

/// This document
#[utoipa::path(get, path = "/v1/openapi.json", operation_id = "getOpenApi",
    responses((status = 200, description = "OpenAPI 3.1", body = Object)))]
pub(super) async fn openapi() -> HttpResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json(),
    )
        .into_response()
}
