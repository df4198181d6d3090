//! Reschedule: a new due time (and maybe body) for an existing job. The
//! script is `reschedule.lua`.

use std::time::Duration;

use super::{Script, Status, Store};
use crate::error::Result;

pub const SCRIPT: Script = Script {
    name: "reschedule",
    source: include_str!("reschedule.lua"),
    when_full: false,
};

impl Store {
    /// The status and, when Done, the new due time and whether it is now
    /// the earliest job.
    pub(crate) async fn reschedule(
        &self,
        id: &str,
        delay: Duration,
        due_at_ms: Option<i64>,
        body: Option<&str>,
    ) -> Result<(Status, i64, bool)> {
        let mut cmd = self.fcall(&SCRIPT, self.part(id));
        cmd.arg(id)
            .arg(delay.as_millis() as u64)
            .arg(due_at_ms.map_or(-1, |t| t.max(0)))
            .arg(if body.is_some() { "1" } else { "0" })
            .arg(body.unwrap_or(""));
        let (status, mut f) = self.run("reschedule", &cmd).await?;
        Ok((status, f.int()?, f.int()? == 1))
    }
}
