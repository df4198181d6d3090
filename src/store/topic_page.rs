//! The per-topic counts (`{p}:count`) read in bounded calls: every topic's
//! in HSCAN calls of [`SCAN_COUNT`] fields (never one HGETALL of the whole
//! hash, which held Redis 25-39 ms at 100,000 topics), and a page of
//! topics for `GET /v1/topics?cursor=&limit=`, whose calls each cost
//! O(page).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::layout::{state, Keys};
use super::read::{decode_counts, Overview};
use super::Store;
use super::TopicCounts;
use crate::error::{Error, Result};

/// Fields one HSCAN of the count hash asks for: about this many entries
/// a call, whatever the number of topics.
pub const SCAN_COUNT: usize = 1000;

/// The states a topic is counted in, in the order that decides on which
/// page a topic is listed (see [`Store::overview_page`]).
const STATES: [&str; 5] = [
    state::DELAYED,
    state::READY,
    state::RESERVED,
    state::DEAD,
    state::FINISHED,
];

/// Most HSCAN calls one page makes: HSCAN may return nothing for a call
/// over a sparse table, so a page stops here with a cursor to go on from.
const MOST_SCANS: usize = 16;

/// Where a page of topics starts: partition, and HSCAN cursor in its count
/// hash. Written "<partition>-<cursor>".
fn parse_cursor(c: &str, parts: usize) -> Result<(usize, u64)> {
    let bad = || {
        Error::Invalid(format!(
            "cursor {c:?} is not one of /v1/topics's next_cursor values"
        ))
    };
    let (p, at) = c.split_once('-').ok_or_else(bad)?;
    let p: usize = p.parse().map_err(|_| bad())?;
    let at: u64 = at.parse().map_err(|_| bad())?;
    if p >= parts {
        return Err(bad());
    }
    Ok((p, at))
}

impl Store {
    /// One HSCAN of partition `part`'s count hash from `at`: the next
    /// cursor (0: the end) and about `count` fields.
    async fn scan_counts(
        &self,
        part: usize,
        at: u64,
        count: usize,
    ) -> Result<(u64, Vec<(String, i64)>)> {
        let mut cmd = redis::cmd("HSCAN");
        cmd.arg(self.parts()[part].counts())
            .arg(at)
            .arg("COUNT")
            .arg(count);
        let (next, fields): (u64, Vec<(String, i64)>) = self
            .redis
            .call("topics", cmd.query_async(&mut self.redis.conn()))
            .await?;
        Ok((next, fields))
    }

    /// Partition `part`'s whole count hash, in HSCAN calls of about
    /// [`SCAN_COUNT`] fields each. A field changed during the walk may be
    /// read twice (the last read wins) or, if it came or went meanwhile,
    /// not at all, as SCAN promises.
    pub(crate) async fn counts_of(&self, part: usize) -> Result<HashMap<String, i64>> {
        let mut all = HashMap::new();
        let mut at = 0;
        loop {
            let (next, fields) = self.scan_counts(part, at, SCAN_COUNT).await?;
            all.extend(fields);
            if next == 0 {
                return Ok(all);
            }
            at = next;
        }
    }

    /// Every topic with jobs and its counts, over every partition (each
    /// read in bounded calls, see [`Store::counts_of`]): for the loops that
    /// visit every topic, which need neither due times nor paused flags.
    pub(crate) async fn topic_counts(&self) -> Result<BTreeMap<String, TopicCounts>> {
        let mut counts: HashMap<String, i64> = HashMap::new();
        for part in 0..self.parts().len() {
            for (k, n) in self.counts_of(part).await? {
                *counts.entry(k).or_default() += n;
            }
        }
        Ok(decode_counts(counts))
    }

    /// Each of `topics`' count fields in every partition: one HMGET per
    /// partition and 100 topics, of 5 fields a topic. A partition that does
    /// not answer is named in the second value and counts nothing.
    async fn counts_in_parts(
        &self,
        topics: &BTreeSet<String>,
    ) -> Result<(Vec<Vec<Option<i64>>>, Vec<usize>)> {
        let fields: Vec<String> = (topics.iter())
            .flat_map(|t| STATES.iter().map(move |s| format!("{s}:{t}")))
            .collect();
        let mut rows = Vec::with_capacity(self.parts().len());
        let mut down = Vec::new();
        for (i, part) in self.parts().iter().enumerate() {
            if fields.is_empty() {
                rows.push(Vec::new());
                continue;
            }
            let mut pipe = redis::pipe();
            for chunk in fields.chunks(100 * STATES.len()) {
                pipe.cmd("HMGET").arg(part.counts()).arg(chunk);
            }
            let r: Result<Vec<Vec<Option<i64>>>> = if self.redis.health.is_down(i) {
                Err(self.redis.timed_out("topics"))
            } else {
                self.redis
                    .call("topics", pipe.query_async(&mut self.redis.conn()))
                    .await
            };
            match r {
                Ok(row) => rows.push(row.concat()),
                Err(e) if e.is_unavailable() && self.parts().len() > 1 => {
                    down.push(i);
                    rows.push(vec![None; fields.len()]);
                }
                Err(e) => return Err(e),
            }
        }
        Ok((rows, down))
    }

    /// Whether `topic` has a job in any state: one HMGET per partition.
    pub(crate) async fn topic_has_jobs(&self, topic: &str) -> Result<bool> {
        let (rows, _) = self
            .counts_in_parts(&BTreeSet::from([topic.to_owned()]))
            .await?;
        Ok(rows.iter().flatten().any(|n| n.unwrap_or(0) > 0))
    }

    /// One topic's counts (listed whether or not it has jobs), due time
    /// and paused flag: O(1) calls of O(1) entries.
    pub(crate) async fn overview_of(&self, topic: &str) -> Result<Overview> {
        let names = BTreeSet::from([topic.to_owned()]);
        let (rows, unavailable_partitions) = self.counts_in_parts(&names).await?;
        let mut c: HashMap<String, i64> = HashMap::new();
        for row in &rows {
            for (st, n) in STATES.iter().zip(row) {
                *c.entry(format!("{st}:{topic}")).or_default() += n.unwrap_or(0);
            }
        }
        let counts = decode_counts(c).remove(topic).unwrap_or_default();
        let mut o = Overview {
            topics: BTreeMap::from([(topic.to_owned(), counts)]),
            next_due_ms: self.next_due().await?,
            unavailable_partitions,
        };
        self.page_dues_and_pauses(&mut o).await?;
        Ok(o)
    }

    /// A page of topics, about `limit` (HSCAN may return a few more in its
    /// last call), from `cursor` (None: the first page), and the cursor of
    /// the next page (None: this was the last). Each call costs O(limit):
    /// HSCAN calls of `limit` fields, one HMGET per partition of the
    /// page's topics, one ZRANGE of one entry per partition for the next
    /// due time, the page's due times and paused flags.
    ///
    /// A topic is listed once: on the page that reads its first counted
    /// state (in [`STATES`] order) in the first partition that counts it.
    /// A topic whose jobs change state during the walk may be missed or
    /// listed twice, as SCAN promises. The first page also lists the
    /// topics known with no jobs (paused or rate-limited: one entry each).
    pub(crate) async fn overview_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Overview, Option<String>)> {
        let parts = self.parts().len();
        let (mut part, mut at) = match cursor {
            None => (0, 0),
            Some(c) => parse_cursor(c, parts)?,
        };
        // (partition, topic, state) of each field the scan read.
        let mut seen: Vec<(usize, String, String)> = Vec::new();
        let mut next = None;
        for scans in 1.. {
            let (after, fields) = self.scan_counts(part, at, limit).await?;
            for (f, _) in fields {
                if let Some((st, t)) = f.split_once(':') {
                    seen.push((part, t.to_owned(), st.to_owned()));
                }
            }
            (part, at) = match after {
                0 => (part + 1, 0),
                after => (part, after),
            };
            if part == parts {
                break;
            }
            if seen.len() >= limit || scans == MOST_SCANS {
                next = Some(format!("{part}-{at}"));
                break;
            }
        }
        let mut names: BTreeSet<String> = seen.iter().map(|s| s.1.clone()).collect();
        // Topics known with no jobs: on the first page.
        let mut extra = BTreeSet::new();
        if cursor.is_none() {
            let mut limited = redis::cmd("HKEYS");
            limited.arg(Keys::rates_index(self.prefix()));
            let limited: Vec<String> = self
                .redis
                .call("topics", limited.query_async(&mut self.redis.conn()))
                .await?;
            extra.extend(limited);
            extra.extend(self.paused().await?);
            extra.retain(|t| !names.contains(t));
            names.extend(extra.iter().cloned());
        }
        let (rows, unavailable_partitions) = self.counts_in_parts(&names).await?;
        let read: HashSet<(usize, &str, &str)> = (seen.iter())
            .map(|(p, t, st)| (*p, t.as_str(), st.as_str()))
            .collect();
        let mut topics = BTreeMap::new();
        for (k, t) in names.iter().enumerate() {
            let mut c: HashMap<String, i64> = HashMap::new();
            // The first (partition, state) with a count: where it is listed.
            let mut first: Option<(usize, &str)> = None;
            for (p, row) in rows.iter().enumerate() {
                for (s, st) in STATES.iter().enumerate() {
                    if let Some(n) = row.get(k * STATES.len() + s).copied().flatten() {
                        *c.entry(format!("{st}:{t}")).or_default() += n;
                        first.get_or_insert((p, *st));
                    }
                }
            }
            // Topics with no jobs are listed only as known ones.
            let here = match first {
                None => extra.contains(t),
                Some((p, st)) => read.contains(&(p, t.as_str(), st)),
            };
            if here {
                topics.insert(t.clone(), decode_counts(c).remove(t).unwrap_or_default());
            }
        }
        let mut o = Overview {
            topics,
            next_due_ms: self.next_due().await?,
            unavailable_partitions,
        };
        self.page_dues_and_pauses(&mut o).await?;
        Ok((o, next))
    }

    /// The earliest due time (or lease end) of the schedule and the heads
    /// over every partition: one entry each.
    async fn next_due(&self) -> Result<Option<i64>> {
        let mut next: Option<i64> = None;
        for (i, part) in self.parts().iter().enumerate() {
            if self.redis.health.is_down(i) {
                continue;
            }
            let mut pipe = redis::pipe();
            for key in [part.schedule(), part.heads()] {
                pipe.cmd("ZRANGE").arg(key).arg(0).arg(0).arg("WITHSCORES");
            }
            type Head = Vec<(String, f64)>;
            let (a, b): (Head, Head) = self
                .redis
                .call("topics", pipe.query_async(&mut self.redis.conn()))
                .await?;
            for (_, due) in a.into_iter().chain(b) {
                let due = due as i64;
                next = Some(next.map_or(due, |d| d.min(due)));
            }
        }
        Ok(next)
    }

    /// The page's topics' next due times (their topic schedules' heads)
    /// and paused flags: O(page).
    async fn page_dues_and_pauses(&self, o: &mut Overview) -> Result<()> {
        if o.topics.is_empty() {
            return Ok(());
        }
        if o.unavailable_partitions.is_empty() {
            self.fill_next_dues(&mut o.topics).await;
        }
        let mut pipe = redis::pipe();
        let paused_key = Keys::new(self.prefix()).paused();
        for t in o.topics.keys() {
            pipe.cmd("SISMEMBER").arg(&paused_key).arg(t);
        }
        let paused: Vec<bool> = self
            .redis
            .call("paused topics", pipe.query_async(&mut self.redis.conn()))
            .await?;
        for (c, p) in o.topics.values_mut().zip(paused) {
            c.paused = p;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_names_its_partition_and_scan_cursor() {
        assert_eq!(parse_cursor("0-17", 1).unwrap(), (0, 17));
        assert_eq!(parse_cursor("2-0", 3).unwrap(), (2, 0));
        for bad in ["", "17", "1-17", "a-1", "0-x", "-1"] {
            let e = parse_cursor(bad, 1).unwrap_err().to_string();
            assert!(e.contains("next_cursor"), "{bad}: {e}");
        }
    }
}
