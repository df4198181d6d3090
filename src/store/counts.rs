//! The figures of throughput and lateness as the store keeps them: what
//! is counted, the lateness buckets, the points kept, the increments on
//! their way to Redis (`crate::stats` counts and flushes them).

use std::collections::{BTreeMap, HashMap};

use crate::figures::Lateness;

/// Histogram bucket bounds, seconds: fine below 20 ms, where the lateness
/// promise lives; coarse above.
pub(crate) const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// What is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Pushed,
    /// Handed to a consumer (a pop, a long-poll, a webhook delivery).
    Delivered,
    Finished,
    /// An attempt failed (nack or lease ran out) and another follows.
    Failed,
    /// An attempt failed and it was the last.
    Dead,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Pushed,
        Kind::Delivered,
        Kind::Finished,
        Kind::Failed,
        Kind::Dead,
    ];
    /// Its name in the Redis fields and the JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Pushed => "pushed",
            Kind::Delivered => "delivered",
            Kind::Finished => "finished",
            Kind::Failed => "failed",
            Kind::Dead => "dead",
        }
    }
}

/// Lateness buckets: `BUCKETS`' bounds (seconds), then +Inf.
pub const LATENESS_BUCKETS: usize = BUCKETS.len() + 1;

/// Per-second points kept and shown.
pub const SECOND_POINTS: i64 = 300;
/// Per-minute points kept and shown (lateness percentiles read them too).
pub const MINUTE_POINTS: i64 = 60;

/// Increments not yet in Redis. Bounded by topics x kinds (x the one or
/// two seconds since the last flush), not by jobs.
#[derive(Default, Debug)]
pub(crate) struct Pending {
    /// topic -> local Unix second -> count per [`Kind`] (in `ALL`'s order).
    pub counts: HashMap<String, BTreeMap<i64, [u64; 5]>>,
    /// topic -> local Unix minute -> count per lateness bucket.
    pub lateness: HashMap<String, BTreeMap<i64, [u64; LATENESS_BUCKETS]>>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty() && self.lateness.is_empty()
    }

    pub(crate) fn merge(&mut self, other: Pending) {
        for (topic, secs) in other.counts {
            let mine = self.counts.entry(topic).or_default();
            for (s, c) in secs {
                let m = mine.entry(s).or_default();
                m.iter_mut().zip(c).for_each(|(a, b)| *a += b);
            }
        }
        for (topic, mins) in other.lateness {
            let mine = self.lateness.entry(topic).or_default();
            for (s, c) in mins {
                let m = mine.entry(s).or_insert([0; LATENESS_BUCKETS]);
                m.iter_mut().zip(c).for_each(|(a, b)| *a += b);
            }
        }
    }
}

/// The bucket of `seconds` of lateness (the first bound it does not pass).
pub fn lateness_bucket(seconds: f64) -> usize {
    BUCKETS
        .iter()
        .position(|b| seconds <= *b)
        .unwrap_or(BUCKETS.len())
}

/// p50, p99 and p99.9 from merged bucket counts: each a bucket's upper
/// bound in ms (None beyond the last bound, or with no samples).
pub fn percentiles(b: &[u64; LATENESS_BUCKETS]) -> Lateness {
    let samples: u64 = b.iter().sum();
    let at = |q: f64| -> Option<f64> {
        if samples == 0 {
            return None;
        }
        let rank = ((samples as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in b.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return BUCKETS.get(i).map(|s| s * 1000.0);
            }
        }
        None
    };
    Lateness {
        p50: at(0.5),
        p99: at(0.99),
        p999: at(0.999),
        samples,
        window_s: (MINUTE_POINTS * 60) as u64,
    }
}
