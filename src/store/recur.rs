//! Recurring schedules in Redis: `recur_put.lua` (create, replace,
//! delete) and `tick.lua` (push one tick's job, once), and the index of
//! names.

use std::collections::{BTreeMap, HashMap};

use super::layout::recur_field;
use super::push::{Push, Pushed};
use super::{Keys, Script, Status, Store};
use crate::error::{Error, Result};

pub const TICK: Script = Script {
    name: "tick",
    source: include_str!("tick.lua"),
    when_full: false,
};

pub const PUT: Script = Script {
    name: "recur_put",
    source: include_str!("recur_put.lua"),
    // Delete must work on a full Redis.
    when_full: true,
};

/// A schedule's hash, read back.
#[derive(Clone, Debug)]
pub(crate) struct Stored {
    pub name: String,
    pub def: String,
    pub version: String,
    pub last_ms: i64,
    pub pending: String,
}

/// What a tick did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ticked {
    /// Pushed (or, for an advance, recorded).
    Done(Option<Pushed>),
    /// This tick or a later one was done already.
    Already,
    /// The schedule changed or is gone.
    Stale,
}

impl Store {
    fn recur_part(&self, name: &str) -> usize {
        self.part_of(&format!("{{{name}}}"))
    }

    /// Creates or replaces schedule `name` with `def` (JSON) under a new
    /// version; ticks count from now.
    pub(crate) async fn recur_put(&self, name: &str, def: &str) -> Result<()> {
        let part = self.recur_part(name);
        let version = uuid::Uuid::new_v4().simple().to_string();
        let mut cmd = self.fcall(&PUT, &self.parts()[part]);
        cmd.arg(name).arg("put").arg(def).arg(&version);
        self.run_acked(&PUT, part, vec![cmd], self.timeout())
            .await?;
        let mut sadd = redis::cmd("SADD");
        sadd.arg(Keys::recurring_index(&self.prefix)).arg(name);
        self.call("recurring put", sadd.query_async::<i64>(&mut self.conn()))
            .await?;
        Ok(())
    }

    /// Deletes schedule `name` and its next tick's job if not yet handed
    /// over. False if there was none.
    pub(crate) async fn recur_delete(&self, name: &str) -> Result<bool> {
        let part = self.recur_part(name);
        let mut cmd = self.fcall(&PUT, &self.parts()[part]);
        cmd.arg(name).arg("delete").arg("").arg("");
        let mut r = self
            .run_acked(&PUT, part, vec![cmd], self.timeout())
            .await?;
        let (status, _) = r.remove(0);
        let mut srem = redis::cmd("SREM");
        srem.arg(Keys::recurring_index(&self.prefix)).arg(name);
        self.call(
            "recurring delete",
            srem.query_async::<i64>(&mut self.conn()),
        )
        .await?;
        Ok(status == Status::Done)
    }

    /// Every schedule (or just `only`), read now.
    pub(crate) async fn recur_all(&self, only: Option<&str>) -> Result<Vec<Stored>> {
        let names: Vec<String> = match only {
            Some(n) => vec![n.to_owned()],
            None => {
                let mut cmd = redis::cmd("SMEMBERS");
                cmd.arg(Keys::recurring_index(&self.prefix));
                self.call("recurring list", cmd.query_async(&mut self.conn()))
                    .await?
            }
        };
        let mut groups: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for n in names {
            groups.entry(self.recur_part(&n)).or_default().push(n);
        }
        let reads = groups.iter().map(|(&part, names)| async move {
            let mut pipe = redis::pipe();
            for n in names {
                pipe.cmd("HGETALL").arg(self.parts()[part].recur(n));
            }
            let hashes: Vec<HashMap<String, String>> = self
                .call("recurring list", pipe.query_async(&mut self.conn()))
                .await?;
            Ok::<_, Error>(names.iter().cloned().zip(hashes).collect::<Vec<_>>())
        });
        let mut out = Vec::new();
        for r in futures::future::join_all(reads).await {
            for (name, mut h) in r? {
                let Some(def) = h.remove(recur_field::DEF) else {
                    continue;
                };
                out.push(Stored {
                    name,
                    def,
                    version: h.remove(recur_field::VERSION).unwrap_or_default(),
                    last_ms: h
                        .get(recur_field::LAST)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0),
                    pending: h.remove(recur_field::PENDING).unwrap_or_default(),
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// One tick of schedule `s` at `tick_ms`: push `job` (None: only record
    /// the tick), first dropping job `drop` if it is still delayed.
    pub(crate) async fn tick(
        &self,
        s: &Stored,
        tick_ms: i64,
        job: Option<&Push>,
        drop: &str,
    ) -> Result<Ticked> {
        let part = self.recur_part(&s.name);
        let mut cmd = self.fcall(&TICK, &self.parts()[part]);
        cmd.arg(&s.name)
            .arg(&s.version)
            .arg(tick_ms)
            .arg(if job.is_some() { "push" } else { "advance" })
            .arg(drop);
        match job {
            Some(j) => cmd
                .arg(&j.id)
                .arg(&j.topic)
                .arg(&j.body)
                .arg(j.ttr_ms)
                .arg(&j.intervals_ms)
                .arg(j.max_attempts),
            None => cmd.arg("").arg("").arg("").arg(0).arg("").arg(0),
        };
        let (status, f) = self
            .run_acked(&TICK, part, vec![cmd], self.timeout())
            .await?
            .remove(0);
        Ok(match status {
            Status::Stale => Ticked::Stale,
            Status::Kept => Ticked::Already,
            _ if job.is_none() => Ticked::Done(None),
            _ => Ticked::Done(Some(super::push::decode((status, f))?)),
        })
    }
}
