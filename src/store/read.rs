//! Plain reads: a job, a listing page's jobs, the counts, a page of dead
//! letters, Redis's memory. They change nothing, so they need no script.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::layout::{field, state};
use super::{Keys, Store};
use crate::error::{Error, Result};
use crate::job::{FailedAttempt, Job, JobState};
use crate::retry::RetryPolicy;

/// Job counts of one topic: the wire's type, so `/v1/topics` sends what
/// the store read.
pub use crate::figures::TopicCounts;

mod get;
mod list;
mod memory;

pub use crate::figures::Overview;

/// A job from its hash and its schedule score (the due time while delayed).
fn decode_job(
    id: &str,
    mut f: HashMap<String, String>,
    scheduled: Option<f64>,
) -> Result<Option<Job>> {
    let Some(topic) = f.remove(field::TOPIC) else {
        return Ok(None);
    };
    let stored = f.remove(field::STATE);
    let state_name = stored.as_deref().unwrap_or(state::DELAYED);
    let state = JobState::parse(state_name)
        .ok_or_else(|| Error::protocol("get", format!("unknown job state {state_name:?}")))?;
    let int = |v: Option<&String>| v.and_then(|s| s.parse::<i64>().ok());
    let history = f
        .get(field::HISTORY)
        .map(|h| {
            h.lines()
                .filter_map(|line| {
                    let mut parts = line.splitn(3, '\t');
                    Some(FailedAttempt {
                        attempt: parts.next()?.parse().ok()?,
                        at_ms: parts.next()?.parse().ok()?,
                        error: parts.next().unwrap_or("").to_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(Job {
        id: id.to_owned(),
        topic,
        body: f.remove(field::BODY).unwrap_or_default(),
        ttr: Duration::from_millis(int(f.get(field::TTR)).unwrap_or(0).max(0) as u64),
        due_ms: int(f.get(field::DUE))
            .or(scheduled.map(|s| s as i64))
            .unwrap_or(0),
        attempts: int(f.get(field::ATTEMPTS)).unwrap_or(0).max(0) as u32,
        retry: RetryPolicy::from_stored(
            f.get(field::RETRY).map(String::as_str),
            f.get(field::MAX).map(String::as_str),
        ),
        lease_until_ms: int(f.get(field::LEASE)).filter(|_| state == JobState::Reserved),
        dead_at_ms: int(f.get(field::DEAD_AT)),
        finished_at_ms: int(f.get(field::FINISHED_AT)),
        cancelled_at_ms: int(f.get(field::CANCELLED)),
        last_error: f.remove(field::ERROR),
        traceparent: f.remove(field::TRACEPARENT),
        tracestate: f.remove(field::TRACESTATE),
        history,
        tags: f
            .remove(field::TAGS)
            .map(|t| t.lines().map(str::to_owned).collect())
            .unwrap_or_default(),
        group: f.remove(field::GROUP),
        batch: f.remove(field::BATCH),
        state,
        priority: int(f.get(field::PRIORITY)).map_or(0, |p| p.clamp(0, 255) as u8),
        progress: f
            .remove(field::PROGRESS)
            .map(|p| serde_json::from_str(&p).unwrap_or(serde_json::Value::String(p))),
        result: f
            .remove(field::RESULT)
            .map(|p| serde_json::from_str(&p).unwrap_or(serde_json::Value::String(p))),
        children: f
            .remove(field::CHILDREN)
            .map(|c| crate::job::children_of(&c)),
        body_left_out: None,
    }))
}

/// Counts from the count hash ("<state>:<topic>" -> n).
pub(super) fn decode_counts(counts: HashMap<String, i64>) -> BTreeMap<String, TopicCounts> {
    let mut topics: BTreeMap<String, TopicCounts> = BTreeMap::new();
    for (key, n) in counts {
        let Some((st, topic)) = key.split_once(':') else {
            continue;
        };
        let c = topics.entry(topic.to_owned()).or_default();
        let n = n.max(0) as u64;
        match st {
            state::DELAYED => c.delayed = n,
            state::READY => c.ready = n,
            state::RESERVED => c.reserved = n,
            state::DEAD => c.dead = n,
            state::FINISHED => c.finished = n,
            _ => {}
        }
    }
    topics
}

impl Store {
    /// Each delayed topic's next due time, from its topic schedule's head
    /// (the overview's and a topics page's; O(the topics given)). A read
    /// that fails leaves them unset: the counts still stand.
    pub(super) async fn fill_next_dues(&self, topics: &mut BTreeMap<String, TopicCounts>) {
        let delayed: Vec<String> = (topics.iter())
            .filter(|(_, c)| c.delayed > 0)
            .map(|(t, _)| t.clone())
            .collect();
        match self.topic_heads(&delayed).await {
            Ok(heads) => {
                for (t, due) in heads {
                    if let Some(c) = topics.get_mut(&t) {
                        c.next_due_ms = Some(due);
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "topics' next due times not read"),
        }
    }

    /// A job, in whatever state it is.
    pub(crate) async fn get(&self, id: &str) -> Result<Option<Job>> {
        Ok(self.get_many(&[id.to_owned()]).await?.pop())
    }

    /// Several jobs, one round trip per partition (at once); ids with no
    /// job are left out, the others keep their order.
    pub(crate) async fn get_many(&self, ids: &[String]) -> Result<Vec<Job>> {
        let groups = self.by_partition(ids);
        let reads = groups
            .iter()
            .map(|(&part, ids)| self.get_in(&self.parts()[part], ids));
        let mut found: HashMap<String, Job> = HashMap::new();
        for jobs in futures::future::join_all(reads).await {
            found.extend(jobs?.into_iter().map(|j| (j.id.clone(), j)));
        }
        Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
    }

    /// Which of `ids` have an outcome (no job, or one finished or dead):
    /// two fields read per id, one round trip per partition (at once).
    pub(crate) async fn settled(&self, ids: &[String]) -> Result<Vec<String>> {
        let groups = self.by_partition(ids);
        let reads = groups
            .iter()
            .map(|(&part, ids)| self.settled_in(&self.parts()[part], ids));
        let mut settled = Vec::new();
        for ids in futures::future::join_all(reads).await {
            settled.extend(ids?);
        }
        Ok(settled)
    }

    /// Counts per topic and state, and the earliest due time, over every
    /// partition.
    pub(crate) async fn overview(&self) -> Result<Overview> {
        let reads = self.parts().iter().enumerate().map(|(i, part)| async move {
            // A partition whose master is down is not waited for: the
            // others are counted, and the answer says which are missing.
            if self.redis.health.is_down(i) {
                return Err(self.redis.timed_out("topics"));
            }
            // The counts in bounded calls (HSCAN), never one HGETALL.
            let c = self.counts_of(i).await?;
            let mut pipe = redis::pipe();
            pipe.cmd("ZRANGE")
                .arg(part.schedule())
                .arg(0)
                .arg(0)
                .arg("WITHSCORES")
                // Layout 3 keeps delayed jobs out of the schedule: their
                // earliest is the heads' first.
                .cmd("ZRANGE")
                .arg(part.heads())
                .arg(0)
                .arg(0)
                .arg("WITHSCORES");
            type Head = Vec<(String, f64)>;
            let (mut head, heads): (Head, Head) = self
                .redis
                .call("topics", pipe.query_async(&mut self.redis.conn()))
                .await?;
            head.extend(heads);
            head.sort_by(|a, b| a.1.total_cmp(&b.1));
            Ok::<_, Error>((c, head))
        });
        let mut counts: HashMap<String, i64> = HashMap::new();
        let mut next_due_ms: Option<i64> = None;
        let mut unavailable_partitions = Vec::new();
        let mut first_error = None;
        for (i, r) in futures::future::join_all(reads)
            .await
            .into_iter()
            .enumerate()
        {
            let (c, head) = match r {
                Ok(r) => r,
                Err(e) if e.is_unavailable() && self.parts().len() > 1 => {
                    unavailable_partitions.push(i);
                    first_error.get_or_insert(e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            for (k, n) in c {
                *counts.entry(k).or_default() += n;
            }
            if let Some((_, due)) = head.first() {
                let due = *due as i64;
                next_due_ms = Some(next_due_ms.map_or(due, |d| d.min(due)));
            }
        }
        if let Some(e) = first_error {
            if unavailable_partitions.len() == self.parts().len() {
                return Err(e);
            }
        }
        let mut topics = decode_counts(counts);
        // Each topic's next due time, from its topic schedule's head.
        if unavailable_partitions.is_empty() {
            self.fill_next_dues(&mut topics).await;
        }
        match self.paused().await {
            Ok(paused) => {
                for t in paused {
                    topics.entry(t).or_default().paused = true;
                }
            }
            Err(e) if unavailable_partitions.is_empty() => return Err(e),
            Err(_) => {}
        }
        // A topic with a rate limit is known with no jobs too. HKEYS costs
        // one name per rate-limited topic.
        let mut limited = redis::cmd("HKEYS");
        limited.arg(Keys::rates_index(self.prefix()));
        match self
            .redis
            .call(
                "topics",
                limited.query_async::<Vec<String>>(&mut self.redis.conn()),
            )
            .await
        {
            Ok(limited) => {
                for t in limited {
                    topics.entry(t).or_default();
                }
            }
            Err(e) if unavailable_partitions.is_empty() => return Err(e),
            Err(_) => {}
        }
        Ok(Overview {
            topics,
            next_due_ms,
            unavailable_partitions,
        })
    }

    /// Ids of `topic`'s dead jobs, oldest first, positions `first..=last`
    /// (over every partition: each gives its oldest `last + 1`, merged by
    /// time of death).
    pub(crate) async fn dead_ids(
        &self,
        topic: &str,
        first: usize,
        last: usize,
    ) -> Result<Vec<String>> {
        if let [part] = self.parts() {
            let mut cmd = redis::cmd("ZRANGE");
            cmd.arg(part.dead(topic)).arg(first).arg(last);
            return self
                .redis
                .call("dead letters", cmd.query_async(&mut self.redis.conn()))
                .await;
        }
        let reads = self.parts().iter().map(|part| {
            let mut cmd = redis::cmd("ZRANGE");
            cmd.arg(part.dead(topic)).arg(0).arg(last).arg("WITHSCORES");
            async move {
                self.redis
                    .call("dead letters", cmd.query_async(&mut self.redis.conn()))
                    .await
            }
        });
        let mut all: Vec<(String, f64)> = Vec::new();
        for r in futures::future::join_all(reads).await {
            let page: Vec<(String, f64)> = r?;
            all.extend(page);
        }
        all.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        Ok(all
            .into_iter()
            .skip(first)
            .take(last + 1 - first)
            .map(|(id, _)| id)
            .collect())
    }

    pub(crate) async fn ping(&self) -> Result<()> {
        let _: String = self
            .redis
            .call(
                "ping",
                redis::cmd("PING").query_async(&mut self.redis.conn()),
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_delayed_and_a_dead_job() {
        let hash = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>()
        };
        let j = decode_job(
            "a",
            hash(&[(field::TOPIC, "t"), (field::TTR, "60000")]),
            Some(5.0),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (j.state, j.due_ms, j.ttr.as_secs()),
            (JobState::Delayed, 5, 60)
        );
        let j = decode_job(
            "b",
            hash(&[
                (field::TOPIC, "t"),
                (field::STATE, state::DEAD),
                (field::DUE, "7"),
                (field::ATTEMPTS, "3"),
                (field::HISTORY, "1\t10\tboom\n2\t20\tbang"),
            ]),
            None,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (j.state, j.attempts, j.history.len()),
            (JobState::Dead, 3, 2)
        );
        assert_eq!(j.history[1].error, "bang");
        assert!(decode_job("c", HashMap::new(), None).unwrap().is_none());
        let counts = decode_counts(HashMap::from([
            ("ready:t".to_string(), 2),
            ("dead:t".to_string(), 1),
        ]));
        assert_eq!(
            counts["t"],
            TopicCounts {
                ready: 2,
                dead: 1,
                ..Default::default()
            }
        );
        let m = memory::parse("used_memory:10\r\nmaxmemory:5\r\nmaxmemory_policy:allkeys-lru\r\n")
            .unwrap();
        assert!(m.full() && m.evicting());
    }
}
