//! `/v1/tags/{tag}`: a tag's jobs listed, cancelled or rescheduled a page at
//! a time.

use serde::{Deserialize, Serialize};

use super::{DueAt, JobBody};
use crate::defaults::TAG_PAGE;
use crate::job::JobState;

/// `GET /v1/tags/{tag}/jobs?cursor=&limit=`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
pub struct TagJobsQuery {
    /// The `cursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Most index entries looked at.
    #[serde(default = "page")]
    #[cfg_attr(feature = "server", param(minimum = 1, maximum = 1000, default = page))]
    pub limit: usize,
}

fn page() -> usize {
    TAG_PAGE
}

/// A page of a tag's jobs, by partition then id.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TagJobs {
    pub tag: String,
    pub jobs: Vec<JobBody>,
    /// Where the next page starts; null on the last page.
    pub cursor: Option<String>,
}

/// `POST /v1/tags/{tag}/cancel` (an empty body: the first page of 500).
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TagCancelSpec {
    /// Most jobs looked at (default 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(minimum = 1, maximum = 1000))]
    pub limit: Option<usize>,
    /// The `cursor` of the previous reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// `POST /v1/tags/{tag}/reschedule`: `shift_ms` or `due_at`, one of them.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TagRescheduleSpec {
    /// Each job's own due time plus this (negative: earlier, never before
    /// now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shift_ms: Option<i64>,
    /// One due time for all of them (a time past means now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<DueAt>,
    /// Most jobs looked at (default 500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(minimum = 1, maximum = 1000))]
    pub limit: Option<usize>,
    /// The `cursor` of the previous reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// What a cancel or reschedule by tag did on one page.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TagChanged {
    /// Jobs cancelled or moved.
    pub changed: u64,
    /// Jobs left alone: reserved (handed out), or dead for a reschedule.
    pub skipped: Vec<TagSkipped>,
    /// Where the next page starts; null when the tag's jobs are done.
    pub cursor: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct TagSkipped {
    pub id: String,
    pub state: JobState,
}

impl From<crate::queue::TagChange> for TagChanged {
    fn from(c: crate::queue::TagChange) -> Self {
        TagChanged {
            changed: c.changed,
            skipped: c
                .skipped
                .into_iter()
                .map(|(id, state)| TagSkipped { id, state })
                .collect(),
            cursor: c.cursor,
        }
    }
}

// The bounds are read from the OpenAPI document, which only the server has.
#[cfg(all(test, feature = "server"))]
mod tests {
    use super::*;
    use crate::defaults::MAX_TAG_PAGE;
    use utoipa::{IntoParams, PartialSchema};

    /// The OpenAPI document's bounds (literals: utoipa takes no consts
    /// there) are the ones the queue checks.
    #[test]
    fn the_documented_page_bounds_are_the_defaults() {
        let max = serde_json::json!(MAX_TAG_PAGE);
        for schema in [TagCancelSpec::schema(), TagRescheduleSpec::schema()] {
            let schema = serde_json::to_value(schema).unwrap();
            assert_eq!(schema["properties"]["limit"]["maximum"], max, "{schema}");
        }
        let params = serde_json::to_value(TagJobsQuery::into_params(|| None)).unwrap();
        let limit = &params[1]["schema"];
        assert_eq!(limit["maximum"], max, "{params}");
        assert_eq!(limit["default"], serde_json::json!(TAG_PAGE), "{params}");
    }
}
