//! `/v1/topics/{topic}/groups`: a topic's groups, their figures, limits and
//! pauses.

use serde::{Deserialize, Serialize};

/// A group and its figures: the library's own type, sent as it is.
pub use crate::store::group::{Group, GroupPage};

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
    100
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
