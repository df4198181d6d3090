//! Batches (see [`crate::batch`]): creating one, pushing jobs into it,
//! closing, cancelling and reading it.
//!
//! A push into a batch is three steps: the batch's home takes the ids in
//! (`batch_add.lua`), the jobs are pushed where their ids put them, the
//! home hears how each push went (`batch_settle.lua`). Taking the ids in
//! first is what keeps the callback from firing early: a running job of
//! the batch that adds jobs has them counted before its own finish can
//! be. A pusher that dies between the first two steps leaves reservations
//! that the relay settles (`loops::notes`).

use std::collections::BTreeMap;

use tracing::warn;

use super::Queue;
use crate::batch::{check_batch_id, Batch, BatchOn, BatchState, NewBatch};
use crate::error::{Error, Result};
use crate::job::{NewJob, PushOutcome, Pushed};
use crate::store::batches::{
    count, field, BatchAdd, BatchCancelJobs, BatchClose, BatchOpen, BatchSettle, Callback, Closed,
    Take, Taken,
};
use crate::store::layout::batch_field as f;

/// Most entries of a batch's live index one cancel call looks at.
const CANCEL_PAGE: usize = 500;

impl Queue {
    /// Creates a batch, open: push jobs into it (`NewJob::batch`), then
    /// [`close_batch`](Self::close_batch). Its callback job's id is picked now, in the
    /// batch's home partition. An id that names a batch already (or one
    /// kept after it ended) is refused ([`Error::Conflict`]).
    #[tracing::instrument(skip_all, fields(batch = %b.id))]
    pub async fn create_batch(&self, b: &NewBatch) -> Result<Batch> {
        let id = if b.id.is_empty() {
            uuid::Uuid::new_v4().to_string()
        } else {
            b.id.clone()
        };
        crate::job::check_new_batch_id(&id).map_err(Error::Invalid)?;
        // The report carries the body escaped: bounded as a result is.
        if b.callback.body.len() > crate::defaults::MAX_RESULT_BYTES {
            return Err(Error::Invalid(format!(
                "callback body is {} bytes; the limit is {}",
                b.callback.body.len(),
                crate::defaults::MAX_RESULT_BYTES
            )));
        }
        self.check_builds_know_batches().await?;
        let store = self.store();
        let home = store.part_of(&id);
        let cb_id = std::iter::repeat_with(|| uuid::Uuid::new_v4().to_string())
            .find(|c| store.part_of(c) == home)
            .expect("an endless supply of ids");
        let cb = &b.callback;
        let probe = NewJob {
            id: cb_id.clone(),
            topic: cb.topic.clone(),
            body: cb.body.clone(),
            ttr: cb.ttr,
            retry: cb.retry.clone(),
            ..NewJob::default()
        };
        self.limits()
            .check_job(&probe)
            .map_err(|e| Error::Invalid(format!("callback: {e}")))?;
        let policy = cb
            .retry
            .as_ref()
            .unwrap_or_else(|| self.retry_policy_for(&cb.topic));
        let callback = Callback {
            id: cb_id,
            topic: cb.topic.clone(),
            body: cb.body.clone(),
            ttr_ms: cb.ttr.as_millis() as u64,
            intervals_ms: policy.intervals_ms(),
            max_attempts: policy.max_attempts.unwrap_or(0),
            parent: None,
        };
        let created = store
            .run::<BatchOpen>(home, (&id, &callback, b.on.as_str(), &callback))
            .await?;
        if !created {
            return Err(Error::Conflict(format!(
                "batch {id:?} exists (or ended within the retention); pick another id"
            )));
        }
        self.batch(&id).await?.ok_or(Error::NoBatch(id))
    }

    /// Refuses while an instance of an older build runs on this queue:
    /// its scripts would end jobs of a batch without telling the batch's
    /// home, and the batch would wait for ever. One read of the heartbeats
    /// (bounded by the instances).
    pub(super) async fn check_builds_know_batches(&self) -> Result<()> {
        let old: Vec<String> = self
            .instances()
            .await?
            .into_iter()
            .filter(|i| i.batches != Some(true))
            .map(|i| format!("{} ({})", i.id, i.version))
            .collect();
        if old.is_empty() {
            return Ok(());
        }
        Err(Error::Conflict(format!(
            "batches need every instance of this queue to run a build that knows them; \
             these do not: {}: upgrade them first",
            old.join(", ")
        )))
    }

    /// A batch's state and counts, or None (no such batch, or its
    /// retention ran out). One read of its hash.
    pub async fn batch(&self, id: &str) -> Result<Option<Batch>> {
        check_batch_id(id).map_err(Error::Invalid)?;
        let fields = self.store().batch_fields(id).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let state = BatchState::parse(field(&fields, f::STATE))
            .ok_or_else(|| Error::protocol("batch", format!("state of {id:?}")))?;
        let (jobs, finished, dead, deleted) = (
            count(&fields, f::JOBS),
            count(&fields, f::FINISHED),
            count(&fields, f::DEAD),
            count(&fields, f::DELETED),
        );
        Ok(Some(Batch {
            id: id.to_owned(),
            state,
            on: BatchOn::parse(field(&fields, f::ON)).unwrap_or_default(),
            callback_id: field(&fields, f::CALLBACK_ID).to_owned(),
            callback_topic: field(&fields, f::CALLBACK_TOPIC).to_owned(),
            jobs,
            finished,
            dead,
            deleted,
            pending: jobs.saturating_sub(finished + dead + deleted),
            created_ms: field(&fields, f::CREATED_AT).parse().unwrap_or(0),
            ended_ms: field(&fields, f::ENDED_AT).parse().ok(),
        }))
    }

    /// Closes an open batch: its pusher is done. It fires once every job
    /// it took in has its outcome (at once, if they all have). Closing a
    /// closed batch changes nothing. Its state after.
    pub async fn close_batch(&self, id: &str) -> Result<BatchState> {
        self.close_or_cancel(id, "close").await
    }

    /// Cancels a batch: it never fires, takes no more jobs, and its jobs
    /// not handed out yet (delayed, ready) are deleted; running jobs end as
    /// their consumers say, dead ones stay. How many jobs were deleted.
    /// Cancelling a fired batch is refused ([`Error::Conflict`]).
    pub async fn cancel_batch(&self, id: &str) -> Result<u64> {
        self.close_or_cancel(id, "cancel").await?;
        self.cancel_batch_jobs(id).await
    }

    /// Deletes a cancelled batch's jobs not handed out, partition by
    /// partition, a page a call. How many went.
    pub(super) async fn cancel_batch_jobs(&self, id: &str) -> Result<u64> {
        let store = self.store();
        let mut deleted = 0;
        for part in 0..store.parts().len() {
            let mut cursor = String::new();
            loop {
                let (next, n) = store
                    .run::<BatchCancelJobs>(part, (id, cursor.as_str(), CANCEL_PAGE))
                    .await?;
                deleted += n;
                if next.is_empty() {
                    break;
                }
                cursor = next;
            }
        }
        Ok(deleted)
    }

    async fn close_or_cancel(&self, id: &str, what: &str) -> Result<BatchState> {
        check_batch_id(id).map_err(Error::Invalid)?;
        self.end_batch(id, what).await
    }

    /// Closes ("close") or cancels ("cancel") batch `id` (a flow's too),
    /// checked by the caller.
    pub(super) async fn end_batch(&self, id: &str, what: &str) -> Result<BatchState> {
        let home = self.store().batch_home(id);
        let reply = self
            .store()
            .run::<BatchClose>(home, (id, what, self.batch_retention()))
            .await?;
        let state = |s: &str| {
            BatchState::parse(s).ok_or_else(|| Error::protocol("batch_close", format!("{s:?}")))
        };
        match reply {
            Closed::Now(s) => state(&s),
            Closed::Missing => Err(Error::NoBatch(id.to_owned())),
            Closed::Ended(s) => Err(Error::Conflict(format!(
                "batch {id:?} is {s}: it cannot be {}",
                if what == "close" {
                    "closed"
                } else {
                    "cancelled"
                }
            ))),
        }
    }

    /// How long a fired or cancelled batch stays readable, ms.
    fn batch_retention(&self) -> u64 {
        self.store().keep.results.as_millis().max(1) as u64
    }

    /// Pushes `jobs` (placed and checked; each with a batch), batch by
    /// batch: the home takes their ids in, then they are pushed, then the
    /// home hears how each went. Per job as [`Queue::push_many`].
    pub(super) async fn push_into_batches(&self, jobs: &[&NewJob]) -> Vec<Result<Pushed>> {
        let mut out: Vec<Option<Result<Pushed>>> = vec![None; jobs.len()];
        let mut by_batch: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, j) in jobs.iter().enumerate() {
            let b = j.batch.as_deref().expect("jobs of batches only");
            by_batch.entry(b).or_default().push(i);
        }
        for (batch, idx) in by_batch {
            let done = self
                .push_into_batch(batch, &idx.iter().map(|&i| jobs[i]).collect::<Vec<_>>())
                .await;
            for (i, r) in idx.into_iter().zip(done) {
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.expect("every job answered"))
            .collect()
    }

    async fn push_into_batch(&self, batch: &str, jobs: &[&NewJob]) -> Vec<Result<Pushed>> {
        let store = self.store();
        let home = store.batch_home(batch);
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        let taken = match store.run::<BatchAdd>(home, (batch, &ids)).await {
            Ok(Taken::Ids(t)) => t,
            Ok(Taken::Missing) => return each(jobs, Error::NoBatch(batch.to_owned())),
            Ok(Taken::Ended(s)) => {
                return each(
                    jobs,
                    Error::Conflict(format!("batch {batch:?} is {s}: it takes no more jobs")),
                )
            }
            Err(e) => return each(jobs, e),
        };
        // An id that had its outcome in this batch is not pushed again.
        let sent: Vec<(&NewJob, Take)> = jobs
            .iter()
            .zip(taken.iter().copied())
            .filter(|(_, t)| *t != Take::Ended)
            .map(|(j, t)| (*j, t))
            .collect();
        let pushes: Vec<_> = sent.iter().map(|(j, _)| self.to_push(j)).collect();
        let replies = if pushes.is_empty() {
            Vec::new()
        } else {
            match store.push_many(&pushes).await {
                Ok(r) => r,
                // The reservations stay; the relay settles them.
                Err(e) => return each(jobs, e),
            }
        };
        let mut replies = sent.iter().map(|(j, _)| j.id.as_str()).zip(replies);
        let mut settle: Vec<(&str, &str)> = Vec::new();
        let mut out = Vec::with_capacity(jobs.len());
        for (job, take) in jobs.iter().zip(taken) {
            if take == Take::Ended {
                out.push(Err(Error::Conflict(format!(
                    "job id {:?} already had its outcome in batch {batch:?}: a batch takes an id once",
                    job.id
                ))));
                continue;
            }
            let (_, reply) = replies.next().expect("a reply per job sent");
            let new = take == Take::New;
            match reply {
                Ok(r) if r.outcome == PushOutcome::Kept && new => {
                    // The id names a job of no batch, or another's.
                    settle.push((&job.id, "lost"));
                    out.push(Err(Error::Conflict(format!(
                        "job id {:?} is in use (a job, or a waiting flow's parent): a job pushed into a batch is only created",
                        job.id
                    ))));
                }
                Ok(r) => {
                    if new {
                        settle.push((&job.id, "landed"));
                    }
                    out.push(Ok(self.pushed(job, r)));
                }
                Err(e) => out.push(Err(e)),
            }
        }
        if !settle.is_empty() {
            let retention = self.batch_retention();
            if let Err(e) = store
                .run::<BatchSettle>(home, (batch, retention, &settle))
                .await
            {
                warn!(batch, error = %e, "batch reservations not settled; the relay settles them");
            }
        }
        out
    }
}

/// The same error for every job.
fn each(jobs: &[&NewJob], e: Error) -> Vec<Result<Pushed>> {
    jobs.iter().map(|_| Err(e.clone())).collect()
}
