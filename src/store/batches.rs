//! Batches of jobs with a callback (issue 53): the scripts of a batch's
//! home (open, take ids in, settle reservations, count notes, close or
//! cancel) and of its jobs' partitions (cancel a page of them), the reads
//! of a batch and of the notes the relay carries. (Not `batch.rs`, which
//! gathers many calls into one.) lib/batches.lua says how a job's end
//! reaches its batch's home.

use std::collections::BTreeMap;

use super::script::script;
use super::{Status, Store};
use crate::error::{Error, Result};
use crate::redis::Fields;

/// The callback a batch pushes once: a job to `topic`, made ready at once,
/// its body the batch's report.
#[derive(Clone, Debug)]
pub(crate) struct Callback {
    pub id: String,
    pub topic: String,
    pub body: String,
    pub ttr_ms: u64,
    pub intervals_ms: String,
    pub max_attempts: u32,
    /// A flow's parent (see [`crate::flow`]); None for a batch.
    pub parent: Option<ParentOptions>,
}

/// What a flow's parent takes beyond a batch's callback.
#[derive(Clone, Debug)]
pub(crate) struct ParentOptions {
    pub child_dead: &'static str,
    pub delay_ms: u64,
    pub priority: u8,
    /// Newline-separated.
    pub tags: String,
    /// The flow (batch id) whose child this parent is; "" for a root.
    pub upper: String,
    /// Its W3C trace context ("" for none).
    pub traceparent: String,
    pub tracestate: String,
}

impl Callback {
    /// batch_open's flow arguments ("" and zeros for a batch).
    fn parent_args(&self) -> (&str, u64, u64, &str, &str, &str, &str) {
        match &self.parent {
            Some(p) => (
                p.child_dead,
                p.delay_ms,
                u64::from(p.priority),
                &p.tags,
                &p.upper,
                &p.traceparent,
                &p.tracestate,
            ),
            None => ("", 0, 0, "", "", "", ""),
        }
    }
}

script! {
    /// Creates batch `id` in its home (call it there): true, or false when
    /// the id names a batch already (nothing changed). Bounded: one hash.
    BatchOpen = "batch_open", when_full: false, acked: true, late_unknown: true,
        (
            id: &'a str,
            cb: &'a Callback => (&cb.id, &cb.topic, &cb.body, cb.ttr_ms, &cb.intervals_ms, cb.max_attempts),
            on: &'a str,
            flow: &'a Callback => flow.parent_args(),
        ) -> bool = created;
    /// Takes `ids` into batch `id` at its home, before they are pushed:
    /// per id what the home made of it. O(ids).
    BatchAdd = "batch_add", when_full: false, acked: true, late_unknown: true,
        (id: &'a str, ids: &'a [&'a str]) -> Taken = taken;
    /// Ends reservations of batch `id`: each id "landed" (pushed) or
    /// "lost" (never pushed);
    /// whether the batch fired. O(ids).
    BatchSettle = "batch_settle", when_full: true, acked: true, late_unknown: true,
        (id: &'a str, retention_ms: u64, outcomes: &'a [(&'a str, &'a str)]) -> bool = fired;
    /// Counts notes (batch, job, outcome, result) at their batches' home:
    /// how many counts changed, how many callbacks fired. O(notes).
    BatchNote = "batch_note", when_full: true, acked: true, late_unknown: true,
        (retention_ms: u64, notes: &'a [(&'a str, &'a str, &'a str, &'a str)]) -> (u64, u64) = noted;
    /// Reads up to `limit` notes of the partition it is called on, for
    /// the relay, oldest first. Acknowledged (its one write marks the
    /// read): they come back only once the partition's replicas have
    /// them, so no end a failover takes back goes home. O(limit).
    NotesRead = "notes_read", when_full: true, acked: true, late_unknown: true,
        (limit: usize) -> Vec<Note> = notes_of;
    /// Closes ("close") or cancels ("cancel") batch `id`: its state after.
    BatchClose = "batch_close", when_full: true, acked: true, late_unknown: true,
        (id: &'a str, what: &'a str, retention_ms: u64) -> Closed = closed;
    /// Deletes a page of batch `id`'s jobs not handed out in one partition,
    /// after `cursor`: the next cursor ("" at the end), how many went.
    BatchCancelJobs = "batch_cancel_jobs", when_full: true, acked: true, late_unknown: true,
        (id: &'a str, cursor: &'a str, limit: usize) -> (String, u64) = page;
}

/// What a batch's home made of an id it was asked to take in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Take {
    /// Taken in now.
    New,
    /// A member with no outcome yet (a push made again).
    Member,
    /// A member that had its outcome: a batch takes an id once.
    Ended,
}

/// [`BatchAdd`]'s reply.
#[derive(Debug, PartialEq)]
pub(crate) enum Taken {
    /// Per id.
    Ids(Vec<Take>),
    /// No such batch.
    Missing,
    /// It fired or was cancelled: its state.
    Ended(String),
}

/// [`BatchClose`]'s reply.
#[derive(Debug, PartialEq)]
pub(crate) enum Closed {
    /// Its state after the call.
    Now(String),
    Missing,
    /// It fired (or, closing, was cancelled): its state; nothing changed.
    Ended(String),
}

fn created((status, _): (Status, Fields)) -> Result<bool> {
    Ok(status == Status::Done)
}

fn taken((status, mut f): (Status, Fields)) -> Result<Taken> {
    match status {
        Status::Done => {
            let mut ids = Vec::with_capacity(f.left());
            while f.left() > 0 {
                ids.push(match f.int()? {
                    1 => Take::New,
                    0 => Take::Member,
                    _ => Take::Ended,
                });
            }
            Ok(Taken::Ids(ids))
        }
        Status::Missing => Ok(Taken::Missing),
        Status::Stale => Ok(Taken::Ended(f.string()?)),
        other => Err(Error::protocol("batch_add", format!("status {other:?}"))),
    }
}

fn fired((_, mut f): (Status, Fields)) -> Result<bool> {
    Ok(f.int()? == 1)
}

fn noted((_, mut f): (Status, Fields)) -> Result<(u64, u64)> {
    Ok((f.int()?.max(0) as u64, f.int()?.max(0) as u64))
}

fn notes_of((_, mut f): (Status, Fields)) -> Result<Vec<Note>> {
    let mut notes = Vec::with_capacity(f.left() / 5);
    while f.left() > 0 {
        notes.push(Note {
            entry: f.string()?,
            batch: f.string()?,
            id: f.string()?,
            outcome: f.string()?,
            result: f.string()?,
        });
    }
    Ok(notes)
}

fn closed((status, mut f): (Status, Fields)) -> Result<Closed> {
    match status {
        Status::Done => Ok(Closed::Now(f.string()?)),
        Status::Missing => Ok(Closed::Missing),
        Status::Stale => Ok(Closed::Ended(f.string()?)),
        other => Err(Error::protocol("batch_close", format!("status {other:?}"))),
    }
}

fn page((_, mut f): (Status, Fields)) -> Result<(String, u64)> {
    Ok((f.string()?, f.int()?.max(0) as u64))
}

/// A note as the relay read it: its stream id, batch, job id, outcome.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Note {
    pub entry: String,
    pub batch: String,
    pub id: String,
    pub outcome: String,
    /// A flow's child's result ("" none).
    pub result: String,
}

impl Store {
    /// The partition batch `id` lives in: its id's, or for a flow its
    /// parent's (the parent is pushed there when the flow fires).
    pub(crate) fn batch_home(&self, id: &str) -> usize {
        self.part_of(id.strip_prefix(crate::flow::FLOW_MARK).unwrap_or(id))
    }

    /// Batch `id`'s hash as stored (empty: no such batch). One HGETALL of
    /// a hash of fixed fields.
    pub(crate) async fn batch_fields(&self, id: &str) -> Result<BTreeMap<String, String>> {
        let part = &self.parts()[self.batch_home(id)];
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(part.batch(id));
        self.redis
            .call("batch", cmd.query_async(&mut self.redis.conn()))
            .await
    }

    /// Up to `limit` of partition `part`'s notes, oldest first: with
    /// replica acks, only once the partition's replicas have them all
    /// ([`NotesRead`]).
    pub(crate) async fn notes(&self, part: usize, limit: usize) -> Result<Vec<Note>> {
        self.run::<NotesRead>(part, (limit,)).await
    }

    /// Deletes notes `entries` of partition `part`, once their homes have
    /// counted them. One XDEL.
    pub(crate) async fn drop_notes(&self, part: usize, entries: &[&str]) -> Result<()> {
        let mut cmd = redis::cmd("XDEL");
        cmd.arg(self.parts()[part].notes()).arg(entries);
        self.redis
            .call::<i64>("notes", cmd.query_async(&mut self.redis.conn()))
            .await?;
        Ok(())
    }

    /// Up to `limit` reservations of partition `part` taken in before
    /// `before_ms` (Redis time) and not yet settled: (batch, job id). One
    /// ZRANGEBYSCORE bounded by `limit`.
    pub(crate) async fn old_reservations(
        &self,
        part: usize,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<(String, String)>> {
        let mut cmd = redis::cmd("ZRANGEBYSCORE");
        cmd.arg(self.parts()[part].batch_reserved())
            .arg("-inf")
            .arg(before_ms)
            .arg("LIMIT")
            .arg(0)
            .arg(limit);
        let entries: Vec<String> = self
            .redis
            .call("reservations", cmd.query_async(&mut self.redis.conn()))
            .await?;
        Ok(entries
            .into_iter()
            .filter_map(|e| {
                e.split_once('\n')
                    .map(|(b, id)| (b.to_owned(), id.to_owned()))
            })
            .collect())
    }

    /// Batch `id`'s members' ids (kept after a cancel for the retention;
    /// gone once it fired). One HKEYS, bounded by the members (a flow's:
    /// [`crate::flow::MAX_FLOW_CHILDREN`]).
    pub(crate) async fn batch_members(&self, id: &str) -> Result<Vec<String>> {
        let part = &self.parts()[self.batch_home(id)];
        let mut cmd = redis::cmd("HKEYS");
        cmd.arg(part.batch_members(id));
        self.redis
            .call("batch", cmd.query_async(&mut self.redis.conn()))
            .await
    }

    /// Whether each of `ids` is the parent of a flow (kept or waiting).
    /// One EXISTS per id, one round trip per partition.
    pub(crate) async fn flows_exist(&self, ids: &[String]) -> Result<Vec<bool>> {
        let mut found = std::collections::HashMap::new();
        for (part, ids) in self.by_partition(ids) {
            let keys = &self.parts()[part];
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.cmd("EXISTS")
                    .arg(keys.batch(&crate::flow::flow_batch_id(id)));
            }
            let rows: Vec<bool> = self
                .redis
                .call("flows_exist", pipe.query_async(&mut self.redis.conn()))
                .await?;
            found.extend(ids.into_iter().cloned().zip(rows));
        }
        Ok(ids.iter().map(|id| found.get(id) == Some(&true)).collect())
    }

    /// The batch each of `ids` carries (None: no such job, or one of no
    /// batch). One HGET per id, one round trip per partition.
    pub(crate) async fn batches_of(&self, ids: &[String]) -> Result<Vec<Option<String>>> {
        let mut found = std::collections::HashMap::new();
        for (part, ids) in self.by_partition(ids) {
            let keys = &self.parts()[part];
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.cmd("HGET")
                    .arg(keys.job(id))
                    .arg(crate::store::layout::field::BATCH);
            }
            let rows: Vec<Option<String>> = self
                .redis
                .call("batches_of", pipe.query_async(&mut self.redis.conn()))
                .await?;
            found.extend(ids.into_iter().cloned().zip(rows));
        }
        Ok(ids
            .iter()
            .map(|id| found.get(id).cloned().flatten())
            .collect())
    }
}

/// A batch's stored fields, by name (`layout::batch_field`).
pub(crate) fn field<'a>(fields: &'a BTreeMap<String, String>, name: &str) -> &'a str {
    fields.get(name).map(String::as_str).unwrap_or_default()
}

/// A count field of a batch's hash.
pub(crate) fn count(fields: &BTreeMap<String, String>, name: &str) -> u64 {
    field(fields, name).parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_ids_taken_in_and_ended_batches() {
        let d = |r: &[&str]| taken(Fields::parse("batch_add", sample(r)).unwrap());
        assert_eq!(
            d(&["0", "1", "0", "2"]).unwrap(),
            Taken::Ids(vec![Take::New, Take::Member, Take::Ended])
        );
        assert_eq!(d(&["1"]).unwrap(), Taken::Missing);
        assert_eq!(d(&["2", "fired"]).unwrap(), Taken::Ended("fired".into()));
    }

    #[test]
    fn decodes_a_close() {
        let d = |r: &[&str]| closed(Fields::parse("batch_close", sample(r)).unwrap());
        assert_eq!(d(&["0", "closed"]).unwrap(), Closed::Now("closed".into()));
        assert_eq!(d(&["1"]).unwrap(), Closed::Missing);
        assert_eq!(d(&["2", "fired"]).unwrap(), Closed::Ended("fired".into()));
    }
}
