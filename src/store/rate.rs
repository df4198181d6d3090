//! Per-topic rate limits in Redis. The token bucket of each topic lives in
//! every partition (`{p}:rate:<topic>`), where the pop script takes from it
//! in the same step as the jobs; the index `{prefix}:rates` lists the
//! limits as set.
//!
//! A queue of N partitions gives each partition 1/N of the rate (and of
//! the burst, at least one job): the total holds while ready jobs are
//! spread over the partitions, as job ids spread them; a backlog in a few
//! partitions is handed out more slowly than the limit allows, never
//! faster.

use std::collections::BTreeMap;

use super::{layout::rate_field, Keys, Store};
use crate::error::{Error, Result};

/// A topic's limit.
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

impl Store {
    /// Sets (or replaces) `topic`'s limit; the bucket starts full.
    pub(crate) async fn set_rate(&self, topic: &str, limit: RateLimit) -> Result<()> {
        let n = self.parts().len() as f64;
        let burst = (limit.burst as f64 / n).max(1.0);
        for part in self.parts() {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(part.rate(topic))
                .arg(rate_field::PER_S)
                // Tokens are thousandths of a job, refilled every ms:
                // per_second / 1000 jobs a ms is per_second thousandths.
                .arg(limit.per_second / n)
                .arg(rate_field::BURST)
                .arg(burst)
                .arg(rate_field::TOKENS)
                .arg(burst * 1000.0);
            self.call("set rate", cmd.query_async::<i64>(&mut self.conn()))
                .await?;
        }
        let mut cmd = redis::cmd("HSET");
        cmd.arg(Keys::rates_index(&self.prefix))
            .arg(topic)
            .arg(serde_json::to_string(&limit).expect("serializes"));
        self.call("set rate", cmd.query_async::<i64>(&mut self.conn()))
            .await?;
        Ok(())
    }

    /// Removes `topic`'s limit. False if it had none.
    pub(crate) async fn clear_rate(&self, topic: &str) -> Result<bool> {
        for part in self.parts() {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(part.rate(topic));
            self.call("clear rate", cmd.query_async::<i64>(&mut self.conn()))
                .await?;
        }
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(Keys::rates_index(&self.prefix)).arg(topic);
        let n: i64 = self
            .call("clear rate", cmd.query_async(&mut self.conn()))
            .await?;
        Ok(n > 0)
    }

    /// Every topic's limit.
    pub(crate) async fn rates(&self) -> Result<BTreeMap<String, RateLimit>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(Keys::rates_index(&self.prefix));
        let all: BTreeMap<String, String> = self
            .call("read rates", cmd.query_async(&mut self.conn()))
            .await?;
        all.into_iter()
            .map(|(t, v)| {
                serde_json::from_str(&v)
                    .map(|l| (t, l))
                    .map_err(|e| Error::protocol("read rates", e.to_string()))
            })
            .collect()
    }
}
