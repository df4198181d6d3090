//! A listing page's reads: the jobs a page names, their fields first,
//! then the bodies that fit the page's bound.

use std::collections::{BTreeMap, HashMap};

use super::super::layout::field;
use super::super::{Keys, Store};
use super::decode_job;
use super::get::moved_between_reads;
use crate::error::{Error, Result};
use crate::job::Job;

/// A job as a listing's first read finds it: its fields but the body, its
/// due time if delayed, its body's length, and that length if the body is
/// in pieces.
struct Head<'a> {
    id: &'a str,
    fields: HashMap<String, String>,
    due: Option<f64>,
    len: u64,
    pieced: Option<u64>,
}

impl Store {
    /// Jobs for a listing page, in the order of `ids` (those with no job
    /// left out), their bodies bounded: a body over LIST_BODY_BYTES, or one
    /// that would take the page's bodies past LIST_PAGE_BODY_BYTES, is left
    /// out (`body_left_out`). Two round trips per partition (at once): the
    /// fields but the body and each body's length, then the bodies that fit.
    pub(crate) async fn list_many(&self, ids: &[String]) -> Result<Vec<Job>> {
        let mut room = crate::job::LIST_PAGE_BODY_BYTES as u64;
        self.list_many_within(ids, &mut room).await
    }

    /// [`list_many`](Self::list_many) for a page read in several parts:
    /// `room` is what is left of the page's body bytes, and shrinks by the
    /// bodies this part carries.
    pub(crate) async fn list_many_within(
        &self,
        ids: &[String],
        room: &mut u64,
    ) -> Result<Vec<Job>> {
        use crate::job::LIST_BODY_BYTES;
        let groups = self.by_partition(ids);
        let reads = groups
            .iter()
            .map(|(&part, ids)| self.heads_in(&self.parts()[part], ids));
        let mut found: HashMap<String, (Job, u64, bool)> = HashMap::new();
        for heads in futures::future::join_all(reads).await {
            found.extend(heads?.into_iter().map(|h| (h.0.id.clone(), h)));
        }
        let mut jobs: Vec<(Job, u64, bool)> =
            ids.iter().filter_map(|id| found.remove(id)).collect();
        // In page order, the bodies that fit: (id, its length if pieced).
        let mut wanted: BTreeMap<usize, Vec<(&String, Option<u64>)>> = BTreeMap::new();
        for (j, len, pieced) in &mut jobs {
            if *len == 0 {
                continue;
            }
            if *len <= LIST_BODY_BYTES as u64 && *len <= *room {
                *room -= *len;
                let pieces = pieced.then_some(*len);
                (wanted.entry(self.part_of(&j.id)).or_default()).push((&j.id, pieces));
            } else {
                j.body_left_out = Some(*len);
            }
        }
        let reads = (wanted.iter()).map(|(&part, ids)| self.bodies_in(&self.parts()[part], ids));
        let mut bodies: HashMap<String, String> = HashMap::new();
        for got in futures::future::join_all(reads).await {
            bodies.extend(got?.into_iter().filter_map(|(id, b)| Some((id, b?))));
        }
        Ok(jobs
            .into_iter()
            .map(|(mut j, _, _)| {
                if let Some(b) = bodies.remove(&j.id) {
                    j.body = b;
                }
                j
            })
            .collect())
    }

    /// A listing's first read of one partition: each job's fields but the
    /// body, the body's length, and whether it is in pieces. A job that
    /// falls due between the fields' read and its due time's (layout 3)
    /// is read again, as [`get_in`](Self::get_in) does: never listed
    /// delayed with no due time.
    async fn heads_in(&self, part: &Keys, ids: &[&String]) -> Result<Vec<(Job, u64, bool)>> {
        let mut tries = 0;
        loop {
            let rows = self.heads_in_once(part, ids).await?;
            let moved = rows.iter().any(|r| moved_between_reads(&r.fields, r.due));
            if !moved || tries == 3 {
                let mut out = Vec::with_capacity(rows.len());
                for r in rows {
                    if let Some(j) = decode_job(r.id, r.fields, r.due)? {
                        out.push((j, r.pieced.unwrap_or(r.len), r.pieced.is_some()));
                    }
                }
                return Ok(out);
            }
            tries += 1;
        }
    }

    /// One read of [`heads_in`](Self::heads_in).
    async fn heads_in_once<'a>(&self, part: &Keys, ids: &[&'a String]) -> Result<Vec<Head<'a>>> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("HMGET")
                .arg(part.job(id))
                .arg(field::ALL_BUT_BODY)
                .cmd("HSTRLEN")
                .arg(part.job(id))
                .arg(field::BODY)
                .cmd("ZSCORE")
                .arg(part.schedule())
                .arg(*id);
        }
        let flat: Vec<redis::Value> = self
            .redis
            .call("list", pipe.query_async(&mut self.redis.conn()))
            .await?;
        let mut rows = Vec::with_capacity(ids.len());
        for (id, three) in ids.iter().zip(flat.chunks(3)) {
            let fields: Vec<Option<String>> = redis::from_redis_value(three[0].clone())
                .map_err(|e| Error::protocol("list", e.to_string()))?;
            let len: u64 = redis::from_redis_value(three[1].clone())
                .map_err(|e| Error::protocol("list", e.to_string()))?;
            let due: Option<f64> = redis::from_redis_value(three[2].clone())
                .map_err(|e| Error::protocol("list", e.to_string()))?;
            let mut fields: HashMap<String, String> = field::ALL_BUT_BODY
                .iter()
                .zip(fields)
                .filter_map(|(k, v)| Some(((*k).to_owned(), v?)))
                .collect();
            // A pieced body's length is its own field (HSTRLEN read 0).
            let pieced = fields
                .remove(field::BODY_SIZE)
                .and_then(|z| z.parse::<u64>().ok());
            rows.push(Head {
                id,
                fields,
                due,
                len,
                pieced,
            });
        }
        let mut dues: Vec<Option<f64>> = rows.iter().map(|r| r.due).collect();
        let fields: Vec<&HashMap<String, String>> = rows.iter().map(|r| &r.fields).collect();
        self.topic_dues("list", part, ids, &fields, &mut dues)
            .await?;
        for (r, due) in rows.iter_mut().zip(dues) {
            r.due = due;
        }
        Ok(rows)
    }
}
