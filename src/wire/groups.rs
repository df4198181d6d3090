//! `/v1/topics/{topic}/groups`: a topic's groups, their figures, limits and
//! pauses.

use serde::{Deserialize, Serialize};

use super::RateLimitBody;
use crate::group::{Group, GroupPage};

/// A group of a topic: its settings and what its jobs are doing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Group))]
pub struct GroupBody {
    /// The group key.
    pub group: String,
    /// Jobs ready in the group's line (held ones included).
    pub ready: u64,
    /// Jobs reserved now: the slots in use.
    pub reserved: u64,
    /// Ready jobs its pause or its limit keeps back now.
    pub held: u64,
    /// Most jobs of the group reserved at once; none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// A paused group hands out none of its jobs.
    pub paused: bool,
    /// How long the job at the head of the group's line has waited since
    /// it fell due, ms (the oldest ready job unless priorities put a newer
    /// one first); none: nothing ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_ready_ms: Option<u64>,
    /// How fast the group's jobs are handed out, across every instance
    /// (the topic's own limit holds beside it); none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateLimitBody>,
}

impl From<Group> for GroupBody {
    fn from(g: Group) -> Self {
        GroupBody {
            group: g.group,
            ready: g.ready,
            reserved: g.reserved,
            held: g.held,
            concurrency: g.concurrency,
            paused: g.paused,
            oldest_ready_ms: g.oldest_ready_ms,
            rate: g.rate.map(Into::into),
        }
    }
}

/// A page of a topic's groups, in byte order of their keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = GroupPage))]
pub struct GroupPageBody {
    pub groups: Vec<GroupBody>,
    /// The cursor of the next page (`after`); none: this was the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

impl From<GroupPage> for GroupPageBody {
    fn from(p: GroupPage) -> Self {
        GroupPageBody {
            groups: p.groups.into_iter().map(Into::into).collect(),
            next: p.next,
        }
    }
}

/// `GET /v1/topics/{topic}/groups?after=&limit=`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
pub struct GroupsQuery {
    /// The `next` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Most groups in the page.
    #[serde(default = "page")]
    #[cfg_attr(feature = "server", param(minimum = 1, maximum = 1000, default = page))]
    pub limit: usize,
}

fn page() -> usize {
    crate::defaults::GROUP_PAGE
}

/// `PUT /v1/topics/{topic}/groups/{group}`: the settings it names; one
/// left out stays as it is, and `null` removes it.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    /// Most jobs of the group reserved at once, across every instance;
    /// absent: as it is; null: no limit.
    #[serde(
        default,
        deserialize_with = "named",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "server", schema(value_type = Option<u32>, minimum = 1))]
    pub concurrency: Option<Option<u32>>,
    /// A paused group hands out none of its jobs; absent: as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// How fast the group's jobs are handed out, across every instance
    /// (the topic's limit holds beside it); absent: as it is; null: no
    /// limit. Set again, its bucket keeps its level.
    #[serde(
        default,
        deserialize_with = "named",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "server", schema(value_type = Option<super::RateSpec>))]
    pub rate: Option<Option<super::RateSpec>>,
}

/// A field given (`null` included: Some(None)); a field left out is None
/// through `default`.
fn named<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}
