//! [`Consumer`]: runs an async handler over a queue's jobs, with bounded
//! concurrency. `Ok` finishes the job; `Err` nacks it with the error's text,
//! and the job's retry policy decides when (or whether) it comes back.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tracing::{info_span, warn, Instrument};

use crate::job::Delivery;
use crate::queue::Queue;
use crate::shutdown::Shutdown;

/// Pulls jobs from topics and hands each to a handler.
pub struct Consumer {
    queue: Queue,
    topics: Vec<String>,
    concurrency: usize,
    poll_wait: Duration,
}

impl Consumer {
    /// A consumer of `topics` (tried in order), one job at a time.
    pub fn new(queue: Queue, topics: &[&str]) -> Consumer {
        Consumer {
            queue,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            concurrency: 1,
            poll_wait: Duration::from_secs(30),
        }
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
        let mut backoff = Duration::from_millis(50);
        loop {
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
                _ = shutdown.wait() => break,
            };
            let popped = tokio::select! {
                r = self.queue.pop(&self.topics, self.poll_wait) => r,
                _ = shutdown.wait() => break,
            };
            let job = match popped {
                Ok(Some(job)) => job,
                Ok(None) => continue,
                Err(e) => {
                    warn!(error = %e, "consumer cannot pop; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.wait() => break,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            };
            backoff = Duration::from_millis(50);
            let (queue, handler) = (self.queue.clone(), handler.clone());
            let span =
                info_span!("handle", id = %job.id, topic = %job.topic, attempt = job.attempts);
            tokio::spawn(
                async move {
                    let (id, token) = (job.id.clone(), job.token.clone());
                    let result = handler(job).await.map_err(|e| e.to_string());
                    let outcome = match result {
                        Ok(()) => queue.finish(&id, &token).await,
                        Err(e) => queue.nack(&id, &token, None, &e).await.map(|_| ()),
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
        // Wait for every handler in flight.
        let _ = slots.acquire_many(self.concurrency as u32).await;
    }
}
