//! What a consumer (or an operator) does to one job: finish, release, nack,
//! touch, delete, reschedule. Each is one fenced script call.

use std::sync::OnceLock;
use std::time::Duration;

use super::Queue;
use crate::error::{Error, Result};
use crate::job::{check_due_at, Nacked};
use crate::store::cancel::Cancel;
#[cfg(feature = "server")]
use crate::store::hold::Hold;
use crate::store::nack::Nack;
use crate::store::release::Release;
use crate::store::remove::Fence;
use crate::store::reschedule::Reschedule;
use crate::store::touch::Touch;
use crate::store::Status;

/// How long after its lease would have ended a cancelled job's holder
/// still hears that it was cancelled (a consumer late with its finish).
pub const CANCEL_GRACE: Duration = Duration::from_secs(600);

impl Queue {
    /// Finishes a delivered job: the consumer holding lease `token` is done.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn finish(&self, id: &str, token: &str) -> Result<()> {
        self.finish_carrying(id, token, String::new()).await
    }

    /// Finishes a delivered job as [`finish`](Self::finish) does, with a
    /// result: any JSON value (null, a bare string, an object...) of at
    /// most [`MAX_RESULT_BYTES`](crate::defaults::MAX_RESULT_BYTES) (64
    /// KiB) serialized and
    /// [`MAX_PROGRESS_DEPTH`](crate::defaults::MAX_PROGRESS_DEPTH) levels.
    /// [`get`](Self::get) shows it in the job's finished record: kept as
    /// long as the topic keeps records (`keep_finished`), otherwise for
    /// `result_retention` (24 h unless configured), unlisted and uncounted.
    /// A result over the limit is [`Error::Invalid`] and changes nothing
    /// (the lease still holds); a stale token writes no result.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn finish_with_result(
        &self,
        id: &str,
        token: &str,
        result: &serde_json::Value,
    ) -> Result<()> {
        let json = super::running::check_result(result).map_err(Error::Invalid)?;
        self.finish_carrying(id, token, json).await
    }

    async fn finish_carrying(&self, id: &str, token: &str, result: String) -> Result<()> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        self.limits().check_token(token).map_err(Error::Invalid)?;
        let removed = self
            .store()
            .finish_with(id, Fence::Lease(token), result)
            .await?;
        match removed.status {
            Status::Done => {
                self.inner.h.metrics.finished.inc([&removed.topic], 1);
                Ok(())
            }
            Status::Stale => Err(Error::StaleLease(id.to_owned())),
            Status::Cancelled => Err(Error::Cancelled(id.to_owned())),
            _ => Err(Error::NotFound(id.to_owned())),
        }
    }

    /// Finishes many delivered jobs at once, each under its own lease
    /// token: what a consumer that popped a batch sends when the batch is
    /// done. One round trip (a script call per partition); each job has its
    /// own result, as [`finish`](Self::finish) would give it: a stale token
    /// or a malformed id fails that job only.
    #[tracing::instrument(skip_all, fields(jobs = leases.len()))]
    pub async fn finish_many(&self, leases: &[(&str, &str)]) -> Result<Vec<Result<()>>> {
        let leases: Vec<_> = leases.iter().map(|(id, token)| (*id, *token, "")).collect();
        self.finish_many_carrying(&leases).await
    }

    /// [`finish_many`](Self::finish_many), each job with its result
    /// (checked JSON text, "": none): a webhook's finishes.
    pub(crate) async fn finish_many_carrying(
        &self,
        leases: &[(&str, &str, &str)],
    ) -> Result<Vec<Result<()>>> {
        let checked: Vec<Result<(), String>> = leases
            .iter()
            .map(|(id, token, _)| {
                self.limits().check_id(id)?;
                self.limits().check_token(token)
            })
            .collect();
        let valid: Vec<(&str, &str, &str)> = leases
            .iter()
            .zip(&checked)
            .filter(|(_, c)| c.is_ok())
            .map(|(l, _)| *l)
            .collect();
        let mut done = if valid.is_empty() {
            Vec::new()
        } else {
            self.store().finish_many(&valid).await?
        }
        .into_iter();
        Ok(leases
            .iter()
            .zip(checked)
            .map(|((id, _, _), c)| {
                c.map_err(Error::Invalid)?;
                let removed = done.next().unwrap_or_else(|| {
                    Err(Error::protocol("remove", "fewer replies than jobs".into()))
                })?;
                match removed.status {
                    Status::Done => {
                        self.inner.h.metrics.finished.inc([&removed.topic], 1);
                        Ok(())
                    }
                    Status::Stale => Err(Error::StaleLease((*id).to_owned())),
                    Status::Cancelled => Err(Error::Cancelled((*id).to_owned())),
                    _ => Err(Error::NotFound((*id).to_owned())),
                }
            })
            .collect())
    }

    /// Gives a leased job back: ready again at once, the attempt not
    /// counted. A stale token changes nothing.
    pub async fn release(&self, id: &str, token: &str) -> Result<()> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        self.limits().check_token(token).map_err(Error::Invalid)?;
        let store = self.store();
        if store.run::<Release>(store.part_of(id), (id, token)).await? {
            return Ok(());
        }
        // Not current: say whether the job exists at all (a finished job's
        // kept record is none, as without it).
        match self.get(id).await? {
            Some(j) if j.state != crate::JobState::Finished => {
                Err(Error::StaleLease(id.to_owned()))
            }
            _ => Err(Error::NotFound(id.to_owned())),
        }
    }

    /// Finishes a job without a lease token, whatever its state: the
    /// compatible API's `/finish` (its record is kept as a finish's). False
    /// if there was no such job (a finished job's record is none).
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn finish_by_id(&self, id: &str) -> Result<bool> {
        self.remove_any(id, Fence::Finish, &self.inner.h.metrics.finished)
            .await
    }

    /// Cancels a job, whatever its state, or removes a finished job's kept
    /// record. False if there was neither.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn delete(&self, id: &str) -> Result<bool> {
        self.remove_any(id, Fence::Any, &self.inner.h.metrics.deleted)
            .await
    }

    /// Cancels job `id`, whatever its state; returns the state it was in
    /// (None: no such job, or only a finished job's record). A running
    /// job's lease ends at once and it is never handed out again: its
    /// holder's next touch, nack or finish fails with
    /// [`Error::Cancelled`] (changing nothing) until its lease would have
    /// ended, and `CANCEL_GRACE` after.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn cancel(&self, id: &str) -> Result<Option<crate::JobState>> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        let store = self.store();
        store
            .run::<Cancel>(store.part_of(id), (id, CANCEL_GRACE))
            .await
    }

    async fn remove_any(
        &self,
        id: &str,
        fence: Fence<'_>,
        counter: &crate::metrics::Counter<1>,
    ) -> Result<bool> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        let removed = self.store().remove(id, fence).await?;
        // A record removed is no job cancelled.
        if removed.status == Status::Done && removed.state != Some(crate::JobState::Finished) {
            counter.inc([&removed.topic], 1);
        }
        Ok(removed.status == Status::Done)
    }

    /// Reports a failed attempt: the job goes where its retry policy says
    /// (after `delay` instead of the schedule's interval, if given). A job
    /// with no policy at all waits [`RetryPolicy::backoff`]'s intervals
    /// when no `delay` is given (`Some(Duration::ZERO)`: again at once).
    ///
    /// [`RetryPolicy::backoff`]: crate::RetryPolicy::backoff
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn nack(
        &self,
        id: &str,
        token: &str,
        delay: Option<Duration>,
        error: &str,
    ) -> Result<Nacked> {
        let l = self.limits();
        l.check_id(id).map_err(Error::Invalid)?;
        l.check_token(token).map_err(Error::Invalid)?;
        if let Some(d) = delay {
            l.check_delay("nack delay", d).map_err(Error::Invalid)?;
        }
        // History lines are tab-separated, one per line: keep errors to one
        // line of bounded length.
        let error: String = error
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(1000)
            .collect();
        let error = if error.is_empty() { "nack" } else { &error };
        let retention = self.inner.h.retention;
        let store = self.store();
        let f = store
            .run::<Nack>(
                store.part_of(id),
                (retention, id, token, delay, error, backoff_ms()),
            )
            .await?;
        match (f.status, f.state) {
            (Status::Done, Some(state)) => {
                let m = &self.inner.h.metrics;
                match state {
                    crate::JobState::Dead => m.dead.inc([&f.topic], 1),
                    _ => m.retried.inc([&f.topic], 1),
                }
                if state == crate::JobState::Delayed {
                    self.inner.h.wake.one(self.store().part_of(id));
                }
                Ok(Nacked {
                    state,
                    due_ms: f.due_ms,
                })
            }
            (Status::Stale, _) => Err(Error::StaleLease(id.to_owned())),
            (Status::Cancelled, _) => Err(Error::Cancelled(id.to_owned())),
            _ => Err(Error::NotFound(id.to_owned())),
        }
    }

    /// Extends the lease `token` holds to `ttr` from now (the job's own ttr
    /// when `None`). Returns the new end of the lease (Unix ms).
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn touch(&self, id: &str, token: &str, ttr: Option<Duration>) -> Result<i64> {
        let l = self.limits();
        l.check_id(id).map_err(Error::Invalid)?;
        l.check_token(token).map_err(Error::Invalid)?;
        if let Some(t) = ttr {
            l.check_ttr(t).map_err(Error::Invalid)?;
        }
        let store = self.store();
        let touched = store
            .run::<Touch>(store.part_of(id), (id, token, ttr))
            .await?;
        match touched.status {
            Status::Done => Ok(touched.lease_until_ms),
            Status::Stale => Err(Error::StaleLease(id.to_owned())),
            Status::Cancelled => Err(Error::Cancelled(id.to_owned())),
            _ => Err(Error::NotFound(id.to_owned())),
        }
    }

    /// Checks many leases at once, right before their jobs are sent: per
    /// `(id, token, attempt)`, whether the lease is still held (the job was
    /// not deleted, rescheduled, finished, nacked or leased again
    /// meanwhile), and a held lease ending within `length` is extended to
    /// end then. A job rescheduled meanwhile has its attempt uncounted.
    /// One call per partition; per lease, its end (Unix ms) and the ms
    /// left when Redis looked, or [`Error::StaleLease`] /
    /// [`Error::NotFound`]. A long enough lease is only read.
    #[cfg(feature = "server")]
    pub(crate) async fn hold_many(
        &self,
        leases: &[(&str, &str, u32)],
        length: Duration,
    ) -> Result<Vec<Result<(i64, i64)>>> {
        let holds: Vec<Hold> = leases
            .iter()
            .map(|(id, token, attempt)| Hold {
                id: (*id).to_owned(),
                token: (*token).to_owned(),
                length,
                attempt: *attempt,
            })
            .collect();
        let checked = self.store().hold_many(&holds).await?;
        Ok(leases
            .iter()
            .zip(checked)
            .map(|((id, _, _), c)| {
                let c = c?;
                match c.status {
                    Status::Done => Ok((c.lease_until_ms, c.left_ms)),
                    Status::Stale => Err(Error::StaleLease((*id).to_owned())),
                    _ => Err(Error::NotFound((*id).to_owned())),
                }
            })
            .collect())
    }

    /// Gives a job a new due time (`due_at_ms`, or `delay` from now) and,
    /// optionally, a new body. Returns the new due time.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn reschedule(
        &self,
        id: &str,
        delay: Duration,
        due_at_ms: Option<i64>,
        body: Option<&str>,
    ) -> Result<i64> {
        let l = self.limits();
        l.check_id(id).map_err(Error::Invalid)?;
        l.check_delay("delay", delay).map_err(Error::Invalid)?;
        if let Some(at) = due_at_ms {
            check_due_at(at).map_err(Error::Invalid)?;
        }
        if let Some(b) = body {
            l.check_body(b).map_err(Error::Invalid)?;
        }
        let store = self.store();
        let r = store
            .run::<Reschedule>(store.part_of(id), (id, delay, due_at_ms, body))
            .await?;
        if r.status != Status::Done {
            return Err(Error::NotFound(id.to_owned()));
        }
        if r.new_head {
            self.inner.h.wake.one(self.store().part_of(id));
        }
        Ok(r.due_ms)
    }
}

/// The built-in backoff as the nack script takes it.
fn backoff_ms() -> &'static str {
    static MS: OnceLock<String> = OnceLock::new();
    MS.get_or_init(|| crate::RetryPolicy::backoff().intervals_ms())
}
