//! Group commit, the one engine for every kind of batched call: the calls
//! of one kind and partition that arrive while the previous batch is at
//! Redis go together in the next. A call that arrives when nothing is under
//! way goes at once, alone: group commit adds no wait, it only uses the
//! wait there already is. Single pushes may have a second batch at Redis
//! beside the first once enough of them wait ([`Coalesced::SECOND_AT`]).
//! Its kinds: single pushes and removes (one script call over many jobs,
//! [`super::batch`]), pops of one partition, and acknowledged writes
//! ([`Acked`]).
//!
//! Each batch is sent from a task of its own, so a caller that goes away
//! (a dropped HTTP request) does not strand the calls batched with its own.
//! A lane whose sender died (a panic, or the runtime it ran on shut down)
//! gets a new one: at once from the dying sender when calls are waiting,
//! and from the next call otherwise, which finds the old one finished.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::{Cmd, RedisResult, Value};
use tokio::sync::{oneshot, Notify};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::conn::Conn;
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

/// What one call holds so far, against a [`Batch`]'s limits.
#[derive(Default)]
pub(crate) struct Fill {
    items: usize,
    bytes: usize,
}

impl Fill {
    /// No item more fits, whatever its size.
    pub(crate) fn full<B: Batch>(&self) -> bool {
        self.items >= B::MAX_ITEMS
    }

    /// Takes an item of `bytes` if it fits (a call's first item always
    /// does); false, taking nothing, if not.
    pub(crate) fn take<B: Batch>(&mut self, bytes: usize) -> bool {
        let fits = self.items == 0
            || (!self.full::<B>() && self.bytes.saturating_add(bytes) <= B::MAX_BYTES);
        if fits {
            self.items += 1;
            self.bytes = self.bytes.saturating_add(bytes);
        }
        fits
    }
}

/// `items`, in order, cut into calls within `B`'s limits (`bytes`: an
/// item's size); none for no items.
pub(crate) fn chunks<B: Batch, T>(
    items: impl IntoIterator<Item = T>,
    bytes: impl Fn(&T) -> usize,
) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = Vec::new();
    let mut fill = Fill::default();
    for item in items {
        let b = bytes(&item);
        if out.is_empty() || !fill.take::<B>(b) {
            fill = Fill::default();
            fill.take::<B>(b);
            out.push(Vec::new());
        }
        out.last_mut().expect("pushed above").push(item);
    }
    out
}

/// A kind of call that single callers make and that goes to Redis in
/// batches.
pub(crate) trait Coalesced: Batch {
    /// What a batch is sent with (the store; for acknowledged writes, the
    /// connection and the WAIT).
    type Ctx: Clone + Send + Sync + 'static;
    const OP: &'static str;
    /// Whether `other` may go in the batch that `first` opens.
    fn joins(_first: &Self::Item, _other: &Self::Item) -> bool {
        true
    }
    /// What to do with a result whose caller has gone (a pop's jobs are
    /// released, so they do not wait out their ttr).
    fn unclaimed(_ctx: &Self::Ctx, _out: Self::Out) {}
    /// The error of a call whose caller stopped waiting before it was sent.
    fn late(ctx: &Self::Ctx) -> Error;
    /// How many calls must be waiting for a second batch to go while one is
    /// at Redis; None (the default): one batch at a time. See [`Lane`].
    const SECOND_AT: Option<usize> = None;
    /// When the caller of `item` stops waiting, if before the deadline it
    /// was submitted with (a pop waits longer than its caller, for a late
    /// reply whose jobs it gives back): the lane holds later calls back
    /// behind a batch at most that long, and does not send an item whose
    /// caller has gone.
    fn caller_gone_at(_item: &Self::Item) -> Option<Instant> {
        None
    }
    /// Sends one batch (all of partition `part`) that changes nothing after
    /// `deadline` (its members' earliest): the batch's error, or each
    /// item's result in order.
    fn send(
        ctx: Self::Ctx,
        part: usize,
        items: Vec<Self::Item>,
        deadline: Instant,
    ) -> impl std::future::Future<Output = Result<Vec<Result<Self::Out>>>> + Send;
}

struct Waiting<B: Coalesced> {
    item: B::Item,
    /// When the caller stops waiting.
    deadline: Instant,
    reply: oneshot::Sender<Result<B::Out>>,
}

/// One partition's calls waiting, and the task sending them. One sender
/// per lane, and one batch at Redis at a time unless the kind says
/// otherwise ([`Coalesced::SECOND_AT`]): then a second batch goes while the
/// first is away once that many calls wait. Two at once from the first
/// call (a second sender) split batches: the second took the first call
/// that came and sent it nearly alone (measured with 64 single adds in
/// flight: 30-36k adds/s at 20-24 us of Redis CPU each, against 42-44k/s
/// at 16 us with one). Waiting for enough calls keeps batches large, and
/// Redis has the next batch in hand when it answers the first, instead of
/// idling while the reply travels and the next batch forms.
struct Lane<B: Coalesced> {
    queue: Mutex<Queued<B>>,
    /// Told when enough calls wait for a second batch.
    more: Notify,
}

struct Queued<B: Coalesced> {
    waiting: Vec<Waiting<B>>,
    /// The sender; None when it ended finding nothing to send. One that
    /// is finished although it is still here died.
    sender: Option<AbortHandle>,
}

impl<B: Coalesced> Lane<B> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queued<B>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A lane of batches per partition.
pub(crate) struct Coalescer<B: Coalesced> {
    lanes: RwLock<Vec<Arc<Lane<B>>>>,
}

fn lanes<B: Coalesced>(partitions: usize) -> Vec<Arc<Lane<B>>> {
    (0..partitions)
        .map(|_| {
            Arc::new(Lane {
                queue: Mutex::new(Queued {
                    waiting: Vec::new(),
                    sender: None,
                }),
                more: Notify::new(),
            })
        })
        .collect()
}

impl<B: Coalesced> Coalescer<B> {
    pub fn new(partitions: usize) -> Coalescer<B> {
        Coalescer {
            lanes: RwLock::new(lanes(partitions)),
        }
    }

    /// New lanes: later calls do not queue behind a batch still waiting
    /// on a master that was replaced (Sentinel).
    pub fn reset(&self) {
        let mut lanes = self.lanes.write().unwrap_or_else(|e| e.into_inner());
        *lanes = self::lanes(lanes.len());
    }

    /// Sends `item` in partition `part`'s next batch and waits for its
    /// result, at most `limit` from now.
    pub async fn submit(
        &self,
        ctx: &B::Ctx,
        part: usize,
        item: B::Item,
        limit: Duration,
    ) -> Result<B::Out> {
        let lane = self.lanes.read().unwrap_or_else(|e| e.into_inner())[part].clone();
        let (tx, rx) = oneshot::channel();
        {
            let mut q = lane.lock();
            q.waiting.push(Waiting {
                item,
                deadline: Instant::now() + limit,
                reply: tx,
            });
            if q.sender.as_ref().is_none_or(AbortHandle::is_finished) {
                let sender = tokio::spawn(send_batches::<B>(lane.clone(), ctx.clone(), part));
                q.sender = Some(sender.abort_handle());
            } else if B::SECOND_AT.is_some_and(|n| q.waiting.len() >= n) {
                lane.more.notify_one();
            }
        }
        rx.await.unwrap_or_else(|_| {
            Err(Error::protocol(
                B::OP,
                "the batch this call was in was dropped".into(),
            ))
        })
    }
}

/// A lane's sender while it runs. One that ends without finding the queue
/// empty (a panic, or its runtime shutting down) starts another on drop
/// when calls are waiting and a runtime is there to run it.
struct Sender<B: Coalesced> {
    lane: Arc<Lane<B>>,
    ctx: B::Ctx,
    part: usize,
    /// take_batch found the queue empty and gave the place back.
    done: bool,
}

impl<B: Coalesced> Drop for Sender<B> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut q = self.lane.lock();
        let mine = q.sender.as_ref().map(AbortHandle::id) == tokio::task::try_id();
        if !mine {
            return;
        }
        q.sender = None;
        if q.waiting.is_empty() {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let sender = rt.spawn(send_batches::<B>(
                self.lane.clone(),
                self.ctx.clone(),
                self.part,
            ));
            q.sender = Some(sender.abort_handle());
        }
    }
}

async fn send_batches<B: Coalesced>(lane: Arc<Lane<B>>, ctx: B::Ctx, part: usize) {
    let mut me = Sender {
        lane,
        ctx,
        part,
        done: false,
    };
    let (lane, ctx) = (me.lane.clone(), me.ctx.clone());
    // The batches at Redis, each until it ends or its callers stop waiting.
    let mut away = FuturesUnordered::new();
    loop {
        let batch = match take_batch(&lane, away.len()) {
            Take::Batch(batch) => batch,
            Take::Done => {
                me.done = true;
                return;
            }
            Take::Wait => {
                tokio::select! {
                    _ = away.next() => {}
                    _ = lane.more.notified(), if away.len() < 2 => {}
                }
                continue;
            }
        };
        let now = Instant::now();
        let waits =
            |w: &Waiting<B>| B::caller_gone_at(&w.item).map_or(w.deadline, |t| t.min(w.deadline));
        let (live, late): (Vec<_>, Vec<_>) = batch.into_iter().partition(|w| waits(w) > now);
        for w in late {
            let _ = w.reply.send(Err(B::late(&ctx)));
        }
        let (Some(deadline), Some(patience)) = (
            live.iter().map(|w| w.deadline).min(),
            live.iter().map(waits).max(),
        ) else {
            continue;
        };
        let (items, replies): (Vec<_>, Vec<_>) =
            live.into_iter().map(|w| (w.item, w.reply)).unzip();
        // The batch goes in a task of its own, and the lane waits for it at
        // most as long as its callers would: a batch stuck on a connection
        // that answers nothing (a master that died, a link being replaced)
        // is left to finish or fail by itself, and the calls queued behind
        // it go on. Its late results still reach its callers, or are given
        // back when they have gone.
        let batch = tokio::spawn(send_one::<B>(ctx.clone(), part, items, replies, deadline));
        away.push(tokio::time::timeout_at(patience, batch));
    }
}

/// Sends one batch and hands each caller its result.
async fn send_one<B: Coalesced>(
    ctx: B::Ctx,
    part: usize,
    items: Vec<B::Item>,
    replies: Vec<oneshot::Sender<Result<B::Out>>>,
    deadline: Instant,
) {
    match B::send(ctx.clone(), part, items, deadline).await {
        Ok(results) if results.len() == replies.len() => {
            for (reply, r) in replies.into_iter().zip(results) {
                if let Err(Ok(out)) = reply.send(r) {
                    B::unclaimed(&ctx, out);
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

/// What a lane's sender does next.
enum Take<B: Coalesced> {
    Batch(Vec<Waiting<B>>),
    /// Waits for a batch at Redis to end, or for enough calls to send a
    /// second.
    Wait,
    /// Nothing waits and nothing is at Redis: the sender ends.
    Done,
}

/// The next batch, with `away` batches at Redis: the first call waiting and
/// those after it that may join it, in the order they came, up to the
/// limits. With none away, whatever waits goes; with one, only once
/// [`Coalesced::SECOND_AT`] calls wait. Done when nothing waits or is away:
/// the sender ends in the same step, so a call queued after it starts a new
/// one.
fn take_batch<B: Coalesced>(lane: &Lane<B>, away: usize) -> Take<B> {
    let mut guard = lane.lock();
    let Queued { waiting: q, sender } = &mut *guard;
    if q.is_empty() && away == 0 {
        *sender = None;
        return Take::Done;
    }
    let second = away == 1 && B::SECOND_AT.is_some_and(|n| q.len() >= n);
    if q.is_empty() || (away > 0 && !second) {
        return Take::Wait;
    }
    let mut fill = Fill::default();
    let mut taken: Vec<Waiting<B>> = Vec::new();
    let mut i = 0;
    while i < q.len() && !fill.full::<B>() {
        if let Some(first) = taken.first() {
            if !B::joins(&first.item, &q[i].item) {
                i += 1;
                continue;
            }
        }
        if !fill.take::<B>(B::bytes(&q[i].item)) {
            break;
        }
        taken.push(q.remove(i));
    }
    Take::Batch(taken)
}

/// Acknowledged writes: with `replica_acks` N, a write is answered only
/// once N replicas have it (Redis WAIT), so a failover cannot lose it.
/// WAIT blocks the connection it is sent on until the replicas answer, so
/// acknowledged writes have a connection of their own, and a partition's
/// writes that arrive while its batch waits go together in the next
/// pipeline, followed by one WAIT. One slow replica slows that partition's
/// acknowledged writes, nothing else.
pub(crate) struct Acked;

/// One script call to acknowledge.
pub(crate) struct AckedWrite {
    pub cmd: Cmd,
    /// Where it goes (on a cluster, the partition's master as last seen);
    /// a batch goes where its first write says.
    pub conn: Option<Conn>,
    pub deadline: Instant,
}

/// The connection for acknowledged writes, and the WAIT they end with.
#[derive(Clone)]
pub(crate) struct AckRoute {
    pub conn: Conn,
    pub wanted: usize,
    pub wait_ms: u64,
}

/// A script's own reply (an error as `Value::ServerError`), and how many
/// replicas acknowledged its batch.
pub(crate) type AckedReply = (Value, usize);

impl Batch for Acked {
    type Item = AckedWrite;
    type Out = AckedReply;
    const MAX_ITEMS: usize = 256;
    const MAX_BYTES: usize = usize::MAX;

    fn bytes(_: &AckedWrite) -> usize {
        0
    }
}

fn no_reply() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no reply to the acknowledged-write batch",
    ))
}

impl Coalesced for Acked {
    type Ctx = AckRoute;
    const OP: &'static str = "acknowledged write";

    fn late(_: &AckRoute) -> Error {
        Error::redis(Self::OP, no_reply())
    }

    async fn send(
        route: AckRoute,
        _part: usize,
        items: Vec<AckedWrite>,
        _deadline: Instant,
    ) -> Result<Vec<Result<AckedReply>>> {
        let mut conn = items[0].conn.clone().unwrap_or_else(|| route.conn.clone());
        // Given up when the last caller stops waiting (its writes carry
        // deadlines: if they reach Redis later they change nothing).
        let until = items
            .iter()
            .map(|w| w.deadline)
            .max()
            .unwrap_or(Instant::now());
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for w in &items {
            pipe.add_command(w.cmd.clone());
        }
        pipe.cmd("WAIT").arg(route.wanted).arg(route.wait_ms);
        let sent: RedisResult<Vec<Value>> =
            match tokio::time::timeout_at(until, pipe.query_async(&mut conn)).await {
                Ok(r) => r,
                Err(_) => Err(no_reply()),
            };
        let mut values = sent.map_err(|e| Error::redis(Self::OP, e))?;
        let acked = match values.pop() {
            Some(Value::Int(n)) => n.max(0) as usize,
            _ => 0,
        };
        Ok(values.into_iter().map(|v| Ok((v, acked))).collect())
    }
}

#[cfg(test)]
mod tests;
