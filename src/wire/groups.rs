//! `/v1/topics/{topic}/groups`: a topic's groups, their figures, limits and
//! pauses.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// A group and its figures: the library's own type, sent as it is.
pub use crate::store::group::{Group, GroupPage};

/// `GET /v1/topics/{topic}/groups?after=&limit=`.
#[derive(Serialize, Deserialize, IntoParams, Debug, Clone)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct GroupsQuery {
    /// The `next` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Most groups in the page.
    #[serde(default = "page")]
    #[param(minimum = 1, maximum = 1000, default = page)]
    pub limit: usize,
}

fn page() -> usize {
    100
}

/// `PUT /v1/topics/{topic}/groups/{group}`: both settings at once.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// Most jobs of the group reserved at once, across every instance;
    /// absent or null: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub concurrency: Option<u32>,
    /// A paused group hands out none of its jobs (default false).
    #[serde(default)]
    pub paused: bool,
    /// How fast the group's jobs are handed out, across every instance
    /// (the topic's limit holds beside it); absent or null: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<super::RateSpec>,
}
