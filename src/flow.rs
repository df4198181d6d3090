//! Flows (issue 53): a parent job that waits for its children. The order
//! closer refunds an order's three payments, then closes the order once
//! they are done; the reminder service renders a digest from the results
//! of its per-member jobs.
//!
//! A flow is pushed as one request ([`crate::Queue::push_flow`]): a tree of
//! jobs, each parent with its children, several levels deep. The leaves
//! are pushed at once (each with its own delay, group, priority, retries);
//! a parent waits, no job yet, until each of its children has its outcome,
//! then it is pushed (due its own delay after that) and handed out with
//! its children's outcomes and results ([`crate::Delivery::children`]).
//! A child that dies fails its parent at once (it dies, its error naming
//! the child) or is ignored, as the parent's [`ChildDead`] says; a child
//! deleted or cancelled counts as done. Cancelling a waiting parent
//! ([`crate::Queue::cancel_flow`]) cancels its children not handed out
//! yet, down the tree.
//!
//! Underneath, each parent is a batch ([`crate::batch`]) of its children
//! whose callback is the parent itself: the same notes carry each child's
//! end (and result) to the parent's partition, so a flow keeps the
//! batches' promises across partitions, cluster masters and failovers.

use crate::job::NewJob;

/// The byte before a parent's id that makes its flow's batch id: no batch
/// id a user gives holds a control character, so the two never meet.
pub const FLOW_MARK: char = '\u{1}';

/// Most bytes of children's results one parent is handed (past it, a
/// child's outcome comes without its result).
pub const MAX_CHILDREN_RESULTS_BYTES: usize = 1024 * 1024;

/// Most children of one parent.
pub const MAX_FLOW_CHILDREN: usize = 10_000;

/// Most jobs in one flow push, parents included.
pub const MAX_FLOW_JOBS: usize = 20_000;

/// Most levels of one flow (a parent with children is two).
pub const MAX_FLOW_DEPTH: usize = 16;

/// What a parent does when one of its children dies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChildDead {
    /// The parent dies at once, its error naming the child; it can be
    /// requeued (it then runs with the outcomes as they were).
    #[default]
    Fail,
    /// The dead child counts as done; the parent runs when the rest are.
    Ignore,
}

impl ChildDead {
    pub fn as_str(self) -> &'static str {
        match self {
            ChildDead::Fail => "fail",
            ChildDead::Ignore => "ignore",
        }
    }

    pub fn parse(s: &str) -> Option<ChildDead> {
        match s {
            "fail" => Some(ChildDead::Fail),
            "ignore" => Some(ChildDead::Ignore),
            _ => None,
        }
    }
}

/// A job of a flow: a leaf (no children), or a parent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewFlow {
    /// The job. A parent's id is required (it names the flow); its
    /// `delay` counts from when its children are done; a parent takes no
    /// group, dedup, due time or batch. A leaf is any job a push takes,
    /// but a batch, dedup or `if_exists` replace.
    pub job: NewJob,
    pub children: Vec<NewFlow>,
    /// A parent's: what a dead child does.
    pub on_child_dead: ChildDead,
}

impl NewFlow {
    /// A leaf.
    pub fn leaf(job: NewJob) -> NewFlow {
        NewFlow {
            job,
            ..NewFlow::default()
        }
    }

    /// Every job of the tree, parents before their children, level by
    /// level (the root, its children, then theirs).
    pub fn jobs(&self) -> Vec<&NewFlow> {
        let mut out = vec![self];
        let mut i = 0;
        while i < out.len() {
            let node = out[i];
            out.extend(node.children.iter());
            i += 1;
        }
        out
    }

    /// How many levels the tree has (a leaf: 1).
    pub fn depth(&self) -> usize {
        1 + self.children.iter().map(NewFlow::depth).max().unwrap_or(0)
    }
}

/// The batch id of the flow whose parent is `parent`.
pub fn flow_batch_id(parent: &str) -> String {
    format!("{FLOW_MARK}{parent}")
}

/// A flow's state, as its parent sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowState {
    /// Being pushed: its children are taken in.
    Adding,
    /// Its parent waits for its children.
    Waiting,
    /// Its children are done: the parent was pushed (read it as a job).
    Released,
    /// A child died and the flow said fail: the parent was made dead.
    Failed,
    /// Cancelled: the parent never runs.
    Cancelled,
}

impl FlowState {
    pub fn as_str(self) -> &'static str {
        match self {
            FlowState::Adding => "adding",
            FlowState::Waiting => "waiting",
            FlowState::Released => "released",
            FlowState::Failed => "failed",
            FlowState::Cancelled => "cancelled",
        }
    }
}

/// A flow as read, by its parent's id: its state and its children's
/// counts. Kept after its parent's release or cancel for the result
/// retention.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    /// The parent's id and topic.
    pub id: String,
    pub topic: String,
    pub state: FlowState,
    pub on_child_dead: ChildDead,
    /// Children taken in, and of them: finished, dead, deleted; the rest
    /// (`pending`) have no outcome yet.
    pub children: u64,
    pub finished: u64,
    pub dead: u64,
    pub deleted: u64,
    pub pending: u64,
    /// The child whose death failed the parent.
    pub failed_by: Option<String>,
    /// The flow whose child this parent is (its parent's id), if any.
    pub parent: Option<String>,
    /// When it was pushed; when its parent was released, failed or
    /// cancelled (Unix ms).
    pub created_ms: i64,
    pub ended_ms: Option<i64>,
}

/// What a flow push made: the root's id and every job's id, in the order
/// of [`NewFlow::jobs`] (ids delayq picked included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowPushed {
    pub id: String,
    pub jobs: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, children: Vec<NewFlow>) -> NewFlow {
        NewFlow {
            job: NewJob {
                id: id.into(),
                ..NewJob::default()
            },
            children,
            ..NewFlow::default()
        }
    }

    #[test]
    fn a_tree_lists_parents_before_children_and_counts_its_levels() {
        let t = node(
            "root",
            vec![node("a", vec![node("a1", vec![])]), node("b", vec![])],
        );
        let ids: Vec<&str> = t.jobs().iter().map(|n| n.job.id.as_str()).collect();
        assert_eq!(ids, ["root", "a", "b", "a1"]);
        assert_eq!(t.depth(), 3);
        assert_eq!(node("x", vec![]).depth(), 1);
        assert_eq!(flow_batch_id("p"), "\u{1}p");
    }
}
