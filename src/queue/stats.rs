//! Throughput, backlog ages and lateness: what every instance adds into
//! Redis (see `crate::stats`), read back.

use super::Queue;
use crate::error::{Error, Result};
use crate::figures::Overview;
use crate::figures::{Lateness, Throughput};

/// The points of a throughput read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The last 5 minutes, 300 points.
    Second,
    /// The last hour, 60 points.
    Minute,
}

impl std::str::FromStr for Resolution {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "second" => Ok(Resolution::Second),
            "minute" => Ok(Resolution::Minute),
            other => Err(format!(
                "resolution {other:?} is not one of: second, minute"
            )),
        }
    }
}

impl Queue {
    /// Pushed, delivered, finished, failed and dead per point, oldest
    /// first, counted by every instance: of `topic`, or of all topics.
    /// Costs one HMGET per point.
    pub async fn throughput(&self, topic: Option<&str>, r: Resolution) -> Result<Throughput> {
        if let Some(t) = topic {
            self.limits().check_topic(t).map_err(Error::Invalid)?;
        }
        self.store()
            .throughput(topic, r == Resolution::Second)
            .await
    }

    /// Fills in each topic's backlog ages, what holds it back (`rates`:
    /// the topics' rate limits; empty, "rate" is not looked at) and its
    /// lateness percentiles; returns all topics' lateness.
    pub async fn topic_stats(
        &self,
        o: &mut Overview,
        rates: &std::collections::BTreeMap<String, crate::RateLimit>,
    ) -> Result<Lateness> {
        self.store().backlog(o, rates).await?;
        self.store().lateness_into(o).await
    }

    /// Adds this instance's counts into Redis now (they go once a second
    /// anyway, and on close).
    pub async fn flush_stats(&self) {
        crate::stats::flush(self.store(), &self.inner.h.metrics.stats).await
    }
}
