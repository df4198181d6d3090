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
//! quick reply (at most [`MAX_SAMPLE_RTT`]) replaces the estimate, so the
//! clock follows Redis's even when that steps back (a failover); a slow one
//! lowers it only when it proves it ahead (`R` below the estimate at
//! sending).
//!
//! The readings are kept in the client's [`Offset`]; [`Client::clock`]
//! gives the clock over it, the one way to ask what time it is in Redis:
//! [`RedisClock::now_estimate_ms`] never asks Redis,
//! [`RedisClock::now_ms`] asks it once (`TIME`) when no reply has told it
//! yet.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::Client;
use crate::error::{Error, Result};

/// Round trips up to this replace the estimate; longer ones only refine it.
const MAX_SAMPLE_RTT: Duration = Duration::from_millis(100);
const UNKNOWN: i64 = i64::MIN;

/// Redis time minus local time, as the replies tell it.
#[derive(Debug)]
pub(crate) struct Offset {
    base: Instant,
    /// Redis time (us) minus microseconds since `base`; `UNKNOWN` until the
    /// first sample.
    offset_us: AtomicI64,
}

impl Default for Offset {
    fn default() -> Self {
        Offset {
            base: Instant::now(),
            offset_us: AtomicI64::new(UNKNOWN),
        }
    }
}

impl Offset {
    /// Records that a call sent at `sent` and answered at `received` saw
    /// Redis time `redis_us`.
    pub fn observe(&self, sent: Instant, received: Instant, redis_us: i64) {
        // Redis time was `redis_us` between `sent` and `received`: the
        // offset is at least `low` and at most `high`.
        let low = redis_us.saturating_sub(self.local_us(received));
        if received.saturating_duration_since(sent) <= MAX_SAMPLE_RTT {
            self.offset_us.store(low, Ordering::Relaxed);
            return;
        }
        let high = redis_us.saturating_sub(self.local_us(sent));
        let _ = self
            .offset_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                (now == UNKNOWN || low > now || high < now).then_some(low)
            });
    }

    /// Redis time (us) at local instant `at`, at the latest; `None` before
    /// the first sample.
    pub fn at(&self, at: Instant) -> Option<i64> {
        match self.offset_us.load(Ordering::Relaxed) {
            UNKNOWN => None,
            offset => Some(offset.saturating_add(self.local_us(at))),
        }
    }

    fn local_us(&self, at: Instant) -> i64 {
        at.saturating_duration_since(self.base).as_micros() as i64
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn estimates_stay_behind_redis_and_slow_replies_never_put_them_ahead() {
        let c = Offset::default();
        let t0 = c.base + Duration::from_secs(1);
        assert_eq!(c.at(t0), None);
        // Redis said 5_000_000 us at some point before t0 + 1 ms.
        c.observe(t0, t0 + MS, 5_000_000);
        assert_eq!(c.at(t0 + MS), Some(5_000_000));
        assert_eq!(c.at(t0 + Duration::from_secs(2)), Some(6_999_000));
        // A reply that took 10 s (a stall), read by Redis right after it
        // was sent, says less than the estimate knows: nothing changes.
        let sent = t0 + Duration::from_secs(2);
        c.observe(sent, sent + Duration::from_secs(10), 7_000_000);
        assert_eq!(c.at(t0 + MS), Some(5_000_000));
    }

    #[test]
    fn a_slow_reply_is_a_reading_behind_by_its_round_trip() {
        let c = Offset::default();
        let t0 = c.base + Duration::from_secs(1);
        // Sent at t0, answered 150 ms later: Redis read 5_000_000 at some
        // point in between, so at the answer it is at least that.
        c.observe(t0, t0 + 150 * MS, 5_000_000);
        assert_eq!(c.at(t0 + 150 * MS), Some(5_000_000));
        assert_eq!(c.at(t0 + 1150 * MS), Some(6_000_000));
    }

    #[test]
    fn the_tighter_of_slow_readings_is_kept() {
        let c = Offset::default();
        let t0 = c.base + Duration::from_secs(1);
        // Redis runs at local time + 4 s; replies come 150 ms late. The
        // first was read by Redis at its answer, the second right after
        // its sending (says less), the third at its answer again.
        c.observe(t0, t0 + 150 * MS, 5_150_000);
        assert_eq!(c.at(t0 + 150 * MS), Some(5_150_000));
        let t1 = t0 + Duration::from_secs(1);
        c.observe(t1, t1 + 150 * MS, 6_000_000);
        assert_eq!(c.at(t1 + 150 * MS), Some(6_150_000), "never lower");
        let t2 = t0 + Duration::from_secs(2);
        c.observe(t2, t2 + 150 * MS, 7_150_000);
        assert_eq!(c.at(t2 + 150 * MS), Some(7_150_000));
        // A quick reply replaces whatever slow ones said.
        let t3 = t0 + Duration::from_secs(3);
        c.observe(t3, t3 + MS, 8_000_000);
        assert_eq!(c.at(t3 + MS), Some(8_000_000));
    }

    #[test]
    fn a_slow_reply_that_shows_the_estimate_ahead_brings_it_back() {
        let c = Offset::default();
        let t0 = c.base + Duration::from_secs(1);
        c.observe(t0, t0 + MS, 5_000_000);
        // Redis's clock stepped back 10 s (a failover); the next reply is
        // slow, and its reading is below the estimate at its sending.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(c.at(t1), Some(5_999_000));
        c.observe(t1, t1 + 150 * MS, -4_000_000);
        assert_eq!(c.at(t1 + 150 * MS), Some(-4_000_000));
    }
}
