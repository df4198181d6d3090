//! Which shards can answer, and how many replicas each has: so that one
//! master that died, or lost its replica, stops only what must stop.
//!
//! - A partition whose master does not answer is **down**: pops pass it by
//!   (and look again once it answers), so the other partitions' jobs keep
//!   flowing. A call that fails marks it at once; the watch clears it.
//! - With `replica_acks` N, a shard with fewer than N connected replicas
//!   is **degraded**: its master may be the losing side of a split (its
//!   replica promoted elsewhere), whose writes a failover discards. Every
//!   acknowledged call on it (push, pop, finish, nack, cancel, delete,
//!   reschedule, recurring tick) follows [`DegradedPushes`], in the spirit
//!   of Redis's `min-replicas-to-write`: refused before anything is
//!   written (the default: nothing is handed out or acknowledged there),
//!   or sent without waiting for replicas, with a warning (the older,
//!   weaker promise: at least once, a repeat or a loss after a second
//!   failure or a split).
//!
//! The watch (`dispatch::upkeep::watch_health`) is also the one reader of
//! a cluster's topology: each look reads `CLUSTER SLOTS` once and hands
//! the slot owners on ([`Health::topology`]) to the master follower and
//! the subscriber. It asks each master for `INFO replication` (one call
//! per master, its reply a few hundred bytes) once a second while writes
//! wait for replicas, a shard is down, degraded or unseen, or something
//! suggested a change in the last [`HOT_FOR`] (a call that could not reach
//! Redis, an events connection that dropped, a new master followed, the
//! topology changed); otherwise every [`IDLE_EVERY`], a backstop: a
//! failure shows itself in a call or a dropped connection first. A change
//! is logged once, not per call.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::library::Function;

/// What acknowledged calls (pushes, pops, finishes, nacks, cancels, ...)
/// do on a shard with fewer replicas than `replica_acks`, and when their
/// replicas do not confirm them in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DegradedPushes {
    /// Refuse them (nothing is written, nothing handed out), and fail one
    /// whose WAIT came back short: every acknowledged change is on
    /// `replica_acks` replicas, every lease handed out too.
    #[default]
    Refuse,
    /// Take them without waiting for replicas, and warn: the queue keeps
    /// working, and a second failure (the master dies before a replica is
    /// back) or a split loses what it took meanwhile, and may hand out
    /// again a job whose finish it acknowledged.
    Accept,
}

impl std::str::FromStr for DegradedPushes {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "refuse" => Ok(DegradedPushes::Refuse),
            "accept" => Ok(DegradedPushes::Accept),
            _ => Err(format!("{s:?}: expected refuse or accept")),
        }
    }
}

/// How long a partition whose call failed is passed by before pops try it
/// again (unless the watch sees it answer sooner).
const DOWN_FOR: Duration = Duration::from_secs(2);

/// How often the watch looks while nothing suggests a change.
pub(crate) const IDLE_EVERY: Duration = Duration::from_secs(30);
/// How often it looks while something may be changing.
pub(crate) const HOT_EVERY: Duration = Duration::from_secs(1);
/// How long after a hint of a change it looks at [`HOT_EVERY`].
const HOT_FOR: Duration = Duration::from_secs(30);

/// Slot ranges with their masters, as the last CLUSTER SLOTS read.
pub(crate) type Owners = Vec<(u16, u16, (String, u16))>;

/// What is known of one partition's shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardView {
    /// The master's address (empty until first seen).
    pub node: String,
    /// Connected replicas (None: the master did not answer).
    pub replicas: Option<usize>,
}

#[derive(Default)]
struct Part {
    shard: ShardView,
    down_until: Option<Instant>,
}

/// Every partition's health.
pub(crate) struct Health {
    parts: Mutex<Vec<Part>>,
    /// Replicas a write waits for (0: none).
    wanted: usize,
    pub policy: DegradedPushes,
    /// Something suggested a change: the watch looks at once.
    pub(crate) hint: tokio::sync::Notify,
    /// Until when the watch looks at its hot pace.
    hot_until: Mutex<Option<Instant>>,
    /// A cluster's slot owners, as the watch last read them (empty until
    /// read); changes only when they do.
    pub(super) topology: tokio::sync::watch::Sender<Owners>,
}

/// One shard as `/readyz` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub node: String,
    /// "ok", "degraded" (fewer replicas than asked for) or "down".
    pub state: &'static str,
    pub replicas: Option<usize>,
    pub partitions: Vec<usize>,
}

impl Health {
    pub fn new(partitions: usize, wanted: usize, policy: DegradedPushes) -> Health {
        Health {
            parts: Mutex::new((0..partitions).map(|_| Part::default()).collect()),
            wanted,
            policy,
            hint: tokio::sync::Notify::new(),
            hot_until: Mutex::new(None),
            topology: tokio::sync::watch::Sender::new(Vec::new()),
        }
    }

    /// Something suggests the shards changed (a call that could not reach
    /// Redis, a connection that dropped): the watch looks now, and often
    /// for a while.
    pub fn suspect(&self) {
        self.hint.notify_one();
    }

    /// The watch looks often from now, for a while.
    pub(crate) fn heat(&self) {
        *self.hot_until.lock().unwrap() = Some(Instant::now() + HOT_FOR);
    }

    /// How long the watch waits before its next look.
    pub(crate) fn next_look(&self) -> Duration {
        let hot = self
            .hot_until
            .lock()
            .unwrap()
            .is_some_and(|t| t > Instant::now());
        let parts = self.parts.lock().unwrap();
        let unsure = parts
            .iter()
            .any(|p| p.down_until.is_some() || state_of(&p.shard, self.wanted) != "ok");
        if hot || unsure || self.wanted > 0 {
            HOT_EVERY
        } else {
            IDLE_EVERY
        }
    }

    /// The slot owners as the watch last read them, and their changes.
    pub(crate) fn topology(&self) -> tokio::sync::watch::Receiver<Owners> {
        self.topology.subscribe()
    }

    /// Pops pass partition `part` by for now.
    pub fn is_down(&self, part: usize) -> bool {
        let parts = self.parts.lock().unwrap();
        parts[part].down_until.is_some_and(|t| t > Instant::now())
    }

    /// The address of `part`'s master, as last seen (up or not).
    pub fn node(&self, part: usize) -> Option<String> {
        let parts = self.parts.lock().unwrap();
        let node = &parts[part].shard.node;
        (!node.is_empty()).then(|| node.clone())
    }

    /// No partition answers.
    pub fn all_down(&self) -> bool {
        let now = Instant::now();
        let parts = self.parts.lock().unwrap();
        parts.iter().all(|p| p.down_until.is_some_and(|t| t > now))
    }

    /// A call on `part` found its master unreachable.
    pub fn mark_down(&self, part: usize) {
        let mut parts = self.parts.lock().unwrap();
        parts[part].down_until = Some(Instant::now() + DOWN_FOR);
        self.suspect();
    }

    /// The shard of `part` has fewer connected replicas than writes wait
    /// for: its name and replica count.
    pub fn degraded(&self, part: usize) -> Option<(String, usize)> {
        if self.wanted == 0 {
            return None;
        }
        let parts = self.parts.lock().unwrap();
        match &parts[part].shard {
            ShardView {
                node,
                replicas: Some(n),
            } if *n < self.wanted => Some((node.clone(), *n)),
            _ => None,
        }
    }

    /// A write on `part` was acknowledged by only `acked` replicas: treat
    /// the shard as degraded until the watch sees enough replicas again.
    pub fn short_of_replicas(&self, part: usize, acked: usize) {
        let mut parts = self.parts.lock().unwrap();
        let p = &mut parts[part];
        if p.shard.replicas.is_none_or(|n| n >= self.wanted) {
            p.shard.replicas = Some(acked);
        }
        self.suspect();
    }

    /// Records what the watch saw of every partition; returns true if a
    /// partition came back (pops waiting may find jobs there now).
    pub(super) fn update(&self, seen: Vec<ShardView>) -> bool {
        let mut parts = self.parts.lock().unwrap();
        let mut back = false;
        for (i, (p, view)) in parts.iter_mut().zip(seen).enumerate() {
            let was = state_of(&p.shard, self.wanted);
            let now = state_of(&view, self.wanted);
            if was != now || p.shard.node != view.node {
                log_change(i, &view, was, now, self.wanted, self.policy);
            }
            match view.replicas {
                None => p.down_until = Some(Instant::now() + DOWN_FOR),
                Some(_) => {
                    back |= p.down_until.take().is_some();
                }
            }
            p.shard = view;
        }
        back
    }

    /// The shards, each with its partitions, for `/readyz` and metrics.
    pub fn shards(&self) -> Vec<Shard> {
        let parts = self.parts.lock().unwrap();
        let mut out: Vec<Shard> = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            if p.shard.node.is_empty() {
                continue;
            }
            let state = if p.down_until.is_some_and(|t| t > Instant::now()) {
                "down"
            } else {
                state_of(&p.shard, self.wanted)
            };
            match out
                .iter_mut()
                .find(|s| s.node == p.shard.node && s.state == state)
            {
                Some(s) => s.partitions.push(i),
                None => out.push(Shard {
                    node: p.shard.node.clone(),
                    state,
                    replicas: p.shard.replicas,
                    partitions: vec![i],
                }),
            }
        }
        out
    }
}

fn state_of(view: &ShardView, wanted: usize) -> &'static str {
    match view.replicas {
        None if view.node.is_empty() => "unknown",
        None => "down",
        Some(n) if n < wanted => "degraded",
        Some(_) => "ok",
    }
}

fn log_change(
    part: usize,
    view: &ShardView,
    was: &'static str,
    now: &'static str,
    wanted: usize,
    policy: DegradedPushes,
) {
    let node = view.node.as_str();
    match now {
        "down" => tracing::warn!(part, node, "shard does not answer: pops pass its partition by"),
        "degraded" => match policy {
            DegradedPushes::Refuse => tracing::warn!(
                part, node, replicas = view.replicas, wanted,
                "shard has fewer replicas than --replica-acks: pushes, pops, finishes, nacks and cancels on it are refused until a replica is back"
            ),
            DegradedPushes::Accept => tracing::warn!(
                part, node, replicas = view.replicas, wanted,
                "shard has fewer replicas than --replica-acks: pushes, pops, finishes and cancels on it go on UNREPLICATED (--degraded-pushes accept); a second failure or a split can lose them or hand finished jobs out again"
            ),
        },
        "ok" if was != "unknown" => {
            tracing::info!(part, node, replicas = view.replicas, "shard healthy again")
        }
        _ => {}
    }
}

/// The error of a call of `script` whose WAIT found only `acked` of the
/// `wanted` replicas within `after`: written on the master, not
/// acknowledged.
pub(crate) fn unconfirmed(
    function: &Function,
    acked: usize,
    wanted: usize,
    after: Duration,
) -> crate::Error {
    use crate::Error;
    // A push (or a recurring tick's) is safe to send again: its ids make
    // a second one change nothing. A pop's leases are given back by its
    // caller: nothing was handed out.
    if function.repeatable {
        Error::Unreplicated { acked, wanted }
    } else if !function.late_unknown {
        Error::LeaseUnconfirmed {
            acked,
            wanted,
            after,
        }
    } else {
        Error::Unconfirmed {
            op: function.name,
            acked,
            wanted,
            after,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_shard_short_of_replicas_is_degraded_and_one_that_fails_is_down() {
        let h = Health::new(2, 1, DegradedPushes::Refuse);
        let view = |node: &str, replicas| ShardView {
            node: node.into(),
            replicas,
        };
        h.update(vec![view("a:1", Some(1)), view("b:2", Some(0))]);
        assert_eq!(h.degraded(0), None);
        assert_eq!(h.degraded(1), Some(("b:2".into(), 0)));
        h.short_of_replicas(0, 0);
        assert_eq!(h.degraded(0), Some(("a:1".into(), 0)));
        h.update(vec![view("a:1", None), view("b:2", Some(1))]);
        assert!(h.is_down(0) && !h.is_down(1));
        assert_eq!(h.degraded(1), None);
        assert!(h.update(vec![view("a:1", Some(1)), view("b:2", Some(1))]));
        assert!(!h.is_down(0));
        let shards = h.shards();
        assert_eq!(shards.len(), 2);
        assert!(shards.iter().all(|s| s.state == "ok"));
    }
}
