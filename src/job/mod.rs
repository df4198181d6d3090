//! What a job is, what it carries at each step of its life, and the limits
//! on what a producer may send.
//!
//! A job's life: `delayed` (in the schedule, trigger key ticking) ->
//! `ready` (in its topic's ready list) -> `reserved` (leased to a consumer
//! until now + ttr) -> finished (gone; with `keep_finished`, a record in
//! state `finished` is kept for that long). A failed attempt (a nack, or a lease
//! that runs out) goes where the job's retry policy says: `ready` again,
//! `delayed` until the next interval, or `dead` when the attempts are used
//! up. Delete removes it from any state; pushing its id again replaces it.
//!
//! The limits, and the checks of what a producer sends, are in `limits.rs`.

mod children;
mod limits;

use std::time::Duration;

use crate::retry::RetryPolicy;
use crate::trace::HopKind;

pub(crate) use children::children_of;
pub use children::{Child, ChildOutcome, Children};
pub use limits::{
    check_due_at, check_group, check_keep_finished, check_new_batch_id, check_priority, check_tag,
    check_tags, Limits, MAX_DEDUP_KEY_BYTES, MAX_DEDUP_WINDOW, MAX_DUE_AT_MS, MAX_GROUP_BYTES,
    MAX_KEEP_FINISHED, MAX_PRIORITY, MAX_TAGS, MAX_TAG_BYTES, TICK_ID_PREFIX,
};

/// A job to push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJob {
    pub id: String,
    pub topic: String,
    pub body: String,
    /// How long from now (Redis time) until the job is due.
    pub delay: Duration,
    /// Absolute due time (Unix ms, Redis clock); overrides `delay`. A time
    /// in the past means now.
    pub due_at_ms: Option<i64>,
    /// Time to run: how long a popped job stays leased before the attempt
    /// counts as failed.
    pub ttr: Duration,
    /// Retry policy; `None` takes the topic's default, then the queue's.
    pub retry: Option<RetryPolicy>,
    /// What to do when a job with this id exists.
    pub if_exists: IfExists,
    /// Deduplication by key (simple, throttle or debounce); with it, `id`
    /// may be left empty for delayq to choose one in the key's partition.
    pub dedup: Option<Dedup>,
    /// Among a topic's ready jobs, a smaller number is handed out first:
    /// 0 (the default), then 1, ... [`MAX_PRIORITY`]; FIFO within each.
    pub priority: u8,
    /// W3C trace context of the push (see [`crate::trace`]), kept with the
    /// job and handed on; `tracestate` only with a `traceparent`.
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    /// Tags (at most [`MAX_TAGS`], each 1 to [`MAX_TAG_BYTES`] bytes): the
    /// job is listed, cancelled and rescheduled with the tag's other jobs.
    pub tags: Vec<String>,
    /// Groups: the job's group within its topic (1 to [`MAX_GROUP_BYTES`]
    /// bytes, no control characters): at most the group's concurrency
    /// limit of its jobs are reserved at once, pops take turns over the
    /// groups with ready jobs, and a group can be paused on its own. On a
    /// queue split into partitions the job lives in its group's partition:
    /// its id carries the group's hash tag (`{acct:7}:r1`), or is left
    /// empty for delayq to pick one there.
    pub group: Option<String>,
    /// Batches: the batch the job joins (see [`crate::batch`]): its home
    /// takes the id in before the push, and the push only creates (an id
    /// in use is refused, [`crate::Error::Conflict`]); no dedup with it.
    pub batch: Option<String>,
}

impl Default for NewJob {
    fn default() -> Self {
        NewJob {
            id: String::new(),
            topic: String::new(),
            body: String::new(),
            delay: Duration::ZERO,
            due_at_ms: None,
            ttr: crate::defaults::TTR,
            retry: None,
            if_exists: IfExists::Replace,
            dedup: None,
            priority: 0,
            traceparent: None,
            tracestate: None,
            tags: Vec::new(),
            group: None,
            batch: None,
        }
    }
}

/// Pushing an id that exists...
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IfExists {
    /// ...replaces the job atomically: new body, due time and policy.
    #[default]
    Replace,
    /// ...changes nothing and reports [`PushOutcome::Kept`].
    Keep,
}

/// Deduplication of pushes by a key of the producer's choosing, beyond
/// [`IfExists`] on an id. Limits: `key` 1 to [`MAX_DEDUP_KEY_BYTES`]
/// bytes; `window` and `max_wait` 1 ms to [`MAX_DEDUP_WINDOW`]; `window`
/// only and always with throttle and debounce; `max_wait` only with
/// debounce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dedup {
    pub key: String,
    pub mode: DedupMode,
    /// Throttle: how long the first push wins. Debounce: how long after
    /// each push a further push still joins the series.
    pub window: Option<Duration>,
    /// Debounce: the job is never due later than this after the series'
    /// first push (Redis time).
    pub max_wait: Option<Duration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DedupMode {
    /// While the key's job is not finished (delayed, ready, reserved or
    /// waiting for a retry), pushes with the key change nothing. Ends when
    /// it finishes, is deleted or dies.
    Simple,
    /// The first push wins for `window` from that push.
    Throttle,
    /// A push within `window` of the last one replaces the pending job (body
    /// and all) and moves its due time, up to `max_wait`.
    Debounce,
}

impl DedupMode {
    pub const fn as_str(self) -> &'static str {
        match self {
            DedupMode::Simple => "simple",
            DedupMode::Throttle => "throttle",
            DedupMode::Debounce => "debounce",
        }
    }
}

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Delayed,
    Ready,
    Reserved,
    /// Attempts used up; kept for inspection, requeue or purge.
    Dead,
    /// Finished, and its record kept for a while (`keep_finished`): when
    /// and by which attempt, without the body.
    Finished,
}

impl JobState {
    /// Every state, in the order of a job's life.
    pub const ALL: [JobState; 5] = [
        JobState::Delayed,
        JobState::Ready,
        JobState::Reserved,
        JobState::Dead,
        JobState::Finished,
    ];
    /// Their names, as [`as_str`](Self::as_str) gives them.
    pub const NAMES: [&'static str; 5] = [
        JobState::Delayed.as_str(),
        JobState::Ready.as_str(),
        JobState::Reserved.as_str(),
        JobState::Dead.as_str(),
        JobState::Finished.as_str(),
    ];

    /// The state named `s`, as [`as_str`](Self::as_str) names it.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// The state's name: the one place it is written, used in Redis (the
    /// scripts get it through the key layout), on the wire, in metrics
    /// labels and by the CLI.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobState::Delayed => "delayed",
            JobState::Ready => "ready",
            JobState::Reserved => "reserved",
            JobState::Dead => "dead",
            JobState::Finished => "finished",
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobState {
    type Err = String;

    /// As [`parse`](Self::parse), with an error naming the states.
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
            .ok_or_else(|| format!("state {s:?} is not one of {}", Self::NAMES.join(", ")))
    }
}

/// One failed attempt in a job's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedAttempt {
    pub attempt: u32,
    /// When it failed (Unix ms, Redis clock).
    pub at_ms: i64,
    pub error: String,
}

/// One line of a running job's log ([`Queue::log`](crate::Queue::log)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// When it was written, Unix ms (Redis clock).
    pub at_ms: i64,
    pub line: String,
}

/// A stored job, as `get` sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    pub id: String,
    pub topic: String,
    pub body: String,
    pub ttr: Duration,
    /// Unix time (ms, Redis clock) at which the job was or will be due.
    pub due_ms: i64,
    pub state: JobState,
    /// Deliveries so far (since the last requeue).
    pub attempts: u32,
    pub retry: RetryPolicy,
    /// End of the current lease (reserved jobs).
    pub lease_until_ms: Option<i64>,
    /// When the job died (dead jobs).
    pub dead_at_ms: Option<i64>,
    /// When it finished (finished jobs' records; Unix ms, Redis clock).
    pub finished_at_ms: Option<i64>,
    /// When it was cancelled while it ran (what is left of it answers its
    /// holder "cancelled" for a while; Unix ms, Redis clock).
    pub cancelled_at_ms: Option<i64>,
    /// The last failed attempt's error.
    pub last_error: Option<String>,
    /// The last 20 failed attempts, oldest first (a finished job's record
    /// keeps none: see `last_error`).
    pub history: Vec<FailedAttempt>,
    /// Its priority among ready jobs (0: the default).
    pub priority: u8,
    /// The push's W3C trace context, as stored (a finished job's record
    /// keeps none).
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    /// Its tags (none on a finished job's record).
    pub tags: Vec<String>,
    /// Its group, if it has one.
    pub group: Option<String>,
    /// The batch it belongs to, if any ([`crate::batch`]).
    pub batch: Option<String>,
    /// The progress its holder last reported
    /// ([`Queue::progress`](crate::Queue::progress)); it stays across
    /// attempts and in a finished job's record.
    pub progress: Option<serde_json::Value>,
    /// The result its finish carried
    /// ([`Queue::finish_with_result`](crate::Queue::finish_with_result)),
    /// on its finished record; `Some(Null)` for a result of null. Listings
    /// leave it out: [`Queue::get`](crate::Queue::get) reads it.
    pub result: Option<serde_json::Value>,
    /// A flow's parent (the `flow` module), once released: each child's
    /// outcome and result. Listings leave it out.
    pub children: Option<Children>,
    /// Listings only: the body's size in bytes when the listing left it out
    /// (`body` is then empty): a body over [`LIST_BODY_BYTES`], or one past
    /// [`LIST_PAGE_BODY_BYTES`] of bodies in the page. `get` reads it whole.
    pub body_left_out: Option<u64>,
}

/// The largest body a listing carries; a larger one is left out (see
/// [`Job::body_left_out`]).
pub const LIST_BODY_BYTES: usize = 64 * 1024;

/// The most body bytes one listing page carries, its jobs together (as a
/// pop's reply is bounded): bodies past it are left out, so a page of
/// large jobs costs delayq and its client a few MB, not the page times
/// the body size.
pub const LIST_PAGE_BODY_BYTES: usize = 4 * 1024 * 1024;

/// A job handed to a consumer, with the lease that goes with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub id: String,
    pub topic: String,
    pub body: String,
    /// The lease token: finishing with it fails once the job was delivered
    /// again to someone else.
    pub token: String,
    /// Unix time (ms, Redis clock) at which the job was due.
    pub due_ms: i64,
    /// Redis time (µs) at the hand-over; `popped_at_us - due_ms * 1000` is
    /// how late it was.
    pub popped_at_us: i64,
    /// 1 on the first delivery.
    pub attempts: u32,
    /// End of the lease (Unix ms, Redis clock): finish, nack or touch
    /// before then.
    pub lease_until_ms: i64,
    /// The push's W3C trace context, as stored.
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    /// A flow's parent (the `flow` module): each child's outcome and result,
    /// by child id. None on other jobs.
    pub children: Option<Children>,
}

impl Delivery {
    /// A delivery's hop (`kind`: a pop's hand-over, a webhook request): the
    /// `traceparent` to hand on with it (None for a job without one) and the
    /// hop's span, which lasts while the caller keeps it.
    pub fn hand_over(&self, kind: HopKind) -> (Option<String>, tracing::Span) {
        match crate::trace::Hop::child_of(self.traceparent.as_deref(), self.tracestate.as_deref()) {
            Some(hop) => {
                let span = hop.span(kind, &self.id, &self.topic);
                tracing::debug!(parent: &span, attempt = self.attempts, "handed over");
                (Some(hop.handed_on()), span)
            }
            None => (None, tracing::Span::none()),
        }
    }
}

/// The result of a push.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The job the push created or changed; for a deduplicated push, the
    /// job that was already there.
    pub id: String,
    /// Unix time (ms, Redis clock) at which the job falls due (for a kept
    /// job: its existing due time).
    pub due_ms: i64,
    pub outcome: PushOutcome,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushOutcome {
    Created,
    /// An existing job with this id was replaced.
    Replaced,
    /// The id existed and [`IfExists::Keep`] left it as it was.
    Kept,
    /// A job with the dedup key was there (simple, throttle): nothing
    /// changed; `id` names that job.
    Deduplicated,
    /// Debounce: the pending job with the key (`id`) took this push's body
    /// and fields and its new due time.
    Debounced,
}

/// Where a nacked job went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nacked {
    /// `Ready`, `Delayed` (waiting for its next attempt) or `Dead`.
    pub state: JobState,
    /// When the next attempt is due (Unix ms), or when it died.
    pub due_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_names_read_back_and_a_wrong_one_names_them_all() {
        for state in JobState::ALL {
            assert_eq!(state.as_str().parse::<JobState>(), Ok(state));
        }
        assert_eq!(
            "gone".parse::<JobState>(),
            Err("state \"gone\" is not one of delayed, ready, reserved, dead, finished".to_owned())
        );
    }
}
