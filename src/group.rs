//! Groups: a topic's jobs that share a group key, handed out with the
//! group's own concurrency limit, pause and rate. The store keeps them
//! (`store::group`, `group.lua`); the native API shows them as
//! [`crate::wire::GroupBody`].

use crate::rate::RateLimit;

/// A group of a topic: its settings and what its jobs are doing.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// The group key.
    pub group: String,
    /// Jobs ready in the group's line (held ones included).
    pub ready: u64,
    /// Jobs reserved now: the slots in use.
    pub reserved: u64,
    /// Ready jobs its pause or its limit keeps back now.
    pub held: u64,
    /// Most jobs of the group reserved at once; none: no limit.
    pub concurrency: Option<u32>,
    /// A paused group hands out none of its jobs.
    pub paused: bool,
    /// How long the job at the head of the group's line has waited since
    /// it fell due, ms (the oldest ready job unless priorities put a newer
    /// one first); none: nothing ready.
    pub oldest_ready_ms: Option<u64>,
    /// How fast the group's jobs are handed out, across every instance
    /// (the topic's own limit holds beside it); none: no limit.
    pub rate: Option<RateLimit>,
}

/// A group's settings, as set (all at once; see [`GroupChange`] for some).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GroupSettings {
    /// Most jobs of the group reserved at once (1 or more); None: no limit.
    pub concurrency: Option<u32>,
    pub paused: bool,
    /// How fast the group's jobs are handed out; None: no limit.
    pub rate: Option<RateLimit>,
}

/// A change to some of a group's settings: what is None stays as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GroupChange {
    /// Some(None): no limit.
    pub concurrency: Option<Option<u32>>,
    pub paused: Option<bool>,
    /// Some(None): no rate limit.
    pub rate: Option<Option<RateLimit>>,
}

impl From<GroupSettings> for GroupChange {
    /// Every setting: what the settings leave out is removed.
    fn from(s: GroupSettings) -> GroupChange {
        GroupChange {
            concurrency: Some(s.concurrency),
            paused: Some(s.paused),
            rate: Some(s.rate),
        }
    }
}

/// A page of a topic's groups, in byte order of their keys.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupPage {
    pub groups: Vec<Group>,
    /// The cursor of the next page (`after`); none: this was the last.
    pub next: Option<String>,
}
