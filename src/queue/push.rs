//! Pushes: input checked against the limits, refused while Redis may evict
//! jobs, the retry policy chosen, the sweep woken for a new earliest job.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, Instrument};

use super::Queue;
use crate::error::{Error, Result};
use crate::figures::{evicting, Memory};
use crate::job::{IfExists, NewJob, Pushed};
use crate::store::push::Push;
use crate::trace::{Hop, HopKind};

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

    /// Refuses new jobs while Redis is set to evict them. The policy is
    /// read at most once a second, off the caller's path: a stale reading
    /// answers at once while a fresh one is taken in the background, so
    /// the read never adds its wait to the push's (with Redis down, a push
    /// fails within its own timeout). Only the first call, with no reading
    /// yet, waits for one, within `limit`. A server that does not let
    /// delayq read it (INFO denied by an ACL) is taken at its word.
    pub(super) async fn check_policy(&self, limit: Duration) -> Result<()> {
        let last = self.inner.policy.lock().unwrap().clone();
        let policy = match last {
            Some((at, p)) => {
                if at.elapsed() >= POLICY_RECHECK {
                    self.refresh_policy();
                }
                p
            }
            None => match tokio::time::timeout(limit, self.read_policy()).await {
                Ok(Ok(Some(p))) => p,
                Ok(Ok(None)) => return Ok(()),
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err(self.store().redis.timed_out("read maxmemory-policy")),
            },
        };
        if evicting(&policy) {
            return Err(Error::Evicting(policy));
        }
        Ok(())
    }

    /// Takes a fresh reading of the policy in the background, unless one
    /// is being taken.
    fn refresh_policy(&self) {
        if self.inner.policy_reading.swap(true, Ordering::AcqRel) {
            return;
        }
        let q = self.clone();
        tokio::spawn(async move {
            let _ = q.read_policy().await;
            q.inner.policy_reading.store(false, Ordering::Release);
        });
    }

    /// Reads the policy: None when it cannot be read and pushes go on
    /// (INFO denied, an unexpected reply). Redis not answering keeps the
    /// last reading for another second: the read goes to every master, and
    /// one that does not answer (hung, or lost before the client knows its
    /// replica) says nothing of the others, and the push goes on to its
    /// own partition, whose node answers for itself. With no reading yet,
    /// the error stands.
    async fn read_policy(&self) -> Result<Option<String>> {
        match self.memory().await {
            Ok(m) => Ok(Some(m.policy)),
            Err(Error::Refused { .. }) => Ok(None),
            Err(e) if e.is_unavailable() => {
                let mut last = self.inner.policy.lock().unwrap();
                match last.as_mut() {
                    Some((at, p)) => {
                        *at = Instant::now();
                        Ok(Some(p.clone()))
                    }
                    None => Err(e),
                }
            }
            Err(_) => Ok(None),
        }
    }

    /// `job` (which `check_job` has accepted) as the push script takes it.
    pub(super) fn to_push(&self, job: &NewJob) -> Push {
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
            // A job of a batch is only created (its home took its id in).
            keep: job.if_exists == IfExists::Keep || job.batch.is_some(),
            extra: crate::store::push::Extra {
                traceparent: job.traceparent.clone(),
                tracestate: job.tracestate.clone(),
                dedup: job.dedup.as_ref().map(Into::into),
                priority: (job.priority > 0).then_some(job.priority),
                tags: distinct(&job.tags),
                group: job.group.clone(),
                batch: job.batch.clone(),
            },
        }
    }

    /// A push's job, placed in the partition its dedup key's record or its
    /// group must share with it (one script call holds both: atomic; a
    /// group's jobs all live in its home partition, where its limits are
    /// counted). With no id, a UUID that lands there; with an id on a
    /// partitioned queue, refused unless the id is there. Any other push
    /// is taken as it is.
    pub(super) fn placed<'a>(
        &self,
        job: &'a NewJob,
    ) -> Result<std::borrow::Cow<'a, NewJob>, String> {
        let store = self.store();
        let key_home = job.dedup.as_ref().map(|d| store.part_of(&d.key));
        let group_home = job.group.as_deref().map(|g| store.group_home(g));
        let home =
            match (key_home, group_home) {
                (None, None) => return Ok(std::borrow::Cow::Borrowed(job)),
                (Some(k), Some(g)) if k != g => {
                    return Err(format!(
                    "dedup.key {:?} and group {:?} fall in different partitions of this queue, \
                     and both must live with the job: give them the same hash tag, \
                     e.g. key \"{{acct:7}}:order-9\" with group \"{{acct:7}}\"",
                    job.dedup.as_ref().map(|d| d.key.as_str()).unwrap_or_default(),
                    job.group.as_deref().unwrap_or_default()
                ))
                }
                (Some(h), _) | (None, Some(h)) => h,
            };
        if !job.id.is_empty() {
            if store.part_of(&job.id) == home {
                return Ok(std::borrow::Cow::Borrowed(job));
            }
            return Err(match (&job.dedup, &job.group) {
                (Some(d), _) => format!(
                    "id {:?} and dedup.key {:?} fall in different partitions of this queue, \
                     and the key's record must live with its job: leave id out (delayq picks \
                     one in the key's partition) or give id and key the same hash tag, \
                     e.g. id \"{{member:77}}:r1\" with key \"{{member:77}}\"",
                    job.id, d.key
                ),
                (None, Some(g)) => format!(
                    "id {:?} falls outside group {g:?}'s partition of this queue, and a \
                     group's jobs all live in its partition (where its limits are counted): \
                     leave id out (delayq picks one there) or give it one there (one with \
                     the group's hash tag, if it has one), e.g. id {:?} for this group",
                    job.id,
                    group_id_hint(g, store.parts().len(), self.limits())
                ),
                (None, None) => unreachable!("a home comes from a key or a group"),
            });
        }
        // A uniform hash: on average one try per partition.
        let id = std::iter::repeat_with(|| uuid::Uuid::new_v4().to_string())
            .find(|id| store.part_of(id) == home)
            .expect("an endless supply of ids");
        Ok(std::borrow::Cow::Owned(NewJob { id, ..job.clone() }))
    }

    /// Books a push's outcome.
    pub(super) fn pushed(&self, job: &NewJob, p: crate::store::push::PushReply) -> Pushed {
        self.inner
            .h
            .pushed(&job.topic, self.store().part_of(&job.id), &p);
        Pushed {
            id: p.job_id.unwrap_or_else(|| job.id.clone()),
            due_ms: p.due_ms,
            outcome: p.outcome,
        }
    }

    /// Pushes a job; an existing job with the same id is replaced (or kept,
    /// with [`IfExists::Keep`]). With [`NewJob::dedup`], the key decides
    /// first (see [`crate::Dedup`]), and an empty id lets delayq pick one.
    #[tracing::instrument(skip_all, fields(id = %job.id, topic = %job.topic))]
    pub async fn push(&self, job: &NewJob) -> Result<Pushed> {
        let job = &*self.placed(job).map_err(Error::Invalid)?;
        self.limits().check_job(job).map_err(Error::Invalid)?;
        // A traced job's push is a span of its trace (trace_id in the logs).
        let span = push_span(job);
        async {
            // The policy check and the push share the caller's deadline.
            let deadline = Instant::now() + self.store().redis.timeout();
            self.check_policy(self.store().redis.timeout()).await?;
            if job.batch.is_some() {
                let mut r = self.push_into_batches(&[job]).await;
                return r.pop().expect("one reply per job");
            }
            let limit = deadline.saturating_duration_since(Instant::now());
            let reply = self.store().push(self.to_push(job), limit).await?;
            let pushed = self.pushed(job, reply);
            debug!(due = %crate::duration::rfc3339_ms(pushed.due_ms), due_ms = pushed.due_ms, outcome = ?pushed.outcome, "pushed");
            Ok(pushed)
        }
        .instrument(span)
        .await
    }

    /// Pushes many jobs in few round trips: one script call per partition
    /// and up to 128 jobs, the partitions' calls at once, a partition's
    /// one after another, so the jobs are applied in the order given (a
    /// later job with an earlier one's id replaces it; jobs due in the same
    /// millisecond become ready in this order). Each job is still its own
    /// atomic upsert. Jobs that break a limit get their own
    /// [`Error::Invalid`] and are not sent.
    #[tracing::instrument(skip_all, fields(jobs = jobs.len()))]
    pub async fn push_many(&self, jobs: &[NewJob]) -> Result<Vec<Result<Pushed>>> {
        let placed: Vec<Result<std::borrow::Cow<NewJob>, String>> =
            jobs.iter().map(|j| self.placed(j)).collect();
        let checked: Vec<Result<(), String>> = placed
            .iter()
            .map(|j| match j {
                Ok(j) => self.limits().check_job(j),
                Err(e) => Err(e.clone()),
            })
            .collect();
        let valid: Vec<&NewJob> = placed
            .iter()
            .zip(&checked)
            .filter_map(|(j, c)| match (j, c) {
                (Ok(j), Ok(())) => Some(&**j),
                _ => None,
            })
            .collect();
        // Jobs of batches take their own path (their homes first).
        let (batched, plain): (Vec<&NewJob>, Vec<&NewJob>) =
            valid.iter().partition(|j| j.batch.is_some());
        let replies = if plain.is_empty() {
            Vec::new()
        } else {
            self.check_policy(self.store().redis.timeout()).await?;
            let pushes: Vec<Push> = plain.iter().map(|j| self.to_push(j)).collect();
            // Each traced job's push span lasts as long as the batch's.
            let _spans: Vec<tracing::Span> = plain.iter().map(|j| push_span(j)).collect();
            self.store().push_many(&pushes).await?
        };
        let mut plain_replies = plain
            .iter()
            .zip(replies)
            .map(|(j, r)| r.map(|r| self.pushed(j, r)));
        let mut batched_replies = if batched.is_empty() {
            Vec::new()
        } else {
            self.check_policy(self.store().redis.timeout()).await?;
            self.push_into_batches(&batched).await
        }
        .into_iter();
        let mut replies = valid.iter().map(|j| {
            if j.batch.is_some() {
                batched_replies.next()
            } else {
                plain_replies.next()
            }
        });
        let mut replies = std::iter::from_fn(move || replies.next().flatten());
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

/// The push's span for a traced job (none for a plain one).
fn push_span(job: &NewJob) -> tracing::Span {
    Hop::child_of(job.traceparent.as_deref(), job.tracestate.as_deref())
        .map_or_else(tracing::Span::none, |h| {
            h.span(HopKind::Push, &job.id, &job.topic)
        })
}

/// Tags without repeats, in the order first given.
fn distinct(tags: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for t in tags {
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    out
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

/// An id that a push of group `g` on a queue of `n` partitions takes: in
/// the group's partition, and one `limits` accept. The group's hash tag
/// reads best, but a tag with a brace in it, or a group whose braces make
/// no tag (its whole key counts), cannot be wrapped in braces again: then
/// the group's own key, else the first of r1, r2, ... that lands there (a
/// uniform hash: about `n` tries).
fn group_id_hint(g: &str, n: usize, limits: &crate::job::Limits) -> String {
    let home = crate::store::layout::partition_of(g, n);
    [format!("{{{}}}:r1", hash_tag(g)), g.to_owned()]
        .into_iter()
        .chain((1..).map(|i| format!("r{i}")))
        .find(|id| {
            crate::store::layout::partition_of(id, n) == home && limits.check_new_id(id).is_ok()
        })
        .expect("an endless supply of ids")
}

/// The part of `key` that decides its partition (its hash tag).
fn hash_tag(key: &str) -> &str {
    // Split at ASCII braces: still UTF-8.
    std::str::from_utf8(crate::store::layout::hash_tag(key.as_bytes())).unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::layout::partition_of;
    use proptest::prelude::*;

    fn hint_is_taken(g: &str, n: usize) -> Result<(), TestCaseError> {
        let limits = crate::job::Limits::default();
        let hint = group_id_hint(g, n, &limits);
        prop_assert_eq!(
            partition_of(&hint, n),
            partition_of(g, n),
            "{:?} for group {:?}",
            hint,
            g
        );
        prop_assert!(
            limits.check_new_id(&hint).is_ok(),
            "{:?} for group {:?}",
            hint,
            g
        );
        Ok(())
    }

    #[test]
    fn the_group_id_hint_is_taken_for_odd_groups() {
        for g in [
            "}{", "{}x", "}", "{}", "a}b{c", "x}", "acct:7", "{acct:7}", " x}", "..", "{a{b}",
        ] {
            for n in [2, 3, 4, 12] {
                hint_is_taken(g, n).unwrap();
            }
        }
    }

    proptest! {
        #[test]
        fn the_group_id_hint_is_taken(g in "[{}a. :x]{1,12}", n in 2usize..16) {
            prop_assume!(crate::job::check_group(&g).is_ok());
            hint_is_taken(&g, n)?;
        }
    }
}
