//! Waiting for a job's outcome (`GET /v1/jobs/{id}?wait_ms=`): the job
//! finished (its record), dead, or gone. Redis tells nothing when a job
//! ends (a plain finish publishes nothing, so that it costs what it did),
//! so one poll per instance stands for all its waiters: every
//! [`OUTCOME_POLL`] while any wait, a read of two fields of every job
//! waited on (a pipeline per partition, O(the distinct ids waited on), at
//! most [`MAX_OUTCOME_WAITS`]), then the whole of those that have an
//! outcome; none while none wait.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use super::Queue;
use crate::defaults::{MAX_OUTCOME_WAIT, MAX_OUTCOME_WAITS, OUTCOME_POLL};
use crate::error::{Error, Result};
use crate::job::{Job, JobState};

/// The jobs waited on, each with its waiters.
#[derive(Default)]
pub(crate) struct Outcomes(Mutex<Waiting>);

#[derive(Default)]
struct Waiting {
    ids: HashMap<String, Vec<oneshot::Sender<Option<Job>>>>,
    /// A poll task runs (it ends when no one waits).
    polling: bool,
}

/// Whether a read is an outcome: no job (never was, deleted, or its
/// record gone), or one finished or dead.
fn settled(j: &Option<Job>) -> bool {
    j.as_ref()
        .is_none_or(|j| matches!(j.state, JobState::Finished | JobState::Dead))
}

impl Queue {
    /// Job `id` once it has an outcome (finished, with its result if its
    /// finish carried one; dead; or None: gone, or never was), or as it
    /// stands when `wait` runs out (at most [`MAX_OUTCOME_WAIT`]; zero: at
    /// once, as [`get`](Self::get)). Waiters of one instance share one
    /// poll of Redis (see the module's note): a finish is seen within
    /// about [`OUTCOME_POLL`].
    pub async fn wait_outcome(&self, id: &str, wait: Duration) -> Result<Option<Job>> {
        if wait > MAX_OUTCOME_WAIT {
            return Err(Error::Invalid(format!(
                "wait_ms {} is too long: at most {} ms",
                wait.as_millis(),
                MAX_OUTCOME_WAIT.as_millis()
            )));
        }
        let now = self.get(id).await?;
        if wait.is_zero() || settled(&now) {
            return Ok(now);
        }
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut w = self.inner.outcomes.0.lock().unwrap();
            if !w.ids.contains_key(id) && w.ids.len() >= MAX_OUTCOME_WAITS {
                return Err(Error::Busy(format!(
                    "{MAX_OUTCOME_WAITS} jobs are waited on at once on this instance, \
                     the most it polls: read the job without wait_ms, or wait on fewer"
                )));
            }
            w.ids.entry(id.to_owned()).or_default().push(tx);
            !std::mem::replace(&mut w.polling, true)
        };
        if start {
            tokio::spawn(self.clone().poll_outcomes());
        }
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(job)) => Ok(job),
            // The wait ran out (or the queue closed): as it stands now.
            _ => self.get(id).await,
        }
    }

    /// How many jobs this instance waits on now (for the suite: a wait
    /// joins after its first read, so a test cannot tell otherwise).
    #[doc(hidden)]
    pub fn outcome_waits(&self) -> usize {
        self.inner.outcomes.0.lock().unwrap().ids.len()
    }

    /// The instance's one poll: runs while anyone waits.
    async fn poll_outcomes(self) {
        let outcomes = &self.inner.outcomes.0;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(OUTCOME_POLL) => {}
                _ = self.inner.h.stop.wait() => {}
            }
            let ids: Vec<String> = {
                let mut w = outcomes.lock().unwrap();
                // Waiters whose wait ran out are dropped here.
                w.ids.retain(|_, txs| {
                    txs.retain(|t| !t.is_closed());
                    !txs.is_empty()
                });
                if w.ids.is_empty() || self.inner.h.stop.is_triggered() {
                    w.ids.clear();
                    w.polling = false;
                    return;
                }
                w.ids.keys().cloned().collect()
            };
            // Two fields of each first; the whole job only of those settled.
            let read = async {
                let settled = self.store().settled(&ids).await?;
                self.store().get_many(&settled).await.map(|j| (settled, j))
            };
            let (ids, jobs) = match read.await {
                Ok(read) => read,
                Err(e) => {
                    tracing::debug!(error = %e, "outcomes not read; again at the next poll");
                    continue;
                }
            };
            let mut read: HashMap<String, Job> =
                jobs.into_iter().map(|j| (j.id.clone(), j)).collect();
            let mut w = outcomes.lock().unwrap();
            for id in ids {
                let job = read.remove(&id);
                if settled(&job) {
                    for tx in w.ids.remove(&id).unwrap_or_default() {
                        let _ = tx.send(job.clone());
                    }
                }
            }
        }
    }
}
