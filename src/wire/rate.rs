//! `/v1/topics/{topic}/rate`: rate limits.

use serde::{Deserialize, Serialize};

use crate::rate::RateLimit;

/// `PUT /v1/topics/{topic}/rate`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RateSpec {
    /// Jobs per second, on average.
    #[cfg_attr(feature = "server", schema(maximum = 1_000_000))]
    pub per_second: f64,
    /// Most jobs at once after a quiet spell (default: the rate, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(minimum = 1, maximum = 1_000_000))]
    pub burst: Option<u32>,
}

/// A topic's limit.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = RateLimit))]
pub struct RateLimitBody {
    /// Jobs per second, on average.
    pub per_second: f64,
    /// Most jobs at once after a quiet spell.
    pub burst: u32,
}

impl From<RateLimit> for RateLimitBody {
    fn from(l: RateLimit) -> Self {
        RateLimitBody {
            per_second: l.per_second,
            burst: l.burst,
        }
    }
}

/// A topic and its limit.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Rate {
    pub topic: String,
    pub per_second: f64,
    pub burst: u32,
}
