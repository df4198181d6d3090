//! [`Consumer`]: runs an async handler over a queue's jobs, with bounded
//! concurrency. `Ok` finishes the job; `Err` nacks it with the error's text,
//! and the job's retry policy decides when (or whether) it comes back.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{error, info_span, warn, Instrument};

use crate::dispatch::Backoff;
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
    pub async fn run<F, Fut, E>(self, handler: F, shutdown: Shutdown)
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        let handler = Arc::new(handler);
        let slots = Arc::new(Semaphore::new(self.concurrency));
        let mut failing = Backoff::starting_at(Duration::from_millis(50));
        loop {
            let first = tokio::select! {
                p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
                _ = shutdown.wait() => break,
            };
            // Every free slot is filled by the same pop: one round trip for
            // a burst, not one per job (a pop per job made the consumer,
            // and each webhook, as slow as Redis's round trip whatever the
            // concurrency). Slots a pop leaves empty are freed again.
            let mut permits = vec![first];
            while permits.len() < self.queue.limits().max_pop_jobs {
                match slots.clone().try_acquire_owned() {
                    Ok(p) => permits.push(p),
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
                self.spawn_handler(job, permit, handler.clone());
            }
        }
        // Wait for every handler in flight.
        let _ = slots.acquire_many(self.concurrency as u32).await;
    }

    /// Runs `handler` on `job` in a task of its own, holding `permit` (its
    /// slot) until the job is settled.
    fn spawn_handler<F, Fut, E>(&self, job: Delivery, permit: OwnedSemaphorePermit, handler: Arc<F>)
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        let (queue, handler, backoff) = (self.queue.clone(), handler, self.backoff.clone());
        let span = info_span!("handle", id = %job.id, topic = %job.topic, attempt = job.attempts);
        tokio::spawn(
            async move {
                let (id, token, attempt) = (job.id.clone(), job.token.clone(), job.attempts);
                let result = handler(job).await.map_err(|e| e.to_string());
                let outcome = match result {
                    Ok(()) => queue.finish(&id, &token).await,
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
                drop(permit);
            }
            .instrument(span),
        );
    }
}
