//! [`RedisClock`]: this process's estimate of Redis time.
//!
//! Two promises need to know what time it is in Redis, not here:
//!
//! - A call that times out here must not take effect later in Redis (a pop
//!   that answered 503 must not lease jobs to nobody; a push that answered
//!   503 must not create a job the client will push again). So every script
//!   call carries a deadline in Redis time, and the script refuses to act
//!   past it (see `lib.lua`).
//! - A pop whose reply arrives after its lease ended (this process stalled)
//!   must not hand the job over.
//!
//! Redis reports its time in the replies of dispatch and pop. A reply
//! received at local instant `L1` says Redis time was `R` somewhere between
//! sending and `L1`, so `R - L1` is a lower bound of (Redis time - local
//! time). The estimate therefore never runs ahead of Redis: a deadline made
//! from it may fall a little early (the call is refused, and the caller is
//! told nothing changed), never late. Replies that took long to come back (a
//! stalled process, a paused Redis) say little and are ignored.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Round trips longer than this give no sample.
const MAX_SAMPLE_RTT: Duration = Duration::from_millis(100);
const UNKNOWN: i64 = i64::MIN;

#[derive(Debug)]
pub(crate) struct RedisClock {
    base: Instant,
    /// Redis time (us) minus microseconds since `base`; `UNKNOWN` until the
    /// first sample.
    offset_us: AtomicI64,
}

impl Default for RedisClock {
    fn default() -> Self {
        RedisClock {
            base: Instant::now(),
            offset_us: AtomicI64::new(UNKNOWN),
        }
    }
}

impl RedisClock {
    /// Records that a call sent at `sent` and answered at `received` saw
    /// Redis time `redis_us`.
    pub fn observe(&self, sent: Instant, received: Instant, redis_us: i64) {
        if received.saturating_duration_since(sent) <= MAX_SAMPLE_RTT {
            let local = self.local_us(received);
            self.offset_us
                .store(redis_us.saturating_sub(local), Ordering::Relaxed);
        }
    }

    /// Redis time (us) at local instant `at`, at the latest; `None` before
    /// the first sample.
    pub fn at(&self, at: Instant) -> Option<i64> {
        match self.offset_us.load(Ordering::Relaxed) {
            UNKNOWN => None,
            offset => Some(offset.saturating_add(self.local_us(at))),
        }
    }

    pub fn now_us(&self) -> Option<i64> {
        self.at(Instant::now())
    }

    fn local_us(&self, at: Instant) -> i64 {
        at.saturating_duration_since(self.base).as_micros() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_stay_behind_redis_and_slow_replies_are_ignored() {
        let c = RedisClock::default();
        let t0 = c.base + Duration::from_secs(1);
        assert_eq!(c.at(t0), None);
        // Redis said 5_000_000 us at some point before t0 + 1 ms.
        c.observe(t0, t0 + Duration::from_millis(1), 5_000_000);
        assert_eq!(c.at(t0 + Duration::from_millis(1)), Some(5_000_000));
        assert_eq!(c.at(t0 + Duration::from_secs(2)), Some(6_999_000));
        // A reply that took 10 s (a stall) changes nothing.
        c.observe(t0, t0 + Duration::from_secs(10), 1);
        assert_eq!(c.at(t0 + Duration::from_millis(1)), Some(5_000_000));
    }
}
