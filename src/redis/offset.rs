//! Redis time minus local time, as replies tell it: the readings behind
//! [`RedisClock`](super::clock::RedisClock) (its module says how they are
//! taken and why the estimate never runs ahead of Redis).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Round trips up to this replace the estimate; longer ones only refine it.
pub(super) const MAX_SAMPLE_RTT: Duration = Duration::from_millis(100);
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
