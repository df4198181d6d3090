//! Operating a queue: dead letters requeued or purged, topics paused and
//! rate-limited, dashboard sessions, and what health checks and `/metrics`
//! read (Redis's settings and memory, shards, gauges).

use std::time::Duration;

use super::Queue;
use crate::error::{Error, Result};
use crate::figures::{Memory, Overview, Settings};
use crate::metrics::Gauges;
use crate::rate::RateLimit;

impl Queue {
    /// Brings dead jobs of `topic` back to ready with fresh attempts: the
    /// given ids, or all of them when `ids` is empty. Returns how many.
    pub async fn requeue_dead(&self, topic: &str, ids: &[String]) -> Result<u64> {
        use crate::store::requeue::{Requeue, BATCH};
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        let store = self.store();
        let mut total = 0;
        if ids.is_empty() {
            let oldest: &[String] = &[];
            for part in 0..store.parts().len() {
                loop {
                    match store.run::<Requeue>(part, (topic, BATCH, oldest)).await? {
                        0 => break,
                        n => total += n,
                    }
                }
            }
            return Ok(total);
        }
        let mut groups: std::collections::BTreeMap<usize, Vec<String>> = Default::default();
        for id in ids {
            groups
                .entry(store.part_of(id))
                .or_default()
                .push(id.clone());
        }
        for (part, ids) in groups {
            for batch in ids.chunks(BATCH) {
                total += store.run::<Requeue>(part, (topic, BATCH, batch)).await?;
            }
        }
        Ok(total)
    }

    /// Deletes every dead job of `topic`. Returns how many.
    pub async fn purge_dead(&self, topic: &str) -> Result<u64> {
        use crate::store::sweeps::Purge;
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        let mut total = 0;
        for part in 0..self.store().parts().len() {
            loop {
                match self.store().run::<Purge>(part, (topic,)).await? {
                    0 => break,
                    n => total += n,
                }
            }
        }
        Ok(total)
    }

    /// Stops handing out `topic`'s jobs (pops, long-polls, webhooks, on
    /// every instance); they still fall due on time and wait in ready.
    pub async fn pause(&self, topic: &str) -> Result<()> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        self.store().set_paused(topic, true).await
    }

    /// Hands `topic`'s jobs out again, at once.
    pub async fn resume(&self, topic: &str) -> Result<()> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        self.store().set_paused(topic, false).await?;
        self.inner.h.waiters.wake_all();
        Ok(())
    }

    /// Limits how fast `topic`'s jobs are handed out (pops, long-polls and
    /// webhook deliveries together, across every instance). Jobs still
    /// fall due on time and wait in ready.
    pub async fn set_rate(&self, topic: &str, limit: RateLimit) -> Result<()> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        limit.check().map_err(Error::Invalid)?;
        self.store().set_rate(topic, limit).await
    }

    /// Removes `topic`'s rate limit. False if it had none.
    pub async fn clear_rate(&self, topic: &str) -> Result<bool> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        let had = self.store().clear_rate(topic).await?;
        // Pops held back by the limit may go now.
        self.inner.h.waiters.wake_all();
        Ok(had)
    }

    /// Every topic's rate limit.
    pub async fn rates(&self) -> Result<std::collections::BTreeMap<String, RateLimit>> {
        self.store().rates().await
    }

    /// Ends the dashboard session `id` on every instance, for `ttl` (what
    /// is left of its lifetime).
    pub async fn end_dashboard_session(&self, id: &str, ttl: Duration) -> Result<()> {
        self.store().end_session(id, ttl).await
    }

    /// Whether the dashboard session `id` has been signed out.
    pub async fn dashboard_session_ended(&self, id: &str) -> Result<bool> {
        self.store().session_ended(id).await
    }

    /// Job counts per topic and state, and the earliest due time in the
    /// schedule.
    pub async fn topics(&self) -> Result<Overview> {
        self.store().overview().await
    }

    /// A page of topics (about `limit`) from `cursor` (None: the first),
    /// and the next page's cursor (None: the last); each Redis call costs
    /// O(limit), whatever the number of topics. A topic is listed once
    /// unless its jobs change state during the walk (as with SCAN).
    pub async fn topics_page(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Overview, Option<String>)> {
        self.store().overview_page(cursor, limit).await
    }

    /// One topic's counts, due time and paused flag (with no jobs too).
    pub async fn topic_overview(&self, topic: &str) -> Result<Overview> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        self.store().overview_of(topic).await
    }

    /// Whether `topic` has a job in any state: one HMGET per partition.
    pub async fn topic_has_jobs(&self, topic: &str) -> Result<bool> {
        self.store().topic_has_jobs(topic).await
    }

    /// Connects to Redis once and says plainly what failed, if anything
    /// (`connect` itself never waits for Redis). `delayq serve` calls it at
    /// start.
    pub async fn check_connection(&self) -> Result<()> {
        self.store().probe().await
    }

    /// The Redis settings delayq depends on (see [`Settings`]).
    pub async fn redis_settings(&self) -> Result<Settings> {
        self.store().settings().await
    }

    /// Turns on expired events in Redis; false when Redis refuses CONFIG
    /// (only the sweep fires jobs then: still on time).
    pub async fn enable_expired_events(&self) -> bool {
        self.store().enable_expired_events().await
    }

    /// The memory of each master, read now (on a single Redis, one entry
    /// named "").
    pub async fn memories(&self) -> Result<Vec<(String, Memory)>> {
        self.store().memories().await
    }

    /// The queue is on a Redis Cluster.
    pub fn on_cluster(&self) -> bool {
        self.store().redis.cluster.is_some()
    }

    /// Each shard with the partitions it holds and its state: "ok",
    /// "degraded" (fewer replicas than `replica_acks`: acknowledged calls
    /// there follow `degraded_pushes`) or "down" (its master does not answer: pops pass
    /// its partitions by). Empty unless replica acks are on or the queue is
    /// on a cluster.
    pub fn shards(&self) -> Vec<crate::redis::health::Shard> {
        self.store().redis.health.shards()
    }

    /// Why the Redis server runs none of delayq's scripts (neither FCALL
    /// nor EVALSHA: the server, both answers, the fix), as the last script
    /// call found; None once one runs. Known without asking Redis.
    pub fn scripts_refused(&self) -> Option<String> {
        self.store().redis.no_scripts()
    }

    /// Redis answers (for readiness checks).
    pub async fn ping(&self) -> Result<()> {
        self.store().ping().await
    }

    /// The gauges `/metrics` shows, read now (queue depths are left out
    /// while Redis is away; `delayq_redis_errors_total` says so).
    pub async fn gauges(&self) -> Gauges {
        // Counts only, in bounded calls (no due times: not shown here).
        let counts = async {
            let mut o = Overview {
                topics: self.store().topic_counts().await?,
                ..Default::default()
            };
            for t in self.store().paused().await? {
                o.topics.entry(t).or_default().paused = true;
            }
            Ok::<_, crate::Error>(o)
        };
        let jobs = match counts.await {
            Ok(mut o) => {
                // Backlog ages are left out if they cannot be read.
                let _ = self.store().backlog(&mut o, &Default::default()).await;
                Some(o.topics)
            }
            Err(_) => None,
        };
        // Groups' gauges of the topics with jobs, left out if unreadable.
        let with_jobs: Vec<String> = jobs.iter().flatten().map(|(t, _)| t.clone()).collect();
        let groups = self
            .store()
            .group_gauges(&with_jobs)
            .await
            .unwrap_or_default();
        Gauges {
            jobs,
            groups,
            ..self.local_gauges()
        }
    }

    /// The gauges this process knows without asking Redis: the queue's
    /// depths, pauses, backlog ages and groups left out.
    pub fn local_gauges(&self) -> Gauges {
        Gauges {
            jobs: None,
            groups: Default::default(),
            subscriber_connected: self.subscriber_connected(),
            expired_events: self.expired_events_heard(),
            waiting_pops: self
                .waiting_pops()
                .saturating_sub(self.waiting_webhook_pops()),
            webhook_pops: self.waiting_webhook_pops(),
            shards: self.shards(),
        }
    }
}
