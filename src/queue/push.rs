//! Pushes: input checked against the limits, refused while Redis may evict
//! jobs, the retry policy chosen, the sweep woken for a new earliest job.

use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use super::Queue;
use crate::error::{Error, Result};
use crate::job::{IfExists, NewJob, PushOutcome, Pushed};
use crate::store::push::Push;
use crate::store::{read, Memory};

/// How long a reading of Redis's `maxmemory-policy` is trusted.
const POLICY_RECHECK: Duration = Duration::from_secs(1);

impl Queue {
    /// Redis's memory settings and use, read now.
    pub async fn memory(&self) -> Result<Memory> {
        let m = self.store().memory().await?;
        *self.inner.policy.lock().unwrap() = Some((Instant::now(), m.policy.clone()));
        if m.evicting() {
            tracing::error!(policy = %m.policy, "redis may evict delayq's jobs: set maxmemory-policy to noeviction; pushes are refused until then");
        }
        Ok(m)
    }

    /// Refuses new jobs while Redis is set to evict them. Reads the policy
    /// at most once a second; a server that does not let delayq read it
    /// (INFO denied by an ACL) is taken at its word.
    pub(super) async fn check_policy(&self) -> Result<()> {
        // The common case, on every push: a fresh reading that allows it,
        // looked at under the lock without copying it.
        let fresh = match &*self.inner.policy.lock().unwrap() {
            Some((at, p)) if at.elapsed() < POLICY_RECHECK => {
                Some(read::evicting(p).then(|| p.clone()))
            }
            _ => None,
        };
        let policy = match fresh {
            Some(None) => return Ok(()),
            Some(Some(p)) => p,
            None => match self.memory().await {
                Ok(m) => m.policy,
                Err(Error::Redis { source, .. }) if source.code() == Some("NOPERM") => {
                    return Ok(())
                }
                Err(e) if e.is_unavailable() => return Err(e),
                Err(_) => return Ok(()),
            },
        };
        if read::evicting(&policy) {
            return Err(Error::Evicting(policy));
        }
        Ok(())
    }

    /// `job` (which `check_job` has accepted) as the push script takes it.
    fn to_push(&self, job: &NewJob) -> Push {
        let policy = job
            .retry
            .as_ref()
            .unwrap_or_else(|| self.retry_policy_for(&job.topic));
        Push {
            id: job.id.clone(),
            topic: job.topic.clone(),
            body: job.body.clone(),
            ttr_ms: millis(job.ttr),
            delay_ms: millis(job.delay),
            due_at_ms: job.due_at_ms,
            intervals_ms: policy.intervals_ms(),
            max_attempts: policy.max_attempts.unwrap_or(0),
            keep: job.if_exists == IfExists::Keep,
            extra: crate::store::push::Extra {
                priority: (job.priority > 0).then_some(job.priority),
            },
        }
    }

    /// Books a push's outcome.
    fn pushed(&self, job: &NewJob, p: crate::store::push::Pushed) -> Pushed {
        if p.outcome != PushOutcome::Kept {
            self.inner.h.metrics.pushed.inc([&job.topic], 1);
        }
        if p.new_head {
            // Other instances hear of it on the wake channel; this one needs
            // no round trip through Redis.
            self.inner.h.wake.one(self.store().part_of(&job.id));
        }
        Pushed {
            due_ms: p.due_ms,
            outcome: p.outcome,
        }
    }

    /// Pushes a job; an existing job with the same id is replaced (or kept,
    /// with [`IfExists::Keep`]).
    #[tracing::instrument(skip_all, fields(id = %job.id, topic = %job.topic))]
    pub async fn push(&self, job: &NewJob) -> Result<Pushed> {
        self.limits().check_job(job).map_err(Error::Invalid)?;
        self.check_policy().await?;
        let reply = self.store().push(self.to_push(job)).await?;
        let pushed = self.pushed(job, reply);
        debug!(due_ms = pushed.due_ms, outcome = ?pushed.outcome, "pushed");
        Ok(pushed)
    }

    /// Pushes many jobs in one round trip (one script call per partition,
    /// of up to 128 jobs each, the calls at once; each
    /// job is still its own atomic upsert). Jobs that break a limit get
    /// their own [`Error::Invalid`] and are not sent.
    #[tracing::instrument(skip_all, fields(jobs = jobs.len()))]
    pub async fn push_many(&self, jobs: &[NewJob]) -> Result<Vec<Result<Pushed>>> {
        let checked: Vec<Result<(), String>> =
            jobs.iter().map(|j| self.limits().check_job(j)).collect();
        let valid: Vec<&NewJob> = jobs
            .iter()
            .zip(&checked)
            .filter(|(_, c)| c.is_ok())
            .map(|(j, _)| j)
            .collect();
        let replies = if valid.is_empty() {
            Vec::new()
        } else {
            self.check_policy().await?;
            let pushes: Vec<Push> = valid.iter().map(|j| self.to_push(j)).collect();
            self.store().push_many(&pushes).await?
        };
        let mut replies = valid
            .iter()
            .zip(replies)
            .map(|(j, r)| r.map(|r| self.pushed(j, r)));
        Ok(checked
            .into_iter()
            .map(|c| match c {
                Ok(()) => replies.next().unwrap_or_else(|| {
                    Err(Error::protocol("push", "fewer replies than jobs".into()))
                }),
                Err(e) => Err(Error::Invalid(e)),
            })
            .collect())
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}
