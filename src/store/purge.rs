//! Purge: delete a topic's dead jobs for good. The script is `purge.lua`.

use super::{Script, Status, Store};
use crate::error::Result;
use crate::redis::Fields;

pub const SCRIPT: Script = Script {
    name: "purge",
    source: include_str!("purge.lua"),
    when_full: true,
    acked: false,
    late_unknown: true,
};

/// The reply: DONE and how many jobs were deleted.
fn decode((_, mut f): (Status, Fields)) -> Result<u64> {
    Ok(f.int()?.max(0) as u64)
}

impl Store {
    /// Deletes up to 500 dead jobs of `topic` in partition `part`; returns how many.
    pub(crate) async fn purge(&self, part: usize, topic: &str) -> Result<u64> {
        let mut cmd = self.script(&SCRIPT, part);
        cmd.arg(topic).arg(500);
        decode(self.send(cmd).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_how_many() {
        let d = |r: &[&str]| decode(Fields::parse("purge", sample(r)).unwrap());
        assert_eq!(d(&["0", "7"]).unwrap(), 7);
        assert_eq!(d(&["0", "0"]).unwrap(), 0);
        assert!(d(&["0"]).is_err());
        assert!(d(&["0", "x"]).is_err());
    }
}
