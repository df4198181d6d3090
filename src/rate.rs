//! Rate limits: how fast a topic's (or a group's) jobs are handed out,
//! across every instance. The store keeps each limit as a token bucket
//! (`store::rate`); the native API shows it as [`crate::wire::RateLimitBody`].

/// A topic's limit (or a group's). Its JSON is also how the store keeps
/// the limits as set (the rates index) and how the config file names one.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RateLimit {
    /// Jobs per second, on average.
    pub per_second: f64,
    /// Most jobs at once after a quiet spell.
    pub burst: u32,
}

impl RateLimit {
    pub fn check(&self) -> std::result::Result<(), String> {
        if !(self.per_second > 0.0 && self.per_second <= 1_000_000.0) {
            return Err(format!(
                "per_second {} is out of range: above 0, at most 1000000",
                self.per_second
            ));
        }
        if self.burst == 0 || self.burst > 1_000_000 {
            return Err(format!(
                "burst {} is out of range: 1 to 1000000",
                self.burst
            ));
        }
        Ok(())
    }
}
