//! Tags: a tag's jobs listed, cancelled or rescheduled a page at a time.
//! Each page is one script call per partition it reaches, bounded by the
//! page's limit; a cursor `<partition>:<last id>` resumes where it stopped,
//! over all partitions in turn. The `_all` methods loop for the caller.

use super::Queue;
use crate::error::{Error, Result};
use crate::job::{check_due_at, check_tag, Job, JobState};
use crate::store::tag_pages::{TagCancel, TagList, TagPage};
pub use crate::store::tag_reschedule::TagMove;
use crate::store::tag_reschedule::TagReschedule;

pub use crate::defaults::{MAX_TAG_PAGE, TAG_PAGE};

/// What a cancel or reschedule by tag did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagChange {
    /// Jobs cancelled or moved.
    pub changed: u64,
    /// Jobs left alone (handed out, or dead for a reschedule), with their
    /// state.
    pub skipped: Vec<(String, JobState)>,
    /// Where the next page starts; None when the tag's jobs are done.
    pub cursor: Option<String>,
}

#[derive(Clone, Copy)]
enum Op {
    List,
    Cancel,
    Move(TagMove),
    /// A move's check: every page it would change, nothing changed.
    Check(TagMove),
}

impl Queue {
    /// A page of the jobs with `tag` (at most `limit` looked at, 1 to
    /// [`MAX_TAG_PAGE`]), by partition then id, and the cursor of the next
    /// page (None: no more).
    pub async fn tag_jobs(
        &self,
        tag: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Job>, Option<String>)> {
        let (pages, next) = self.tag_pages(tag, cursor, limit, Op::List).await?;
        let ids: Vec<String> = pages.into_iter().flat_map(|p| p.ids).collect();
        let jobs = self.store().list_many(&ids).await?;
        // A job that lost the tag between the two reads is not listed.
        let jobs = jobs.into_iter().filter(|j| j.tags.iter().any(|t| t == tag));
        Ok((jobs.collect(), next))
    }

    /// Deletes a page of the jobs with `tag` that are not handed out
    /// (delayed, ready, dead); reserved ones are reported, not changed.
    pub async fn cancel_tag(
        &self,
        tag: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TagChange> {
        self.tag_change(tag, cursor, limit, Op::Cancel).await
    }

    /// Moves a page of the jobs with `tag` that are delayed or ready to a
    /// new due time (never before now, Redis time); reserved and dead ones
    /// are reported, not changed.
    pub async fn reschedule_tag(
        &self,
        tag: &str,
        to: TagMove,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TagChange> {
        self.check_move(to)?;
        // A page over several partitions is one step per partition: each
        // is checked before any is changed, so a move that cannot be done
        // (a due time past the latest allowed) changes nothing.
        if self.store().parts().len() > 1 {
            self.tag_pages(tag, cursor, limit, Op::Check(to)).await?;
        }
        self.tag_change(tag, cursor, limit, Op::Move(to)).await
    }

    fn check_move(&self, to: TagMove) -> Result<()> {
        match to {
            TagMove::At(ms) => check_due_at(ms).map_err(Error::Invalid),
            TagMove::Shift(ms) => {
                let max = self.limits().max_delay.as_millis() as u64;
                // unsigned_abs: i64::MIN has no i64 magnitude.
                if ms.unsigned_abs() > max {
                    return Err(Error::Invalid(format!(
                        "shift_ms {ms} is beyond the limit of +-{max} ms"
                    )));
                }
                Ok(())
            }
        }
    }

    /// [`cancel_tag`](Self::cancel_tag) page after page until the tag's
    /// jobs are done (each page its own atomic step).
    pub async fn cancel_tag_all(&self, tag: &str) -> Result<TagChange> {
        self.tag_change_all(tag, Op::Cancel).await
    }

    /// [`reschedule_tag`](Self::reschedule_tag) page after page. Every
    /// page is checked first: a move that cannot be done changes nothing.
    pub async fn reschedule_tag_all(&self, tag: &str, to: TagMove) -> Result<TagChange> {
        self.check_move(to)?;
        self.tag_change_all(tag, Op::Check(to)).await?;
        self.tag_change_all(tag, Op::Move(to)).await
    }

    async fn tag_change_all(&self, tag: &str, op: Op) -> Result<TagChange> {
        let first = self.tag_change(tag, None, TAG_PAGE, op).await?;
        self.tag_change_from(tag, first, op).await
    }

    async fn tag_change_from(&self, tag: &str, mut all: TagChange, op: Op) -> Result<TagChange> {
        while let Some(cursor) = all.cursor.take() {
            let next = self.tag_change(tag, Some(&cursor), TAG_PAGE, op).await?;
            all.changed += next.changed;
            all.skipped.extend(next.skipped);
            all.cursor = next.cursor;
        }
        Ok(all)
    }

    async fn tag_change(
        &self,
        tag: &str,
        cursor: Option<&str>,
        limit: usize,
        op: Op,
    ) -> Result<TagChange> {
        let (pages, cursor) = self.tag_pages(tag, cursor, limit, op).await?;
        let mut out = TagChange {
            cursor,
            ..TagChange::default()
        };
        for p in pages {
            out.changed += p.changed;
            for (id, state) in p.skipped {
                let state = JobState::parse(&state).ok_or_else(|| {
                    Error::protocol("tag", format!("unknown job state {state:?}"))
                })?;
                out.skipped.push((id, state));
            }
        }
        Ok(out)
    }

    /// Pages from the cursor on, partition after partition, until `limit`
    /// entries were looked at or the last partition's index ended.
    async fn tag_pages(
        &self,
        tag: &str,
        cursor: Option<&str>,
        limit: usize,
        op: Op,
    ) -> Result<(Vec<TagPage>, Option<String>)> {
        check_tag(tag).map_err(|e| Error::Invalid(e.replacen("tags:", "tag:", 1)))?;
        if !(1..=MAX_TAG_PAGE).contains(&limit) {
            return Err(Error::Invalid(format!(
                "limit {limit} is out of range 1 to {MAX_TAG_PAGE}"
            )));
        }
        let parts = self.store().parts().len();
        let (mut part, mut after) = match cursor {
            None | Some("") => (0, String::new()),
            Some(c) => parse_cursor(c, parts)?,
        };
        let store = self.store();
        let mut pages = Vec::new();
        let mut left = limit;
        while part < parts {
            let page = match op {
                Op::List => {
                    store
                        .run::<TagList>(part, (tag, after.as_str(), left))
                        .await?
                }
                Op::Cancel => {
                    store
                        .run::<TagCancel>(part, (tag, after.as_str(), left))
                        .await?
                }
                Op::Move(to) | Op::Check(to) => {
                    let check = matches!(op, Op::Check(_));
                    match store
                        .run::<TagReschedule>(part, (tag, after.as_str(), left, to, check))
                        .await
                    {
                        Ok(page) => page,
                        // Checked first, so only a job changed since can
                        // fail here: say what was already moved.
                        Err(Error::Invalid(e)) if pages.iter().any(|p: &TagPage| p.changed > 0) => {
                            let moved: u64 = pages.iter().map(|p| p.changed).sum();
                            return Err(Error::Invalid(format!(
                                "{e} (partition {part}; {moved} jobs of the partitions before it were already moved)"
                            )));
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            if page.new_head {
                self.inner.h.wake.one(part);
            }
            let seen = page.ids.len() + page.skipped.len() + page.changed as usize;
            let last = page.last.clone();
            pages.push(page);
            match last {
                // The budget is spent within this partition.
                Some(last) => return Ok((pages, Some(format!("{part}:{last}")))),
                None => {
                    part += 1;
                    after.clear();
                    left = left.saturating_sub(seen);
                    if left == 0 {
                        break;
                    }
                }
            }
        }
        let next = (part < parts).then(|| format!("{part}:"));
        Ok((pages, next))
    }
}

/// "<partition>:<last id>" (the id may be empty: from the partition's start).
fn parse_cursor(c: &str, parts: usize) -> Result<(usize, String)> {
    let bad =
        |why: &str| Error::Invalid(format!("cursor {c:?} is not one this server gave: {why}"));
    let (part, id) = c.split_once(':').ok_or_else(|| bad("no partition"))?;
    let part: usize = part
        .parse()
        .map_err(|_| bad("its partition is not a number"))?;
    if part >= parts {
        return Err(bad("no such partition"));
    }
    Ok((part, id.to_owned()))
}
