//! Release: undo a lease that never reached its consumer. The script is
//! `release.lua`.

use super::{Script, Status, Store};
use crate::error::Result;

pub const SCRIPT: Script = Script {
    name: "release",
    source: include_str!("release.lua"),
    when_full: true,
};

impl Store {
    /// True if the lease `token` was undone (the job is ready again, the
    /// attempt uncounted); false if it was no longer current.
    pub(crate) async fn release(&self, id: &str, token: &str) -> Result<bool> {
        let mut cmd = self.fcall(&SCRIPT, self.part(id));
        cmd.arg(id).arg(token);
        let (status, _) = self.run("release", &cmd).await?;
        Ok(status == Status::Done)
    }
}
