//! [`Consumer`]: runs an async handler over a queue's jobs, with bounded
//! concurrency. `Ok` finishes the job (with [`Consumer::run_with_results`],
//! carrying the handler's result); `Err` nacks it with the error's text,
//! and the job's retry policy decides when (or whether) it comes back.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::{debug, error, info, info_span, warn, Instrument};

use crate::backoff::Backoff;
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
        }
    }

    /// Waits between attempts of jobs whose own policy has no intervals
    /// (a job with only `max_attempts` would otherwise come back at once):
    /// the intervals of `policy`. Without it, a job with no policy at all
    /// still waits the built-in [`RetryPolicy::backoff`] (the nack's
    /// default). Attempts stay bounded by the job's own policy.
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
        let handler = move |job| {
            let handled = handler(job);
            async move { handled.await.map(|()| None) }
        };
        self.run_with_results(handler, shutdown).await
    }

    /// [`run`](Self::run) for a handler whose `Ok` may carry the job's
    /// result (see [`Queue::finish_with_result`]): `Some(value)` is kept
    /// with the finished job, `None` finishes it without one. A result
    /// past its limits (`MAX_RESULT_BYTES`, 64 levels deep) is logged and
    /// the job finished without it: the work is done, and doing it again
    /// would not shrink the result.
    pub async fn run_with_results<F, Fut, E>(self, handler: F, shutdown: Shutdown)
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<serde_json::Value>, E>> + Send + 'static,
        E: Display,
    {
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
            let popped = tokio::select! {
                r = self.queue.pop_many(&self.topics, permits.len(), self.poll_wait) => r,
                _ = shutdown.wait() => break,
            };
            let jobs = match popped {
                Ok(jobs) => jobs,
                Err(e) => {
                    warn!(error = %e, "consumer cannot pop; retrying");
                    drop(permits);
                    tokio::select! {
                        _ = tokio::time::sleep(failing.wait()) => {}
                        _ = shutdown.wait() => break,
                    }
                    continue;
                }
            };
            if !jobs.is_empty() {
                failing.reset();
            }
            for (job, permit) in jobs.into_iter().zip(permits) {
                self.spawn_handler(job, permit, handler.clone(), finishes.clone());
            }
        }
        // Wait for every handler in flight, then for their finishes.
        let _ = slots.acquire_many(self.concurrency as u32).await;
        drop(finishes);
        let _ = finisher.await;
    }

    /// Runs `handler` on `job` in a task of its own, holding its slot until
    /// the handler ends and its lease's place until the job is settled.
    fn spawn_handler<F, Fut, E>(
        &self,
        job: Delivery,
        (slot, held): (OwnedSemaphorePermit, OwnedSemaphorePermit),
        handler: Arc<F>,
        finishes: mpsc::UnboundedSender<Finish>,
    ) where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<serde_json::Value>, E>> + Send + 'static,
        E: Display,
    {
        let (queue, handler, backoff) = (self.queue.clone(), handler, self.backoff.clone());
        let span = info_span!("handle", id = %job.id, topic = %job.topic, attempt = job.attempts);
        // When the lease ends, on this host's clock: a finish after it would
        // be refused, so it is not tried again past it.
        let lease_left = job.lease_until_ms.saturating_sub(job.popped_at_us / 1000);
        let lease_ends = Instant::now() + Duration::from_millis(lease_left.max(0) as u64);
        tokio::spawn(
            async move {
                let (id, token, attempt) = (job.id.clone(), job.token.clone(), job.attempts);
                let result = handler(job).await.map_err(|e| e.to_string());
                match result {
                    Ok(value) => {
                        drop(slot);
                        let result = match value.map(|v| crate::queue::check_result(&v)) {
                            None => String::new(),
                            Some(Ok(json)) => json,
                            Some(Err(why)) => {
                                warn!(%why, "the handler's result is not kept; the job finishes without one");
                                String::new()
                            }
                        };
                        let finish = Finish {
                            id,
                            token,
                            result,
                            lease_ends,
                            _held: held,
                        };
                        // Only gone when the finisher is (the runtime is
                        // shutting down): the lease brings the job back.
                        let _ = finishes.send(finish);
                        return;
                    }
                    Err(e) => fail(&queue, backoff.as_ref(), &id, &token, attempt, &e).await,
                }
                drop((slot, held));
            }
            .instrument(span),
        );
    }
}

/// Nacks a failed attempt (`e`, attempt number `attempt`) and says what
/// happens next. A job whose own policy has no intervals waits those of
/// `backoff`, if given.
pub(crate) async fn fail(
    queue: &Queue,
    backoff: Option<&RetryPolicy>,
    id: &str,
    token: &str,
    attempt: u32,
    e: &str,
) {
    let delay = match backoff {
        Some(b) => match queue.get(id).await {
            Ok(Some(j)) if j.retry.intervals.is_empty() => Some(b.interval_after(attempt)),
            _ => None,
        },
        None => None,
    };
    match queue.nack(id, token, delay, e).await {
        // Every failure is told, with what happens next.
        Ok(n) => match n.state {
            JobState::Dead => {
                error!(error = %e, "job failed and is dead: its attempts are used up")
            }
            JobState::Delayed => {
                warn!(
                    error = %e,
                    retry_at = %crate::duration::rfc3339_ms(n.due_ms),
                    retry_at_ms = n.due_ms,
                    "job failed; retrying later"
                )
            }
            _ => warn!(error = %e, "job failed; retrying now"),
        },
        // Cancelled while it ran: nothing to settle, no retry.
        Err(e @ Error::Cancelled(_)) => info!(error = %e, "the job was cancelled"),
        // Stale lease (the ttr ran out first) or Redis away: the lease
        // brings the job back; nothing is lost.
        Err(e) => warn!(error = %e, "could not settle the job"),
    }
}

/// A handled job waiting for its finish.
pub(crate) struct Finish {
    pub(crate) id: String,
    pub(crate) token: String,
    /// Its result, JSON text ("": none).
    pub(crate) result: String,
    /// When its lease ends, on this host's clock.
    pub(crate) lease_ends: Instant,
    /// Its place among the jobs leased to the consumer, given back once
    /// the finish is settled.
    pub(crate) _held: OwnedSemaphorePermit,
}

/// Most finishes in one call (remove.lua's batches are as large).
const FINISH_BATCH: usize = 256;

/// Finishes jobs as their handlers hand them over: the finishes that come
/// while a call is at Redis go together in the next one (group commit: no
/// waiting for a batch to fill). Ends when every handler is gone.
pub(crate) async fn finish_batches(queue: Queue, mut to_finish: mpsc::UnboundedReceiver<Finish>) {
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
        let leases: Vec<(&str, &str, &str)> = batch
            .iter()
            .map(|f| (f.id.as_str(), f.token.as_str(), f.result.as_str()))
            .collect();
        let results = match queue.finish_many_carrying(&leases).await {
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
                Err(e @ Error::Cancelled(_)) => {
                    info!(id = %f.id, error = %e, "the job was cancelled")
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
