//! [`Consumer`]: runs an async handler over a queue's jobs, with bounded
//! concurrency. `Ok` finishes the job; `Err` nacks it with the error's text,
//! and the job's retry policy decides when (or whether) it comes back.

use std::collections::VecDeque;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::{debug, error, info_span, warn, Instrument};

use crate::dispatch::Backoff;
use crate::error::Error;
use crate::job::{Delivery, JobState};
use crate::queue::Queue;
use crate::retry::RetryPolicy;
use crate::shutdown::Shutdown;

/// Pulls jobs from topics and hands each to a handler.
pub struct Consumer {
    queue: Queue,
    topics: Vec<String>,
    concurrency: usize,
    poll_wait: Duration,
    backoff: Option<RetryPolicy>,
    prefetch: bool,
}

impl Consumer {
    /// A consumer of `topics` (tried in order), one job at a time.
    pub fn new(queue: Queue, topics: &[&str]) -> Consumer {
        Consumer {
            queue,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            concurrency: 1,
            poll_wait: Duration::from_secs(30),
            backoff: None,
            prefetch: false,
        }
    }

    /// Leases jobs ahead of free slots (up to twice `concurrency` more than
    /// run), so the next pop is at Redis while the handlers run, not after
    /// one has ended: pops of at least a round's worth of jobs whatever the
    /// handlers' timing. A job waits its turn in this process while its
    /// lease runs, so the handler must mind the lease it has left (the
    /// webhook extends it before a request that could outlast it). Jobs
    /// still waiting at shutdown are given back (their attempt uncounted).
    pub(crate) fn prefetch(mut self) -> Consumer {
        self.prefetch = true;
        self
    }

    /// Waits between attempts of jobs whose own policy has no intervals
    /// (which would otherwise come back at once): the intervals of
    /// `policy`. Whoever pushed a job, a failing handler is not retried in a
    /// tight loop. Attempts stay bounded by the job's own policy.
    pub fn backoff(mut self, policy: RetryPolicy) -> Consumer {
        self.backoff = Some(policy);
        self
    }

    /// Runs up to `n` handlers at once.
    pub fn concurrency(mut self, n: usize) -> Consumer {
        self.concurrency = n.max(1);
        self
    }

    /// Runs until `shutdown` fires, then waits for handlers in flight to end
    /// (their jobs are finished or nacked as usual).
    ///
    /// A handler's slot is free again as soon as it returns `Ok`: its
    /// finish goes to Redis with the other finishes of the moment, in one
    /// call, while the next pop is under way. So besides the `concurrency`
    /// handlers running, up to `concurrency` more jobs can be leased to
    /// this consumer waiting for their finish.
    pub async fn run<F, Fut, E>(self, handler: F, shutdown: Shutdown)
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        if self.prefetch {
            return self.run_prefetching(handler, shutdown).await;
        }
        let handler = Arc::new(handler);
        let slots = Arc::new(Semaphore::new(self.concurrency));
        // Jobs leased to this consumer and not yet settled: a Redis slow to
        // take finishes slows the pops instead of piling up leases.
        let held = Arc::new(Semaphore::new(2 * self.concurrency));
        let (finishes, to_finish) = mpsc::unbounded_channel();
        let finisher = tokio::spawn(finish_batches(self.queue.clone(), to_finish));
        let mut failing = Backoff::starting_at(Duration::from_millis(50));
        loop {
            let first = tokio::select! {
                p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
                _ = shutdown.wait() => break,
            };
            let first_held = tokio::select! {
                p = held.clone().acquire_owned() => p.expect("the semaphore is never closed"),
                _ = shutdown.wait() => break,
            };
            // Handlers that end together free their slots one after another:
            // letting them run first makes one pop for all of them, not a pop
            // of one job for the first and another for the rest (measured:
            // half the pops and finishes of a burst were of one job).
            tokio::task::yield_now().await;
            // Every free slot is filled by the same pop: one round trip for
            // a burst, not one per job (a pop per job made the consumer,
            // and each webhook, as slow as Redis's round trip whatever the
            // concurrency). Slots a pop leaves empty are freed again.
            let mut permits = vec![(first, first_held)];
            while permits.len() < self.queue.limits().max_pop_jobs {
                let Ok(h) = held.clone().try_acquire_owned() else {
                    break;
                };
                match slots.clone().try_acquire_owned() {
                    Ok(p) => permits.push((p, h)),
                    Err(_) => break,
                }
            }
            let Some(jobs) = self.pop(permits.len(), &mut failing, &shutdown).await else {
                break;
            };
            for (job, permit) in jobs.into_iter().zip(permits) {
                let lease_ends = lease_ends(&job);
                spawn_handler(
                    (&self.queue, &self.backoff, None),
                    (job, lease_ends),
                    permit,
                    handler.clone(),
                    finishes.clone(),
                );
            }
        }
        // Wait for every handler in flight, then for their finishes.
        let _ = slots.acquire_many(self.concurrency as u32).await;
        drop(finishes);
        let _ = finisher.await;
    }

    /// One pop of up to `n` jobs. A failed pop is told, and gives no jobs
    /// after the backoff's next wait; `None` when shutdown comes first.
    async fn pop(
        &self,
        n: usize,
        failing: &mut Backoff,
        shutdown: &Shutdown,
    ) -> Option<Vec<Delivery>> {
        let popped = tokio::select! {
            r = self.queue.pop_many(&self.topics, n, self.poll_wait) => r,
            _ = shutdown.wait() => return None,
        };
        match popped {
            Ok(jobs) => {
                if !jobs.is_empty() {
                    failing.reset();
                }
                Some(jobs)
            }
            Err(e) => {
                warn!(error = %e, "consumer cannot pop; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(failing.wait()) => Some(Vec::new()),
                    _ = shutdown.wait() => None,
                }
            }
        }
    }

    /// [`run`](Self::run) with jobs leased ahead (see
    /// [`prefetch`](Self::prefetch)): the pops are sized by the jobs this
    /// consumer may still lease, not by its free slots, and a starter task
    /// hands each popped job, in order, to the next slot that comes free.
    async fn run_prefetching<F, Fut, E>(self, handler: F, shutdown: Shutdown)
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        let handler = Arc::new(handler);
        let slots = Arc::new(Semaphore::new(self.concurrency));
        // Leased and not yet handled: running or waiting for a slot.
        let held = Arc::new(Semaphore::new(3 * self.concurrency));
        // Popped jobs waiting for a slot. A pop goes out once no more than
        // `concurrency` wait: then at least `concurrency` places are free,
        // so each pop takes a round's worth of jobs (not the one or two
        // whose answers came first), and the jobs still waiting keep the
        // slots busy while it is at Redis.
        let (waiting, mut waiting_now) = watch::channel(0usize);
        // Handled and waiting for the finish: a call at Redis and the next
        // one filling. Not counted above, so the finishes' round trips are
        // not part of each job's way from pop to free place (with one
        // bound, a webhook at concurrency 8 had 16 jobs in the pipeline and
        // drained at 16 per pop + request + finish).
        let settling = Arc::new(Semaphore::new(2 * FINISH_BATCH));
        let (finishes, to_finish) = mpsc::unbounded_channel();
        let finisher = tokio::spawn(finish_batches(self.queue.clone(), to_finish));
        let (popped_tx, popped_rx) = mpsc::unbounded_channel();
        let ahead = Ahead::default();
        let starter = tokio::spawn(start_handlers(
            (self.queue.clone(), self.backoff.clone()),
            (popped_rx, waiting.clone(), ahead.clone()),
            slots.clone(),
            finishes,
            shutdown.clone(),
            move |job, lease_ends, permits, queue, backoff, finishes| {
                spawn_handler(
                    (queue, backoff, Some(&settling)),
                    (job, lease_ends),
                    permits,
                    handler.clone(),
                    finishes,
                )
            },
        ));
        let mut failing = Backoff::starting_at(Duration::from_millis(50));
        loop {
            let leasing_ahead = ahead.on();
            // Not ahead: pop only when no job waits and a slot is free, for
            // the free slots, as without prefetch.
            let room = if leasing_ahead { self.concurrency } else { 0 };
            tokio::select! {
                r = waiting_now.wait_for(|w| *w <= room) => { let _ = r; }
                _ = shutdown.wait() => break,
            }
            if !leasing_ahead {
                tokio::select! {
                    s = slots.acquire() => drop(s),
                    _ = shutdown.wait() => break,
                }
            }
            let first = tokio::select! {
                p = held.clone().acquire_owned() => p.expect("the semaphore is never closed"),
                _ = shutdown.wait() => break,
            };
            // Handled together, given back one after another: one pop.
            tokio::task::yield_now().await;
            let most = if leasing_ahead {
                self.queue.limits().max_pop_jobs
            } else {
                slots
                    .available_permits()
                    .clamp(1, self.queue.limits().max_pop_jobs)
            };
            let mut permits = vec![first];
            while permits.len() < most {
                match held.clone().try_acquire_owned() {
                    Ok(h) => permits.push(h),
                    Err(_) => break,
                }
            }
            let Some(jobs) = self.pop(permits.len(), &mut failing, &shutdown).await else {
                break;
            };
            waiting.send_modify(|w| *w += jobs.len());
            for (job, held) in jobs.into_iter().zip(permits) {
                let lease_ends = lease_ends(&job);
                let give_back_at = give_back_at(lease_ends);
                // The starter ends only after this loop.
                let _ = popped_tx.send(Waiting {
                    job,
                    lease_ends,
                    give_back_at,
                    held,
                });
            }
        }
        // The starter gives back what waits, then every handler ends, then
        // their finishes are sent.
        drop(popped_tx);
        let _ = starter.await;
        let _ = slots.acquire_many(self.concurrency as u32).await;
        let _ = finisher.await;
    }
}

/// A popped job waiting for a slot.
struct Waiting {
    job: Delivery,
    /// When its lease ends, on this host's clock.
    lease_ends: Instant,
    /// When it is given back if it has not had a slot by then.
    give_back_at: Instant,
    /// Its place among the leased.
    held: OwnedSemaphorePermit,
}

/// A job that waits for a slot past this share of its lease is given back
/// before its lease ends: at half the lease, and at most a second before
/// its end. Were its lease to run out while it waits, its attempt would be
/// counted without a delivery, and a job could die undelivered.
fn give_back_at(lease_ends: Instant) -> Instant {
    let left = lease_ends.saturating_duration_since(Instant::now());
    lease_ends - (left / 2).min(Duration::from_secs(1))
}

/// How long leasing ahead stays off once a job had to be given back: its
/// lease (ttr) is short beside the wait for a slot.
const AHEAD_PAUSE: Duration = Duration::from_secs(60);

/// Whether the consumer leases ahead of free slots now (shared by the pop
/// loop and the starter; a std mutex: held for a read or a write, never
/// across an await).
#[derive(Clone, Default)]
struct Ahead(Arc<std::sync::Mutex<Option<Instant>>>);

impl Ahead {
    fn on(&self) -> bool {
        let off_until = *self.0.lock().expect("never poisoned");
        off_until.is_none_or(|t| Instant::now() >= t)
    }

    fn pause(&self) {
        *self.0.lock().expect("never poisoned") = Some(Instant::now() + AHEAD_PAUSE);
    }
}

/// Hands popped jobs to handlers (`spawn`), in order, as slots come free.
/// A job still waiting at its give-back instant, or at shutdown, is given
/// back instead: ready again at once, its attempt uncounted. The first
/// give-back for lack of a slot pauses leasing ahead (see [`AHEAD_PAUSE`]).
async fn start_handlers(
    (queue, backoff): (Queue, Option<RetryPolicy>),
    (mut popped, waiting, ahead): (
        mpsc::UnboundedReceiver<Waiting>,
        watch::Sender<usize>,
        Ahead,
    ),
    slots: Arc<Semaphore>,
    finishes: mpsc::UnboundedSender<Finish>,
    shutdown: Shutdown,
    spawn: impl Fn(
        Delivery,
        Instant,
        (OwnedSemaphorePermit, OwnedSemaphorePermit),
        &Queue,
        &Option<RetryPolicy>,
        mpsc::UnboundedSender<Finish>,
    ),
) {
    let mut queued: VecDeque<Waiting> = VecDeque::new();
    let mut open = true;
    let give_back = |w: Waiting| {
        let queue = queue.clone();
        waiting.send_modify(|n| *n = n.saturating_sub(1));
        async move {
            if let Err(e) = queue.release(&w.job.id, &w.job.token).await {
                debug!(id = %w.job.id, error = %e, "job not given back; its lease brings it back");
            }
            drop(w.held);
        }
    };
    loop {
        // Leases end at different times (a job's ttr is its own): the
        // soonest give-back among the waiting, a scan of at most a few
        // rounds of slots.
        let soonest = queued.iter().map(|w| w.give_back_at).min();
        tokio::select! {
            biased;
            _ = shutdown.wait() => break,
            next = popped.recv(), if open => match next {
                Some(w) => queued.push_back(w),
                None => open = false,
            },
            _ = tokio::time::sleep_until(soonest.unwrap_or_else(Instant::now)), if soonest.is_some() => {
                let now = Instant::now();
                let (due, keep): (VecDeque<Waiting>, VecDeque<Waiting>) =
                    queued.drain(..).partition(|w| w.give_back_at <= now);
                queued = keep;
                warn!(
                    jobs = due.len(),
                    "jobs waited for a slot past half their lease: given back, and no jobs leased ahead for {AHEAD_PAUSE:?}"
                );
                ahead.pause();
                for w in due {
                    give_back(w).await;
                }
            }
            slot = slots.clone().acquire_owned(), if !queued.is_empty() => {
                let slot = slot.expect("the semaphore is never closed");
                let w = queued.pop_front().expect("not empty");
                if w.lease_ends > Instant::now() {
                    waiting.send_modify(|n| *n = n.saturating_sub(1));
                    spawn(w.job, w.lease_ends, (slot, w.held), &queue, &backoff, finishes.clone());
                } else {
                    give_back(w).await;
                }
            }
        }
    }
    // Shutdown: what waits, and what the last pop still brings, goes back.
    for w in queued {
        give_back(w).await;
    }
    while let Some(w) = popped.recv().await {
        give_back(w).await;
    }
}

/// When `job`'s lease ends, on this host's clock: a finish after it would
/// be refused, so it is not tried again past it.
fn lease_ends(job: &Delivery) -> Instant {
    let lease_left = job.lease_until_ms.saturating_sub(job.popped_at_us / 1000);
    Instant::now() + Duration::from_millis(lease_left.max(0) as u64)
}

/// Runs `handler` on `job` in a task of its own, holding its slot until
/// the handler ends and its lease's place until the job is settled. With
/// `settling`, a handled job waits for its finish under a place of that
/// bound instead, and its lease's place is free as soon as the handler
/// has returned `Ok`.
fn spawn_handler<F, Fut, E>(
    (queue, backoff, settling): (&Queue, &Option<RetryPolicy>, Option<&Arc<Semaphore>>),
    (job, lease_ends): (Delivery, Instant),
    (slot, held): (OwnedSemaphorePermit, OwnedSemaphorePermit),
    handler: Arc<F>,
    finishes: mpsc::UnboundedSender<Finish>,
) where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display,
{
    let (queue, backoff, settling) = (queue.clone(), backoff.clone(), settling.cloned());
    let span = info_span!("handle", id = %job.id, topic = %job.topic, attempt = job.attempts);
    tokio::spawn(
        async move {
            let (id, token, attempt) = (job.id.clone(), job.token.clone(), job.attempts);
            let result = handler(job).await.map_err(|e| e.to_string());
            let outcome = match result {
                Ok(()) => {
                    drop(slot);
                    let held = match settling {
                        Some(s) => {
                            let place = s.acquire_owned().await;
                            drop(held);
                            place.expect("the semaphore is never closed")
                        }
                        None => held,
                    };
                    let finish = Finish {
                        id,
                        token,
                        lease_ends,
                        _held: held,
                    };
                    // Only gone when the finisher is (the runtime is
                    // shutting down): the lease brings the job back.
                    let _ = finishes.send(finish);
                    return;
                }
                Err(e) => {
                    let delay = match &backoff {
                        Some(b) => match queue.get(&id).await {
                            Ok(Some(j)) if j.retry.intervals.is_empty() => {
                                Some(b.interval_after(attempt))
                            }
                            _ => None,
                        },
                        None => None,
                    };
                    queue.nack(&id, &token, delay, &e).await.map(|n| {
                    // Every failure is told, with what happens next.
                    match n.state {
                        JobState::Dead => error!(error = %e, "job failed and is dead: its attempts are used up"),
                        JobState::Delayed => warn!(error = %e, retry_at_ms = n.due_ms, "job failed; retrying later"),
                        _ => warn!(error = %e, "job failed; retrying now"),
                    }
                })
                }
            };
            if let Err(e) = outcome {
                // Stale lease (the ttr ran out first) or Redis away:
                // the lease brings the job back; nothing is lost.
                warn!(error = %e, "could not settle the job");
            }
            drop((slot, held));
        }
        .instrument(span),
    );
}

/// A handled job waiting for its finish.
struct Finish {
    id: String,
    token: String,
    lease_ends: Instant,
    /// Its place among the jobs leased to the consumer, given back once
    /// the finish is settled.
    _held: OwnedSemaphorePermit,
}

/// Most finishes in one call (remove.lua's batches are as large).
const FINISH_BATCH: usize = 256;

/// Finishes jobs as their handlers hand them over: the finishes that come
/// while a call is at Redis go together in the next one (group commit: no
/// waiting for a batch to fill). Ends when every handler is gone.
async fn finish_batches(queue: Queue, mut to_finish: mpsc::UnboundedReceiver<Finish>) {
    let mut batch = Vec::with_capacity(FINISH_BATCH);
    while to_finish.recv_many(&mut batch, FINISH_BATCH).await > 0 {
        settle(&queue, std::mem::take(&mut batch)).await;
    }
}

/// Finishes `batch`, each job under its own lease, each with its own
/// outcome. A call that failed (Redis away, the connection cut) is tried
/// again shortly for the jobs whose lease has not ended: a finish is fenced
/// by its token, so one that did reach Redis the first time only finds the
/// job gone, and one that comes after the job was leased again is refused.
/// Past a few tries the lease brings the job back (at least once).
async fn settle(queue: &Queue, mut batch: Vec<Finish>) {
    let mut wait = Duration::from_millis(50);
    for attempt in 1.. {
        let leases: Vec<(&str, &str)> = batch
            .iter()
            .map(|f| (f.id.as_str(), f.token.as_str()))
            .collect();
        let results = match queue.finish_many(&leases).await {
            Ok(r) => r,
            Err(e) => vec![Err(e); batch.len()],
        };
        let mut again = Vec::new();
        for (f, r) in batch.into_iter().zip(results) {
            match r {
                Ok(()) => {}
                Err(e) if e.is_unavailable() => again.push((f, e)),
                // A finish tried again after its first call did reach Redis.
                Err(Error::NotFound(_)) if attempt > 1 => {
                    debug!(id = %f.id, "job already finished by an earlier try")
                }
                Err(e) => {
                    // Stale lease (the ttr ran out first): the lease brought
                    // the job back; nothing is lost.
                    warn!(id = %f.id, error = %e, "could not settle the job")
                }
            }
        }
        let now = Instant::now();
        let (retry, given_up): (Vec<_>, Vec<_>) = again
            .into_iter()
            .partition(|(f, _)| attempt < FINISH_TRIES && f.lease_ends > now + wait);
        for (f, e) in given_up {
            warn!(id = %f.id, error = %e, "could not finish the job; its lease brings it back");
        }
        if retry.is_empty() {
            return;
        }
        batch = retry.into_iter().map(|(f, _)| f).collect();
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(1));
    }
}

/// Calls of one batch of finishes at most (about 3.5 s of retries).
const FINISH_TRIES: u32 = 8;
