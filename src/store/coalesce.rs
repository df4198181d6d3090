//! Scripts over many jobs per call, and group commit for single calls: the
//! calls of one kind that arrive while the previous batch is at Redis go
//! together in the next, as one script call over many jobs.
//!
//! Why: about a quarter of what Redis spends on a push in a call of its own
//! is the call (reading and parsing it, entering Lua, the AOF's MULTI/EXEC
//! around the script's writes, the reply): measured, 19.8 us per push one
//! call each, 15.5 us in calls of a hundred. Sixty-four clients pushing at
//! once cost sixty-four calls; batched, they cost a few.
//! A call that arrives when nothing is under way goes at once, alone: group
//! commit adds no wait, it only uses the wait there already is.
//!
//! Each batch is sent from a task of its own, so a caller that goes away
//! (a dropped HTTP request) does not strand the calls batched with its own.
//! A batch carries the earliest deadline of its members: none of them can
//! take effect after its caller stopped waiting.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Cmd;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::reply::Fields;
use super::{Script, Status, Store};
use crate::error::{Error, Result};

/// Items that go to Redis many per call, and the limits of one call (a call
/// takes at least one item, whatever its size): a call's run time in Redis
/// stays near a millisecond, so other clients' calls do not queue long
/// behind it.
pub(crate) trait Batch: Send + Sync + 'static {
    type Item: Send + Sync + 'static;
    type Out: Send + 'static;
    const MAX_ITEMS: usize;
    const MAX_BYTES: usize;
    fn bytes(item: &Self::Item) -> usize;
}

/// A script that takes many items in one call and answers DONE, then each
/// item's result in order: push.lua, remove.lua.
pub(crate) trait PerJob: Batch {
    const SCRIPT: &'static Script;
    /// Adds one item's arguments to the call.
    fn args(item: &Self::Item, cmd: &mut Cmd);
    /// Reads one item's result from the reply.
    fn decode(f: &mut Fields) -> Result<Self::Out>;
}

/// A kind of call that single callers make and that goes to Redis in
/// batches: every [`PerJob`] script, and pops.
pub(crate) trait Coalesced: Batch {
    const OP: &'static str;
    /// Whether `other` may go in the batch that `first` opens.
    fn joins(_first: &Self::Item, _other: &Self::Item) -> bool {
        true
    }
    /// What to do with a result whose caller has gone (a pop's jobs are
    /// released, so they do not wait out their ttr).
    fn unclaimed(_store: &Arc<Store>, _out: Self::Out) {}
    /// Sends one batch (all of partition `part`) that changes nothing after
    /// `deadline`: the batch's error, or each item's result in order.
    fn send(
        store: Arc<Store>,
        part: usize,
        items: Vec<Self::Item>,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<Vec<Result<Self::Out>>>> + Send;
}

impl<B: PerJob> Coalesced for B {
    const OP: &'static str = B::SCRIPT.name;

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
    /// changing nothing after `deadline`.
    pub(crate) async fn batch_call<B: PerJob>(
        &self,
        part: usize,
        items: &[&B::Item],
        deadline: Instant,
    ) -> Result<Vec<B::Out>> {
        let op = B::SCRIPT.name;
        let mut cmd = self.fcall_until(B::SCRIPT, &self.parts()[part], deadline);
        for item in items {
            B::args(item, &mut cmd);
        }
        let limit = deadline.saturating_duration_since(Instant::now());
        let (status, mut f) = self
            .run_acked(B::SCRIPT, part, vec![cmd], limit)
            .await?
            .remove(0);
        if status != Status::Done {
            return Err(Error::protocol(op, format!("status {status:?}")));
        }
        let out = items
            .iter()
            .map(|_| B::decode(&mut f))
            .collect::<Result<Vec<_>>>()?;
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
        while !left.is_empty() {
            let batch: Vec<&B::Item> = left.iter().map(|&i| items[i]).collect();
            match self.batch_call::<B>(part, &batch, deadline).await {
                Ok(results) => {
                    for (&i, r) in left.iter().zip(results) {
                        out[i] = Some(Ok(r));
                    }
                    break;
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
            .map(|r| r.ok_or_else(|| Error::protocol(B::SCRIPT.name, "a reply is missing".into())))
            .collect()
    }

    /// Many items in as few calls as the limits allow: one or more per
    /// partition, the calls at once. A result per item, in the order of
    /// `items`; the outer error when no call got through.
    pub(crate) async fn batch_many<B: PerJob>(
        &self,
        items: &[B::Item],
        part_of: impl Fn(&B::Item) -> usize,
    ) -> Result<Vec<Result<B::Out>>> {
        let deadline = Instant::now() + self.timeout();
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, item) in items.iter().enumerate() {
            groups.entry(part_of(item)).or_default().push(i);
        }
        let mut calls: Vec<(usize, Vec<usize>)> = Vec::new();
        for (part, members) in groups {
            let mut chunk: Vec<usize> = Vec::new();
            let mut bytes = 0;
            for i in members {
                let b = B::bytes(&items[i]);
                if !chunk.is_empty() && (chunk.len() == B::MAX_ITEMS || bytes + b > B::MAX_BYTES) {
                    calls.push((part, std::mem::take(&mut chunk)));
                    bytes = 0;
                }
                chunk.push(i);
                bytes += b;
            }
            calls.push((part, chunk));
        }
        let replies = futures::future::join_all(calls.iter().map(|(part, members)| {
            let batch: Vec<&B::Item> = members.iter().map(|&i| &items[i]).collect();
            async move { self.batch_each::<B>(*part, &batch, deadline).await }
        }))
        .await;
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
            .map(|r| r.ok_or_else(|| Error::protocol(B::SCRIPT.name, "a reply is missing".into())))
            .collect()
    }
}

struct Waiting<B: Coalesced> {
    item: B::Item,
    /// When the caller stops waiting.
    deadline: Instant,
    reply: oneshot::Sender<Result<B::Out>>,
}

/// How many batches of one lane may be at Redis at once. One: a second
/// sender takes the first call that comes while the other batch is away
/// and sends it nearly alone, so batches shrink. Measured with 64 single
/// adds in flight: two senders made 30-36k adds/s at 20-24 us of Redis CPU
/// each, one made 42-44k/s at 16 us.
const SENDERS: usize = 1;

struct Lane<B: Coalesced> {
    /// The calls waiting, and the tasks sending this lane's batches.
    queue: Mutex<(Vec<Waiting<B>>, usize)>,
}

/// A lane of batches per partition.
pub(crate) struct Coalescer<B: Coalesced> {
    lanes: Vec<Arc<Lane<B>>>,
}

impl<B: Coalesced> Coalescer<B> {
    pub fn new(partitions: usize) -> Coalescer<B> {
        Coalescer {
            lanes: (0..partitions)
                .map(|_| {
                    Arc::new(Lane {
                        queue: Mutex::new((Vec::new(), 0)),
                    })
                })
                .collect(),
        }
    }

    /// Sends `item` in partition `part`'s next batch and waits for its
    /// result, at most `limit` from now.
    pub async fn submit(
        &self,
        store: &Arc<Store>,
        part: usize,
        item: B::Item,
        limit: Duration,
    ) -> Result<B::Out> {
        let lane = &self.lanes[part];
        let (tx, rx) = oneshot::channel();
        let spawn = {
            let mut q = lane.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.0.push(Waiting {
                item,
                deadline: Instant::now() + limit,
                reply: tx,
            });
            let spawn = q.1 < SENDERS;
            if spawn {
                q.1 += 1;
            }
            spawn
        };
        if spawn {
            tokio::spawn(send_batches::<B>(lane.clone(), store.clone(), part));
        }
        rx.await.unwrap_or_else(|_| {
            Err(Error::protocol(
                B::OP,
                "the batch this call was in was dropped".into(),
            ))
        })
    }
}

/// A lane's sender, counted in the lane while it runs. One that ends
/// without finding the queue empty (a panic, or its runtime shutting down)
/// gives its place back on drop and, when calls are waiting, starts
/// another, so the lane never stays without a sender.
struct Sender<B: Coalesced> {
    lane: Arc<Lane<B>>,
    store: Arc<Store>,
    part: usize,
    /// take_batch found the queue empty and gave the place back.
    done: bool,
}

impl<B: Coalesced> Drop for Sender<B> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut q = self.lane.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.1 -= 1;
        if !q.0.is_empty() && q.1 < SENDERS {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                q.1 += 1;
                rt.spawn(send_batches::<B>(
                    self.lane.clone(),
                    self.store.clone(),
                    self.part,
                ));
            }
        }
    }
}

async fn send_batches<B: Coalesced>(lane: Arc<Lane<B>>, store: Arc<Store>, part: usize) {
    let mut me = Sender {
        lane,
        store,
        part,
        done: false,
    };
    let (lane, store) = (me.lane.clone(), me.store.clone());
    loop {
        let Some(batch) = take_batch(&lane) else {
            me.done = true;
            return;
        };
        let now = Instant::now();
        let (live, late): (Vec<_>, Vec<_>) = batch.into_iter().partition(|w| w.deadline > now);
        for w in late {
            let _ = w.reply.send(Err(store.timed_out(B::OP)));
        }
        let Some(deadline) = live.iter().map(|w| w.deadline).min() else {
            continue;
        };
        let (items, replies): (Vec<_>, Vec<_>) =
            live.into_iter().map(|w| (w.item, w.reply)).unzip();
        // The batch goes in a task of its own, and the lane waits for it at
        // most as long as a caller would: a batch stuck on a connection
        // that answers nothing (a master that died, a link being replaced)
        // is left to finish or fail by itself, and the calls queued behind
        // it go on. Its late results still reach its callers, or are given
        // back when they have gone.
        let batch = tokio::spawn(send_one::<B>(store.clone(), part, items, replies, deadline));
        let _ = tokio::time::timeout(store.timeout(), batch).await;
    }
}

/// Sends one batch and hands each caller its result.
async fn send_one<B: Coalesced>(
    store: Arc<Store>,
    part: usize,
    items: Vec<B::Item>,
    replies: Vec<oneshot::Sender<Result<B::Out>>>,
    deadline: Instant,
) {
    match B::send(store.clone(), part, items, deadline).await {
        Ok(results) if results.len() == replies.len() => {
            for (reply, r) in replies.into_iter().zip(results) {
                if let Err(Ok(out)) = reply.send(r) {
                    B::unclaimed(&store, out);
                }
            }
        }
        Ok(results) => {
            let e = Error::protocol(
                B::OP,
                format!("{} results for {} calls", results.len(), replies.len()),
            );
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// The next batch: the first call waiting and those after it that may
/// join it, in the order they came, up to the limits. None when nothing
/// waits: the sender ends, in the same step, so a call queued after it
/// starts a new one.
fn take_batch<B: Coalesced>(lane: &Lane<B>) -> Option<Vec<Waiting<B>>> {
    let mut guard = lane.queue.lock().unwrap_or_else(|e| e.into_inner());
    let (q, senders) = &mut *guard;
    if q.is_empty() {
        *senders -= 1;
        return None;
    }
    let mut bytes = 0;
    let mut taken: Vec<Waiting<B>> = Vec::new();
    let mut i = 0;
    while i < q.len() && taken.len() < B::MAX_ITEMS {
        if let Some(first) = taken.first() {
            if !B::joins(&first.item, &q[i].item) {
                i += 1;
                continue;
            }
            if bytes + B::bytes(&q[i].item) > B::MAX_BYTES {
                break;
            }
        }
        bytes += B::bytes(&q[i].item);
        taken.push(q.remove(i));
    }
    Some(taken)
}
