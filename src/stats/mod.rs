//! Throughput and fire lateness across instances (issue 24), kept in Redis.
//!
//! Every instance counts in process what it does (pushed, delivered,
//! finished, failed, dead; lateness per topic) and adds its increments into
//! Redis once a second, in one pipelined call whose size is bounded by the
//! (kind, topic) pairs that changed, never by the jobs: the job scripts
//! write nothing more. Keys per second (kept ~5 minutes) and per minute
//! (kept ~an hour) are named in `store/layout.rs`; each holds a field per
//! kind for all topics summed, so reading "all topics" is not a sum over
//! topics. A stopping queue flushes what it counted; a crash loses at most
//! the last second's increments.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::shutdown::Shutdown;
use crate::store::Store;

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

/// Lateness buckets: `metrics::series`'s bounds (seconds), then +Inf.
pub const LATENESS_BUCKETS: usize = crate::metrics::BUCKETS.len() + 1;

/// How often each instance adds its increments into Redis.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);
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

    fn merge(&mut self, other: Pending) {
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

/// This instance's counts on their way to Redis.
#[derive(Default, Debug)]
pub struct Recorder {
    pending: Mutex<Pending>,
}

fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The bucket of `seconds` of lateness (the first bound it does not pass).
pub fn lateness_bucket(seconds: f64) -> usize {
    crate::metrics::BUCKETS
        .iter()
        .position(|b| seconds <= *b)
        .unwrap_or(crate::metrics::BUCKETS.len())
}

impl Recorder {
    /// Counts `by` events of `kind` for `topic`, now.
    pub fn count(&self, kind: Kind, topic: &str, by: u64) {
        if by == 0 {
            return;
        }
        let sec = local_ms().div_euclid(1000);
        let mut p = self.pending.lock().unwrap();
        let secs = match p.counts.get_mut(topic) {
            Some(s) => s,
            None => p.counts.entry(topic.to_owned()).or_default(),
        };
        secs.entry(sec).or_default()[kind as usize] += by;
    }

    /// Notes one job of `topic` handed over `seconds` late.
    pub fn lateness(&self, topic: &str, seconds: f64) {
        let min = local_ms().div_euclid(60_000);
        let b = lateness_bucket(seconds);
        let mut p = self.pending.lock().unwrap();
        let mins = match p.lateness.get_mut(topic) {
            Some(m) => m,
            None => p.lateness.entry(topic.to_owned()).or_default(),
        };
        mins.entry(min).or_insert([0; LATENESS_BUCKETS])[b] += 1;
    }

    pub(crate) fn take(&self) -> Pending {
        std::mem::take(&mut *self.pending.lock().unwrap())
    }

    /// Puts back what a failed flush could not write (the next one tries).
    pub(crate) fn put_back(&self, p: Pending) {
        self.pending.lock().unwrap().merge(p);
    }
}

/// Adds `rec`'s increments into Redis once a second until `stop`, then
/// once more (a closing queue loses nothing it counted).
pub(crate) async fn flush_loop(store: Arc<Store>, rec: Arc<Recorder>, stop: Shutdown) {
    loop {
        let stopping = tokio::select! {
            _ = tokio::time::sleep(FLUSH_EVERY) => false,
            _ = stop.wait() => true,
        };
        flush(&store, &rec).await;
        if stopping {
            return;
        }
    }
}

/// One flush: a pipelined call, or none when nothing was counted.
pub(crate) async fn flush(store: &Store, rec: &Recorder) {
    let p = rec.take();
    if p.is_empty() {
        return;
    }
    // Buckets are Redis's seconds: this process's clock may be off.
    let offset_ms = store
        .clock
        .now_us()
        .map(|us| us / 1000 - local_ms())
        .unwrap_or(0);
    if let Err(e) = store.add_stats(&p, offset_ms).await {
        // Nothing is lost while Redis is away: the next flush tries again
        // (a reply lost after Redis applied it counts twice, rarely).
        tracing::debug!(error = %e, "stats flush failed; kept for the next");
        rec.put_back(p);
    }
}

/// p50, p99 and p99.9 from merged bucket counts: each a bucket's upper
/// bound in ms (None beyond the last bound, or with no samples).
pub fn percentiles(b: &[u64; LATENESS_BUCKETS]) -> crate::wire::Lateness {
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
                return crate::metrics::BUCKETS.get(i).map(|s| s * 1000.0);
            }
        }
        None
    };
    crate::wire::Lateness {
        p50: at(0.5),
        p99: at(0.99),
        p999: at(0.999),
        samples,
        window_s: (MINUTE_POINTS * 60) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_bucket_upper_bounds() {
        let mut b = [0; LATENESS_BUCKETS];
        b[lateness_bucket(0.0008)] = 900; // <= 1 ms
        b[lateness_bucket(0.004)] = 99; // <= 5 ms
        b[lateness_bucket(0.3)] = 1; // <= 500 ms
        let l = percentiles(&b);
        assert_eq!(l.samples, 1000);
        assert_eq!((l.p50, l.p99, l.p999), (Some(1.0), Some(5.0), Some(5.0)));
        b[lateness_bucket(100.0)] = 10;
        let l = percentiles(&b);
        assert_eq!((l.p99, l.p999), (Some(500.0), None));
        assert_eq!(percentiles(&[0; LATENESS_BUCKETS]).p50, None);
    }

    #[test]
    fn counts_merge_back_after_a_failed_flush() {
        let r = Recorder::default();
        r.count(Kind::Pushed, "a", 2);
        let p = r.take();
        r.count(Kind::Pushed, "a", 1);
        r.put_back(p);
        let p = r.take();
        let total: u64 = p.counts["a"].values().map(|c| c[0]).sum();
        assert_eq!(total, 3);
    }
}
