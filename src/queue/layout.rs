//! The storage layout: which one each partition's writers write, and
//! going back to an older one before an older build starts (see
//! `store::layout::LAYOUT_READ` and docs/upgrading.md).

use super::Queue;
use crate::error::{Error, Result};
use crate::store::layout::LAYOUT_READ;
use crate::store::relayout::Flag;

/// One partition's layout flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionLayout {
    pub partition: usize,
    /// The layout its writers write (1: bodies whole; 2: long bodies in
    /// pieces; 3: besides, delayed jobs in their topic schedules only).
    pub layout: u8,
    /// Held by the operator (`delayq layout --hold`): the upkeep does not
    /// raise it.
    pub held: bool,
}

/// The highest layout this build reads.
pub const LAYOUT: u8 = LAYOUT_READ;

impl Queue {
    /// Every partition's layout flag.
    pub async fn layouts(&self) -> Result<Vec<PartitionLayout>> {
        Ok(self
            .store()
            .layout_flags()
            .await?
            .into_iter()
            .enumerate()
            .map(|(partition, f)| PartitionLayout {
                partition,
                layout: f.layout,
                held: f.held,
            })
            .collect())
    }

    /// Holds every partition at `layout` (the upkeep leaves a held flag
    /// alone). Holding 2 or 1 then puts every delayed job back into the
    /// shared schedule (layout 3 keeps them in their topic schedules only),
    /// and holding 1 rewrites every pieced body whole, a batch at a time
    /// and paced (about a quarter of Redis's time), so that an older
    /// build, which reads neither, can start. Returns how many bodies were
    /// rewritten.
    pub async fn hold_layout(&self, layout: u8) -> Result<u64> {
        if !(1..=LAYOUT_READ).contains(&layout) {
            return Err(Error::Invalid(format!(
                "layout {layout} is not one this build knows: hold 1 (bodies whole), 2 (long bodies in pieces) or {LAYOUT_READ} (delayed jobs in their topic schedules only)"
            )));
        }
        let store = self.store();
        let held = Flag { layout, held: true };
        for part in 0..store.parts().len() {
            // Marked before any writer sees 3; below 3, marked so that the
            // way back runs whatever raised the flag (a hand-set 3 too).
            store.mark_split(part).await?;
            store.set_layout_flag(part, held).await?;
        }
        let mut rewritten = 0;
        if layout == 1 {
            for part in 0..store.parts().len() {
                rewritten += store.relayout_all(part).await?;
            }
        }
        // Below layout 3: delayed jobs back into the shared schedule, which
        // an older build fires from (a pass under way ends first, then
        // goes on with the way back).
        if layout < 3 {
            for part in 0..store.parts().len() {
                store.index_all(part).await?;
            }
        }
        Ok(rewritten)
    }

    /// Lets go of a held layout: the flag keeps its layout, and the
    /// upkeep raises it once every live instance reads the next.
    pub async fn release_layout(&self) -> Result<()> {
        let store = self.store();
        for (part, f) in store.layout_flags().await?.into_iter().enumerate() {
            if f.held {
                store
                    .set_layout_flag(part, Flag { held: false, ..f })
                    .await?;
            }
        }
        Ok(())
    }
}
