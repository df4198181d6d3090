//! Requeue: dead jobs back to ready with fresh attempts. The script is
//! `requeue.lua`.

use super::script::script;
use super::Status;
use crate::error::Result;
use crate::redis::Fields;

script! {
    /// Requeues `ids` (at most `limit`, [`BATCH`] at most; all in the
    /// partition called), or the oldest `limit` dead jobs of `topic` when
    /// `ids` is empty: how many.
    Requeue = "requeue", when_full: true, acked: false, late_unknown: true,
        (topic: &'a str, limit: usize, ids: &'a [String]) -> u64 = decode;
}

/// Most dead jobs one call moves: bounds a script's run time.
pub(crate) const BATCH: usize = 500;

/// The reply: DONE and how many jobs were requeued.
fn decode((_, mut f): (Status, Fields)) -> Result<u64> {
    Ok(f.int()?.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_how_many() {
        let d = |r: &[&str]| decode(Fields::parse("requeue", sample(r)).unwrap());
        assert_eq!(d(&["0", "7"]).unwrap(), 7);
        assert_eq!(d(&["0", "0"]).unwrap(), 0);
        assert!(d(&["0"]).is_err());
        assert!(d(&["0", "x"]).is_err());
    }
}
