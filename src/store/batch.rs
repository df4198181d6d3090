//! Scripts over many jobs per call (push.lua, remove.lua): one call per
//! partition and per limit for a batch of jobs, and the single calls that
//! [`crate::redis::coalesce`] gathers while Redis is busy.
//!
//! Why: about a quarter of what Redis spends on a push in a call of its own
//! is the call (reading and parsing it, entering Lua, the AOF's MULTI/EXEC
//! around the script's writes, the reply): measured, 19.8 us per push one
//! call each, 15.5 us in calls of a hundred. Sixty-four clients pushing at
//! once cost sixty-four calls; batched, they cost a few.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use super::call::Call;
use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::redis::coalesce::{chunks, Batch, Coalesced};
use crate::redis::Fields;

/// A script that takes many items in one call and answers DONE, then each
/// item's result in order: push.lua, remove.lua.
pub(crate) trait PerJob: Batch {
    const DEF: &'static ScriptDef;
    /// [`Coalesced::SECOND_AT`] for the kind's single calls.
    const SECOND_AT: Option<usize> = None;
    /// Adds the arguments that come before the items' (none by default).
    fn header(_store: &Store, _call: &mut Call) {}
    /// Adds one item's arguments to the call.
    fn args(item: &Self::Item, call: &mut Call);
    /// Reads one item's result from the reply.
    fn decode(f: &mut Fields) -> Result<Self::Out>;
}

impl<B: PerJob> Coalesced for B {
    type Ctx = Arc<Store>;
    const OP: &'static str = B::DEF.name;
    const SECOND_AT: Option<usize> = <B as PerJob>::SECOND_AT;

    fn late(store: &Arc<Store>) -> Error {
        store.redis.timed_out(B::DEF.name)
    }

    async fn send(
        store: Arc<Store>,
        part: usize,
        items: Vec<B::Item>,
        deadline: Instant,
    ) -> Result<Vec<Result<B::Out>>> {
        let all: Vec<&B::Item> = items.iter().collect();
        store.batch_each::<B>(part, &all, deadline).await
    }
}

/// The job a DQINVALID refusal names ("job 3: due time ..."): its index
/// from 0, and what is wrong with it.
fn refused_job(message: &str) -> Option<(usize, String)> {
    let rest = message.strip_prefix("job ")?;
    let (n, why) = rest.split_once(": ")?;
    let n: usize = n.parse().ok()?;
    Some((n.checked_sub(1)?, why.to_owned()))
}

impl Store {
    /// One call of `B`'s script over `items` (all of partition `part`),
    /// changing nothing after `deadline`. The results of the first items:
    /// all of them, or fewer (at least one) when the script ran out of time
    /// and left the others untouched (PARTIAL).
    pub(crate) async fn batch_call<B: PerJob>(
        &self,
        part: usize,
        items: &[&B::Item],
        deadline: Instant,
    ) -> Result<Vec<B::Out>> {
        let op = B::DEF.name;
        let mut call = self.script(B::DEF, part).until(deadline);
        B::header(self, &mut call);
        for item in items {
            B::args(item, &mut call);
        }
        let (status, mut f) = self.send(call).await?;
        let mut out = Vec::with_capacity(items.len());
        match status {
            Status::Done => {
                for _ in items {
                    out.push(B::decode(&mut f)?);
                }
            }
            Status::Partial => {
                while f.left() > 0 && out.len() < items.len() {
                    out.push(B::decode(&mut f)?);
                }
                if out.is_empty() || out.len() == items.len() {
                    return Err(Error::protocol(
                        op,
                        format!("{} of {} in a partial reply", out.len(), items.len()),
                    ));
                }
            }
            _ => return Err(Error::protocol(op, format!("status {status:?}"))),
        }
        if f.left() > 0 {
            return Err(Error::protocol(op, "reply too long".into()));
        }
        Ok(out)
    }

    /// [`batch_call`](Self::batch_call) with a result per item: when the
    /// script refuses the call for one item's arguments (DQINVALID "job N:
    /// ...", before any write), that item gets the error and the others go
    /// again without it. The outer error is the call's, when no item got
    /// through.
    pub(crate) async fn batch_each<B: PerJob>(
        &self,
        part: usize,
        items: &[&B::Item],
        deadline: Instant,
    ) -> Result<Vec<Result<B::Out>>> {
        let mut out: Vec<Option<Result<B::Out>>> = (0..items.len()).map(|_| None).collect();
        let mut left: Vec<usize> = (0..items.len()).collect();
        // How many items a call is sent: all at first; after a call that
        // ran out of time, about as many as it took, so that the rest are
        // not sent, read and checked again for nothing (a push checks
        // every job it is sent before its first write); doubling again
        // after a call that took all it was sent.
        let mut room = items.len();
        while !left.is_empty() {
            let sent = room.min(left.len());
            let batch: Vec<&B::Item> = left[..sent].iter().map(|&i| items[i]).collect();
            match self.batch_call::<B>(part, &batch, deadline).await {
                // All of them, or the first ones (the call ran out of time):
                // the rest go again.
                Ok(results) => {
                    let done = results.len();
                    for (&i, r) in left.iter().zip(results) {
                        out[i] = Some(Ok(r));
                    }
                    left.drain(..done);
                    room = if done < sent {
                        (done + done / 4).max(1)
                    } else {
                        (room * 2).min(items.len())
                    };
                }
                Err(Error::Invalid(m)) => match refused_job(&m) {
                    Some((k, why)) if k < left.len() => {
                        out[left.remove(k)] = Some(Err(Error::Invalid(why)));
                    }
                    _ => return Err(Error::Invalid(m)),
                },
                Err(e) if out.iter().all(Option::is_none) => return Err(e),
                Err(e) => {
                    for &i in &left {
                        out[i] = Some(Err(e.clone()));
                    }
                    break;
                }
            }
        }
        out.into_iter()
            .map(|r| r.ok_or_else(|| Error::protocol(B::DEF.name, "a reply is missing".into())))
            .collect()
    }

    /// Many items in as few calls as the limits allow: one or more per
    /// partition, the partitions' calls at once, each partition's one
    /// after another: a call that ran out of time (PARTIAL) sends its
    /// rest before the next call of its partition goes, so every item is
    /// applied in the order of `items` (a later push of the same id
    /// replaces the earlier; ties keep their push order). A result per
    /// item, in the order of `items`; the outer error when no call got
    /// through.
    pub(crate) async fn batch_many<B: PerJob>(
        &self,
        items: &[B::Item],
        part_of: impl Fn(&B::Item) -> usize,
    ) -> Result<Vec<Result<B::Out>>> {
        let deadline = Instant::now() + self.redis.timeout();
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            groups.entry(part_of(item)).or_default().push(i);
        }
        let mut calls: Vec<(usize, Vec<usize>)> = Vec::new();
        let mut lanes: Vec<std::ops::Range<usize>> = Vec::new();
        for (part, members) in groups {
            let first = calls.len();
            for chunk in chunks::<B, _>(members, |&i| B::bytes(&items[i])) {
                calls.push((part, chunk));
            }
            lanes.push(first..calls.len());
        }
        let per_lane = futures::future::join_all(lanes.into_iter().map(|lane| {
            let calls = &calls[lane];
            async move {
                let mut replies = Vec::with_capacity(calls.len());
                for (part, members) in calls {
                    let batch: Vec<&B::Item> = members.iter().map(|&i| &items[i]).collect();
                    replies.push(self.batch_each::<B>(*part, &batch, deadline).await);
                }
                replies
            }
        }))
        .await;
        let replies: Vec<_> = per_lane.into_iter().flatten().collect();
        if let Some(Err(e)) = replies.iter().find(|r| r.is_err()) {
            if replies.iter().all(|r| r.is_err()) {
                return Err(e.clone());
            }
        }
        let mut out: Vec<Option<Result<B::Out>>> = (0..items.len()).map(|_| None).collect();
        for ((_, members), replies) in calls.iter().zip(replies) {
            match replies {
                Ok(results) => {
                    for (&i, r) in members.iter().zip(results) {
                        out[i] = Some(r);
                    }
                }
                Err(e) => {
                    for &i in members {
                        out[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.ok_or_else(|| Error::protocol(B::DEF.name, "a reply is missing".into())))
            .collect()
    }
}
