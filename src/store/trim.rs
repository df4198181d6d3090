//! Trim: dead-letter retention for one topic. The script is `trim.lua`.

use super::nack::Retention;
use super::{Script, Store};
use crate::error::Result;

pub const SCRIPT: Script = Script {
    name: "trim",
    source: include_str!("trim.lua"),
    when_full: true,
    acked: false,
};

impl Store {
    /// Drops up to 200 of `topic`'s dead jobs beyond `retention`; returns
    /// how many.
    pub(crate) async fn trim(&self, part: usize, topic: &str, retention: Retention) -> Result<u64> {
        let mut cmd = self.script(&SCRIPT, part);
        cmd.arg(topic)
            .arg(retention.max_per_topic)
            .arg(retention.max_age.as_millis() as u64);
        let (_, mut f) = self.send(cmd).await?;
        Ok(f.int()?.max(0) as u64)
    }
}
