//! Release: undo a lease that never reached its consumer. The script is
//! `release.lua`.

use super::{ScriptDef, Status, Store};
use crate::error::Result;
use crate::redis::Fields;

pub const SCRIPT: ScriptDef = ScriptDef {
    name: "release",
    source: include_str!("release.lua"),
    when_full: true,
    acked: false,
    late_unknown: true,
};

/// The reply: DONE, or STALE or MISSING (nothing changed).
fn decode((status, _): (Status, Fields)) -> bool {
    status == Status::Done
}

impl Store {
    /// True if the lease `token` was undone (the job is ready again, the
    /// attempt uncounted); false if it was no longer current.
    pub(crate) async fn release(&self, id: &str, token: &str) -> Result<bool> {
        let mut cmd = self.script(&SCRIPT, self.part_of(id));
        cmd.arg(id).arg(token);
        let done = decode(self.send(cmd).await?);
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_whether_it_was_done() {
        let d = |r: &[&str]| decode(Fields::parse::<Status>("release", sample(r)).unwrap());
        assert!(d(&["0"]));
        assert!(!d(&["2"]));
        assert!(Fields::parse::<Status>("release", sample(&["9"])).is_err());
    }
}
