//! Groups: per-group concurrency limits and pauses, and a topic's groups
//! with their figures (see `lib/groups.lua`).

use super::Queue;
use crate::error::{Error, Result};
use crate::group::{Group, GroupChange, GroupPage, GroupSettings};

impl Queue {
    /// Checks a topic and group key.
    fn check_group_args(&self, topic: &str, group: &str) -> Result<()> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        crate::job::check_group(group).map_err(Error::Invalid)
    }

    /// A group's figures (ready, reserved, held) and settings; a group
    /// never seen has all of them zero.
    pub async fn group(&self, topic: &str, group: &str) -> Result<Group> {
        self.check_group_args(topic, group)?;
        self.store().group(topic, group).await
    }

    /// Sets a group's concurrency limit, pause and rate limit (None: none),
    /// on every instance at once. A lowered limit takes no lease back: no new job of
    /// the group goes out until fewer than the limit are reserved. Returns
    /// the group's figures after.
    pub async fn set_group(&self, topic: &str, group: &str, s: GroupSettings) -> Result<Group> {
        self.change_group(topic, group, s.into()).await
    }

    /// Changes the settings of a group that `change` names and keeps the
    /// others, as [`set_group`](Self::set_group) does. A rate set again
    /// keeps its bucket's level (at most the new burst): it lets no job
    /// out early.
    pub async fn change_group(&self, topic: &str, group: &str, c: GroupChange) -> Result<Group> {
        self.check_group_args(topic, group)?;
        if c.concurrency == Some(Some(0)) {
            return Err(Error::Invalid(
                "concurrency must be 1 or more (pause the group to hand out none)".into(),
            ));
        }
        if let Some(Some(r)) = &c.rate {
            r.check()
                .map_err(|e| Error::Invalid(format!("rate: {e}")))?;
        }
        let g = self
            .store()
            .set_group(topic, group, c.concurrency, c.paused, c.rate)
            .await?;
        self.inner.h.waiters.wake_all();
        Ok(g)
    }

    /// Stops handing out `group`'s jobs of `topic` (its other settings
    /// stay); they wait in ready.
    pub async fn pause_group(&self, topic: &str, group: &str) -> Result<Group> {
        self.check_group_args(topic, group)?;
        self.store()
            .set_group(topic, group, None, Some(true), None)
            .await
    }

    /// Hands `group`'s jobs out again, at once.
    pub async fn resume_group(&self, topic: &str, group: &str) -> Result<Group> {
        self.check_group_args(topic, group)?;
        let g = self
            .store()
            .set_group(topic, group, None, Some(false), None)
            .await?;
        self.inner.h.waiters.wake_all();
        Ok(g)
    }

    /// A page of `topic`'s groups (those with ready or reserved jobs, or
    /// with settings) after `after` ("" from the start), at most `limit`
    /// (1 to [`MAX_TAG_PAGE`](crate::defaults::MAX_TAG_PAGE)), in byte
    /// order of their keys, with their figures.
    pub async fn groups(&self, topic: &str, after: &str, limit: usize) -> Result<GroupPage> {
        self.limits().check_topic(topic).map_err(Error::Invalid)?;
        if limit == 0 || limit > crate::defaults::MAX_GROUP_PAGE {
            return Err(Error::Invalid(format!(
                "limit {limit} is out of range: 1 to {}",
                crate::defaults::MAX_GROUP_PAGE
            )));
        }
        self.store().groups(topic, after, limit).await
    }
}
