//! The event stream, read over every partition: a position is one stream
//! id per partition, comma-separated, so a reader resumes each partition
//! exactly where it left it.

use super::Queue;
use crate::error::{Error, Result};
use crate::figures::Event;
use crate::store::events::{check_pos, Read};

/// What [`Queue::events_after`] read.
#[derive(Debug, Default)]
pub struct EventRead {
    /// The events, each with the position just after it (resume there to
    /// get the events that follow it, not it).
    pub events: Vec<(String, Event)>,
    /// Partitions whose stream no longer holds the position asked for:
    /// events after it may be missing (its events here start at the
    /// oldest kept).
    pub gaps: Vec<usize>,
    /// Where the reader is after all it read, the events of other topics
    /// too.
    pub position: String,
}

/// Said when the stream is asked for while it is off.
pub const EVENTS_OFF: &str = "the event stream is off: start delayq serve with --events \
     (or events = true in its config file; Config::events in the library)";

impl Queue {
    /// Where the event stream ends now: the position to read after for
    /// events from now on.
    pub async fn events_now(&self) -> Result<String> {
        let parts = self.store().parts().len();
        self.events_position(&vec!["$".to_owned(); parts]).await
    }

    async fn events_position(&self, pos: &[String]) -> Result<String> {
        let reads = (0..pos.len()).map(|p| self.store().read_events(p, &pos[p], 1));
        let mut out = Vec::with_capacity(pos.len());
        for (p, r) in futures::future::join_all(reads)
            .await
            .into_iter()
            .enumerate()
        {
            let r = r?;
            out.push(if pos[p] == "$" { r.pos } else { pos[p].clone() });
        }
        Ok(out.join(","))
    }

    /// Up to `max` events of each partition after `position` (from
    /// [`events_now`](Self::events_now), an event's position, or "0": the
    /// oldest kept), of `topics` only (empty: all), in time order. One
    /// script call per partition, its cost bounded by the `max` entries it
    /// reads.
    pub async fn events_after(
        &self,
        position: &str,
        topics: &[String],
        max: usize,
    ) -> Result<EventRead> {
        if !self.store().events_on() {
            return Err(Error::Invalid(EVENTS_OFF.into()));
        }
        let parts = self.store().parts().len();
        let mut pos: Vec<String> = if position == "0" {
            vec!["0-0".to_owned(); parts]
        } else {
            position.split(',').map(str::to_owned).collect()
        };
        if pos.len() != parts {
            return Err(Error::Invalid(format!(
                "event position {position:?} has {} part(s); this queue has {parts} partition(s): \
                 one <ms>-<seq> each, comma-separated",
                pos.len()
            )));
        }
        for p in &pos {
            check_pos(p).map_err(Error::Invalid)?;
        }
        let reads = (0..parts).map(|p| self.store().read_events(p, &pos[p], max));
        let reads: Vec<Read> = futures::future::join_all(reads)
            .await
            .into_iter()
            .collect::<Result<_>>()?;
        let mut out = EventRead::default();
        let mut all = Vec::new();
        for (p, r) in reads.into_iter().enumerate() {
            if r.gap {
                out.gaps.push(p);
                pos[p] = "0-0".into();
            }
            if r.entries.is_empty() {
                pos[p] = r.pos;
            }
            all.extend(r.entries.into_iter().map(|e| (p, e)));
        }
        let key = |pos: &str| {
            let (ms, seq) = pos.split_once('-').unwrap_or((pos, "0"));
            (
                ms.parse::<i64>().unwrap_or(0),
                seq.parse::<u64>().unwrap_or(0),
            )
        };
        // Each partition's events stay in their order; across partitions,
        // by time.
        all.sort_by_key(|(p, e)| (key(&e.pos), *p));
        for (p, e) in all {
            pos[p] = e.pos.clone();
            if !topics.is_empty() && !topics.contains(&e.topic) {
                continue;
            }
            // A progress event's value, and a finished event's result,
            // travel in the entry's error field.
            let json = |v: String| serde_json::from_str(&v).unwrap_or(serde_json::Value::String(v));
            let (mut error, mut progress, mut result) = (None, None, None);
            match e.kind.as_str() {
                crate::store::layout::event::PROGRESS => progress = e.error.map(json),
                crate::store::layout::event::FINISHED
                | crate::store::layout::event::BATCH_FIRED => result = e.error.map(json),
                _ => error = e.error,
            }
            let event = Event {
                event: e.kind,
                id: e.id,
                topic: e.topic,
                attempt: e.attempt,
                at_ms: key(&e.pos).0,
                due_ms: e.due_ms,
                error,
                progress,
                result,
            };
            out.events.push((pos.join(","), event));
        }
        out.position = pos.join(",");
        Ok(out)
    }

    /// Fires when the queue closes (or its caller's shutdown fires): event
    /// streams end then, so a server's graceful stop does not wait on them.
    #[cfg(feature = "server")]
    pub(crate) fn closed(&self) -> crate::shutdown::Shutdown {
        self.inner.h.stop.clone()
    }

    /// Whether this queue writes the event stream.
    pub fn events_on(&self) -> bool {
        self.store().events_on()
    }
}
