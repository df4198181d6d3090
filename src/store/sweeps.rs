//! A topic's sweeps: scripts that drop up to a bounded number of a topic's
//! entries in one partition and reply DONE and how many. One shape, so
//! one table ([`script!`]) and one decode:
//!
//! - purge (`purge.lua`): delete a topic's dead jobs for good;
//! - trim (`trim.lua`): dead-letter retention for one topic;
//! - history (`history.lua`): the trim of a topic's kept records of
//!   finished jobs (`keep_finished`), and the loop that runs it for topics
//!   where nothing finishes any more. Finishes write and trim records in
//!   `remove.lua`.

use super::nack::Retention;
use super::script::script;
use super::{Status, Store};
use crate::error::Result;
use crate::redis::Fields;

script! {
    /// Deletes up to [`PURGE_BATCH`] dead jobs of `topic`: how many.
    Purge = "purge", when_full: true, acked: false, late_unknown: true,
        (topic: &'a str => (topic, PURGE_BATCH)) -> u64 = count;
    /// Drops up to 200 of `topic`'s dead jobs beyond `retention` (its
    /// `max_per_topic`, or older than its `max_age`): how many.
    Trim = "trim", when_full: true, acked: false, late_unknown: true,
        (
            topic: &'a str,
            retention: Retention => (retention.max_per_topic, retention.max_age.as_millis() as u64),
        ) -> u64 = count;
    /// Drops up to 100 of `topic`'s kept records: those older than
    /// `window_ms`, and index entries whose record is gone.
    History = "history", when_full: true, acked: false, late_unknown: true,
        (topic: &'a str, window_ms: u64) -> u64 = count;
}

/// Most dead jobs one purge call deletes: bounds a script's run time.
pub(crate) const PURGE_BATCH: u64 = 500;

/// The reply: DONE and how many entries went.
fn count((_, mut f): (Status, Fields)) -> Result<u64> {
    Ok(f.int()?.max(0) as u64)
}

impl Store {
    /// Drops up to 100 of `topic`'s kept records in partition `part`:
    /// those older than its window, and index entries whose record is gone.
    /// Returns how many.
    pub(crate) async fn trim_history(&self, part: usize, topic: &str) -> Result<u64> {
        let window = self.keep.of(topic).map_or(0, |d| d.as_millis() as u64);
        self.run::<History>(part, (topic, window)).await
    }

    pub(crate) async fn trim_all_history(&self) -> Result<()> {
        for (topic, counts) in self.topic_counts().await? {
            if counts.finished > 0 {
                for part in 0..self.parts().len() {
                    while self.trim_history(part, &topic).await? > 0 {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_how_many() {
        let d = |r: &[&str]| count(Fields::parse("purge", sample(r)).unwrap());
        assert_eq!(d(&["0", "7"]).unwrap(), 7);
        assert_eq!(d(&["0", "3"]).unwrap(), 3);
        assert_eq!(d(&["0", "0"]).unwrap(), 0);
        assert!(d(&["0"]).is_err());
        assert!(d(&["0", "x"]).is_err());
    }
}
