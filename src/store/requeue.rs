//! Requeue: dead jobs back to ready with fresh attempts. The script is
//! `requeue.lua`.

use super::{Script, Store};
use crate::error::Result;

pub const SCRIPT: Script = Script {
    name: "requeue",
    source: include_str!("requeue.lua"),
    when_full: true,
    acked: false,
};

/// Most dead jobs one call moves: bounds a script's run time.
pub(crate) const BATCH: usize = 500;

impl Store {
    /// Requeues `ids` (at most [`BATCH`]), or the oldest [`BATCH`] dead jobs
    /// of `topic` when `ids` is empty. Returns how many.
    /// All of `ids` must be in partition `part`.
    pub(crate) async fn requeue(&self, part: usize, topic: &str, ids: &[String]) -> Result<u64> {
        let mut cmd = self.script(&SCRIPT, part);
        cmd.arg(topic).arg(BATCH);
        for id in ids {
            cmd.arg(id);
        }
        let (_, mut f) = self.send(cmd).await?;
        Ok(f.int()?.max(0) as u64)
    }
}
