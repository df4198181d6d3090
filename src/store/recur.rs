//! Recurring schedules in Redis: `recur_put.lua` (create, replace,
//! delete), `tick.lua` (push ticks' jobs, each once, many per call), the
//! index of names and each partition's due index (schedule -> last tick).

use std::collections::{BTreeMap, HashMap};

use redis::Cmd;
use tokio::time::Instant;

use super::batch::PerJob;
use super::coalesce::Batch;
use super::layout::recur_field;
use super::push::{Push, Pushed};
use super::reply::Fields;
use super::{Keys, Script, Status, Store};
use crate::error::{Error, Result};
use crate::job::PushOutcome;

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
    pub last_ms: i64,
    pub pending: String,
}

/// What a tick asks of `tick.lua` (see its header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TickMode {
    /// Push the tick's job.
    Push,
    /// A tick missed while no delayq ran: its job, unless the tick before
    /// it has one (which then fires in its place).
    Fire,
    /// A missed tick: drop the tick before it if still delayed; no job.
    Skip,
    /// The rule has no next tick: out of the due index until put again.
    Park,
}

impl TickMode {
    fn as_str(self) -> &'static str {
        match self {
            TickMode::Push => "push",
            TickMode::Fire => "fire",
            TickMode::Skip => "skip",
            TickMode::Park => "park",
        }
    }
}

/// One tick of one schedule.
#[derive(Debug)]
pub(crate) struct Tick {
    pub name: String,
    pub version: String,
    pub tick_ms: i64,
    pub mode: TickMode,
    /// The tick's job (Push and Fire).
    pub job: Option<Push>,
}

/// What a tick did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ticked {
    /// Recorded, and its job pushed if it had one.
    Done(Option<Pushed>),
    /// This tick or a later one was done already.
    Already,
    /// The schedule changed or is gone.
    Stale,
}

impl Batch for Tick {
    type Item = Tick;
    type Out = Ticked;
    const MAX_ITEMS: usize = 128;
    const MAX_BYTES: usize = 1 << 20;

    fn bytes(t: &Tick) -> usize {
        t.name.len()
            + t.version.len()
            + t.job.as_ref().map_or(0, |j| {
                j.id.len() + j.topic.len() + j.body.len() + j.intervals_ms.len()
            })
            + 64
    }
}

impl PerJob for Tick {
    const SCRIPT: &'static Script = &TICK;

    fn args(t: &Tick, cmd: &mut Cmd) {
        cmd.arg(&t.name)
            .arg(&t.version)
            .arg(t.tick_ms)
            .arg(t.mode.as_str());
        match &t.job {
            Some(j) => cmd
                .arg(&j.id)
                .arg(&j.topic)
                .arg(&j.body)
                .arg(j.ttr_ms)
                .arg(&j.intervals_ms)
                .arg(j.max_attempts),
            None => cmd.arg("").arg("").arg("").arg(0).arg("").arg(0),
        };
    }

    fn decode(f: &mut Fields) -> Result<Ticked> {
        let status = f.status()?;
        let pushed = f.int()? == 1;
        let due_ms = f.int()?;
        let new_head = f.int()? == 1;
        Ok(match (status, pushed) {
            (Status::Stale, _) => Ticked::Stale,
            (Status::Kept, false) => Ticked::Already,
            (Status::Done, false) => Ticked::Done(None),
            (s, true) => Ticked::Done(Some(Pushed {
                outcome: match s {
                    Status::Done => PushOutcome::Created,
                    Status::Replaced => PushOutcome::Replaced,
                    Status::Kept => PushOutcome::Kept,
                    s => return Err(Error::protocol("tick", format!("status {s:?}"))),
                },
                due_ms,
                new_head,
            })),
            (s, false) => return Err(Error::protocol("tick", format!("status {s:?}"))),
        })
    }
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

    /// Ticks of partition `part`'s schedules, in order (a schedule's ticks
    /// stay in order: the calls go one after another), as few calls as
    /// [`Tick`]'s limits allow; each tick has its own result.
    pub(crate) async fn recur_tick(
        &self,
        part: usize,
        ticks: &[Tick],
    ) -> Result<Vec<Result<Ticked>>> {
        let mut out = Vec::with_capacity(ticks.len());
        let mut chunk: Vec<&Tick> = Vec::new();
        let mut bytes = 0;
        for (i, t) in ticks.iter().enumerate() {
            let b = Tick::bytes(t);
            if !chunk.is_empty() && (chunk.len() == Tick::MAX_ITEMS || bytes + b > Tick::MAX_BYTES)
            {
                let deadline = Instant::now() + self.timeout();
                out.extend(self.batch_each::<Tick>(part, &chunk, deadline).await?);
                chunk.clear();
                bytes = 0;
            }
            chunk.push(t);
            bytes += b;
            if i + 1 == ticks.len() {
                let deadline = Instant::now() + self.timeout();
                out.extend(self.batch_each::<Tick>(part, &chunk, deadline).await?);
            }
        }
        Ok(out)
    }

    /// Partition `part`'s schedules whose last tick is at or before
    /// `now_ms` (at most `limit`, earliest first: name, last tick), and
    /// the earliest last tick after `now_ms`. Costs what it returns.
    pub(crate) async fn recur_due(
        &self,
        part: usize,
        now_ms: i64,
        limit: usize,
    ) -> Result<(Vec<(String, i64)>, Option<i64>)> {
        let key = self.parts()[part].recur_due();
        let mut pipe = redis::pipe();
        pipe.cmd("ZRANGE")
            .arg(&key)
            .arg("-inf")
            .arg(now_ms)
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .arg("WITHSCORES")
            .cmd("ZRANGE")
            .arg(&key)
            .arg(format!("({now_ms}"))
            .arg("+inf")
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(1)
            .arg("WITHSCORES");
        type Scored = Vec<(String, f64)>;
        let (due, next): (Scored, Scored) = self
            .call("recurring due", pipe.query_async(&mut self.conn()))
            .await?;
        Ok((
            due.into_iter().map(|(n, s)| (n, s as i64)).collect(),
            next.first().map(|(_, s)| *s as i64),
        ))
    }

    /// The definition and version of each of `names` (all of partition
    /// `part`); None for one that is gone. Costs what it returns.
    pub(crate) async fn recur_defs(
        &self,
        part: usize,
        names: &[String],
    ) -> Result<Vec<Option<(String, String)>>> {
        let mut pipe = redis::pipe();
        for n in names {
            pipe.cmd("HMGET")
                .arg(self.parts()[part].recur(n))
                .arg(recur_field::DEF)
                .arg(recur_field::VERSION);
        }
        let got: Vec<(Option<String>, Option<String>)> = self
            .call("recurring read", pipe.query_async(&mut self.conn()))
            .await?;
        Ok(got
            .into_iter()
            .map(|(d, v)| Some((d?, v.unwrap_or_default())))
            .collect())
    }

    /// The last look at the schedules by any process: (since when looks
    /// have followed each other without an outage, when the last was), ms;
    /// and whether any schedule exists (one round trip, one slot: both
    /// keys are under the prefix's own tag).
    pub(crate) async fn recur_seen(&self) -> Result<(Option<(i64, i64)>, bool)> {
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg(Keys::recurring_seen(&self.prefix))
            .cmd("EXISTS")
            .arg(Keys::recurring_index(&self.prefix));
        let (v, any): (Option<String>, bool) = self
            .call("recurring seen", pipe.query_async(&mut self.conn()))
            .await?;
        let seen = v.and_then(|v| {
            let (since, last) = v.split_once(' ')?;
            Some((since.parse().ok()?, last.parse().ok()?))
        });
        Ok((seen, any))
    }

    /// Notes a look at `now_ms`, looks having followed each other since
    /// `since_ms`.
    pub(crate) async fn recur_look(&self, since_ms: i64, now_ms: i64) -> Result<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(Keys::recurring_seen(&self.prefix))
            .arg(format!("{since_ms} {now_ms}"));
        self.call("recurring seen", cmd.query_async::<()>(&mut self.conn()))
            .await
    }

    /// Whether every schedule in the index of names has its entry in a due
    /// index (schedules stored before the due index existed, or put by an
    /// older delayq, have none). Costs one count per partition.
    pub(crate) async fn recur_indexed(&self) -> Result<bool> {
        let mut names = redis::cmd("SCARD");
        names.arg(Keys::recurring_index(&self.prefix));
        let names: usize = self
            .call("recurring count", names.query_async(&mut self.conn()))
            .await?;
        let mut due = 0;
        for k in self.parts() {
            let mut c = redis::cmd("ZCARD");
            c.arg(k.recur_due());
            due += self
                .call("recurring count", c.query_async::<usize>(&mut self.conn()))
                .await?;
        }
        Ok(names == due)
    }

    /// Gives every schedule that has no entry in its partition's due index
    /// one, at its last tick. Reads every name: run only when
    /// [`recur_indexed`](Self::recur_indexed) says some are missing.
    pub(crate) async fn recur_reindex(&self) -> Result<usize> {
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(Keys::recurring_index(&self.prefix));
        let names: Vec<String> = self
            .call("recurring reindex", cmd.query_async(&mut self.conn()))
            .await?;
        let mut groups: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for n in names {
            groups.entry(self.recur_part(&n)).or_default().push(n);
        }
        let mut added = 0;
        for (part, names) in groups {
            let k = &self.parts()[part];
            for chunk in names.chunks(1000) {
                let mut pipe = redis::pipe();
                for n in chunk {
                    pipe.cmd("HGET").arg(k.recur(n)).arg(recur_field::LAST);
                }
                let lasts: Vec<Option<i64>> = self
                    .call("recurring reindex", pipe.query_async(&mut self.conn()))
                    .await?;
                let mut pipe = redis::pipe();
                for (n, last) in chunk.iter().zip(lasts) {
                    if let Some(last) = last {
                        // NX: an entry written meanwhile by a tick is newer.
                        pipe.cmd("ZADD")
                            .arg(k.recur_due())
                            .arg("NX")
                            .arg(last)
                            .arg(n);
                    }
                }
                let n: Vec<i64> = self
                    .call("recurring reindex", pipe.query_async(&mut self.conn()))
                    .await?;
                added += n.iter().sum::<i64>() as usize;
            }
        }
        Ok(added)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::sample;

    #[test]
    fn decodes_each_tick() {
        let (status, mut f) = Fields::parse(
            "tick",
            sample(&[
                "0",
                "2",
                "0",
                "0",
                "0",
                "3",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "1",
                "1700000000000",
                "1",
                "3",
                "1",
                "5",
                "0",
            ]),
        )
        .unwrap();
        assert_eq!(status, Status::Done);
        let mut next = || Tick::decode(&mut f).unwrap();
        assert_eq!(next(), Ticked::Stale);
        assert_eq!(next(), Ticked::Already);
        assert_eq!(next(), Ticked::Done(None));
        assert_eq!(
            next(),
            Ticked::Done(Some(Pushed {
                outcome: PushOutcome::Created,
                due_ms: 1_700_000_000_000,
                new_head: true
            }))
        );
        assert_eq!(
            next(),
            Ticked::Done(Some(Pushed {
                outcome: PushOutcome::Kept,
                due_ms: 5,
                new_head: false
            }))
        );
        assert!(Tick::decode(&mut f).is_err(), "nothing left");
        let mut f = Fields::parse("tick", sample(&["0", "1", "0", "0", "0"]))
            .unwrap()
            .1;
        assert!(Tick::decode(&mut f).is_err(), "MISSING is no tick's status");
    }
}
