//! Kept records of finished jobs (`keep_finished`): the trim of a topic's
//! index (`history.lua`) and the loop that runs it for topics where nothing
//! finishes any more. Finishes write and trim records in `remove.lua`.

use super::{Script, Status, Store};
use crate::error::Result;
use crate::redis::Fields;

pub const SCRIPT: Script = Script {
    name: "history",
    source: include_str!("history.lua"),
    when_full: true,
    acked: false,
    late_unknown: true,
};

fn decode((_, mut f): (Status, Fields)) -> Result<u64> {
    Ok(f.int()?.max(0) as u64)
}

impl Store {
    /// Drops up to 100 of `topic`'s kept records in partition `part`:
    /// those older than its window, and index entries whose record is gone.
    /// Returns how many.
    pub(crate) async fn trim_history(&self, part: usize, topic: &str) -> Result<u64> {
        let window = self.keep.of(topic).map_or(0, |d| d.as_millis() as u64);
        let mut cmd = self.script(&SCRIPT, part);
        cmd.arg(topic).arg(window);
        decode(self.send(cmd).await?)
    }

    pub(crate) async fn trim_all_history(&self) -> Result<()> {
        for (topic, counts) in self.topic_counts().await? {
            if counts.finished > 0 {
                for part in 0..self.parts().len() {
                    while self.trim_history(part, &topic).await? > 0 {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_how_many() {
        let d = |r: &[&str]| decode(Fields::parse("history", sample(r)).unwrap());
        assert_eq!(d(&["0", "3"]).unwrap(), 3);
        assert!(d(&["0"]).is_err());
    }
}
