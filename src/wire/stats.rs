//! `/v1/stats/throughput` and the backlog and lateness figures of
//! `/v1/topics`.

use serde::{Deserialize, Serialize};

pub use crate::figures::{Held, Lateness, Series, Throughput};

/// `GET /metrics?redis=`.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
pub struct MetricsQuery {
    /// false: leave out the series read from Redis at scrape time (queue
    /// depths, paused topics, backlog ages, groups); the scrape then makes
    /// no Redis call, whatever the number of topics. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", param(value_type = Option<bool>, default = true))]
    pub redis: Option<bool>,
}

/// `GET /v1/stats/throughput?topic=&resolution=`.
#[derive(Serialize, Deserialize, Debug, Clone, Default)]
#[cfg_attr(feature = "server", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "server", into_params(parameter_in = Query))]
pub struct ThroughputQuery {
    /// One topic; absent: all topics together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// "minute" (the default: the last hour, 60 points) or "second" (the
    /// last 5 minutes, 300 points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", param(value_type = Option<String>, default = "minute"))]
    pub resolution: Option<String>,
}
