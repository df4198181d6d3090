//! Purge: delete a topic's dead jobs for good. The script is `purge.lua`.

use super::{Script, Store};
use crate::error::Result;

pub const SCRIPT: Script = Script {
    name: "purge",
    source: include_str!("purge.lua"),
    when_full: true,
    acked: false,
};

impl Store {
    /// Deletes up to 500 dead jobs of `topic` in partition `part`; returns how many.
    pub(crate) async fn purge(&self, part: usize, topic: &str) -> Result<u64> {
        let mut cmd = self.script(&SCRIPT, part);
        cmd.arg(topic).arg(500);
        let (_, mut f) = self.send(cmd).await?;
        Ok(f.int()?.max(0) as u64)
    }
}
