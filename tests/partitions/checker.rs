//! The checker, in the manner of Jepsen's total-queue, reading only the
//! ledger: what each request was answered and when. Times are the shared
//! clock's, so "before" and "after" are certain only across a request's
//! whole span: a hand-out is "after" an acknowledgement when its pop was
//! sent after that acknowledgement came back.

use std::collections::{HashMap, HashSet};

use crate::load::{Kind, Op, GROUP_LIMIT};

/// The anomalies, each with the ids that show it.
#[derive(Default, Debug)]
pub struct Findings {
    pub pushed: usize,
    pub handed_out: usize,
    pub finished: usize,
    pub unknown: usize,
    /// Pushes, finishes and cancels refused (503: nothing was changed).
    pub refused: usize,
    /// An acknowledged push never handed out by the end.
    pub lost: Vec<String>,
    /// Handed out again after an acknowledged finish, or finished (204)
    /// twice.
    pub again: Vec<String>,
    /// Handed out before its due time.
    pub early: Vec<String>,
    /// Handed out, never pushed.
    pub unexpected: Vec<String>,
    /// Handed out after its cancel was acknowledged.
    pub resurrected: Vec<String>,
    /// The group's jobs held at one moment beyond its limit.
    pub over_limit: Vec<String>,
    /// A recurring tick handed out after its finish was acknowledged, or
    /// finished twice.
    pub tick_twice: Vec<String>,
    /// First handed out later than the bound after its due time, of jobs
    /// due once the network had healed and settled.
    pub late: Vec<String>,
    /// Push and finish latency, median and 99th percentile (ms).
    pub push_ms: (u64, u64),
    pub finish_ms: (u64, u64),
}

/// The late bound: a job due after the heal is handed out within a lease
/// and 5 s of its due time.
pub const LATE_BOUND_MS: u64 = crate::load::TTR_MS + 5000;

impl Findings {
    /// The rows to print: name, count, the first few ids.
    pub fn rows(&self) -> Vec<(&'static str, &Vec<String>)> {
        vec![
            ("lost", &self.lost),
            ("again", &self.again),
            ("early", &self.early),
            ("unexpected", &self.unexpected),
            ("resurrected", &self.resurrected),
            ("over-limit", &self.over_limit),
            ("tick-twice", &self.tick_twice),
            ("late", &self.late),
        ]
    }

    /// One table line: counts, then the first ids of each non-zero column.
    pub fn line(&self, scenario: &str, mode: &str) -> String {
        let mut s = format!(
            "| {scenario} | {mode} | {} | {} | {} | {} | {} |",
            self.pushed, self.handed_out, self.finished, self.refused, self.unknown
        );
        for (_, ids) in self.rows() {
            s += &format!(" {} |", ids.len());
        }
        s += &format!(
            " {}/{} | {}/{} |",
            self.push_ms.0, self.push_ms.1, self.finish_ms.0, self.finish_ms.1
        );
        for (name, ids) in self.rows() {
            if !ids.is_empty() {
                let first: Vec<&str> = ids.iter().take(4).map(String::as_str).collect();
                s += &format!("\n    {name}: {}", first.join(" "));
            }
        }
        s
    }
}

pub const HEADER: &str = "| scenario | mode | pushed | handed out | finished | refused | unknown | lost | again | early | unexpected | resurrected | over-limit | tick-twice | late | push ms p50/p99 | finish ms p50/p99 |";

fn acked(op: &Op) -> bool {
    match op.kind {
        Kind::Push => matches!(op.status, 200 | 201),
        Kind::Finish => op.status == 204,
        Kind::Cancel => op.status == 200,
        Kind::Pop => op.status == 200,
    }
}

/// The due time a tick's id names (`recurring/{tick}/2026-...Z`).
fn tick_due(id: &str) -> Option<u64> {
    let at = id.rsplit('/').next()?;
    chrono::DateTime::parse_from_rfc3339(at)
        .ok()
        .map(|t| t.timestamp_millis() as u64)
}

fn percentiles(mut v: Vec<u64>) -> (u64, u64) {
    if v.is_empty() {
        return (0, 0);
    }
    v.sort_unstable();
    (v[v.len() / 2], v[(v.len() * 99 / 100).min(v.len() - 1)])
}

/// Checks the ledger. `settled` is when the network had healed and settled
/// (for lateness), `stopped` when pushing stopped.
pub fn check(ops: &[Op], settled: u64, stopped: u64) -> Findings {
    let mut f = Findings::default();
    let by = |k: Kind| ops.iter().filter(move |o| o.kind == k);
    let pushes: HashMap<&str, &Op> = by(Kind::Push).map(|o| (o.id.as_str(), o)).collect();
    let mut cancel_tried = HashSet::new();
    let mut cancel_acked: HashMap<&str, u64> = HashMap::new();
    for o in by(Kind::Cancel) {
        cancel_tried.insert(o.id.as_str());
        if acked(o) {
            let t = cancel_acked.entry(&o.id).or_insert(o.recv);
            *t = (*t).min(o.recv);
        }
    }
    let mut finish_acked: HashMap<&str, Vec<u64>> = HashMap::new();
    for o in by(Kind::Finish).filter(|o| acked(o)) {
        finish_acked.entry(&o.id).or_default().push(o.recv);
    }
    let mut pops: HashMap<&str, Vec<&Op>> = HashMap::new();
    for o in by(Kind::Pop) {
        pops.entry(&o.id).or_default().push(o);
    }
    f.pushed = pushes.values().filter(|o| acked(o)).count();
    f.handed_out = by(Kind::Pop).count();
    f.finished = by(Kind::Finish).filter(|o| acked(o)).count();
    f.unknown = ops
        .iter()
        .filter(|o| o.kind != Kind::Pop && !acked(o) && matches!(o.status, 0 | 504))
        .count();
    f.refused = ops
        .iter()
        .filter(|o| o.kind != Kind::Pop && o.status == 503)
        .count();
    f.push_ms = percentiles(
        by(Kind::Push)
            .filter(|o| acked(o))
            .map(|o| o.recv - o.sent)
            .collect(),
    );
    f.finish_ms = percentiles(
        by(Kind::Finish)
            .filter(|o| acked(o))
            .map(|o| o.recv - o.sent)
            .collect(),
    );

    let mut push_ids: Vec<&&Op> = pushes.values().filter(|o| acked(o)).collect();
    push_ids.sort_by_key(|o| o.sent);
    for p in push_ids {
        let id = p.id.as_str();
        match pops.get(id) {
            None if !cancel_tried.contains(id) => f.lost.push(id.to_owned()),
            // A grouped job waits its turn under the limit: not late.
            Some(ps) if !p.group && p.at >= settled && p.at <= stopped => {
                let first = ps.iter().map(|o| o.recv).min().unwrap();
                if first > p.at + LATE_BOUND_MS {
                    f.late.push(id.to_owned());
                }
            }
            _ => {}
        }
    }
    let mut ids: Vec<&&str> = pops.keys().collect();
    ids.sort();
    for &&id in &ids {
        let ps = &pops[id];
        let tick = id.starts_with("recurring/");
        let due = if tick {
            tick_due(id)
        } else {
            pushes.get(id).map(|p| p.at)
        };
        let Some(due) = due else {
            f.unexpected.push(id.to_owned());
            continue;
        };
        if ps.iter().any(|o| o.recv < due) {
            f.early.push(id.to_owned());
        }
        if let Some(&c) = cancel_acked.get(id) {
            if ps.iter().any(|o| o.sent > c) {
                f.resurrected.push(id.to_owned());
            }
        }
        let fins = finish_acked.get(id).map_or(&[][..], Vec::as_slice);
        let first_fin = fins.iter().min();
        let repeated = fins.len() > 1 || first_fin.is_some_and(|&t| ps.iter().any(|o| o.sent > t));
        if repeated {
            if tick {
                f.tick_twice.push(id.to_owned());
            } else {
                f.again.push(id.to_owned());
            }
        }
    }
    f.over_limit = over_limit(ops);
    f
}

/// The group's holds certain to have been live: from the pop's answer to
/// the sending of a finish that was acknowledged. More than the limit at
/// one moment is a breach; returns the ids held at each.
fn over_limit(ops: &[Op]) -> Vec<String> {
    let mut events: Vec<(u64, i32, &str)> = Vec::new();
    for o in ops
        .iter()
        .filter(|o| o.kind == Kind::Finish && o.group && acked(o))
    {
        if o.at < o.sent {
            events.push((o.at, 1, &o.id));
            events.push((o.sent, -1, &o.id));
        }
    }
    // Ends before starts at the same millisecond: touching is not overlap.
    events.sort_by_key(|&(t, d, _)| (t, d));
    let mut held: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for (_, d, id) in events {
        if d > 0 {
            held.push(id);
            if held.len() > GROUP_LIMIT {
                for h in &held {
                    if !out.iter().any(|o: &String| o == h) {
                        out.push((*h).to_owned());
                    }
                }
            }
        } else if let Some(i) = held.iter().position(|h| *h == id) {
            held.swap_remove(i);
        }
    }
    out
}

/// The ledger's lines about `id`, in the order sent: for a failure's message.
pub fn excerpt(ops: &[Op], id: &str) -> String {
    let mut lines: Vec<&Op> = ops.iter().filter(|o| o.id == id).collect();
    lines.sort_by_key(|o| o.sent);
    let t0 = lines.first().map_or(0, |o| o.sent);
    lines
        .iter()
        .map(|o| {
            format!(
                "      {:?} on delayq {}: sent +{} ms, answered +{} ms, status {}",
                o.kind,
                o.instance,
                o.sent - t0,
                o.recv - t0,
                o.status
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
