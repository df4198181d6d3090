//! The event stream: one Redis Stream per partition (`{p}:events`), written
//! by the transition scripts themselves (`EVENT.emit` in lib/counts.lua, in the same
//! step as the change, so no event is missed or invented) and read here
//! with `events.lua`. Off unless configured: then no script writes one.

use super::script::script;
use super::{Status, Store};
use crate::error::{Error, Result};
use crate::redis::Fields;

script! {
    /// Up to `max` (at least one) events of a partition after `pos`, which
    /// [`check_pos`] has checked. XINFO STREAM and an XRANGE of at most
    /// `max` entries, so its cost is bounded by what it returns.
    Events = "events", when_full: true, acked: false, late_unknown: false,
        (pos: &'a str, max: usize => max.max(1)) -> Read = decode;
}

pub use crate::defaults::{EVENTS_KEPT as DEFAULT_EVENTS_KEPT, MAX_EVENTS_KEPT};

/// `events_kept` within its range, or what is wrong.
pub fn check_kept(kept: u64) -> std::result::Result<(), String> {
    if (1..=MAX_EVENTS_KEPT).contains(&kept) {
        Ok(())
    } else {
        Err(format!(
            "events_kept {kept} is out of range: 1 to {MAX_EVENTS_KEPT}"
        ))
    }
}

/// One entry of a partition's stream, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its stream id, "<ms>-<seq>" (Redis time).
    pub pos: String,
    pub kind: String,
    pub id: String,
    pub topic: String,
    pub attempt: u32,
    pub due_ms: Option<i64>,
    pub error: Option<String>,
}

/// What one read of a partition gave.
#[derive(Debug)]
pub(crate) struct Read {
    /// The position asked for is no longer kept: events after it may be
    /// lost; `entries` start at the oldest kept.
    pub gap: bool,
    /// Where the reader is after these entries.
    pub pos: String,
    pub entries: Vec<Entry>,
}

/// The reply: the gap flag, the position after, then 7 fields an entry.
fn decode((_, mut f): (Status, Fields)) -> Result<Read> {
    let gap = f.int()? == 1;
    let pos = f.string()?;
    let mut entries = Vec::with_capacity(f.left() / 7);
    while f.left() >= 7 {
        let pos = f.string()?;
        let kind = f.string()?;
        let id = f.string()?;
        let topic = f.string()?;
        let attempt = f.int()?.clamp(0, u32::MAX as i64) as u32;
        let due = f.string()?;
        let error = f.string()?;
        entries.push(Entry {
            pos,
            kind,
            id,
            topic,
            attempt,
            due_ms: due.parse().ok(),
            error: Some(error).filter(|e| !e.is_empty()),
        });
    }
    Ok(Read { gap, pos, entries })
}

/// A partition's position: "$" (now), "0-0" (the oldest kept) or a stream
/// id "<ms>-<seq>".
pub(crate) fn check_pos(pos: &str) -> std::result::Result<(), String> {
    let ok = pos == "$"
        || pos.split_once('-').is_some_and(|(ms, seq)| {
            ms.parse::<u64>().is_ok_and(|ms| ms < 1 << 53) && seq.parse::<u64>().is_ok()
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "position {pos:?} is not an event id (<ms>-<seq>, one per partition, comma-separated)"
        ))
    }
}

impl Store {
    /// Whether the scripts write events.
    pub(crate) fn events_on(&self) -> bool {
        self.events > 0
    }

    /// Up to `max` events of partition `part` after `pos` (see
    /// [`check_pos`]). One script call: XINFO STREAM and an XRANGE of at
    /// most `max` entries, so its cost is bounded by what it returns.
    pub(crate) async fn read_events(&self, part: usize, pos: &str, max: usize) -> Result<Read> {
        check_pos(pos).map_err(Error::Invalid)?;
        self.run::<Events>(part, (pos, max)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_stream_ids_or_now() {
        for ok in ["$", "0-0", "1795472762983-12"] {
            assert_eq!(check_pos(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "0",
            "12",
            "a-1",
            "1-",
            "-1",
            "1-2-3",
            "99999999999999999999-0",
        ] {
            assert!(check_pos(bad).is_err(), "{bad}");
        }
    }
}
