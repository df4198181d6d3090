//! The topic schedules' backfill: `index.lua`, a bounded batch per call,
//! run by the partition leader's upkeep (`crate::loops`) until a pass has
//! ended, and again while an instance of an older build (which keeps no
//! topic schedules) is alive.

use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::redis::Fields;

pub const SCRIPT: ScriptDef = ScriptDef {
    name: "index",
    source: include_str!("index.lua"),
    when_full: false,
    acked: false,
    late_unknown: true,
};

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
            if self.index_topics(part, false).await?.1 {
                return Ok(());
            }
            let pause = (call.elapsed() * 3).clamp(
                std::time::Duration::from_millis(1),
                std::time::Duration::from_millis(500),
            );
            tokio::time::sleep(pause).await;
        }
    }

    /// One batch of partition `part`'s backfill; `again`: begin a new pass
    /// if none is under way. Returns the entries looked at and whether no
    /// pass is under way after it.
    pub(crate) async fn index_topics(&self, part: usize, again: bool) -> Result<(u64, bool)> {
        let mut cmd = self.script(&SCRIPT, part);
        cmd.arg(BATCH).arg(u8::from(again));
        decode(self.send(cmd).await?)
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
