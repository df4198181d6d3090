//! The relay: carries the notes a batch's jobs leave as they end (each in
//! its own partition's stream, written with the end itself) to their
//! batches' homes, where `batch_note.lua` counts each outcome once and
//! fires a callback whose batch is done; then drops them. And it settles
//! reservations whose pusher died between taking an id in and pushing it.
//!
//! Each partition's leader relays its notes (one relay a partition, as one
//! sweep): at once when a call that wrote notes says so on the wake
//! channel, and every [`LOOK_EVERY`] for notices that went unheard. A
//! relay that dies between counting and dropping leaves the notes for the
//! next, which counts nothing twice. Notes are dropped only once every
//! home that counted them answered (acknowledged by replicas, with replica
//! acks), so a failover of a home brings back no count without its note.

use std::collections::BTreeMap;
use std::time::Duration;

use tracing::{debug, warn};

use super::Handles;
use crate::error::Result;
use crate::store::batches::{BatchNote, BatchSettle};
use crate::store::Store;

/// How often the relay looks without a notice: an idle queue pays two
/// reads a partition per look.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(15);

/// Most notes read, counted and dropped per call.
const NOTES_PER_CALL: usize = 500;

/// Most batches one `batch_note` call names: it fires at most one
/// callback each (a push's writes), and a push call takes no more jobs
/// than this either. Notes of one batch cost a few HGETs each: 500 of one
/// batch go in one call; 500 of 500 batches held Redis 20-50 ms.
const BATCHES_PER_COUNT: usize = 128;

/// A reservation older than this whose job does not exist was never
/// pushed: far longer than any push's deadline.
pub(crate) const RESERVATION_GRACE: Duration = Duration::from_secs(60);

/// Most reservations looked at per partition and look.
const RESERVATIONS_PER_LOOK: usize = 200;

/// Relays the partitions this instance leads until the queue stops.
pub(super) async fn run(h: Handles) {
    let mut last_reservations = tokio::time::Instant::now();
    loop {
        for part in h.leader.held() {
            if let Err(e) = relay(&h.store, part).await {
                warn!(part, error = %e, "relaying batch notes failed; trying again later");
            }
        }
        if last_reservations.elapsed() >= LOOK_EVERY {
            last_reservations = tokio::time::Instant::now();
            for part in h.leader.held() {
                if let Err(e) = settle_reservations(&h.store, part).await {
                    debug!(part, error = %e, "settling batch reservations failed; trying again later");
                }
            }
        }
        tokio::select! {
            _ = h.notes.notified() => {}
            _ = tokio::time::sleep(LOOK_EVERY) => {}
            _ = h.stop.wait() => return,
        }
    }
}

/// Carries partition `part`'s notes home until none is left: per call of
/// at most [`NOTES_PER_CALL`] notes, one XRANGE, one `batch_note` call per
/// home they name and [`BATCHES_PER_COUNT`] of its batches, one XDEL.
/// Returns how many notes went.
pub(crate) async fn relay(store: &Store, part: usize) -> Result<usize> {
    let retention = store.keep.results.as_millis() as u64;
    let mut relayed = 0;
    loop {
        let notes = store.notes(part, NOTES_PER_CALL).await?;
        if notes.is_empty() {
            return Ok(relayed);
        }
        let mut homes: BTreeMap<usize, Vec<Counted>> = BTreeMap::new();
        for n in &notes {
            homes
                .entry(store.batch_home(&n.batch))
                .or_default()
                .push((&n.batch, &n.id, &n.outcome, &n.result));
        }
        for (home, triples) in homes {
            for chunk in by_batches(&triples, BATCHES_PER_COUNT) {
                let (changed, fired) = store.run::<BatchNote>(home, (retention, chunk)).await?;
                if fired > 0 {
                    debug!(home, changed, fired, "batch callbacks pushed");
                }
            }
        }
        let entries: Vec<&str> = notes.iter().map(|n| n.entry.as_str()).collect();
        store.drop_notes(part, &entries).await?;
        relayed += notes.len();
        if notes.len() < NOTES_PER_CALL {
            return Ok(relayed);
        }
    }
}

/// A note as its home counts it: batch, job id, outcome, result.
type Counted<'a> = (&'a str, &'a str, &'a str, &'a str);

/// `notes` cut in order into runs naming at most `most` batches each.
fn by_batches<'n, 'a>(notes: &'n [Counted<'a>], most: usize) -> Vec<&'n [Counted<'a>]> {
    let mut runs = Vec::new();
    let (mut start, mut named) = (0, std::collections::HashSet::new());
    for (i, (batch, _, _, _)) in notes.iter().enumerate() {
        if !named.contains(batch) && named.len() == most {
            runs.push(&notes[start..i]);
            (start, named) = (i, Default::default());
        }
        named.insert(*batch);
    }
    if start < notes.len() {
        runs.push(&notes[start..]);
    }
    runs
}

/// Settles partition `part`'s reservations older than
/// [`RESERVATION_GRACE`]: an id whose job carries the batch was pushed
/// (or, a flow's child, is a waiting parent: its flow exists);
/// one with neither never will be (its pusher died first), and leaves
/// its batch. One ZRANGEBYSCORE, one HGET per id (and one EXISTS per
/// flow child not found), one `batch_settle` call per batch. Returns how many were settled.
pub(crate) async fn settle_reservations(store: &Store, part: usize) -> Result<usize> {
    let now = store.redis.clock().now_ms().await?;
    let before = now - RESERVATION_GRACE.as_millis() as i64;
    let old = store
        .old_reservations(part, before, RESERVATIONS_PER_LOOK)
        .await?;
    if old.is_empty() {
        return Ok(0);
    }
    let ids: Vec<String> = old.iter().map(|(_, id)| id.clone()).collect();
    let carried = store.batches_of(&ids).await?;
    let landed: Vec<bool> = old
        .iter()
        .zip(&carried)
        .map(|((batch, _), has)| has.as_deref() == Some(batch.as_str()))
        .collect();
    // A flow's child that is a parent in turn has no job until its own
    // children are done: its flow is what landed. One EXISTS each, for
    // those only.
    let unsure: Vec<String> = old
        .iter()
        .zip(&landed)
        .filter(|((batch, _), landed)| !**landed && batch.starts_with(crate::flow::FLOW_MARK))
        .map(|((_, id), _)| id.clone())
        .collect();
    let waiting: std::collections::HashSet<&String> = unsure
        .iter()
        .zip(store.flows_exist(&unsure).await?)
        .filter_map(|(id, is_flow)| is_flow.then_some(id))
        .collect();
    let mut by_batch: BTreeMap<&str, Vec<(&str, &str)>> = BTreeMap::new();
    for ((batch, id), landed) in old.iter().zip(landed) {
        let how = if landed || (batch.starts_with(crate::flow::FLOW_MARK) && waiting.contains(id)) {
            "landed"
        } else {
            "lost"
        };
        by_batch.entry(batch).or_default().push((id, how));
    }
    let retention = store.keep.results.as_millis() as u64;
    for (batch, outcomes) in by_batch {
        store
            .run::<BatchSettle>(part, (batch, retention, &outcomes))
            .await?;
    }
    Ok(old.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_call_names_at_most_so_many_batches_and_keeps_the_order() {
        let notes: Vec<Counted> = ["a", "a", "b", "a", "c", "c", "d", "b"]
            .iter()
            .enumerate()
            .map(|(i, b)| (*b, ["0", "1", "2", "3", "4", "5", "6", "7"][i], "f", ""))
            .collect();
        let runs = by_batches(&notes, 2);
        let names: Vec<Vec<&str>> = runs
            .iter()
            .map(|r| r.iter().map(|n| n.0).collect())
            .collect();
        assert_eq!(
            names,
            [vec!["a", "a", "b", "a"], vec!["c", "c", "d"], vec!["b"]]
        );
        assert_eq!(by_batches(&notes, 128).len(), 1);
        assert!(by_batches(&[], 2).is_empty());
    }
}
