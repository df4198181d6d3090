//! Throughput and lateness counts in Redis (written once a second by each
//! instance, see `crate::stats`), and the backlog ages of `/v1/topics`.
//! Plain commands: nothing here needs a script.

use std::collections::{BTreeMap, HashMap};

use super::counts::{percentiles, Kind, Pending, LATENESS_BUCKETS, MINUTE_POINTS, SECOND_POINTS};
use super::layout::{field, Keys};
use super::{Overview, Store};
use crate::error::{Error, Result};
use crate::figures::{Held, Lateness, Series, Throughput};

/// Per-second keys outlive the window they are shown in by a minute,
/// per-minute keys by two: a key is never read after it expired.
const SECOND_TTL_S: i64 = SECOND_POINTS + 60;
const MINUTE_TTL_S: i64 = MINUTE_POINTS * 60 + 120;
/// Most due schedule entries `/v1/topics` looks at (per partition) for
/// the oldest overdue delayed jobs.
pub const OVERDUE_LOOK: usize = 100;

/// How many of each ready list's next entries the backlog reads to find
/// its head: entries of jobs deleted or moved while ready stay until a pop
/// skips them, so the next entry may not be a ready job. A topic whose
/// next HEAD_LOOK entries are all stale shows no oldest-ready age until a
/// pop passes them.
pub const HEAD_LOOK: isize = 32;

fn value<T: redis::FromRedisValue>(op: &'static str, v: redis::Value) -> Result<T> {
    redis::from_redis_value(v).map_err(|e| Error::protocol(op, e.to_string()))
}

impl Store {
    /// Adds an instance's increments: one pipelined call of one HINCRBY per
    /// (key, field) that changed and one EXPIRE per key, so its cost is
    /// bounded by topics x kinds (x the seconds since the last flush).
    pub(crate) async fn add_stats(&self, p: &Pending, offset_ms: i64) -> Result<()> {
        let prefix = self.prefix();
        let mut keys: BTreeMap<String, (i64, BTreeMap<String, u64>)> = BTreeMap::new();
        let mut add = |key: String, ttl: i64, field: String, n: u64| {
            *keys
                .entry(key)
                .or_insert_with(|| (ttl, BTreeMap::new()))
                .1
                .entry(field)
                .or_default() += n;
        };
        for (topic, secs) in &p.counts {
            for (sec, counts) in secs {
                let sec = (sec * 1000 + offset_ms).div_euclid(1000);
                let per_s = Keys::throughput_second(prefix, sec);
                let per_m = Keys::throughput_minute(prefix, sec.div_euclid(60));
                for (kind, n) in Kind::ALL.iter().zip(counts).filter(|(_, n)| **n > 0) {
                    let (all, one) = (kind.name().to_owned(), format!("{}:{topic}", kind.name()));
                    add(per_s.clone(), SECOND_TTL_S, all.clone(), *n);
                    add(per_s.clone(), SECOND_TTL_S, one.clone(), *n);
                    add(per_m.clone(), MINUTE_TTL_S, all, *n);
                    add(per_m.clone(), MINUTE_TTL_S, one, *n);
                }
            }
        }
        for (topic, mins) in &p.lateness {
            for (min, counts) in mins {
                let min = (min * 60_000 + offset_ms).div_euclid(60_000);
                let key = Keys::lateness_minute(prefix, min);
                for (b, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
                    add(key.clone(), MINUTE_TTL_S, b.to_string(), *n);
                    add(key.clone(), MINUTE_TTL_S, format!("{b}:{topic}"), *n);
                }
            }
        }
        let mut pipe = redis::pipe();
        for (key, (ttl, fields)) in &keys {
            for (f, n) in fields {
                pipe.cmd("HINCRBY").arg(key).arg(f).arg(*n).ignore();
            }
            pipe.cmd("EXPIRE").arg(key).arg(*ttl).ignore();
        }
        self.redis
            .call(
                "stats flush",
                pipe.query_async::<()>(&mut self.redis.conn()),
            )
            .await
    }

    /// The last hour per minute (`second`: the last 5 minutes per second)
    /// of one topic, or of all together. One HMGET of 5 fields per point:
    /// the cost is bounded by points x kinds, whatever the traffic.
    pub(crate) async fn throughput(&self, topic: Option<&str>, second: bool) -> Result<Throughput> {
        let (step_s, points) = if second {
            (1, SECOND_POINTS)
        } else {
            (60, MINUTE_POINTS)
        };
        let now = self
            .redis
            .clock()
            .now_estimate_ms()
            .div_euclid(1000 * step_s);
        let first = now - points + 1;
        let fields: Vec<String> = Kind::ALL
            .iter()
            .map(|k| match topic {
                Some(t) => format!("{}:{t}", k.name()),
                None => k.name().to_owned(),
            })
            .collect();
        let mut pipe = redis::pipe();
        for at in first..=now {
            let key = if second {
                Keys::throughput_second(self.prefix(), at)
            } else {
                Keys::throughput_minute(self.prefix(), at)
            };
            pipe.cmd("HMGET").arg(key).arg(&fields);
        }
        let rows: Vec<Vec<Option<u64>>> = self
            .redis
            .call("throughput", pipe.query_async(&mut self.redis.conn()))
            .await?;
        let mut series = Series::default();
        for row in rows {
            let n = |k: Kind| row.get(k as usize).copied().flatten().unwrap_or(0);
            series.pushed.push(n(Kind::Pushed));
            series.delivered.push(n(Kind::Delivered));
            series.finished.push(n(Kind::Finished));
            series.failed.push(n(Kind::Failed));
            series.dead.push(n(Kind::Dead));
        }
        Ok(Throughput {
            resolution_s: step_s as u64,
            from_ms: first * step_s * 1000,
            to_ms: (now + 1) * step_s * 1000,
            series,
        })
    }

    /// Lateness bucket counts of the last hour, every instance: all topics
    /// together, and each of `topics`. Per minute key: one HLEN, then an
    /// HGETALL where the key holds no more fields than `topics` could
    /// name, else HMGETs of their bucket fields (100 topics a call). Each
    /// call is bounded by the topics asked for, whatever the number of
    /// topics that saw a job (an HGETALL of a minute read every topic's).
    pub(crate) async fn lateness(
        &self,
        topics: &[&String],
    ) -> Result<(
        [u64; LATENESS_BUCKETS],
        HashMap<String, [u64; LATENESS_BUCKETS]>,
    )> {
        let now = self.redis.clock().now_estimate_ms().div_euclid(60_000);
        let keys: Vec<String> = ((now - MINUTE_POINTS + 1)..=now)
            .map(|m| Keys::lateness_minute(self.prefix(), m))
            .collect();
        let mut pipe = redis::pipe();
        for k in &keys {
            pipe.cmd("HLEN").arg(k);
        }
        let lens: Vec<usize> = self
            .redis
            .call("lateness", pipe.query_async(&mut self.redis.conn()))
            .await?;
        let buckets = 0..LATENESS_BUCKETS;
        let whole = (topics.len() + 1) * LATENESS_BUCKETS;
        // The first chunk: all topics' buckets; then 100 topics' each.
        let mut chunks: Vec<Vec<String>> = vec![buckets.clone().map(|b| b.to_string()).collect()];
        for c in topics.chunks(100) {
            chunks.push(
                c.iter()
                    .flat_map(|t| buckets.clone().map(move |b| format!("{b}:{t}")))
                    .collect(),
            );
        }
        let (mut small, mut big) = (redis::pipe(), redis::pipe());
        let (mut n_small, mut n_big) = (0, 0);
        for (k, len) in keys.iter().zip(lens) {
            if len == 0 {
                continue;
            }
            if len <= whole {
                small.cmd("HGETALL").arg(k);
                n_small += 1;
            } else {
                for fields in &chunks {
                    big.cmd("HMGET").arg(k).arg(fields);
                }
                n_big += 1;
            }
        }
        let mut all = [0; LATENESS_BUCKETS];
        let mut per: HashMap<String, [u64; LATENESS_BUCKETS]> = HashMap::new();
        let wanted: std::collections::HashSet<&str> = topics.iter().map(|t| t.as_str()).collect();
        if n_small > 0 {
            let minutes: Vec<HashMap<String, u64>> = self
                .redis
                .call("lateness", small.query_async(&mut self.redis.conn()))
                .await?;
            for (f, n) in minutes.into_iter().flatten() {
                let (b, topic) = match f.split_once(':') {
                    Some((b, t)) => (b, Some(t)),
                    None => (f.as_str(), None),
                };
                let Some(b) = b.parse::<usize>().ok().filter(|b| *b < LATENESS_BUCKETS) else {
                    continue;
                };
                match topic {
                    Some(t) if wanted.contains(t) => {
                        per.entry(t.to_owned()).or_insert([0; LATENESS_BUCKETS])[b] += n
                    }
                    Some(_) => {}
                    None => all[b] += n,
                }
            }
        }
        if n_big > 0 {
            let rows: Vec<Vec<Option<u64>>> = self
                .redis
                .call("lateness", big.query_async(&mut self.redis.conn()))
                .await?;
            for minute in rows.chunks(chunks.len()) {
                let mut minute = minute.iter();
                for (b, n) in minute.next().into_iter().flatten().enumerate() {
                    all[b] += n.unwrap_or(0);
                }
                let mut names = topics.iter();
                for row in minute {
                    for t in row.chunks(LATENESS_BUCKETS) {
                        let Some(name) = names.next() else { break };
                        let e = per.entry((*name).clone()).or_insert([0; LATENESS_BUCKETS]);
                        for (b, n) in t.iter().enumerate() {
                            e[b] += n.unwrap_or(0);
                        }
                    }
                }
            }
        }
        per.retain(|_, b| b.iter().any(|n| *n > 0));
        Ok((all, per))
    }

    /// Fills in each topic's backlog ages and what holds it. Per partition
    /// two pipelined round trips (three when a topic has jobs of a priority
    /// other than the default: the next entries of each of its levels, at
    /// most MAX_PRIORITY): the next [`HEAD_LOOK`] entries of each ready
    /// list and a ZRANGE of
    /// the topic's priority levels (and
    /// the token bucket of each rate-limited topic with ready jobs, in its
    /// home partition), and at most [`OVERDUE_LOOK`] due schedule entries;
    /// then one HMGET per entry looked at. Cost: O(topics * HEAD_LOOK + OVERDUE_LOOK)
    /// per partition, whatever the queue's size. A topic whose overdue
    /// jobs all lie beyond the first [`OVERDUE_LOOK`] due entries shows no
    /// overdue age (another topic's older ones fill the look).
    pub(crate) async fn backlog(
        &self,
        o: &mut Overview,
        limited: &BTreeMap<String, crate::RateLimit>,
    ) -> Result<()> {
        let now = self.redis.clock().now_estimate_ms();
        let ready: Vec<String> = (o.topics.iter())
            .filter(|(_, c)| c.ready > 0)
            .map(|(t, _)| t.clone())
            .collect();
        let reads = self.parts().iter().enumerate().map(|(i, part)| {
            let ready = &ready;
            async move {
                if self.redis.health.is_down(i) {
                    return Ok(None);
                }
                let rated: Vec<&String> = ready
                    .iter()
                    .filter(|t| {
                        limited.contains_key(*t)
                            && super::layout::partition_of(t, self.parts().len()) == i
                    })
                    .collect();
                let mut pipe = redis::pipe();
                for t in ready {
                    pipe.cmd("LRANGE")
                        .arg(part.ready_list(t))
                        .arg(-HEAD_LOOK)
                        .arg(-1);
                    pipe.cmd("ZRANGE").arg(part.levels(t)).arg(0).arg(-1);
                }
                for t in &rated {
                    pipe.cmd("HMGET")
                        .arg(part.rate(t))
                        .arg(super::layout::rate_field::PER_S)
                        .arg(super::layout::rate_field::BURST)
                        .arg(super::layout::rate_field::TOKENS)
                        .arg(super::layout::rate_field::AT);
                }
                pipe.cmd("ZRANGEBYSCORE")
                    .arg(part.schedule())
                    .arg("-inf")
                    .arg(now)
                    .arg("WITHSCORES")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(OVERDUE_LOOK);
                let mut replies: Vec<redis::Value> = self
                    .redis
                    .call("backlog", pipe.query_async(&mut self.redis.conn()))
                    .await?;
                let due: Vec<(String, f64)> =
                    value("backlog", replies.pop().unwrap_or(redis::Value::Nil))?;
                let mut replies = replies.into_iter();
                // Each list's next entries, next first: its head is the
                // first of them whose job is ready there (see below).
                let mut heads: Vec<(String, Vec<String>)> = Vec::new();
                // Priorities: the next job of each other level is a head too
                // (the oldest ready job may wait in any level).
                let mut levels: Vec<(String, u8)> = Vec::new();
                for t in ready {
                    let head = replies.next().unwrap_or(redis::Value::Nil);
                    if let Ok(mut ids) = value::<Vec<String>>("backlog", head) {
                        ids.reverse();
                        heads.push((t.clone(), ids));
                    }
                    let found = replies.next().unwrap_or(redis::Value::Nil);
                    for l in value::<Vec<u8>>("backlog", found).unwrap_or_default() {
                        // Groups' rotation is the level after the last
                        // priority: no ready list of its own.
                        if l <= crate::job::MAX_PRIORITY {
                            levels.push((t.clone(), l));
                        }
                    }
                }
                if !levels.is_empty() {
                    let mut pipe = redis::pipe();
                    for (t, l) in &levels {
                        pipe.cmd("LRANGE")
                            .arg(part.ready_level(t, *l))
                            .arg(-HEAD_LOOK)
                            .arg(-1);
                    }
                    let found: Vec<Vec<String>> = self
                        .redis
                        .call("backlog", pipe.query_async(&mut self.redis.conn()))
                        .await?;
                    for ((t, _), mut ids) in levels.into_iter().zip(found) {
                        ids.reverse();
                        heads.push((t, ids));
                    }
                }
                let mut out_of_tokens = Vec::new();
                for (t, v) in rated.iter().zip(replies) {
                    let b: Vec<Option<f64>> = value("backlog", v)?;
                    if let [Some(per_s), Some(burst), tokens, at] = b[..] {
                        let mut tokens = tokens.unwrap_or(burst * 1000.0);
                        let at = at.unwrap_or(now as f64);
                        if (now as f64) > at {
                            tokens = (burst * 1000.0).min(tokens + (now as f64 - at) * per_s);
                        }
                        if tokens < 1000.0 {
                            out_of_tokens.push((*t).clone());
                        }
                    }
                }
                let mut pipe = redis::pipe();
                // Entries may be stale (a job deleted or moved while ready,
                // skipped by the next pop): a list's head is its first
                // entry whose job is ready in that topic.
                for (_, ids) in &heads {
                    for id in ids {
                        pipe.cmd("HMGET")
                            .arg(part.job(id))
                            .arg(field::DUE)
                            .arg(field::STATE)
                            .arg(field::TOPIC);
                    }
                }
                for (id, _) in &due {
                    pipe.cmd("HMGET")
                        .arg(part.job(id))
                        .arg(field::TOPIC)
                        .arg(field::STATE);
                }
                let mut ages: Vec<(String, Option<i64>, Option<i64>)> = Vec::new();
                // A topic whose ready jobs are all in groups has no list
                // entries to look at: nothing to send then.
                if heads.iter().any(|(_, ids)| !ids.is_empty()) || !due.is_empty() {
                    let replies: Vec<redis::Value> = self
                        .redis
                        .call("backlog", pipe.query_async(&mut self.redis.conn()))
                        .await?;
                    let mut replies = replies.into_iter();
                    for (t, ids) in &heads {
                        let mut found = false;
                        for v in replies.by_ref().take(ids.len()) {
                            let f: Vec<Option<String>> = value("backlog", v)?;
                            if found {
                                continue;
                            }
                            if let [Some(d), Some(state), Some(topic)] = &f[..] {
                                if state == super::layout::state::READY && topic == t {
                                    if let Ok(d) = d.parse::<i64>() {
                                        ages.push((t.clone(), Some(d), None));
                                        found = true;
                                    }
                                }
                            }
                        }
                    }
                    for ((_, score), v) in due.iter().zip(replies) {
                        let f: Vec<Option<String>> = value("backlog", v)?;
                        // Delayed jobs only (no state field): a reserved
                        // entry is a lease end, not a due time.
                        if let [Some(t), None] = &f[..] {
                            ages.push((t.clone(), None, Some(*score as i64)));
                        }
                    }
                }
                Ok::<_, Error>(Some((ages, out_of_tokens)))
            }
        });
        for r in futures::future::join_all(reads).await {
            let Some((ages, out_of_tokens)) = r? else {
                continue;
            };
            for (t, ready_due, overdue) in ages {
                let Some(c) = o.topics.get_mut(&t) else {
                    continue;
                };
                let age = |due: i64| (now - due).max(0) as u64;
                if let Some(d) = ready_due {
                    c.oldest_ready_ms = Some(c.oldest_ready_ms.unwrap_or(0).max(age(d)));
                }
                if let Some(d) = overdue {
                    c.oldest_overdue_ms = Some(c.oldest_overdue_ms.unwrap_or(0).max(age(d)));
                }
            }
            for t in out_of_tokens {
                if let Some(c) = o.topics.get_mut(&t) {
                    c.held.get_or_insert(Held::Rate);
                }
            }
        }
        for c in o.topics.values_mut() {
            if c.paused {
                c.held = Some(Held::Paused);
            }
        }
        Ok(())
    }

    /// Lateness percentiles into the overview's topics, and all topics'.
    pub(crate) async fn lateness_into(&self, o: &mut Overview) -> Result<Lateness> {
        let names: Vec<&String> = o.topics.keys().collect();
        let (all, topics) = self.lateness(&names).await?;
        for (t, b) in topics {
            if let Some(c) = o.topics.get_mut(&t) {
                c.lateness_ms = percentiles(&b);
            }
        }
        for c in o.topics.values_mut().filter(|c| c.lateness_ms.samples == 0) {
            c.lateness_ms = percentiles(&[0; LATENESS_BUCKETS]);
        }
        Ok(percentiles(&all))
    }
}
