//! `/v1/flows`: push a flow (a parent job that waits for its children, a
//! tree), read and cancel it (see [`crate::flow`]).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;

use super::jobs::{new_job, HeaderTrace};
use super::{parse, ApiError, ApiResult, Segment};
use crate::flow::{ChildDead, NewFlow};
use crate::http::AppState;
use crate::wire::{ChildDeadSpec, ErrorReply, FlowBody, FlowCancelled, FlowPushedBody, FlowSpec};

/// Push a flow: a parent job that waits for its children
///
/// The leaves are pushed at once; each parent is pushed once its children
/// have their outcomes (due its `delay_ms` after), and is handed out with
/// them (`children`). The whole tree is checked before the first write.
#[utoipa::path(post, path = "/v1/flows", operation_id = "pushFlow", request_body = FlowSpec,
    params(super::jobs::TraceHeaders),
    responses(
        (status = 201, description = "Pushed: the root's id and every job's id", body = FlowPushedBody),
        (status = 409, description = "A parent's id or a leaf's id is in use (conflict); nothing of the flow stays", body = ErrorReply),
    ))]
pub(super) async fn push(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<FlowPushedBody>)> {
    let spec: FlowSpec = parse(&state, body)?;
    let flow = new_flow(&spec, &crate::trace::from_headers(&headers), "")?;
    let pushed = state.queue.push_flow(&flow).await?;
    Ok((
        StatusCode::CREATED,
        Json(FlowPushedBody {
            id: pushed.id,
            jobs: pushed.jobs,
        }),
    ))
}

/// A node and its children as the library takes them; a refusal names the
/// job by its id, else its place (`children[1].children[0]`; "" is the
/// root). A parent needs its id (it names its flow: no UUID is picked).
fn new_flow(spec: &FlowSpec, header: &HeaderTrace, place: &str) -> ApiResult<NewFlow> {
    let at = match &spec.job.id {
        Some(id) => format!("flow job {id:?}"),
        None if place.is_empty() => "flow job (the root)".to_owned(),
        None => format!("flow job {place}"),
    };
    let named = |e: ApiError| ApiError::new(e.status, e.code, format!("{at}: {}", e.message));
    let job = new_job(&spec.job, header).map_err(named)?;
    if spec.children.is_empty() {
        if spec.on_child_dead.is_some() {
            return Err(named(ApiError::invalid(
                "on_child_dead is a parent's (a job with children)",
            )));
        }
    } else if spec.job.id.is_none() {
        return Err(named(ApiError::invalid(
            "a parent needs an id (it names its flow)",
        )));
    }
    let children = spec
        .children
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let place = match place {
                "" => format!("children[{i}]"),
                _ => format!("{place}.children[{i}]"),
            };
            new_flow(c, header, &place)
        })
        .collect::<ApiResult<_>>()?;
    Ok(NewFlow {
        job,
        children,
        on_child_dead: match spec.on_child_dead.unwrap_or_default() {
            ChildDeadSpec::Fail => ChildDead::Fail,
            ChildDeadSpec::Ignore => ChildDead::Ignore,
        },
    })
}

/// A flow's state and its children's counts
#[utoipa::path(get, path = "/v1/flows/{id}", operation_id = "getFlow", params(super::JobId),
    responses((status = 200, description = "The flow", body = FlowBody),
        (status = 404, description = "No such flow (or its retention ran out)", body = ErrorReply)))]
pub(super) async fn get_one(
    State(state): State<AppState>,
    Segment(id): Segment,
) -> ApiResult<Json<FlowBody>> {
    match state.queue.flow(&id).await? {
        Some(f) => Ok(Json(f.into())),
        None => Err(crate::Error::NoFlow(id).into()),
    }
}

/// Cancel a waiting flow: its parent never runs; its children not handed
/// out are deleted, down the tree
#[utoipa::path(post, path = "/v1/flows/{id}/cancel", operation_id = "cancelFlow",
    params(super::JobId),
    responses((status = 200, description = "How many jobs were deleted", body = FlowCancelled),
        (status = 404, description = "No such flow", body = ErrorReply),
        (status = 409, description = "Its parent was released or failed: it is a job (conflict)", body = ErrorReply)))]
pub(super) async fn cancel(
    State(state): State<AppState>,
    Segment(id): Segment,
) -> ApiResult<Json<FlowCancelled>> {
    let deleted = state.queue.cancel_flow(&id).await?;
    Ok(Json(FlowCancelled { deleted }))
}
