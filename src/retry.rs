//! Retry policies: how long to wait before each new attempt, and when to
//! give up.
//!
//! A failed attempt is a nack or a lease (ttr) that ran out. After attempt N
//! fails, attempt N+1 waits the N-th interval; past the last interval, the
//! last one repeats while `max_attempts` allows. When the attempts are used
//! up (`max_attempts`, or one more than the intervals when no maximum is
//! given) the job is dead.
//!
//! The payment-notification schedule (notify now; on failure retry after 2m,
//! 10m, 10m, 1h, 2h, 6h, 15h; then give up) is
//! `RetryPolicy::parse("2m,10m,10m,1h,2h,6h,15h", None)`: 8 attempts.
//!
//! A job without a policy is tried for ever: after a lease that runs out,
//! again at once (the behaviour ouqiang/delay-queue clients expect); after
//! a nack that gives no delay, after [`RetryPolicy::backoff`]'s intervals,
//! so that a failing consumer does not hammer what it calls.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration::parse_duration;

/// At most this many intervals in one policy.
pub const MAX_INTERVALS: usize = 64;

/// The longest wait between attempts: a year, leap years included.
pub const MAX_INTERVAL: Duration = Duration::from_secs(366 * 86_400);

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Waits before attempts 2, 3, ...
    pub intervals: Vec<Duration>,
    /// Most attempts in all (first one included); `None` = one more than
    /// the intervals, or unlimited when there are no intervals.
    pub max_attempts: Option<u32>,
}

impl RetryPolicy {
    /// Parses "2m,10m,1h" (human durations, bare numbers are seconds).
    pub fn parse(intervals: &str, max_attempts: Option<u32>) -> Result<RetryPolicy, String> {
        let intervals = intervals
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(parse_duration)
            .collect::<Result<Vec<_>, _>>()?;
        let p = RetryPolicy {
            intervals,
            max_attempts,
        };
        p.check()?;
        Ok(p)
    }

    /// Checks the documented bounds.
    pub fn check(&self) -> Result<(), String> {
        if self.intervals.len() > MAX_INTERVALS {
            return Err(format!(
                "retry schedule has {} intervals; the limit is {MAX_INTERVALS}",
                self.intervals.len()
            ));
        }
        if let Some(d) = self.intervals.iter().find(|d| **d > MAX_INTERVAL) {
            return Err(crate::duration::over_limit(
                "retry interval",
                *d,
                MAX_INTERVAL,
            ));
        }
        if self.max_attempts == Some(0) {
            return Err("max_attempts must be at least 1".into());
        }
        Ok(())
    }

    /// The built-in backoff: 1s, 5s, 30s, 2m, 10m, 30m, 1h, 2h, 4h, 8h
    /// (then 8h). A nack that gives no delay waits these for a job with no
    /// policy (attempts then stay unbounded); a webhook topic without a
    /// policy of its own has it, with 11 attempts in all (about 16 hours).
    pub fn backoff() -> RetryPolicy {
        RetryPolicy::parse("1s,5s,30s,2m,10m,30m,1h,2h,4h,8h", None)
            .expect("a valid built-in policy")
    }

    /// Most attempts in all: `max_attempts`, or one more than the
    /// intervals; None: unlimited (no intervals, no maximum).
    pub fn attempts(&self) -> Option<u32> {
        self.max_attempts
            .or_else(|| (!self.intervals.is_empty()).then(|| self.intervals.len() as u32 + 1))
    }

    /// The wait after failed attempt `attempt` (1-based): the attempt-th
    /// interval, the last one past the end; zero without intervals.
    pub fn interval_after(&self, attempt: u32) -> Duration {
        let i = (attempt.max(1) as usize).min(self.intervals.len());
        self.intervals
            .get(i.wrapping_sub(1))
            .copied()
            .unwrap_or_default()
    }

    /// The intervals as the scripts store them: "120000,600000".
    pub(crate) fn intervals_ms(&self) -> String {
        self.intervals
            .iter()
            .map(|d| d.as_millis().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub(crate) fn from_stored(intervals: Option<&str>, max: Option<&str>) -> RetryPolicy {
        RetryPolicy {
            intervals: intervals
                .unwrap_or("")
                .split(',')
                .filter_map(|v| v.parse().ok())
                .map(Duration::from_millis)
                .collect(),
            max_attempts: max.and_then(|m| m.parse().ok()).filter(|m| *m > 0),
        }
    }
}

/// "1s, 5s, 30s; 4 attempts in all, then dead": the intervals with units
/// and the attempts it allows, as logs and the CLI show it (the Debug
/// form's `max_attempts: None` reads as unlimited where it is not).
impl std::fmt::Display for RetryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let waits: Vec<String> = self
            .intervals
            .iter()
            .map(|d| crate::duration::show_duration(*d))
            .collect();
        if waits.is_empty() {
            f.write_str("no waits")?;
        } else {
            f.write_str(&waits.join(", "))?;
        }
        match self.attempts() {
            Some(n) => write!(f, "; {n} attempts in all, then dead"),
            None => f.write_str("; attempts unlimited"),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_policy_shows_its_waits_and_attempts() {
        assert_eq!(
            super::RetryPolicy::backoff().to_string(),
            "1s, 5s, 30s, 2m, 10m, 30m, 1h, 2h, 4h, 8h; 11 attempts in all, then dead"
        );
        let p = super::RetryPolicy::parse("1m", Some(5)).unwrap();
        assert_eq!(p.to_string(), "1m; 5 attempts in all, then dead");
        assert_eq!(
            super::RetryPolicy::default().to_string(),
            "no waits; attempts unlimited"
        );
    }

    use super::*;

    #[test]
    fn payment_schedule() {
        let p = RetryPolicy::parse("2m, 10m,10m,1h,2h,6h,15h", None).unwrap();
        assert_eq!(p.intervals.len(), 7);
        assert_eq!(p.intervals[0], Duration::from_secs(120));
        assert_eq!(p.intervals_ms().split(',').next(), Some("120000"));
        assert_eq!(RetryPolicy::from_stored(Some(&p.intervals_ms()), None), p);
        assert_eq!(p.interval_after(1), Duration::from_secs(120));
        assert_eq!(p.interval_after(99), Duration::from_secs(15 * 3600));
        assert_eq!(RetryPolicy::default().interval_after(3), Duration::ZERO);
        assert!(RetryPolicy::parse("2x", None).is_err());
        assert!(RetryPolicy::parse("", Some(0)).is_err());
    }
}
