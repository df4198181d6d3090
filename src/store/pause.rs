//! Pausing topics: a paused topic is in every partition's `{p}:paused`
//! set, and `pop.lua` hands out none of its jobs. Plain commands, no
//! script.

use super::{layout, Keys, Store};
use crate::error::Result;

impl Store {
    /// Pauses or resumes `topic` in every partition. Resuming tells every
    /// instance's waiting pops to look again at once.
    pub(crate) async fn set_paused(&self, topic: &str, paused: bool) -> Result<()> {
        let op = if paused { "SADD" } else { "SREM" };
        for part in self.parts() {
            let mut pipe = redis::pipe();
            pipe.cmd(op).arg(part.paused()).arg(topic).ignore();
            if !paused {
                // Ready jobs of every priority: the partition's count.
                pipe.cmd("HGET")
                    .arg(part.counts())
                    .arg(format!("{}:{topic}", layout::state::READY));
            }
            let r: Vec<Option<i64>> = self
                .redis
                .call("pause", pipe.query_async(&mut self.redis.conn()))
                .await?;
            if let Some(&Some(ready)) = r.first() {
                if ready > 0 {
                    let mut publish = redis::cmd("PUBLISH");
                    publish
                        .arg(part.ready_channel())
                        .arg(layout::ready_notice(ready as u64, topic));
                    self.redis
                        .call("resume", publish.query_async::<i64>(&mut self.redis.conn()))
                        .await?;
                }
            }
        }
        let index = Keys::new(self.prefix()).paused();
        if self.parts().len() > 1 {
            let mut cmd = redis::cmd(op);
            cmd.arg(index).arg(topic);
            self.redis
                .call("pause", cmd.query_async::<i64>(&mut self.redis.conn()))
                .await?;
        }
        Ok(())
    }

    /// The paused topics.
    pub(crate) async fn paused(&self) -> Result<std::collections::BTreeSet<String>> {
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(Keys::new(self.prefix()).paused());
        self.redis
            .call("paused topics", cmd.query_async(&mut self.redis.conn()))
            .await
    }
}
