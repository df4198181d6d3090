//! `/v1/jobs`: push (one or a batch), read, reschedule, and the lease
//! holder's finish, release, nack and touch.

use serde::{Deserialize, Serialize};

use super::DueAt;
use crate::job::JobState;
// For the doc links only (a link written inline would show in the
// OpenAPI descriptions, which are the doc comments).
#[cfg(doc)]
use crate::job::Pushed;

/// `POST /v1/jobs` (and each job of a batch). Unknown fields are refused:
/// a typo in a field name must not silently change what a job does.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Generated (a UUID) when absent; with a dedup key or a group, in
    /// the key's or the group's partition of a split queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(max_length = 256))]
    pub id: Option<String>,
    #[cfg_attr(feature = "server", schema(max_length = 128))]
    pub topic: String,
    /// Text; to send JSON, encode it into a string.
    #[serde(default, deserialize_with = "body_text")]
    #[cfg_attr(feature = "server", schema(default = ""))]
    pub body: String,
    /// Due after this long (give this or `due_at`, not both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<DueAt>,
    /// Time to run: a lease lasts this long (default 60000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(minimum = 1, default = 60000))]
    pub ttr_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySpec>,
    #[serde(default, skip_serializing_if = "IfExistsSpec::is_replace")]
    #[cfg_attr(feature = "server", schema(default = "replace"))]
    pub if_exists: IfExistsSpec,
    /// Tags (at most 8, each 1 to 128 bytes, no control characters; a
    /// repeat counts once): list, cancel or reschedule the tag's jobs
    /// together under `/v1/tags/{tag}`.
    #[serde(
        default,
        deserialize_with = "tag_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    #[cfg_attr(feature = "server", schema(max_items = 8))]
    pub tags: Vec<String>,
    /// Its group within the topic (1 to 128 bytes, no control
    /// characters): at most the group's concurrency of its jobs run at
    /// once, pops take turns over the topic's groups, and a group can be
    /// paused (`/v1/topics/{topic}/groups/{group}`). On a queue split
    /// into partitions a grouped job lives in its group's partition: an
    /// id of its own carries the group's hash tag (`{acct:7}:r1` for group
    /// `acct:7`), else 422; without an id delayq picks one there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(min_length = 1, max_length = 128))]
    pub group: Option<String>,
    /// The batch the job joins (`POST /v1/batches`; none such: 404, one
    /// that fired or was cancelled: 409): only created (an id in use: 409),
    /// no dedup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(min_length = 1, max_length = 200))]
    pub batch: Option<String>,
    /// W3C trace context, kept with the job and handed on; overrides the
    /// request's `traceparent` header. Invalid: 400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "server",
        schema(
            min_length = 55,
            max_length = 55,
            example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        )
    )]
    pub traceparent: Option<String>,
    /// W3C tracestate (needs `traceparent`), at most 512 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(max_length = 512))]
    pub tracestate: Option<String>,
    /// Among the topic's ready jobs, a smaller number is handed out first:
    /// 0 (the default), then 1 ... 9; first in, first out within each.
    #[serde(
        default,
        deserialize_with = "whole_priority",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "server", schema(minimum = 0, maximum = 9, default = 0))]
    pub priority: Option<i64>,
    /// Deduplication by key, decided before `if_exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<DedupSpec>,
}

/// A push's deduplication key and mode. `simple`: while the key's job is
/// not finished (delayed, ready, reserved, waiting to retry), pushes with
/// the key are `deduplicated`; it ends when the job finishes, is deleted or
/// dies. `throttle`: the first push wins for `window_ms`; later pushes
/// within it are `deduplicated`. `debounce`: a push within `window_ms` of
/// the last one replaces the key's pending job (body and all) and moves its
/// due time (`debounced`), never beyond `max_wait_ms` after the series'
/// first push; once the job fell due or was handed out, a push starts a
/// new job. Without `id`, delayq picks one in the key's partition.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DedupSpec {
    #[cfg_attr(feature = "server", schema(min_length = 1, max_length = 256))]
    pub key: String,
    pub mode: DedupModeSpec,
    /// Required with throttle and debounce; not taken by simple.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(minimum = 1, maximum = 2_592_000_000u64))]
    pub window_ms: Option<u64>,
    /// Debounce only: the latest the job may be due, after the first push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(minimum = 1, maximum = 2_592_000_000u64))]
    pub max_wait_ms: Option<u64>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DedupModeSpec {
    Simple,
    Throttle,
    Debounce,
}

/// What a push does to an existing job with the same id.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum IfExistsSpec {
    /// Replace it (200 `replaced`).
    #[default]
    Replace,
    /// Leave it alone (409 `exists`).
    Keep,
}

impl IfExistsSpec {
    fn is_replace(&self) -> bool {
        *self == IfExistsSpec::Replace
    }
}

/// A job's retry policy.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// Waits before attempts 2, 3, ...
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(max_items = 64))]
    pub intervals: Vec<Interval>,
    /// Default: one more than the intervals; unlimited without intervals.
    #[cfg_attr(feature = "server", schema(minimum = 1))]
    pub max_attempts: Option<u32>,
}

/// A retry interval: milliseconds, or a duration with its unit.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum Interval {
    /// Milliseconds.
    Ms(u64),
    /// 500ms, 30s, 2m, 1h, 15d.
    Text(String),
}

/// A job's body is a string; JSON of another kind is refused with how to
/// send it (encoded into a string), not only "expected a string".
fn body_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error as _;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => Ok(s),
        other => {
            let encoded = serde_json::to_string(&other.to_string()).unwrap_or_default();
            let shown = if encoded.len() > 80 {
                "\"...\"".to_owned()
            } else {
                encoded
            };
            Err(D::Error::custom(format!(
                "body must be a string: to send JSON, encode it into one (\"body\": {shown})"
            )))
        }
    }
}

/// A priority is a whole number; anything else is refused naming the field
/// (its range is checked with the other limits).
fn whole_priority<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error as _;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::Number(n) if n.as_i64().is_some() => Ok(n.as_i64()),
        other => Err(D::Error::custom(format!(
            "priority must be a whole number from 0 (the default) to {}, not {other}",
            crate::job::MAX_PRIORITY
        ))),
    }
}

/// Tags are a list of strings; anything else is refused naming the field.
fn tag_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    use serde::de::Error as _;
    Vec::<String>::deserialize(d)
        .map_err(|e| D::Error::custom(format!("tags must be a list of strings ({e})")))
}

fn some_body_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    body_text(d).map(Some)
}

/// What a push did.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Created,
    Replaced,
    /// The dedup key's job was there; nothing changed; `id` is that job.
    Deduplicated,
    /// The debounce key's pending job (`id`) took this push.
    Debounced,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Replaced => "replaced",
            Outcome::Deduplicated => "deduplicated",
            Outcome::Debounced => "debounced",
        }
    }
}

/// A pushed job: 201 created; 200 replaced, deduplicated or debounced.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Pushed))]
pub struct PushedBody {
    pub id: String,
    pub due_at_ms: i64,
    pub outcome: Outcome,
}

/// A job as stored.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Job))]
pub struct JobBody {
    pub id: String,
    pub topic: String,
    pub body: String,
    pub state: JobState,
    pub due_at_ms: i64,
    pub ttr_ms: u64,
    /// Deliveries so far (since the last requeue).
    pub attempts: u32,
    pub retry: Retry,
    /// End of the current lease (reserved jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until_ms: Option<i64>,
    /// When the job died (dead jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_at_ms: Option<i64>,
    /// When it finished (state finished: a record kept by
    /// `--keep-finished`, Redis time). Its `attempts` is the attempt that
    /// finished it; its body is not kept (empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    /// When it was cancelled while it ran (`POST /v1/jobs/{id}/cancel`,
    /// Redis time): what is left of it answers its holder's touch, nack
    /// and finish 409 `cancelled` for a while, then goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_at_ms: Option<i64>,
    /// The last failed attempt's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The last 20 failed attempts, oldest first.
    pub history: Vec<Attempt>,
    /// W3C trace context of the push, as stored (only for a job pushed
    /// with one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// Its priority (1 to 9; absent: 0, the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(minimum = 1, maximum = 9))]
    pub priority: Option<u8>,
    /// Its tags (none on a finished job's record).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Its group, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The batch it belongs to, if any (a finished job's record keeps none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    /// A flow's child: its parent's id (`GET /v1/flows/{id}`), in place of
    /// `batch` (a finished job's record keeps none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    /// The progress its holder last reported (`POST
    /// /v1/jobs/{id}/progress`); it stays across attempts and in a
    /// finished job's record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
    /// `GET /v1/jobs/{id}` only: the result its finish carried (any JSON
    /// value, at most 64 KiB), on its finished record: kept as long as the
    /// record (`keep_finished`), or else for the result retention (24 h
    /// unless configured). Absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// `GET /v1/jobs/{id}` only, a flow's parent (`POST /v1/flows`) once
    /// released: each child's outcome and result, by child id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<std::collections::BTreeMap<String, super::ChildBody>>,
    /// `GET /v1/jobs/{id}` only: its log, oldest line first (the last 100
    /// lines, each at most 1024 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<Vec<super::LogLineBody>>,
    /// In listings only: the body's size in bytes when the listing left it
    /// out (`body` is then ""): a body over 64 KiB, or one past 4 MiB of
    /// bodies in the page. `GET /v1/jobs/{id}` returns it whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_left_out: Option<u64>,
}

/// A retry policy as stored.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Retry {
    pub intervals_ms: Vec<u64>,
    pub max_attempts: Option<u32>,
}

/// One failed attempt.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Attempt {
    pub attempt: u32,
    pub at_ms: i64,
    pub error: String,
}

/// `POST /v1/jobs/{id}/reschedule`: a new due time (`delay_ms` or
/// `due_at`, none = now) and optionally a new body.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RescheduleSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<DueAt>,
    #[serde(
        default,
        deserialize_with = "some_body_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub body: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Rescheduled {
    pub id: String,
    pub due_at_ms: i64,
}

/// `POST /v1/jobs/{id}/cancel`: the job is gone; `was` is the state it was
/// in (`reserved`: it was running, and its holder's next touch, nack or
/// finish is answered 409 `cancelled`).
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Cancelled {
    pub id: String,
    pub was: JobState,
}

/// `POST /v1/jobs/{id}/finish` and `/release`: the lease token pop gave.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    pub token: String,
}

/// `POST /v1/jobs/{id}/nack`: a failed attempt.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NackSpec {
    pub token: String,
    /// Overrides the retry policy's next interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Why it failed (kept in the job's history).
    #[serde(default)]
    pub error: String,
}

/// Where a nacked job went: ready, delayed (a retry) or dead.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Nacked))]
pub struct NackedBody {
    pub id: String,
    pub state: JobState,
    pub due_at_ms: i64,
}

/// `POST /v1/jobs/{id}/touch`: extend a lease.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TouchSpec {
    pub token: String,
    /// New lease length from now (default: the job's ttr).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(minimum = 1))]
    pub ttr_ms: Option<u64>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Touched {
    pub id: String,
    pub lease_until_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the client sends is what the server reads: defaults are left
    /// out, and a body of another JSON kind is refused with how to send it.
    #[test]
    fn a_job_spec_reads_back_as_sent() {
        let spec = JobSpec {
            topic: "t".into(),
            due_at: Some(DueAt::from_text("2027-03-28T09:00:00Z")),
            retry: Some(RetrySpec {
                intervals: vec![Interval::Text("2m".into()), Interval::Ms(500)],
                max_attempts: None,
            }),
            ..JobSpec::default()
        };
        let sent = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            sent,
            serde_json::json!({"topic": "t", "body": "", "due_at": "2027-03-28T09:00:00Z",
                "retry": {"intervals": ["2m", 500], "max_attempts": null}})
        );
        let read: JobSpec = serde_json::from_value(sent).unwrap();
        assert_eq!(read.due_at, spec.due_at);
        assert_eq!(read.if_exists, IfExistsSpec::Replace);
        let e = serde_json::from_str::<JobSpec>(r#"{"topic":"t","body":{"a":1}}"#).unwrap_err();
        assert!(e.to_string().contains("encode it into one"), "{e}");
        let e = serde_json::from_str::<JobSpec>(r#"{"topic":"t","dleay_ms":5}"#).unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }
}
