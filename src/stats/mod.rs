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

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) use crate::store::counts::Pending;
pub use crate::store::counts::{
    lateness_bucket, percentiles, Kind, LATENESS_BUCKETS, MINUTE_POINTS, SECOND_POINTS,
};
use crate::store::Store;

/// How often each instance adds its increments into Redis.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

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

/// One flush: a pipelined call, or none when nothing was counted.
pub(crate) async fn flush(store: &Store, rec: &Recorder) {
    let p = rec.take();
    if p.is_empty() {
        return;
    }
    // Buckets are Redis's seconds: this process's clock may be off.
    let offset_ms = store
        .redis
        .clock()
        .estimate_us()
        .map(|us| us / 1000 - local_ms())
        .unwrap_or(0);
    if let Err(e) = store.add_stats(&p, offset_ms).await {
        // Nothing is lost while Redis is away: the next flush tries again
        // (a reply lost after Redis applied it counts twice, rarely).
        tracing::debug!(error = %e, "stats flush failed; kept for the next");
        rec.put_back(p);
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
