//! Pops of one partition that arrive together, sent to Redis as one.

use std::sync::Arc;

use tokio::time::Instant;

use super::{Held, Room};
use crate::error::{Error, Result};
use crate::job::Delivery;
use crate::redis::coalesce::{Batch, Coalesced};
use crate::store::Store;

/// One caller's pop of one partition, as batched.
pub(crate) struct PopRequest {
    pub(super) topics: Vec<String>,
    pub(super) max: usize,
    pub(super) max_bytes: usize,
    /// Redis must not act on it after this.
    pub(super) until: Instant,
}

/// Pops of the same topics and partition that arrive together (the
/// consumers a ready notice woke) go to Redis as one pop for all of them, whose jobs are
/// shared out in the order the pops came, each taking up to its `max`.
pub(crate) struct Pops;

impl Batch for Pops {
    type Item = PopRequest;
    type Out = (Vec<Delivery>, Held);
    const MAX_ITEMS: usize = 64;
    const MAX_BYTES: usize = usize::MAX;

    fn bytes(_: &PopRequest) -> usize {
        0
    }
}

impl Coalesced for Pops {
    type Ctx = Arc<Store>;
    const OP: &'static str = "pop";

    fn late(store: &Arc<Store>) -> Error {
        store.redis.timed_out("pop")
    }

    /// The pop's caller waits until `until`; the batch's deadline is later,
    /// for a late reply whose jobs are then given back.
    fn caller_gone_at(item: &PopRequest) -> Option<Instant> {
        Some(item.until)
    }

    fn joins(first: &PopRequest, other: &PopRequest) -> bool {
        first.topics == other.topics && first.max_bytes == other.max_bytes
    }

    fn unclaimed(store: &Arc<Store>, (jobs, _): (Vec<Delivery>, Held)) {
        if jobs.is_empty() {
            return;
        }
        let store = store.clone();
        tokio::spawn(async move { store.release_all(jobs, "its pop's caller had gone").await });
    }

    async fn send(
        store: Arc<Store>,
        part: usize,
        items: Vec<PopRequest>,
        deadline: Instant,
    ) -> Result<Vec<Result<(Vec<Delivery>, Held)>>> {
        let until = items.iter().map(|r| r.until).min().unwrap_or(deadline);
        let max_bytes = items[0].max_bytes;
        // On a partitioned queue a limit's bucket is the whole queue's:
        // the partition hands out none of a limited topic's jobs, and says
        // so (ungranted), for the callers to take tokens and call again.
        let allowed = match store.parts().len() {
            1 => Vec::new(),
            _ => vec![None; items[0].topics.len()],
        };
        let mut out: Vec<(Vec<Delivery>, Held)> =
            items.iter().map(|_| Default::default()).collect();
        // The pops still without a job: all of them at first; after a call
        // that stopped at the byte limit, those it left empty-handed.
        let mut open: Vec<usize> = (0..items.len()).collect();
        let mut first = true;
        while !open.is_empty() {
            let want: usize = open.iter().map(|&i| items[i].max).sum();
            let limit = deadline.saturating_duration_since(Instant::now());
            let (held, got) = match store
                .pop_call(
                    part,
                    &items[0].topics,
                    Room {
                        jobs: want,
                        bytes: max_bytes,
                        allowed: &allowed,
                    },
                    until,
                    limit,
                )
                .await
            {
                Ok(r) => r,
                Err(e) if first => return Err(e),
                Err(e) => {
                    let mut results: Vec<Result<_>> = out.into_iter().map(Ok).collect();
                    for &i in &open {
                        results[i] = Err(e.clone());
                    }
                    return Ok(results);
                }
            };
            first = false;
            let truncated =
                got.len() < want && got.iter().map(|d| d.body.len()).sum::<usize>() >= max_bytes;
            let mut jobs = got.into_iter();
            for &i in &open {
                out[i].0.extend(jobs.by_ref().take(items[i].max));
            }
            // What the limit held back is counted once, with the first
            // pop; the pops left empty-handed learn when to look again.
            let mut held_jobs = held.jobs;
            for &i in &open {
                out[i].1 = Held {
                    jobs: std::mem::take(&mut held_jobs),
                    retry_ms: if out[i].0.is_empty() {
                        held.retry_ms
                    } else {
                        0
                    },
                    ungranted: held.ungranted,
                    again: held.again && out[i].0.is_empty(),
                };
            }
            open.retain(|&i| out[i].0.is_empty());
            if !truncated {
                break;
            }
        }
        Ok(out.into_iter().map(Ok).collect())
    }
}
