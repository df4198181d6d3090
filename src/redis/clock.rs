//! [`RedisClock`]: Redis time as this process knows it.
//!
//! Two promises need to know what time it is in Redis, not here:
//!
//! - A call that times out here must not take effect later in Redis (a pop
//!   that answered 503 must not lease jobs to nobody; a push that answered
//!   503 must not create a job the client will push again). So every script
//!   call carries a deadline in Redis time, and the script refuses to act
//!   past it (see `lib/call.lua`).
//! - A pop whose reply arrives after its lease ended (this process stalled)
//!   must not hand the job over.
//!
//! Redis reports its time in the replies of dispatch and pop. A reply
//! received at local instant `L1` says Redis time was `R` somewhere between
//! sending and `L1`, so `R - L1` is a lower bound of (Redis time - local
//! time). The estimate therefore never runs ahead of Redis: a deadline made
//! from it may fall a little early (the call is refused, and the caller is
//! told nothing changed), never late.
//!
//! A reply that took long to come back (a far-away Redis, a stalled
//! process) is still a reading, behind by up to its round trip: it sets the
//! first estimate, and later raises it if it shows Redis further on. A
//! quick reply (at most [`MAX_SAMPLE_RTT`](super::offset::MAX_SAMPLE_RTT)) replaces the estimate, so the
//! clock follows Redis's even when that steps back (a failover); a slow one
//! lowers it only when it proves it ahead (`R` below the estimate at
//! sending).
//!
//! The readings are kept in the client's [`Offset`](super::offset::Offset); [`Client::clock`]
//! gives the clock over it, the one way to ask what time it is in Redis:
//! [`RedisClock::now_estimate_ms`] never asks Redis,
//! [`RedisClock::now_ms`] asks it once (`TIME`) when no reply has told it
//! yet.

use tokio::time::Instant;

use super::Client;
use crate::error::{Error, Result};

/// Redis time: this process's estimate, and a reading of Redis's own
/// clock when there is no estimate yet. Made by [`Client::clock`].
#[derive(Clone, Copy)]
pub(crate) struct RedisClock<'a> {
    redis: &'a Client,
}

impl Client {
    /// Redis time as this process knows it.
    pub(crate) fn clock(&self) -> RedisClock<'_> {
        RedisClock { redis: self }
    }
}

impl RedisClock<'_> {
    /// Records that a call sent at `sent` and answered at `received` saw
    /// Redis time `redis_us`.
    pub fn observe(&self, sent: Instant, received: Instant, redis_us: i64) {
        self.redis.time_offset.observe(sent, received, redis_us);
    }

    /// Redis time (us) at local instant `at`, at the latest; `None` before
    /// the first reading.
    pub fn at(&self, at: Instant) -> Option<i64> {
        self.redis.time_offset.at(at)
    }

    /// Redis time now (us), at the latest; `None` before the first reading.
    pub fn estimate_us(&self) -> Option<i64> {
        self.at(Instant::now())
    }

    /// Redis time now, ms, without a round trip (never ahead of Redis,
    /// behind it by about a reply's latency; this host's clock before the
    /// first reading).
    pub fn now_estimate_ms(&self) -> i64 {
        self.estimate_us().map(|us| us / 1000).unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0)
        })
    }

    /// Redis time now, ms: the estimate once a reply has told it, after
    /// one `TIME` round trip if none has yet (an error if Redis cannot be
    /// asked).
    pub async fn now_ms(&self) -> Result<i64> {
        if let Some(now) = self.estimate_us() {
            return Ok(now / 1000);
        }
        self.read("read the clock").await?;
        let now = self
            .estimate_us()
            .ok_or_else(|| Error::protocol("read the clock", "no reading".into()))?;
        Ok(now / 1000)
    }

    /// Reads Redis time once, so that deadlines can be given from the first
    /// call on (later readings come with dispatch and pop replies).
    pub(super) async fn read(&self, op: &'static str) -> Result<()> {
        let sent = Instant::now();
        let (s, us): (i64, i64) = self
            .redis
            .call(op, redis::cmd("TIME").query_async(&mut self.redis.conn()))
            .await?;
        self.observe(sent, Instant::now(), s * 1_000_000 + us);
        Ok(())
    }
}
