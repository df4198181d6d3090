//! The topic schedules' backfill: `index.lua`, a bounded batch per call,
//! run by the partition leader's upkeep (`crate::loops`) until a pass has
//! ended, and again while an instance of an older build (which keeps no
//! topic schedules) is alive.

use super::script::script;
use super::{Status, Store};
use crate::error::{Error, Result};
use crate::redis::Fields;

script! {
    /// One batch ([`BATCH`] entries at most) of a partition's backfill;
    /// `again`: begin a new pass if none is under way. Replies the entries
    /// looked at and whether no pass is under way after it.
    Index = "index", when_full: false, acked: false, late_unknown: true,
        (again: bool => (BATCH, u8::from(again))) -> (u64, bool) = decode;
}

/// Most entries one call looks at.
pub const BATCH: usize = 1000;

/// What one call did: entries looked at, and whether no pass is under way
/// after it.
fn decode((status, mut f): (Status, Fields)) -> Result<(u64, bool)> {
    if status != Status::Done {
        return Err(Error::protocol("index", format!("status {status:?}")));
    }
    Ok((f.int()?.max(0) as u64, f.int()? == 1))
}

impl Store {
    /// Runs `index.lua` on partition `part` until no pass is under way,
    /// paced like the upkeep's calls (about a quarter of Redis's time).
    pub(crate) async fn index_all(&self, part: usize) -> Result<()> {
        loop {
            let call = std::time::Instant::now();
            if self.run::<Index>(part, (false,)).await?.1 {
                return Ok(());
            }
            let pause = (call.elapsed() * 3).clamp(
                std::time::Duration::from_millis(1),
                std::time::Duration::from_millis(500),
            );
            tokio::time::sleep(pause).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_what_a_call_did() {
        let d = |r: &[&str]| decode(Fields::parse("index", sample(r)).unwrap());
        assert_eq!(d(&["0", "1000", "0"]).unwrap(), (1000, false));
        assert_eq!(d(&["0", "3", "1"]).unwrap(), (3, true));
        assert!(d(&["0", "3"]).is_err());
    }
}
