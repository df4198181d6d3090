//! Reading jobs: one by id, pages by topic and state, what falls due
//! next, dead letters.

use super::Queue;
use crate::error::{Error, Result};
use crate::job::Job;

impl Queue {
    /// Reads a job, in whatever state it is.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn get(&self, id: &str) -> Result<Option<Job>> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        self.store().get(id).await
    }

    /// Dead jobs of `topic`, oldest first: `limit` of them from `offset`.
    pub async fn dead(&self, topic: &str, offset: usize, limit: usize) -> Result<Vec<Job>> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let last = offset
            .checked_add(limit - 1)
            .filter(|&n| i64::try_from(n).is_ok())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "offset {offset} is out of range: 0 to {}",
                    i64::MAX as usize - limit
                ))
            })?;
        let ids = self.store().dead_ids(topic, offset, last).await?;
        self.store().list_many(&ids).await
    }

    /// A page of `topic`'s jobs in `state`, and the cursor of the next page
    /// (None: no more): delayed jobs by due time, reserved ones by lease
    /// end, dead ones by time of death (oldest first), finished ones' kept
    /// records by when they finished (newest first), ready ones in the
    /// order they will be handed out. At most `limit` (1 to 1000) jobs;
    /// each page costs Redis time in proportion to the page.
    pub async fn list_jobs(
        &self,
        topic: &str,
        state: crate::JobState,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Job>, Option<String>)> {
        use crate::store::list::{Cursor, Sorted};
        use crate::JobState;
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        let limit = check_page(limit)?;
        let cursor = cursor
            .map(Cursor::decode)
            .transpose()
            .map_err(Error::Invalid)?;
        let s = self.store();
        let page = match state {
            JobState::Ready => return self.list_ready(topic, cursor, limit).await,
            JobState::Dead => {
                s.list_sorted(Sorted::Dead { topic }, cursor.as_ref(), limit)
                    .await?
            }
            JobState::Finished => {
                s.list_sorted(Sorted::Finished { topic }, cursor.as_ref(), limit)
                    .await?
            }
            JobState::Delayed | JobState::Reserved => {
                s.list_sorted(
                    Sorted::Schedule {
                        topic: Some(topic),
                        state: state.as_str(),
                    },
                    cursor.as_ref(),
                    limit,
                )
                .await?
            }
        };
        self.page_of(page).await
    }

    /// A page of `topic`'s ready jobs. A ready list keeps the entries of
    /// jobs that left ready by a delete or a reschedule until a pop skips
    /// them: those are not listed, and the page reads on past them, up to
    /// STALE_LOOK_MAX entries more than it lists (then it ends short, with
    /// a cursor).
    async fn list_ready(
        &self,
        topic: &str,
        mut cursor: Option<crate::store::list::Cursor>,
        limit: usize,
    ) -> Result<(Vec<Job>, Option<String>)> {
        const STALE_LOOK_MAX: usize = 2000;
        let mut jobs: Vec<Job> = Vec::new();
        let mut listed = std::collections::HashSet::new();
        let mut looked = 0;
        // The page's bodies are bounded together, however many reads it takes.
        let mut room = crate::job::LIST_PAGE_BODY_BYTES as u64;
        loop {
            let page = self
                .store()
                .list_ready(topic, cursor.as_ref(), limit - jobs.len())
                .await?;
            looked += page.ids.len();
            cursor = page.next;
            let ids: Vec<String> = page.ids.into_iter().map(|(id, _)| id).collect();
            for j in self.store().list_many_within(&ids, &mut room).await? {
                if j.state == crate::JobState::Ready
                    && j.topic == topic
                    && listed.insert(j.id.clone())
                {
                    jobs.push(j);
                }
            }
            if jobs.len() >= limit || cursor.is_none() || looked >= limit + STALE_LOOK_MAX {
                return Ok((jobs, cursor.map(|c| c.encode())));
            }
        }
    }

    /// What falls due next, every topic: delayed jobs by due time, a page
    /// of at most `limit`, and the next page's cursor. One call looks at a
    /// bounded number of schedule entries.
    pub async fn upcoming(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Job>, Option<String>)> {
        use crate::store::list::{Cursor, Sorted};
        let limit = check_page(limit)?;
        let cursor = cursor
            .map(Cursor::decode)
            .transpose()
            .map_err(Error::Invalid)?;
        let page = self
            .store()
            .list_sorted(
                Sorted::Schedule {
                    topic: None,
                    state: crate::JobState::Delayed.as_str(),
                },
                cursor.as_ref(),
                limit,
            )
            .await?;
        self.page_of(page).await
    }

    async fn page_of(&self, page: crate::store::list::Page) -> Result<(Vec<Job>, Option<String>)> {
        let ids: Vec<String> = page.ids.into_iter().map(|(id, _)| id).collect();
        let jobs = self.store().list_many(&ids).await?;
        Ok((jobs, page.next.map(|c| c.encode())))
    }
}

/// Checks a page size.
fn check_page(limit: usize) -> Result<usize> {
    if (1..=1000).contains(&limit) {
        Ok(limit)
    } else {
        Err(Error::Invalid(format!(
            "limit {limit} is out of range: 1 to 1000"
        )))
    }
}
