//! Flows (see [`crate::flow`]): pushing a tree of jobs whose parents wait
//! for their children, reading and cancelling a flow.
//!
//! A push checks the whole tree first, then: each parent's flow is opened
//! (a batch in the parent's partition whose callback is the parent, top
//! down, each naming the flow above it); each parent takes its children's
//! ids in; the leaves are pushed into their parents' flows (as jobs into a
//! batch); the flows are closed. A parent cannot run on part of its
//! children: its flow fires only once closed, after every child was taken
//! in. A push that fails part way cancels the flows it opened (their
//! leaves not handed out yet go too) and names what failed.

use std::collections::BTreeMap;

use super::Queue;
use crate::batch::{BatchOn, BatchState};
use crate::error::{Error, Result};
use crate::flow::{
    flow_batch_id, ChildDead, Flow, FlowPushed, FlowState, NewFlow, FLOW_MARK, MAX_FLOW_CHILDREN,
    MAX_FLOW_DEPTH, MAX_FLOW_JOBS,
};
use crate::job::NewJob;
use crate::store::batches::{
    count, field, BatchAdd, BatchOpen, BatchSettle, Callback, ParentOptions, Take, Taken,
};
use crate::store::layout::batch_field as f;

impl Queue {
    /// Pushes a flow: a parent with children (a tree). The leaves are
    /// pushed now; each parent waits until its children have their
    /// outcomes, then is pushed with them ([`crate::Delivery::children`]).
    /// Everything is checked before the first write ([`Error::Invalid`]
    /// naming the job); a parent id in use, or a leaf id in use, is
    /// [`Error::Conflict`], and nothing of the flow stays but leaves
    /// handed out meanwhile. A push that failed for want of Redis (no
    /// answer in time, a failover) leaves what it wrote: the same push
    /// made again finishes it (a flow still being pushed is taken up where
    /// it is; ids taken in are taken once), and until then no parent runs;
    /// one that had written everything is taken as pushed.
    #[tracing::instrument(skip_all, fields(flow = %flow.job.id))]
    pub async fn push_flow(&self, flow: &NewFlow) -> Result<FlowPushed> {
        let tree = self.checked_tree(flow).map_err(Error::Invalid)?;
        self.check_builds_know_batches().await?;
        self.check_policy(self.store().redis.timeout()).await?;
        let root = tree[0].job.id.clone();
        let mut opened = Vec::new();
        let done = self.push_tree(&tree, &mut opened).await;
        if let Err(e) = done {
            if e.may_pass() {
                // Kept for the same push made again (see above).
                return Err(e);
            }
            // Undo, root first (its cancel walks down what it can reach).
            for parent in &opened {
                if let Err(undo) = self.cancel_flow(parent).await {
                    tracing::warn!(flow = %parent, error = %undo, "a flow pushed in part was not cancelled");
                }
            }
            return Err(e);
        }
        Ok(FlowPushed {
            id: root,
            jobs: tree.iter().map(|n| n.job.id.clone()).collect(),
        })
    }

    /// The tree, checked, parents before children, each leaf placed (an
    /// id picked where none was given).
    fn checked_tree(&self, flow: &NewFlow) -> std::result::Result<Vec<Node>, String> {
        if flow.children.is_empty() {
            return Err("a flow's root has children; push a job with no children as a job".into());
        }
        if flow.depth() > MAX_FLOW_DEPTH {
            return Err(format!(
                "the flow has {} levels; the limit is {MAX_FLOW_DEPTH}",
                flow.depth()
            ));
        }
        let all = flow.jobs();
        if all.len() > MAX_FLOW_JOBS {
            return Err(format!(
                "the flow has {} jobs; the limit is {MAX_FLOW_JOBS}",
                all.len()
            ));
        }
        // Each node's place and its parent's, in `all`'s order.
        let mut upper: Vec<Option<usize>> = vec![None; all.len()];
        let mut next = 1;
        for (i, n) in all.iter().enumerate() {
            for _ in &n.children {
                upper[next] = Some(i);
                next += 1;
            }
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(all.len());
        let mut seen = std::collections::HashSet::new();
        for (i, n) in all.iter().enumerate() {
            let what = |e: String| {
                if n.job.id.is_empty() {
                    format!("flow job {i}: {e}")
                } else {
                    format!("flow job {:?}: {e}", n.job.id)
                }
            };
            let job = if n.children.is_empty() {
                check_leaf(&n.job).map_err(what)?;
                let mut job = self.placed(&n.job).map_err(what)?.into_owned();
                if job.id.is_empty() {
                    job.id = uuid::Uuid::new_v4().to_string();
                }
                job
            } else {
                if n.children.len() > MAX_FLOW_CHILDREN {
                    return Err(what(format!(
                        "{} children; the limit is {MAX_FLOW_CHILDREN}",
                        n.children.len()
                    )));
                }
                check_parent(&n.job).map_err(what)?;
                n.job.clone()
            };
            self.limits().check_job(&job).map_err(what)?;
            if !seen.insert(job.id.clone()) {
                return Err(what("its id is given twice in the flow".into()));
            }
            nodes.push(Node {
                job,
                parent: upper[i],
                is_parent: !n.children.is_empty(),
                on_child_dead: n.on_child_dead,
            });
        }
        Ok(nodes)
    }

    /// The writes of a push, in order; each parent's id is added to
    /// `opened` once its flow exists.
    async fn push_tree(&self, tree: &[Node], opened: &mut Vec<String>) -> Result<()> {
        let store = self.store();
        let upper_of = |n: &Node| upper_flow(tree, n);
        // 1. The flows, top down. `closing` marks those this push closes:
        // not the ones an earlier push of this tree closed already.
        let mut closing = vec![false; tree.len()];
        let (mut created_any, mut closed_before) = (false, false);
        for (i, n) in tree.iter().enumerate().filter(|(_, n)| n.is_parent) {
            let b = flow_batch_id(&n.job.id);
            let callback = self.parent_callback(n, upper_of(n).unwrap_or_default());
            let on = BatchOn::Settled.as_str();
            let created = store
                .run::<BatchOpen>(store.batch_home(&b), (&b, &callback, on, &callback))
                .await?;
            // A flow still being pushed: an earlier push of this tree
            // that failed for want of Redis, taken up here.
            let found = if created {
                None
            } else {
                self.flow(&n.job.id).await?
            };
            let resumed = found.as_ref().is_some_and(|f| f.state == FlowState::Adding);
            // A flow closed by an earlier push of this very tree whose
            // reply was lost (its last close, say, unconfirmed by a
            // replica): every leaf was pushed before the first close, and
            // closes go bottom up. The root closed: the push was whole.
            if let Some(f) = found.as_ref().filter(|_| !resumed) {
                if self.pushed_before(tree, i, f).await? {
                    if n.parent.is_none() {
                        return Ok(());
                    }
                    closed_before = true;
                    continue;
                }
            }
            if !created && !resumed {
                return Err(Error::Conflict(format!(
                    "flow parent id {:?} is in use (a job, or a flow pushed within the retention); pick another id",
                    n.job.id
                )));
            }
            created_any |= created;
            closing[i] = true;
            opened.push(n.job.id.clone());
        }
        if closed_before && created_any {
            // Part of the tree closed before, part never opened: not one
            // earlier push of this tree (a flow gone since, say).
            return Err(Error::Conflict(format!(
                "flow parent id {:?}: part of this flow was pushed and closed before, part is missing; pick another id",
                tree[0].job.id
            )));
        }
        if !closed_before {
            self.push_children(tree).await?;
        }
        // 4. Closed, bottom up: each fires once its children are done.
        for (_, n) in tree.iter().enumerate().rev().filter(|(i, _)| closing[*i]) {
            self.end_batch(&flow_batch_id(&n.job.id), "close").await?;
        }
        Ok(())
    }

    /// Steps 2 and 3 of a push: each parent takes its sub-flows' parents
    /// in, and the leaves are pushed into their parents' flows.
    async fn push_children(&self, tree: &[Node]) -> Result<()> {
        let store = self.store();
        let upper_of = |n: &Node| upper_flow(tree, n);
        // 2. Each parent's children that are parents: taken in (their
        // flows exist), at once settled.
        let retention = store.keep.results.as_millis().max(1) as u64;
        let mut sub: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for n in tree.iter().filter(|n| n.is_parent) {
            if let Some(b) = upper_of(n) {
                sub.entry(b).or_default().push(&n.job.id);
            }
        }
        for (b, ids) in &sub {
            let home = store.batch_home(b);
            match store.run::<BatchAdd>(home, (b, ids)).await? {
                Taken::Ids(t) if t.iter().all(|t| *t != Take::Ended) => {}
                other => {
                    return Err(Error::protocol(
                        "flow",
                        format!("a new flow took its parents in as {other:?}"),
                    ))
                }
            }
            let landed: Vec<(&str, &str)> = ids.iter().map(|id| (*id, "landed")).collect();
            store
                .run::<BatchSettle>(home, (b, retention, &landed))
                .await?;
        }
        // 3. The leaves, into their parents' flows.
        let leaves: Vec<NewJob> = tree
            .iter()
            .filter(|n| !n.is_parent)
            .map(|n| NewJob {
                batch: upper_of(n),
                ..n.job.clone()
            })
            .collect();
        for chunk in leaves.chunks(self.limits().max_batch.max(1)) {
            let refs: Vec<&NewJob> = chunk.iter().collect();
            for (job, r) in chunk.iter().zip(self.push_into_batches(&refs).await) {
                r.map_err(|e| match e {
                    Error::Conflict(m) => Error::Conflict(format!("flow job {:?}: {m}", job.id)),
                    e => e,
                })?;
            }
        }
        Ok(())
    }

    /// Whether the flow of `tree[at]` (a parent) was pushed whole and
    /// closed before by this very tree: it is closed (or past it), in the
    /// parent's topic, under the parent's own parent, and holds its
    /// children and only them (a leaf as a job of the flow, a parent as a
    /// flow under it). A child whose job is gone since (finished and not
    /// kept) says no: the push is refused as an id in use. `flow` is the
    /// parent's, as read; one job or flow is read per child.
    async fn pushed_before(&self, tree: &[Node], at: usize, flow: &Flow) -> Result<bool> {
        let node = &tree[at].job;
        let upper = tree[at].parent.map(|p| tree[p].job.id.as_str());
        let kids: Vec<&Node> = tree.iter().filter(|n| n.parent == Some(at)).collect();
        if flow.state == FlowState::Adding
            || flow.state == FlowState::Cancelled
            || flow.topic != node.topic
            || flow.parent.as_deref() != upper
            || flow.children != kids.len() as u64
        {
            return Ok(false);
        }
        let batch = flow_batch_id(&node.id);
        for k in kids {
            let ours = if k.is_parent {
                self.flow(&k.job.id)
                    .await?
                    .is_some_and(|f| f.parent.as_deref() == Some(node.id.as_str()))
            } else {
                self.get(&k.job.id)
                    .await?
                    .is_some_and(|j| j.batch.as_deref() == Some(batch.as_str()))
            };
            if !ours {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// A parent as its flow's callback.
    fn parent_callback(&self, n: &Node, upper: String) -> Callback {
        let j = &n.job;
        let policy = j
            .retry
            .as_ref()
            .unwrap_or_else(|| self.retry_policy_for(&j.topic));
        Callback {
            id: j.id.clone(),
            topic: j.topic.clone(),
            body: j.body.clone(),
            ttr_ms: j.ttr.as_millis() as u64,
            intervals_ms: policy.intervals_ms(),
            max_attempts: policy.max_attempts.unwrap_or(0),
            parent: Some(ParentOptions {
                child_dead: n.on_child_dead.as_str(),
                delay_ms: j.delay.as_millis() as u64,
                priority: j.priority,
                tags: j.tags.join("\n"),
                upper,
                traceparent: j.traceparent.clone().unwrap_or_default(),
                tracestate: j.tracestate.clone().unwrap_or_default(),
            }),
        }
    }

    /// The flow whose parent is `id`, or None (no such flow, or its
    /// retention ran out). One read of its hash.
    pub async fn flow(&self, id: &str) -> Result<Option<Flow>> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        let fields = self.store().batch_fields(&flow_batch_id(id)).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let batch_state = BatchState::parse(field(&fields, f::STATE))
            .ok_or_else(|| Error::protocol("flow", format!("state of {id:?}")))?;
        let failed_by = fields.get(f::FAILED_BY).cloned();
        let state = match batch_state {
            BatchState::Open => FlowState::Adding,
            BatchState::Closed => FlowState::Waiting,
            BatchState::Fired if failed_by.is_some() => FlowState::Failed,
            BatchState::Fired => FlowState::Released,
            BatchState::Cancelled => FlowState::Cancelled,
        };
        let (children, finished, dead, deleted) = (
            count(&fields, f::JOBS),
            count(&fields, f::FINISHED),
            count(&fields, f::DEAD),
            count(&fields, f::DELETED),
        );
        Ok(Some(Flow {
            id: id.to_owned(),
            topic: field(&fields, f::CALLBACK_TOPIC).to_owned(),
            state,
            on_child_dead: ChildDead::parse(field(&fields, f::CHILD_DEAD)).unwrap_or_default(),
            children,
            finished,
            dead,
            deleted,
            pending: children.saturating_sub(finished + dead + deleted),
            failed_by,
            parent: fields
                .get(f::UPPER)
                .and_then(|u| u.strip_prefix(FLOW_MARK))
                .map(str::to_owned),
            created_ms: field(&fields, f::CREATED_AT).parse().unwrap_or(0),
            ended_ms: field(&fields, f::ENDED_AT).parse().ok(),
        }))
    }

    /// Cancels the flow whose parent is `id` while the parent waits: it
    /// never runs, and its children not handed out yet are deleted, down
    /// the tree (children that are parents are cancelled likewise); running
    /// children end as their consumers say. A parent that is itself a
    /// child counts as deleted for its own parent. How many jobs were
    /// deleted. A released or failed flow is [`Error::Conflict`] (the
    /// parent is a job then: cancel it as one).
    pub async fn cancel_flow(&self, id: &str) -> Result<u64> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        let mut deleted = 0;
        let mut todo = vec![id.to_owned()];
        while let Some(parent) = todo.pop() {
            let b = flow_batch_id(&parent);
            match self.end_batch(&b, "cancel").await {
                Ok(_) => {}
                // Below the root, a flow already ended is left as it is.
                Err(Error::Conflict(_) | Error::NoBatch(_)) if parent != id => continue,
                Err(Error::NoBatch(_)) => return Err(Error::NoFlow(id.to_owned())),
                Err(Error::Conflict(_)) => {
                    return Err(Error::Conflict(format!(
                        "flow {id:?} has released its parent (or it failed): cancel the job {id:?} instead"
                    )))
                }
                Err(e) => return Err(e),
            }
            deleted += self.cancel_batch_jobs(&b).await?;
            let members = self.store().batch_members(&b).await?;
            let flows = self.store().flows_exist(&members).await?;
            todo.extend(
                members
                    .into_iter()
                    .zip(flows)
                    .filter_map(|(m, is_flow)| is_flow.then_some(m)),
            );
        }
        Ok(deleted)
    }
}

/// A job of a checked flow.
struct Node {
    job: NewJob,
    /// Its parent's place in the tree's list.
    parent: Option<usize>,
    is_parent: bool,
    on_child_dead: ChildDead,
}

/// The flow `n` is a child of (none for the root).
fn upper_flow(tree: &[Node], n: &Node) -> Option<String> {
    n.parent.map(|p| flow_batch_id(&tree[p].job.id))
}

/// What a leaf may not ask: it joins its parent's flow as a job joins a
/// batch (created only, whatever its `if_exists`; no dedup).
fn check_leaf(job: &NewJob) -> std::result::Result<(), String> {
    if job.batch.is_some() {
        return Err("a job of a flow takes no batch (its parent's flow is its batch)".into());
    }
    if job.dedup.is_some() {
        return Err("a job of a flow takes no dedup key".into());
    }
    Ok(())
}

/// What a parent may not ask: it is made when its children are done, in
/// its own id's partition (created only, as a leaf).
fn check_parent(job: &NewJob) -> std::result::Result<(), String> {
    if job.id.is_empty() {
        return Err("a parent needs an id (it names its flow)".into());
    }
    for (asked, what) in [
        (job.group.is_some(), "group"),
        (job.dedup.is_some(), "dedup key"),
        (
            job.due_at_ms.is_some(),
            "due time (its delay counts from its release)",
        ),
        (job.batch.is_some(), "batch"),
    ] {
        if asked {
            return Err(format!("a parent takes no {what}"));
        }
    }
    Ok(())
}
