//! Per-topic rate limits in Redis. A topic's token bucket
//! (`{p}:rate:<topic>`) is one for the whole queue, in the topic's home
//! partition (the one its name hashes to; the only one of an unsplit
//! queue). There the pop script takes from it in the same step as the
//! jobs. A partitioned queue's pop first takes tokens with `rate.lua`, pops
//! no more than those from the partitions, and gives back what it did not
//! use; every other partition holds the limit without tokens, so a pop
//! that did not know of the limit gets nothing of the topic there and
//! takes tokens then. The index `{prefix}:rates` lists the limits as set.

use std::collections::BTreeMap;

use super::call::Call;
use super::script::Script;
use super::{layout, layout::rate_field, Keys, ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::rate::RateLimit;
use crate::redis::Fields;

/// `rate.lua`: one topic's bucket in its home partition, set, taken from
/// or given back to (see [`Bucket`]).
pub(crate) struct Rate;

/// What a call of `rate.lua` does to `topic`'s bucket.
pub(crate) enum Bucket<'a> {
    /// Sets (or replaces) the limit.
    Set(&'a str, RateLimit),
    /// Takes up to this many jobs' tokens.
    Take(&'a str, usize),
    /// Gives back this many jobs' tokens.
    Give(&'a str, u64),
}

impl Script for Rate {
    const DEF: &'static ScriptDef = &ScriptDef {
        name: "rate",
        source: include_str!("rate.lua"),
        when_full: true,
        acked: false,
        late_unknown: true,
    };
    type Input<'a> = Bucket<'a>;
    type Output = Grant;

    fn args(input: Bucket<'_>, call: &mut Call) {
        match input {
            // Tokens are thousandths of a job, refilled every ms:
            // per_second / 1000 jobs a ms is per_second thousandths.
            Bucket::Set(topic, limit) => call
                .arg("set")
                .arg(topic)
                .arg(limit.per_second)
                .arg(limit.burst),
            Bucket::Take(topic, max) => call.arg("take").arg(topic).arg(max),
            Bucket::Give(topic, n) => call.arg("give").arg(topic).arg(n),
        };
    }

    fn decode(reply: (Status, Fields)) -> Result<Grant> {
        decode(reply)
    }
}

impl Store {
    /// The partition that keeps `topic`'s token bucket.
    fn rate_home(&self, topic: &str) -> usize {
        layout::partition_of(topic, self.parts().len())
    }

    /// Sets (or replaces) `topic`'s limit: a new bucket starts full, an
    /// existing one keeps its level (at most the new burst), so setting
    /// the same limit again lets no job out early. One small script call
    /// in the home partition, an HSET in each other one.
    pub(crate) async fn set_rate(&self, topic: &str, limit: RateLimit) -> Result<()> {
        let home = self.rate_home(topic);
        // The bucket first, then the limit's mark in every other partition,
        // whose pops then take no job of the topic without tokens from it.
        self.run::<Rate>(home, Bucket::Set(topic, limit)).await?;
        for i in (0..self.parts().len()).filter(|&i| i != home) {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(self.parts()[i].rate(topic))
                .arg(rate_field::PER_S)
                .arg(limit.per_second)
                .arg(rate_field::BURST)
                .arg(limit.burst);
            self.redis
                .call("set rate", cmd.query_async::<i64>(&mut self.redis.conn()))
                .await?;
        }
        self.limited.lock().unwrap().insert(topic.to_owned());
        let mut cmd = redis::cmd("HSET");
        cmd.arg(Keys::rates_index(self.prefix()))
            .arg(topic)
            .arg(serde_json::to_string(&limit).expect("serializes"));
        self.redis
            .call("set rate", cmd.query_async::<i64>(&mut self.redis.conn()))
            .await?;
        Ok(())
    }

    /// Removes `topic`'s limit. False if it had none.
    pub(crate) async fn clear_rate(&self, topic: &str) -> Result<bool> {
        for part in self.parts() {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(part.rate(topic));
            self.redis
                .call("clear rate", cmd.query_async::<i64>(&mut self.redis.conn()))
                .await?;
        }
        self.limited.lock().unwrap().remove(topic);
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(Keys::rates_index(self.prefix())).arg(topic);
        let n: i64 = self
            .redis
            .call("clear rate", cmd.query_async(&mut self.redis.conn()))
            .await?;
        Ok(n > 0)
    }

    /// Every topic's limit.
    pub(crate) async fn rates(&self) -> Result<BTreeMap<String, RateLimit>> {
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(Keys::rates_index(self.prefix()));
        let all: BTreeMap<String, String> = self
            .redis
            .call("read rates", cmd.query_async(&mut self.redis.conn()))
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

/// The reply of `rate.lua`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    /// Jobs granted; -1: the topic has no limit.
    pub granted: i64,
    /// Milliseconds until the next token.
    pub next_ms: u64,
}

fn decode((status, mut f): (Status, Fields)) -> Result<Grant> {
    if status != Status::Done {
        return Err(Error::protocol("rate", format!("status {status:?}")));
    }
    Ok(Grant {
        granted: f.int()?,
        next_ms: f.int()?.max(0) as u64,
    })
}

impl Store {
    /// For a pop of up to `max` jobs on a partitioned queue, takes
    /// `topic`'s tokens from its one bucket: None without a limit. One
    /// small call; none on an unsplit queue, whose pop takes them itself.
    pub(crate) async fn rate_take(&self, topic: &str, max: usize) -> Result<Option<Grant>> {
        let take = Bucket::Take(topic, max);
        let grant = self.run::<Rate>(self.rate_home(topic), take).await?;
        let mut limited = self.limited.lock().unwrap();
        if grant.granted < 0 {
            limited.remove(topic);
            return Ok(None);
        }
        // Bounded however many topics come and go.
        if limited.len() >= 10_000 {
            limited.clear();
        }
        limited.insert(topic.to_owned());
        Ok(Some(grant))
    }

    /// Gives back the tokens of [`rate_take`](Self::rate_take) that a pop
    /// did not use. A failure only leaves the limit stricter for a moment.
    pub(crate) async fn rate_give(&self, topics: &[String], unused: &[Option<u64>]) {
        for (topic, n) in topics.iter().zip(unused) {
            let Some(n @ 1..) = *n else { continue };
            let give = Bucket::Give(topic, n);
            if let Err(e) = self.run::<Rate>(self.rate_home(topic), give).await {
                tracing::warn!(error = %e, topic, "could not give unused rate tokens back");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_grants() {
        let d = |r: &[&str]| decode(Fields::parse("rate", sample(r)).unwrap());
        assert_eq!(
            d(&["0", "3", "250"]).unwrap(),
            Grant {
                granted: 3,
                next_ms: 250
            }
        );
        assert_eq!(d(&["0", "-1", "-5"]).unwrap().granted, -1);
        assert_eq!(d(&["0", "-1", "-5"]).unwrap().next_ms, 0);
        assert!(d(&["1", "0", "0"]).is_err());
        assert!(d(&["0", "3"]).is_err());
    }
}
