//! Recurring schedules in Redis, read: the index of names, each
//! partition's due index (schedule -> last tick) and the schedules' hashes.
//! Their scripts are wrapped in `recur_put.rs` (create, replace, delete)
//! and `tick.rs` (push ticks' jobs).

use std::collections::{BTreeMap, HashMap};

use super::layout::recur_field;
pub(crate) use super::tick::{Tick, TickMode, Ticked};
use super::{Keys, Store};
use crate::error::{Error, Result};

/// A schedule's hash, read back.
#[derive(Clone, Debug)]
pub(crate) struct Stored {
    pub name: String,
    pub def: String,
    pub last_ms: i64,
    pub pending: String,
    /// When it was paused (Unix ms), while it is.
    pub paused_at: Option<i64>,
    /// The last tick that fired (Unix ms), once one has.
    pub fired: Option<i64>,
}

impl Store {
    pub(crate) fn recur_part(&self, name: &str) -> usize {
        self.part_of(&format!("{{{name}}}"))
    }

    /// Every schedule (or just `only`), read now.
    pub(crate) async fn recur_all(&self, only: Option<&str>) -> Result<Vec<Stored>> {
        let names: Vec<String> = match only {
            Some(n) => vec![n.to_owned()],
            None => {
                let mut cmd = redis::cmd("SMEMBERS");
                cmd.arg(Keys::recurring_index(self.prefix()));
                self.redis
                    .call("recurring list", cmd.query_async(&mut self.redis.conn()))
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
                .redis
                .call("recurring list", pipe.query_async(&mut self.redis.conn()))
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
                    paused_at: h.get(recur_field::PAUSED).and_then(|v| v.parse().ok()),
                    fired: h.get(recur_field::FIRED).and_then(|v| v.parse().ok()),
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
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
            .redis
            .call("recurring due", pipe.query_async(&mut self.redis.conn()))
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
            .redis
            .call("recurring read", pipe.query_async(&mut self.redis.conn()))
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
            .arg(Keys::recurring_seen(self.prefix()))
            .cmd("EXISTS")
            .arg(Keys::recurring_index(self.prefix()));
        let (v, any): (Option<String>, bool) = self
            .redis
            .call("recurring seen", pipe.query_async(&mut self.redis.conn()))
            .await?;
        let seen = v.and_then(|v| {
            let (since, last) = v.split_once(' ')?;
            Some((since.parse().ok()?, last.parse().ok()?))
        });
        Ok((seen, any))
    }

    /// Publishes `notice` (the recurring loops' wake notice) on the first
    /// partition's wake channel, which every instance hears. A failure is
    /// only logged: it costs a pause, not a tick.
    pub(crate) async fn recur_notice(&self, notice: &str) {
        let mut publish = redis::cmd("PUBLISH");
        publish.arg(self.parts()[0].wake_channel()).arg(notice);
        if let Err(e) = self
            .redis
            .call(
                "recurring notice",
                publish.query_async::<i64>(&mut self.redis.conn()),
            )
            .await
        {
            tracing::debug!(error = %e, "recurring wake notice not sent");
        }
    }

    /// Notes a look at `now_ms`, looks having followed each other since
    /// `since_ms`.
    pub(crate) async fn recur_look(&self, since_ms: i64, now_ms: i64) -> Result<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(Keys::recurring_seen(self.prefix()))
            .arg(format!("{since_ms} {now_ms}"));
        self.redis
            .call(
                "recurring seen",
                cmd.query_async::<()>(&mut self.redis.conn()),
            )
            .await
    }

    /// Whether every schedule in the index of names has its entry in a due
    /// index (schedules stored before the due index existed, or put by an
    /// older delayq, have none). Costs one count per partition.
    pub(crate) async fn recur_indexed(&self) -> Result<bool> {
        let mut names = redis::cmd("SCARD");
        names.arg(Keys::recurring_index(self.prefix()));
        let names: usize = self
            .redis
            .call("recurring count", names.query_async(&mut self.redis.conn()))
            .await?;
        let mut due = 0;
        for k in self.parts() {
            let mut c = redis::cmd("ZCARD");
            c.arg(k.recur_due());
            due += self
                .redis
                .call(
                    "recurring count",
                    c.query_async::<usize>(&mut self.redis.conn()),
                )
                .await?;
        }
        Ok(names == due)
    }

    /// Gives every schedule that has no entry in its partition's due index
    /// one, at its last tick. Reads every name: run only when
    /// [`recur_indexed`](Self::recur_indexed) says some are missing.
    pub(crate) async fn recur_reindex(&self) -> Result<usize> {
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(Keys::recurring_index(self.prefix()));
        let names: Vec<String> = self
            .redis
            .call("recurring reindex", cmd.query_async(&mut self.redis.conn()))
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
                    .redis
                    .call(
                        "recurring reindex",
                        pipe.query_async(&mut self.redis.conn()),
                    )
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
                    .redis
                    .call(
                        "recurring reindex",
                        pipe.query_async(&mut self.redis.conn()),
                    )
                    .await?;
                added += n.iter().sum::<i64>() as usize;
            }
        }
        Ok(added)
    }
}
