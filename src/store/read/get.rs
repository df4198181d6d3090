//! Reading jobs whole: a partition's jobs with their due times, wherever
//! the layout keeps a delayed job's (see `topic_dues`).

use std::collections::HashMap;

use super::super::body::{split_body, RawHash};
use super::super::layout::{field, state};
use super::super::{Keys, Store};
use super::decode_job;
use crate::error::{Error, Result};
use crate::job::Job;

/// A job read delayed (a topic, no state, no due field) whose due time
/// its topic schedule no longer held when read next: it moved in between.
pub(super) fn moved_between_reads(f: &HashMap<String, String>, due: Option<f64>) -> bool {
    due.is_none()
        && f.contains_key(field::TOPIC)
        && !f.contains_key(field::STATE)
        && !f.contains_key(field::DUE)
}

impl Store {
    /// Jobs of one partition in one round trip (in layout 3 two). A job
    /// read delayed whose topic schedule no longer lists it when looked up
    /// in the second was moved in between (it fell due): read again, a
    /// few times at most.
    pub(super) async fn get_in(&self, part: &Keys, ids: &[&String]) -> Result<Vec<Job>> {
        let mut tries = 0;
        loop {
            let (rows, scores) = self.get_in_once(part, ids).await?;
            let moved = (rows.iter().zip(&scores)).any(|(f, s)| moved_between_reads(f, *s));
            if !moved || tries == 3 {
                let mut jobs = Vec::with_capacity(ids.len());
                for ((id, f), scheduled) in ids.iter().zip(rows).zip(scores) {
                    if let Some(j) = decode_job(id, f, scheduled)? {
                        jobs.push(j);
                    }
                }
                return Ok(jobs);
            }
            tries += 1;
        }
    }

    /// Which of `ids` (in partition `part`) have an outcome: no job (gone,
    /// or never was), or one finished or dead. One pipeline of an HMGET of
    /// two fields per id: O(ids), whatever the jobs' bodies.
    pub(in crate::store) async fn settled_in(
        &self,
        part: &Keys,
        ids: &[&String],
    ) -> Result<Vec<String>> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET")
                .arg(part.job(id))
                .arg(field::TOPIC)
                .arg(field::STATE);
        }
        let rows: Vec<(Option<String>, Option<String>)> = self
            .redis
            .call("outcomes", pipe.query_async(&mut self.redis.conn()))
            .await?;
        let settled = |row: &(Option<String>, Option<String>)| match row {
            (None, _) => true,
            (Some(_), Some(s)) => s == state::FINISHED || s == state::DEAD,
            (Some(_), None) => false,
        };
        Ok((ids.iter().zip(&rows))
            .filter(|(_, row)| settled(row))
            .map(|(id, _)| id.to_string())
            .collect())
    }

    /// One read of [`get_in`](Self::get_in): each job's fields and due time.
    #[allow(clippy::type_complexity)]
    async fn get_in_once(
        &self,
        part: &Keys,
        ids: &[&String],
    ) -> Result<(Vec<HashMap<String, String>>, Vec<Option<f64>>)> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HGETALL")
                .arg(part.job(id))
                .cmd("ZSCORE")
                .arg(part.schedule())
                .arg(*id);
        }
        let replies: Vec<(RawHash, Option<f64>)> = {
            let flat: Vec<redis::Value> = self
                .redis
                .call("get", pipe.query_async(&mut self.redis.conn()))
                .await?;
            flat.chunks(2)
                .map(|pair| {
                    let hash = redis::from_redis_value(pair[0].clone())
                        .map_err(|e| Error::protocol("get", e.to_string()))?;
                    let score = redis::from_redis_value(pair[1].clone())
                        .map_err(|e| Error::protocol("get", e.to_string()))?;
                    Ok((hash, score))
                })
                .collect::<Result<_>>()?
        };
        let mut rows = Vec::with_capacity(ids.len());
        let mut scores = Vec::with_capacity(ids.len());
        for (raw, scheduled) in replies {
            let (mut f, body) = split_body(raw)?;
            if let Some(body) = body {
                f.insert(field::BODY.to_owned(), body);
            }
            rows.push(f);
            scores.push(scheduled);
        }
        let fields: Vec<&HashMap<String, String>> = rows.iter().collect();
        self.topic_dues("get", part, ids, &fields, &mut scores)
            .await?;
        Ok((rows, scores))
    }

    /// Layout 3 keeps a delayed job's due time in its topic schedule only:
    /// each delayed job (no state field, no due field) whose shared
    /// schedule score is missing gets it from there, in one more round
    /// trip. In layouts 1 and 2 none is missing and nothing is sent.
    pub(super) async fn topic_dues(
        &self,
        op: &'static str,
        part: &Keys,
        ids: &[&String],
        fields: &[&HashMap<String, String>],
        scores: &mut [Option<f64>],
    ) -> Result<()> {
        let mut pipe = redis::pipe();
        let mut at = Vec::new();
        for (i, f) in fields.iter().enumerate() {
            let delayed = !f.contains_key(field::STATE) && !f.contains_key(field::DUE);
            if let (true, None, Some(topic)) = (delayed, scores[i], f.get(field::TOPIC)) {
                pipe.cmd("ZSCORE")
                    .arg(part.topic_schedule(topic))
                    .arg(ids[i].as_str());
                at.push(i);
            }
        }
        if at.is_empty() {
            return Ok(());
        }
        let got: Vec<Option<f64>> = self
            .redis
            .call(op, pipe.query_async(&mut self.redis.conn()))
            .await?;
        for (i, s) in at.into_iter().zip(got) {
            scores[i] = s;
        }
        Ok(())
    }
}
