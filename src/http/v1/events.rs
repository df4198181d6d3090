//! `/v1/events`: the event stream as Server-Sent Events.
//!
//! Each client is read for on its own, by a bounded poll (no connection is
//! held: each read is one script call per partition on the shared
//! connection): while events come, one read per 100 events of each
//! partition; while none come, one read per partition every
//! [`IDLE_POLL`]. At most [`MAX_CLIENTS`] streams per process at once,
//! so the idle cost is bounded too.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::Stream;

use super::{ApiError, ApiResult};
use crate::error::Error;
use crate::http::AppState;
use crate::queue::EventRead;
use crate::shutdown::Shutdown;
use crate::wire::{EventGap, EventsQuery};
use crate::Queue;

/// Most event streams one delayq process serves at once.
pub const MAX_CLIENTS: usize = 64;
/// How long a stream waits before it looks again when nothing came.
pub const IDLE_POLL: Duration = Duration::from_millis(250);
/// Most events one read takes from each partition.
const PAGE: usize = 100;

static CLIENTS: AtomicUsize = AtomicUsize::new(0);

/// One stream's place among the [`MAX_CLIENTS`]; given back when dropped.
struct Slot;

impl Slot {
    fn take() -> Option<Slot> {
        CLIENTS
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_CLIENTS).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        CLIENTS.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Tail {
    queue: Queue,
    topics: Vec<String>,
    pos: String,
    pending: VecDeque<SseEvent>,
    stop: Shutdown,
    _slot: Slot,
}

impl Tail {
    fn take(&mut self, read: EventRead) {
        if !read.gaps.is_empty() {
            let gap = EventGap {
                message: format!(
                    "events were missed: the position asked for is older than what partition(s) \
                     {:?} keep (events_kept); what follows starts at the oldest kept",
                    read.gaps
                ),
                partitions: read.gaps,
            };
            if let Ok(e) = SseEvent::default().event("gap").json_data(&gap) {
                self.pending.push_back(e);
            }
        }
        for (pos, event) in read.events {
            if let Ok(e) = SseEvent::default().id(pos).json_data(&event) {
                self.pending.push_back(e);
            }
        }
        self.pos = read.position;
    }

    /// Waits `d`, or until the server stops (false).
    async fn wait(&self, d: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = self.stop.wait() => false,
        }
    }
}

/// Follow what happens to jobs (Server-Sent Events)
///
/// pushed, fired, delivered, finished, failed, retried and dead, as they
/// happen. Each message's `data:` is an Event, its `id:` the position to
/// resume after: send it back as `Last-Event-ID` (or `?after=`) to get
/// exactly the events that followed, for as long as the stream keeps them
/// (`events_kept` per partition); an older position gets an `event: gap`
/// (data: EventGap) first. Needs the event stream on (`--events`): off,
/// 409 `events_off`. At most 64 streams per delayq process (503
/// `too_many_streams`).
#[utoipa::path(get, path = "/v1/events", operation_id = "followEvents",
    params(EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (wins over `after`)")),
    responses(
        (status = 200, description = "A stream of events, each `data:` an Event; `event: gap` (data: EventGap) when events were missed",
            content_type = "text/event-stream", body = crate::wire::Event),
        (status = 409, description = "The event stream is off (events_off): start delayq with --events", body = crate::wire::ErrorReply),
        (status = 503, description = "Redis unreachable (unavailable), or too many streams (too_many_streams)", body = crate::wire::ErrorReply),
    ))]
pub(super) async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>> {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m);
    let Query(q) = q.map_err(|e| bad(e.body_text()))?;
    let queue = state.queue.clone();
    if !queue.events_on() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "events_off",
            crate::queue::EVENTS_OFF,
        ));
    }
    let topics: Vec<String> = q
        .topics
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    for t in &topics {
        queue
            .limits()
            .check_topic(t)
            .map_err(|e| bad(format!("topics: {e}")))?;
    }
    let after = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| bad("Last-Event-ID is not text".into()))?
                .to_owned(),
        ),
        None => q.after.clone(),
    };
    let slot = Slot::take().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            format!("this delayq already serves {MAX_CLIENTS} event streams; try again later"),
        )
    })?;
    let pos = match after {
        Some(a) => a,
        None => queue.events_now().await?,
    };
    // The first read here, so a bad position is a 400, not a broken stream.
    let first = queue
        .events_after(&pos, &topics, PAGE)
        .await
        .map_err(|e| match e {
            Error::Invalid(m) => bad(m),
            e => e.into(),
        })?;
    let stop = queue.closed();
    let mut tail = Tail {
        queue,
        topics,
        pos,
        pending: VecDeque::new(),
        stop,
        _slot: slot,
    };
    tail.take(first);
    let stream = futures::stream::unfold(tail, |mut t| async move {
        loop {
            if let Some(e) = t.pending.pop_front() {
                return Some((Ok(e), t));
            }
            if t.stop.is_triggered() {
                return None;
            }
            match t.queue.events_after(&t.pos, &t.topics, PAGE).await {
                Ok(read) => {
                    let idle =
                        read.events.is_empty() && read.gaps.is_empty() && read.position == t.pos;
                    t.take(read);
                    if idle && !t.wait(IDLE_POLL).await {
                        return None;
                    }
                }
                Err(e) => {
                    // Redis away: keep the client, look again.
                    tracing::warn!(error = %e, "event stream read failed");
                    if !t.wait(Duration::from_secs(1)).await {
                        return None;
                    }
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
