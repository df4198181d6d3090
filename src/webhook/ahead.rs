//! A webhook's deliveries: jobs leased ahead of its slots, their leases
//! checked in one call right before they are sent.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::Instrument;

use super::client::Sender;
use super::request::deliver;
use super::{Seen, Webhook};
use crate::backoff::Backoff;
use crate::consumer::{fail, Finish};
use crate::job::Delivery;
use crate::queue::Queue;
use crate::shutdown::Shutdown;

/// Jobs leased ahead of a webhook's slots, per slot: up to this many times
/// its concurrency wait in the process for a slot (one pop takes a round's
/// worth, not the few slots that came free), each checked again right
/// before it is sent.
pub(super) const AHEAD: usize = 2;

/// How long leasing ahead pauses once a job leased ahead had to be given
/// back unsent, its lease too short to wait for a slot (a short ttr, or
/// Redis replies coming late): meanwhile a job is leased only when a slot
/// is free for it.
const AHEAD_PAUSE: Duration = Duration::from_secs(60);

/// A job checked and not sent within this of the check's reply is checked
/// again: what a check found is that fresh when its job is sent.
const FRESH: Duration = Duration::from_millis(50);

/// A job leased and not yet sent.
struct Waiting {
    job: Delivery,
    /// Its place among the jobs leased to this webhook and not settled.
    held: OwnedSemaphorePermit,
    /// The earliest its lease can end, on this host's clock: Redis leased
    /// (or extended) it no sooner than its pop (or check) was sent,
    /// whenever the reply came.
    ends: Instant,
    /// Past this without a slot, it is given back rather than wait on.
    use_by: Instant,
    /// When a check found its lease held (the reply's arrival).
    checked: Option<Instant>,
}

impl Waiting {
    fn new(job: Delivery, held: OwnedSemaphorePermit, sent: Instant) -> Waiting {
        let length = job.lease_until_ms - job.popped_at_us.div_euclid(1000);
        let mut w = Waiting {
            job,
            held,
            ends: sent,
            use_by: sent,
            checked: None,
        };
        w.lease_left(sent, length);
        w
    }

    /// Its lease had `left_ms` left when a call sent at `sent` ran.
    fn lease_left(&mut self, sent: Instant, left_ms: i64) {
        let left = Duration::from_millis(left_ms.max(0) as u64);
        self.ends = sent + left;
        // Half its lease, a second before its end at the latest: the give
        // back has that long to reach Redis.
        let slack = (left / 2).max(Duration::from_secs(1));
        self.use_by = self.ends.checked_sub(slack).unwrap_or(sent);
    }
}

/// What a pop brought: when it was sent, whether it waited for jobs, its
/// jobs (or why none), and the places taken for them.
type Popped = (
    Instant,
    bool,
    crate::Result<Vec<Delivery>>,
    Vec<OwnedSemaphorePermit>,
);

/// What a lease check found: when it was sent, the jobs, and per job its
/// lease's end and ms left when Redis looked (or why not held).
type Checked = (
    Instant,
    Vec<Waiting>,
    crate::Result<Vec<crate::Result<(i64, i64)>>>,
);

/// One webhook's deliveries: a pop leases jobs ahead of the slots, and
/// jobs are sent as slots come free, after one call checks the leases about
/// to be used (`hold.lua`): a job deleted, rescheduled, finished or leased
/// again while it waited is not sent, and a lease that would end before the
/// request's timeout is extended first. While deliveries end quickly, the
/// next round's leases are checked while this round's requests are out; a
/// job whose check is older than [`FRESH`] is checked again. A job that
/// cannot wait for a slot until a second (or half its lease) before its
/// lease ends is given back, its attempt uncounted.
pub(super) struct Lanes {
    pub(super) queue: Queue,
    pub(super) sender: Arc<Sender>,
    pub(super) hook: Arc<Webhook>,
    pub(super) seen: Seen,
    /// Deliveries in flight (the webhook's concurrency).
    pub(super) slots: Arc<Semaphore>,
    /// Jobs leased and not settled: waiting, in flight, or handed to the
    /// finisher (a Redis slow to take finishes slows the pops).
    pub(super) leased: Arc<Semaphore>,
    /// A delivery ended.
    pub(super) ended: Arc<Notify>,
    pub(super) finishes: mpsc::UnboundedSender<Finish>,
}

/// Jobs leased and not sent, oldest first.
#[derive(Default)]
struct Queued {
    /// Not checked yet, or checked too long ago.
    unchecked: VecDeque<Waiting>,
    /// Found held by a check less than [`FRESH`] ago.
    checked: VecDeque<Waiting>,
    /// At Redis in the check under way.
    checking: usize,
}

impl Queued {
    fn len(&self) -> usize {
        self.unchecked.len() + self.checked.len() + self.checking
    }
}

impl Lanes {
    pub(super) async fn run(self, shutdown: Shutdown) {
        let c = self.hook.concurrency;
        let topics = vec![self.hook.topic.clone()];
        // The request's timeout and a second: a lease shorter than that is
        // extended before its job is sent.
        let margin = self.hook.timeout + Duration::from_secs(1);
        let poll_wait = Duration::from_secs(30);
        let mut q = Queued::default();
        let mut popping: Option<BoxFuture<'static, Popped>> = None;
        let mut checking: Option<BoxFuture<'static, Checked>> = None;
        // The last pop ahead found nothing: none again until a delivery ends.
        let mut dry = false;
        let mut ahead_from = Instant::now();
        let mut last_end: Option<Instant> = None;
        let mut failing = Backoff::starting_at(Duration::from_millis(50));
        let mut calm_from = Instant::now();
        // Made once, not on every turn of the loop (a turn per delivery
        // that ends): a waiter on each, and a timer reset only when its
        // time changes.
        let stop = shutdown.wait();
        let ended = self.ended.clone();
        let end = ended.notified();
        let wake = tokio::time::sleep_until(Instant::now());
        tokio::pin!(stop, end, wake);
        loop {
            // Deliveries that end together free their slots at once.
            tokio::task::yield_now().await;
            let now = Instant::now();
            // Checked too long ago to be sent on that check.
            let stale = q
                .checked
                .iter()
                .take_while(|w| w.checked.is_some_and(|at| at + FRESH < now))
                .count();
            for w in q.checked.drain(..stale).rev().collect::<Vec<_>>() {
                q.unchecked.push_front(w);
            }
            while !q.checked.is_empty() {
                let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                    break;
                };
                let w = q.checked.pop_front().expect("not empty");
                let ends = w.ends;
                self.send(w, slot, ends);
            }
            if checking.is_none() && !q.unchecked.is_empty() && now >= calm_from {
                let free = self.slots.available_permits();
                // Slots turning over fast: the next round is checked while
                // this one's requests are out. Otherwise only as many as
                // there are free slots (a slow receiver's jobs would be
                // checked again and again).
                let turning = last_end.is_some_and(|at| at + FRESH > now);
                let n = if turning && q.checked.len() < c {
                    2 * c
                } else {
                    free
                };
                let n = n.min(q.unchecked.len()).min(MAX_CHECK);
                if n > 0 {
                    let batch: Vec<_> = q.unchecked.drain(..n).collect();
                    q.checking = batch.len();
                    checking = Some(Box::pin(check(self.queue.clone(), batch, margin)));
                }
            }
            // What cannot wait for a slot any longer goes back (looked
            // for first: moving every waiting job on each turn of the loop
            // was work per delivery).
            if q.unchecked.iter().any(|w| w.use_by <= now) {
                let (late, kept): (Vec<_>, Vec<_>) =
                    q.unchecked.drain(..).partition(|w| w.use_by <= now);
                q.unchecked = kept.into();
                ahead_from = now + AHEAD_PAUSE;
                tracing::debug!(
                    topic = %self.hook.topic,
                    jobs = late.len(),
                    "jobs leased ahead given back: their leases would end before a slot came free; leasing ahead pauses"
                );
                tokio::spawn(give_back(self.queue.clone(), late));
            }
            if popping.is_none() && now >= calm_from {
                let unsent = q.len();
                let free = self.slots.available_permits();
                let pop = if !dry && now >= ahead_from && unsent <= c {
                    // Jobs flowing: a look for the free slots and the
                    // next rounds, at least a round's worth.
                    Some((AHEAD * c - unsent, Duration::ZERO))
                } else if unsent == 0 && free > 0 {
                    // Nothing ready at the last look (or leasing ahead
                    // paused): wait for jobs, for the idle slots alone (a
                    // long wait says little about when Redis leased them).
                    Some((free, poll_wait))
                } else {
                    None
                };
                if let Some((max, wait)) = pop {
                    let max = max.min(self.queue.limits().max_pop_jobs);
                    let (queue, leased, topics) =
                        (self.queue.clone(), self.leased.clone(), topics.clone());
                    popping = Some(Box::pin(async move {
                        let first = leased.clone().acquire_owned().await;
                        let mut held: Vec<_> = first.into_iter().collect();
                        while held.len() < max {
                            match leased.clone().try_acquire_owned() {
                                Ok(p) => held.push(p),
                                Err(_) => break,
                            }
                        }
                        let sent = Instant::now();
                        let got = queue.pop_many(&topics, held.len(), wait).await;
                        (sent, !wait.is_zero(), got, held)
                    }));
                }
            }
            // The next job to give back, or the end of a calm after errors.
            let next_use_by = q.unchecked.iter().map(|w| w.use_by).min();
            let wake_at = next_use_by
                .into_iter()
                .chain((calm_from > now).then_some(calm_from))
                .min();
            if let Some(at) = wake_at {
                if wake.deadline() != at {
                    wake.as_mut().reset(at);
                }
            }
            tokio::select! {
                _ = &mut stop => break,
                (sent, waited, got, held) = async { popping.as_mut().unwrap().await }, if popping.is_some() => {
                    popping = None;
                    match got {
                        Ok(jobs) => {
                            failing.reset();
                            dry = jobs.is_empty() && !waited;
                            for (job, held) in jobs.into_iter().zip(held) {
                                let w = Waiting::new(job, held, sent);
                                // Straight from its pop to a free slot, its
                                // lease long enough: it never waited, so
                                // there is nothing to check. A pop ahead
                                // whose reply took longer than FRESH is
                                // checked (its jobs waited in the reply).
                                let now = Instant::now();
                                let direct = q.len() == 0
                                    && w.ends >= now + margin
                                    && (waited || now.saturating_duration_since(sent) <= FRESH);
                                match direct.then(|| self.slots.clone().try_acquire_owned().ok()).flatten() {
                                    Some(slot) => {
                                        let ends = w.ends;
                                        self.send(w, slot, ends);
                                    }
                                    None => q.unchecked.push_back(w),
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(topic = %self.hook.topic, error = %e, "webhook cannot pop; retrying");
                            calm_from = Instant::now() + failing.wait();
                        }
                    }
                }
                (sent, batch, found) = async { checking.as_mut().unwrap().await }, if checking.is_some() => {
                    checking = None;
                    q.checking = 0;
                    self.checked(sent, batch, found, &mut q, &mut failing, &mut calm_from);
                }
                _ = &mut end => {
                    end.set(ended.notified());
                    dry = false;
                    last_end = Some(Instant::now());
                }
                _ = &mut wake, if wake_at.is_some() => {}
            }
        }
        // A pop under way is dropped: its jobs go back once its reply
        // comes (see Queue::pop_many). A check under way is waited for,
        // then every job not sent goes back, its attempt uncounted.
        drop(popping);
        if let Some(check) = checking {
            let (sent, batch, found) = check.await;
            self.checked(sent, batch, found, &mut q, &mut failing, &mut calm_from);
        }
        let unsent: Vec<Waiting> = q.checked.into_iter().chain(q.unchecked).collect();
        give_back(self.queue.clone(), unsent).await;
        let _ = self.slots.acquire_many(self.hook.concurrency as u32).await;
    }

    /// Files each job of a check: held (to send), not held (dropped: not
    /// ours any more), or unknown (to check again).
    fn checked(
        &self,
        sent: Instant,
        batch: Vec<Waiting>,
        found: crate::Result<Vec<crate::Result<(i64, i64)>>>,
        q: &mut Queued,
        failing: &mut Backoff,
        calm_from: &mut Instant,
    ) {
        let now = Instant::now();
        let found = match found {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(topic = %self.hook.topic, error = %e, "webhook cannot check its leases; trying again");
                *calm_from = now + failing.wait();
                for w in batch.into_iter().rev() {
                    q.unchecked.push_front(w);
                }
                return;
            }
        };
        let mut again = Vec::new();
        for (mut w, found) in batch.into_iter().zip(found) {
            match found {
                Ok((_, left_ms)) => {
                    w.lease_left(sent, left_ms);
                    w.checked = Some(now);
                    q.checked.push_back(w);
                }
                Err(e @ (crate::Error::StaleLease(_) | crate::Error::NotFound(_))) => {
                    tracing::debug!(id = %w.job.id, error = %e, "not sent: deleted, rescheduled, leased again or its topic paused while it waited");
                }
                Err(e) => {
                    tracing::warn!(id = %w.job.id, error = %e, "webhook cannot check a lease; trying again");
                    *calm_from = now + failing.wait();
                    again.push(w);
                }
            }
        }
        for w in again.into_iter().rev() {
            q.unchecked.push_front(w);
        }
    }

    /// Delivers a job in a task of its own, holding its slot until the
    /// request is answered and its place until the job is settled.
    fn send(&self, w: Waiting, slot: OwnedSemaphorePermit, lease_ends: Instant) {
        let (queue, sender, hook, seen) = (
            self.queue.clone(),
            self.sender.clone(),
            self.hook.clone(),
            self.seen.clone(),
        );
        let (finishes, ended) = (self.finishes.clone(), self.ended.clone());
        let Waiting { job, held, .. } = w;
        let span =
            tracing::info_span!("handle", id = %job.id, topic = %job.topic, attempt = job.attempts);
        tokio::spawn(
            async move {
                let (id, token, attempt) = (job.id.clone(), job.token.clone(), job.attempts);
                match deliver(&queue, &sender, &hook, job, &seen).await {
                    Ok(result) => {
                        drop(slot);
                        // Only gone when the finisher is (the runtime is
                        // shutting down): the lease brings the job back.
                        let _ = finishes.send(Finish {
                            id,
                            token,
                            result: result.unwrap_or_default(),
                            lease_ends,
                            _held: held,
                        });
                    }
                    Err(e) => {
                        let backoff = Webhook::default_retry();
                        fail(&queue, Some(&backoff), &id, &token, attempt, &e).await;
                        drop((slot, held));
                    }
                }
                ended.notify_one();
            }
            .instrument(span),
        );
    }
}

/// Most leases in one check (hold.lua's batches are as large).
const MAX_CHECK: usize = 256;

/// Checks the leases of `batch`, about to be sent: one call for all.
async fn check(queue: Queue, batch: Vec<Waiting>, margin: Duration) -> Checked {
    let sent = Instant::now();
    let leases: Vec<(&str, &str, u32)> = batch
        .iter()
        .map(|w| (w.job.id.as_str(), w.job.token.as_str(), w.job.attempts))
        .collect();
    let found = queue.hold_many(&leases, margin).await;
    drop(leases);
    (sent, batch, found)
}

/// Gives back jobs leased and never sent, their attempts uncounted; a call
/// that did not get through is tried again while the lease lasts.
async fn give_back(queue: Queue, jobs: Vec<Waiting>) {
    futures::future::join_all(jobs.into_iter().map(|w| {
        let queue = queue.clone();
        async move {
            let mut wait = Backoff::starting_at(Duration::from_millis(50));
            loop {
                match queue.release(&w.job.id, &w.job.token).await {
                    Ok(()) => break,
                    Err(e) if e.is_unavailable() && Instant::now() + Backoff::MAX < w.ends => {
                        tracing::debug!(id = %w.job.id, error = %e, "a job not sent could not be given back yet");
                        tokio::time::sleep(wait.wait()).await;
                    }
                    // Finished, deleted or leased again meanwhile: not ours.
                    Err(crate::Error::StaleLease(_) | crate::Error::NotFound(_)) => break,
                    Err(e) => {
                        tracing::warn!(id = %w.job.id, error = %e, "a job not sent could not be given back; its lease brings it back");
                        break;
                    }
                }
            }
        }
    }))
    .await;
}
