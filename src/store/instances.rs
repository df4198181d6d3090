//! Running instances' heartbeats and webhook delivery status. Every key is
//! under the prefix's own tag (one slot), so each read is one pipeline.

// Only the server's webhook delivery calls this (`server` feature).
#![cfg_attr(not(feature = "server"), allow(dead_code))]

use std::collections::HashMap;

use super::{Keys, Store};
use crate::error::Result;

/// Most instances listed (a bound on what one read costs).
pub(crate) const MAX_INSTANCES: usize = 1000;

/// A webhook topic's last delivery and its counts, as read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WebhookRead {
    pub last_status: Option<String>,
    pub last_at_ms: Option<i64>,
    pub last_error: Option<String>,
    pub delivered: u64,
    pub failed: u64,
}

/// What one instance learnt of a webhook topic since it last wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WebhookNote {
    /// The last delivery: (status, at ms, error).
    pub last: Option<(String, i64, Option<String>)>,
    /// Unix minute -> (delivered, failed) in it.
    pub counts: Vec<(i64, u64, u64)>,
}

/// How long a minute's counts are kept: the hour they are read for, and
/// a little.
const COUNTS_TTL_S: u64 = 3_900;
/// How long a topic's last delivery is kept after it is last written.
const LAST_TTL_S: u64 = 7 * 86_400;

const STATUS: &str = "status";
const AT: &str = "at";
const ERROR: &str = "error";
const DELIVERED: &str = "d";
const FAILED: &str = "f";

impl Store {
    /// Writes instance `id`'s heartbeat, to expire `ttl_ms` after `now_ms`:
    /// one SET and one ZADD (O(log n) in the live instances).
    pub(crate) async fn heartbeat(
        &self,
        id: &str,
        json: &str,
        now_ms: i64,
        ttl_ms: u64,
    ) -> Result<()> {
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(Keys::instance(self.prefix(), id))
            .arg(json)
            .arg("PX")
            .arg(ttl_ms)
            .ignore()
            .cmd("ZADD")
            .arg(Keys::instances(self.prefix()))
            .arg(now_ms + ttl_ms as i64)
            .arg(id)
            .ignore();
        self.redis
            .call("heartbeat", pipe.query_async::<()>(&mut self.redis.conn()))
            .await
    }

    /// Takes instance `id` out of the list at once (a clean stop).
    pub(crate) async fn instance_gone(&self, id: &str) -> Result<()> {
        let mut pipe = redis::pipe();
        pipe.cmd("DEL")
            .arg(Keys::instance(self.prefix(), id))
            .ignore()
            .cmd("ZREM")
            .arg(Keys::instances(self.prefix()))
            .arg(id)
            .ignore();
        self.redis
            .call("heartbeat", pipe.query_async::<()>(&mut self.redis.conn()))
            .await
    }

    /// The live instances' heartbeats (JSON), by id. Drops the ids whose
    /// heartbeat expired before `now_ms` (each dead instance's one id,
    /// once), then reads at most [`MAX_INSTANCES`]: the cost is that of the
    /// live instances, never a SCAN.
    /// The ids in the instances' index (lapsed ones too, until a read of
    /// the heartbeats prunes them), sorted: one command, for a cheap look
    /// whether an instance started.
    pub(crate) async fn instance_ids(&self) -> Result<Vec<String>> {
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(Keys::instances(self.prefix()))
            .arg(0)
            .arg(MAX_INSTANCES - 1);
        let mut ids: Vec<String> = self
            .redis
            .call("instances", cmd.query_async(&mut self.redis.conn()))
            .await?;
        ids.sort();
        Ok(ids)
    }

    pub(crate) async fn instances(&self, now_ms: i64) -> Result<Vec<String>> {
        let index = Keys::instances(self.prefix());
        let mut pipe = redis::pipe();
        pipe.cmd("ZREMRANGEBYSCORE")
            .arg(&index)
            .arg("-inf")
            .arg(format!("({now_ms}"))
            .ignore()
            .cmd("ZRANGE")
            .arg(&index)
            .arg(0)
            .arg(MAX_INSTANCES - 1);
        let (mut ids,): (Vec<String>,) = self
            .redis
            .call("instances", pipe.query_async(&mut self.redis.conn()))
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        ids.sort();
        let mut mget = redis::cmd("MGET");
        for id in &ids {
            mget.arg(Keys::instance(self.prefix(), id));
        }
        let beats: Vec<Option<String>> = self
            .redis
            .call("instances", mget.query_async(&mut self.redis.conn()))
            .await?;
        Ok(beats.into_iter().flatten().collect())
    }

    /// Adds what this instance saw of `topic`'s deliveries: the last
    /// delivery's status (one HSET) and each minute's counts (an HINCRBY
    /// pair per minute noted, a minute or two per call).
    pub(crate) async fn webhook_note(&self, topic: &str, note: &WebhookNote) -> Result<()> {
        let mut pipe = redis::pipe();
        if let Some((status, at, error)) = &note.last {
            let key = Keys::webhook(self.prefix(), topic);
            pipe.cmd("HSET")
                .arg(&key)
                .arg(STATUS)
                .arg(status)
                .arg(AT)
                .arg(*at)
                .arg(ERROR)
                .arg(error.as_deref().unwrap_or(""))
                .ignore()
                .cmd("EXPIRE")
                .arg(&key)
                .arg(LAST_TTL_S)
                .ignore();
        }
        for &(minute, delivered, failed) in &note.counts {
            let key = Keys::webhook_counts(self.prefix(), topic, minute);
            pipe.cmd("HINCRBY")
                .arg(&key)
                .arg(DELIVERED)
                .arg(delivered)
                .ignore()
                .cmd("HINCRBY")
                .arg(&key)
                .arg(FAILED)
                .arg(failed)
                .ignore()
                .cmd("EXPIRE")
                .arg(&key)
                .arg(COUNTS_TTL_S)
                .ignore();
        }
        self.redis
            .call(
                "webhook status",
                pipe.query_async::<()>(&mut self.redis.conn()),
            )
            .await
    }

    /// Each of `topics`' last delivery and its counts over the 60 minutes
    /// up to `now_minute`: one HMGET of the last delivery and 60 HMGETs of
    /// counts per topic, in one pipeline (what is shown, nothing more).
    pub(crate) async fn webhook_read(
        &self,
        topics: &[String],
        now_minute: i64,
    ) -> Result<HashMap<String, WebhookRead>> {
        if topics.is_empty() {
            return Ok(HashMap::new());
        }
        let mut pipe = redis::pipe();
        for t in topics {
            pipe.cmd("HMGET")
                .arg(Keys::webhook(self.prefix(), t))
                .arg(STATUS)
                .arg(AT)
                .arg(ERROR);
            for m in now_minute - 59..=now_minute {
                pipe.cmd("HMGET")
                    .arg(Keys::webhook_counts(self.prefix(), t, m))
                    .arg(DELIVERED)
                    .arg(FAILED);
            }
        }
        let replies: Vec<Vec<Option<String>>> = self
            .redis
            .call("webhook status", pipe.query_async(&mut self.redis.conn()))
            .await?;
        let mut out = HashMap::new();
        for (t, chunk) in topics.iter().zip(replies.chunks(61)) {
            let (last, counts) = chunk.split_first().expect("61 replies per topic");
            let field = |i: usize| last.get(i).cloned().flatten().filter(|s| !s.is_empty());
            let num = |v: &Option<String>| {
                v.as_deref()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            out.insert(
                t.clone(),
                WebhookRead {
                    last_status: field(0),
                    last_at_ms: field(1).and_then(|v| v.parse().ok()),
                    last_error: field(2),
                    delivered: counts.iter().map(|c| num(&c[0])).sum(),
                    failed: counts.iter().map(|c| num(&c[1])).sum(),
                },
            );
        }
        Ok(out)
    }
}
