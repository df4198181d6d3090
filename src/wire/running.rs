//! What a running job's holder reports: `POST /v1/jobs/{id}/progress` and
//! `/log`, and the log lines a job read returns.

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
