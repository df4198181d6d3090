//! Reservations: pops that take what is ready, and waiting pops that park
//! (no Redis connection each) until a ready notice or their deadline.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;

use super::Queue;
use crate::error::{Error, Result};
use crate::job::Delivery;
use crate::redis::LATE_REPLY_GRACE;
use crate::store::pop::Held;

/// How soon a waiting pop that could not reach Redis looks again.
const UNAVAILABLE_RETRY: Duration = Duration::from_millis(250);

impl Queue {
    /// Reserves up to `max` ready jobs from `topics` (tried in order) without
    /// waiting.
    pub async fn try_pop(&self, topics: &[String], max: usize) -> Result<Vec<Delivery>> {
        self.limits().check_topics(topics).map_err(Error::Invalid)?;
        // The same guard as a long-poll's: a reply read after its lease
        // ended is not handed over, and jobs of a dropped call go back.
        loop {
            let (got, held) = self
                .pop_guarded(topics, max, self.store().redis.timeout(), false)
                .await?;
            // Stale entries the call stopped skipping: look again (each
            // look consumes a bounded number of them, so this ends).
            if got.is_empty() && held.again {
                continue;
            }
            return Ok(got);
        }
    }

    fn count_popped(&self, topics: &[String], got: &[Delivery], held: Held) {
        for d in got {
            self.inner.h.metrics.popped.inc([&d.topic], 1);
        }
        if held.jobs > 0 {
            // A pop of several topics does not say which one held them.
            let topic = match topics {
                [one] => one.as_str(),
                _ => crate::metrics::OTHER_TOPICS,
            };
            self.inner.h.metrics.rate_held.inc([topic], held.jobs);
        }
    }

    /// Waits up to `wait` for a job on any of `topics` (tried in order) and
    /// reserves it.
    ///
    /// While waiting, this holds no Redis connection of its own. It is
    /// cancel-safe: if the future is dropped (an HTTP client went away) while
    /// the pop script is under way, the job it reserved is given back at once
    /// instead of waiting out its ttr.
    pub async fn pop(&self, topics: &[String], wait: Duration) -> Result<Option<Delivery>> {
        Ok(self.pop_many(topics, 1, wait).await?.pop())
    }

    /// Like [`pop`](Self::pop), for up to `max` jobs: returns as soon as at
    /// least one is reserved, or empty after `wait`.
    #[tracing::instrument(skip_all, fields(topics = ?topics, max))]
    pub async fn pop_many(
        &self,
        topics: &[String],
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Delivery>> {
        self.limits().check_topics(topics).map_err(Error::Invalid)?;
        let max = max.max(1);
        let deadline = Instant::now() + wait;
        let guard = self.inner.h.waiters.enter(topics);
        let stop = &self.inner.h.stop;
        // Whether this look follows a ready notice (see Store::pop_start).
        let mut woken_look = false;
        loop {
            // Register for wake-ups before looking, so a job that becomes
            // ready between the look and the wait is not missed.
            let mut notified: Vec<_> = guard
                .handles()
                .iter()
                .map(|n| Box::pin(n.notified()))
                .collect();
            for n in &mut notified {
                n.as_mut().enable();
            }
            // A look may wait its turn behind a burst of others for as long
            // as the caller waits (at least the Redis timeout): a busy
            // Redis is not an error to a long-poll.
            let patience = deadline.saturating_duration_since(Instant::now()).clamp(
                self.store().redis.timeout(),
                self.store().redis.timeout() + LATE_REPLY_GRACE,
            );
            let sent = Instant::now();
            let result = self.pop_guarded(topics, max, patience, woken_look).await;
            woken_look = false;
            let empty = matches!(&result, Ok((got, held)) if got.is_empty() && !held.again);
            // A look made for every pop waiting on these topics wakes the
            // others unless it found them empty.
            guard.looked(empty);
            let (got, held) = match result {
                Ok(r) => r,
                // Redis slow, or a failover under way: a long-poll keeps
                // waiting while it has time, and looks again shortly;
                // only one whose wait ran out hears the error.
                Err(e) if e.is_unavailable() && Instant::now() + UNAVAILABLE_RETRY < deadline => {
                    debug!(error = %e, "a waiting pop could not look; looking again");
                    tokio::select! {
                        _ = tokio::time::sleep(UNAVAILABLE_RETRY) => {}
                        _ = stop.wait() => return Ok(Vec::new()),
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !got.is_empty() || stop.is_triggered() {
                return Ok(got);
            }
            // Ready jobs may wait behind stale entries the call stopped
            // skipping: look again now (each look consumes up to a bound of
            // them, so this ends), also for a pop that does not wait.
            if held.again {
                continue;
            }
            if Instant::now() >= deadline {
                return Ok(got);
            }
            // Wake-ups arrive through the subscriber (and every reconnect
            // wakes all waiters), so a connected waiter looks again only
            // rarely, a backstop for a notice whose publish failed: that
            // is most of what an idle consumer costs Redis, and one look
            // stands for every pop waiting on these topics. While the
            // subscriber is down, look now and then instead. Jobs held by
            // a rate limit are looked for again when the limit lets the
            // next one out.
            let backstop = held.retry_ms == 0 && self.subscriber_connected();
            let every = self.inner.config.wait_backstop;
            let recheck = if held.retry_ms > 0 {
                Duration::from_millis(held.retry_ms)
            } else if backstop {
                every
            } else {
                Duration::from_millis(250)
            };
            if held.retry_ms == 0 {
                guard.looked_empty(sent);
            }
            let mut looked = sent;
            let mut until = deadline.min(looked + recheck);
            loop {
                // Counted as parked only while its wake-ups are enabled
                // and nothing else is under way (see crate::waiters).
                guard.park();
                let woken = tokio::select! {
                    (_, i, _) = futures::future::select_all(notified.iter_mut()) => Some(i),
                    _ = tokio::time::sleep_until(until) => None,
                    _ = stop.wait() => None,
                };
                guard.unpark(woken);
                woken_look = woken.is_some();
                if woken.is_none() && stop.is_triggered() {
                    return Ok(Vec::new());
                }
                if woken.is_some() || !backstop || Instant::now() >= deadline {
                    break;
                }
                // The backstop came due: another waiter's look since this
                // one's stands for it (wait on from that look, wake-ups
                // still enabled), or this one looks for all.
                match guard.claim_look(looked) {
                    Some(at) => {
                        looked = at;
                        until = deadline.min(at + every);
                    }
                    None => break,
                }
            }
        }
    }

    /// One pop attempt, run in its own task so that it completes even if the
    /// caller goes away or stops waiting: a reservation nobody received is
    /// released at once, uncounted. So is one whose lease had already ended
    /// when its reply got here (this process stalled): the job goes back to
    /// ready instead of to a consumer whose finish would be refused.
    async fn pop_guarded(
        &self,
        topics: &[String],
        max: usize,
        patience: Duration,
        woken: bool,
    ) -> Result<(Vec<Delivery>, Held)> {
        let (tx, rx) = oneshot::channel();
        let mut rx = Unclaimed {
            rx,
            queue: self.clone(),
        };
        let queue = self.clone();
        let owned = topics.to_vec();
        tokio::spawn(async move {
            let result = queue
                .store()
                .pop(
                    &owned,
                    max,
                    queue.limits().max_pop_bytes,
                    patience,
                    patience + LATE_REPLY_GRACE,
                    woken,
                )
                .await;
            if let Err(Ok((unclaimed, _))) = tx.send(result) {
                queue
                    .store()
                    .release_all(unclaimed, "its pop's caller had gone")
                    .await;
            }
        });
        let (got, held) = match tokio::time::timeout(patience, &mut rx.rx).await {
            Ok(Ok(result)) => result?,
            Ok(Err(_)) => {
                return Err(Error::protocol(
                    "pop",
                    "pop task ended without a result".into(),
                ))
            }
            // The task goes on: if the reply comes after all, its jobs are
            // released.
            Err(_) => return Err(self.store().redis.timed_out("pop")),
        };
        let now = self.clock().estimate_us();
        let (live, ended): (Vec<_>, Vec<_>) = got
            .into_iter()
            .partition(|d| now.is_none_or(|now| now < d.lease_until_ms.saturating_mul(1000)));
        if !ended.is_empty() {
            let queue = self.clone();
            tokio::spawn(async move {
                queue
                    .store()
                    .release_all(ended, "its lease ended before the reply arrived")
                    .await
            });
        }
        self.count_popped(topics, &live, held);
        Ok((live, held))
    }
}

/// The receiving end of a pop's result. A pop whose caller stops waiting,
/// or goes away, after its result was sent and before taking it leaves
/// the jobs in the channel: given back here, as the sending task gives
/// back those it could not send.
struct Unclaimed {
    rx: oneshot::Receiver<Result<(Vec<Delivery>, Held)>>,
    queue: Queue,
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        // Closed first: a result sent from now on goes back to its sender.
        self.rx.close();
        let Ok(Ok((jobs, _))) = self.rx.try_recv() else {
            return;
        };
        if jobs.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let queue = self.queue.clone();
        rt.spawn(async move {
            (queue.store())
                .release_all(jobs, "its pop's caller had gone")
                .await
        });
    }
}
