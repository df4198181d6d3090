//! What a running job's holder reports: `POST /v1/jobs/{id}/progress`,
//! `/log` and `/finish` (its result), and the log lines a job read returns.

use serde::{Deserialize, Serialize};

/// `POST /v1/jobs/{id}/progress`: the lease token pop gave and the
/// progress (any JSON value but null, at most 1024 bytes serialized).
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ProgressSpec {
    pub token: String,
    /// A number (e.g. 42 for 42 %), or a small JSON value.
    pub progress: serde_json::Value,
}

/// `POST /v1/jobs/{id}/log`: the lease token pop gave and one line (at
/// most 1024 bytes, no control character but tab).
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct LogSpec {
    pub token: String,
    pub line: String,
}

/// One line of a job's log.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = LogLine))]
pub struct LogLineBody {
    /// When it was written (Redis time).
    pub at_ms: i64,
    pub line: String,
}

impl From<crate::job::LogLine> for LogLineBody {
    fn from(l: crate::job::LogLine) -> Self {
        LogLineBody {
            at_ms: l.at_ms,
            line: l.line,
        }
    }
}

/// `POST /v1/jobs/{id}/finish`: the lease token pop gave, and optionally
/// the job's result.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FinishJobSpec {
    pub token: String,
    /// The job's result: any JSON value (`null` too) of at most 64 KiB
    /// serialized and 64 levels of arrays and objects. `GET
    /// /v1/jobs/{id}` shows it on the finished record: as long as the
    /// topic keeps records (`keep_finished`), otherwise for the result
    /// retention (24 h unless configured). Over the limit: 422, nothing
    /// changed, the lease still held.
    #[serde(
        default,
        deserialize_with = "some_value",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "server", schema(value_type = Option<Object>))]
    pub result: Option<serde_json::Value>,
}

/// A field present, `null` included: Some.
fn some_value<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}
