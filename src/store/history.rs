//! Kept records of finished jobs (`keep_finished`): the trim of a topic's
//! index (`history.lua`) and the loop that runs it for topics where nothing
//! finishes any more. Finishes write and trim records in `remove.lua`.

use std::sync::Arc;
use std::time::Duration;

use super::reply::Fields;
use super::{Script, Status, Store};
use crate::error::Result;
use crate::shutdown::Shutdown;

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

    async fn trim_all_history(&self) -> Result<()> {
        for (topic, counts) in self.overview().await?.topics {
            if counts.finished > 0 {
                for part in 0..self.parts().len() {
                    while self.trim_history(part, &topic).await? > 0 {}
                }
            }
        }
        Ok(())
    }
}

/// Keeps the counts of kept records right where nothing finishes any more
/// (a record's hash expires on its own; its index entry and count go here):
/// every quarter of the shortest window, between a second and a minute
/// (a minute when this process keeps none, for indexes a window since
/// turned off left behind).
pub(crate) async fn trim_loop(store: Arc<Store>, stop: Shutdown) {
    let every = store
        .keep
        .shortest()
        .map_or(Duration::from_secs(60), |d| d / 4)
        .clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait() => return,
        }
        if let Err(e) = store.trim_all_history().await {
            tracing::debug!(error = %e, "trimming finished jobs' records failed; trying again later");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::sample;

    #[test]
    fn decodes_how_many() {
        let d = |r: &[&str]| decode(Fields::parse("history", sample(r)).unwrap());
        assert_eq!(d(&["0", "3"]).unwrap(), 3);
        assert!(d(&["0"]).is_err());
    }
}
