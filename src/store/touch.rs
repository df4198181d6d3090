//! Touch: extend a lease. The script is `touch.lua`.

use std::time::Duration;

use super::{Script, Status, Store};
use crate::error::Result;

pub const SCRIPT: Script = Script {
    name: "touch",
    source: include_str!("touch.lua"),
    when_full: true,
};

impl Store {
    /// The status and, when Done, the new end of the lease (Unix ms).
    pub(crate) async fn touch(
        &self,
        id: &str,
        token: &str,
        length: Option<Duration>,
    ) -> Result<(Status, i64)> {
        let mut cmd = self.fcall(&SCRIPT, self.part(id));
        cmd.arg(id)
            .arg(token)
            .arg(length.map_or(-1, |d| d.as_millis() as i64));
        let (status, mut f) = self.run("touch", &cmd).await?;
        Ok((status, f.int()?))
    }
}
