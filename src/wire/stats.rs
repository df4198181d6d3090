//! `/v1/stats/throughput` and the backlog and lateness figures of
//! `/v1/topics`.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `GET /v1/stats/throughput?topic=&resolution=`.
#[derive(Serialize, Deserialize, IntoParams, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ThroughputQuery {
    /// One topic; absent: all topics together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// "minute" (the default: the last hour, 60 points) or "second" (the
    /// last 5 minutes, 300 points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<String>, default = "minute")]
    pub resolution: Option<String>,
}

/// Events per point, oldest first, counted by every instance.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone, Default, PartialEq, Eq)]
pub struct Throughput {
    /// 60 (minute) or 1 (second).
    pub resolution_s: u64,
    /// Start of the oldest point, Unix ms (Redis clock).
    pub from_ms: i64,
    /// End of the newest point (the current one, still filling), Unix ms.
    pub to_ms: i64,
    pub series: Series,
}

/// One count per point and kind.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone, Default, PartialEq, Eq)]
pub struct Series {
    pub pushed: Vec<u64>,
    /// Handed to consumers (pops, long-polls, webhook deliveries).
    pub delivered: Vec<u64>,
    pub finished: Vec<u64>,
    /// Attempts that failed (nack or lease ran out) and were retried.
    pub failed: Vec<u64>,
    /// Attempts that failed and were the last.
    pub dead: Vec<u64>,
}

/// Fire lateness (hand-over time minus due time, Redis clock) over the
/// last hour, from every instance's histogram buckets merged. Each
/// percentile is the upper bound of the bucket it falls in (ms); null with
/// no samples or beyond the last bound (60 s).
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone, Copy, Default, PartialEq)]
pub struct Lateness {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub samples: u64,
    pub window_s: u64,
}

/// Why a topic's ready jobs are not handed out now.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Held {
    /// The topic is paused.
    Paused,
    /// Its rate limit has no token left now.
    Rate,
}
