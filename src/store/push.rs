//! Push: create a job, or replace (or keep) the one with the same id.
//! The script is `push.lua`.

use std::sync::Arc;

use super::batch::PerJob;
use super::call::Call;
use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::job::PushOutcome;
use crate::redis::coalesce::Batch;
use crate::redis::Fields;

/// Arguments per job that push.lua takes (its prelude's PUSH_ARGS).
pub(crate) const ARGS: usize = 10;

/// One push, as the script takes it.
#[derive(Debug)]
pub(crate) struct Push {
    pub id: String,
    pub topic: String,
    pub body: String,
    pub ttr_ms: u64,
    pub delay_ms: u64,
    pub due_at_ms: Option<i64>,
    /// Retry intervals as stored: "120000,600000".
    pub intervals_ms: String,
    /// 0: no limit beyond the intervals.
    pub max_attempts: u32,
    pub keep: bool,
    /// What the job asks beyond the above.
    pub extra: Extra,
}

/// What a job asks beyond the basics (tags, dedup, priority, trace
/// context), sent to push.lua as one JSON object: one argument whatever
/// the features, and "" for a job that asks none of them, which the script
/// then never decodes. Each feature adds its own field, skipped when unset.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Extra {
    /// Tags, distinct, in the order first given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Trace context: W3C traceparent and tracestate, kept as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// Priorities: 1 to MAX_PRIORITY; unset for 0, the default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedup: Option<DedupArg>,
    /// Groups: the job's group key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Batches: the batch the job joins (its home took the id in).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
}

/// A push's dedup settings as push.lua reads them (`extra.dedup`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct DedupArg {
    pub key: String,
    pub mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_wait_ms: Option<u64>,
}

impl From<&crate::job::Dedup> for DedupArg {
    fn from(d: &crate::job::Dedup) -> Self {
        let ms = |d: std::time::Duration| d.as_millis().min(u64::MAX as u128) as u64;
        DedupArg {
            key: d.key.clone(),
            mode: d.mode.as_str(),
            window_ms: d.window.map(ms),
            max_wait_ms: d.max_wait.map(ms),
        }
    }
}

impl Extra {
    /// The script's argument: "" when nothing is set.
    fn arg(&self) -> String {
        if *self == Extra::default() {
            String::new()
        } else {
            serde_json::to_string(self).expect("plain data serializes")
        }
    }
}

/// What a push did, as its script replied (the queue makes a
/// [`crate::job::Pushed`] of it).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PushReply {
    pub outcome: PushOutcome,
    /// When the job falls due (for a kept job: its existing due time).
    pub due_ms: i64,
    /// It is now the earliest job in the schedule: sweeps must re-arm.
    pub new_head: bool,
    /// Deduplicated or debounced: the key's job (otherwise the push's id).
    pub job_id: Option<String>,
}

/// One job's outcome, `status` read already: due time, new head.
#[cfg(test)]
pub(crate) fn decode((status, mut f): (Status, Fields)) -> Result<PushReply> {
    decode_job(status, &mut f)
}

fn decode_job(status: Status, f: &mut Fields) -> Result<PushReply> {
    let outcome = match status {
        Status::Done => PushOutcome::Created,
        Status::Replaced => PushOutcome::Replaced,
        Status::Kept => PushOutcome::Kept,
        Status::Deduplicated => PushOutcome::Deduplicated,
        Status::Debounced => PushOutcome::Debounced,
        s => return Err(Error::protocol("push", format!("status {s:?}"))),
    };
    let due_ms = f.int()?;
    let new_head = f.int()? == 1;
    let job_id = match outcome {
        PushOutcome::Deduplicated | PushOutcome::Debounced => Some(f.string()?),
        _ => None,
    };
    Ok(PushReply {
        outcome,
        due_ms,
        new_head,
        job_id,
    })
}

/// Single pushes are batched while Redis is busy ([`crate::redis::coalesce`]);
/// batch pushes go as few calls as the limits allow.
pub(crate) struct Pushes;

impl Batch for Pushes {
    type Item = Push;
    type Out = PushReply;
    const MAX_ITEMS: usize = 128;
    const MAX_BYTES: usize = 1 << 20;

    fn bytes(p: &Push) -> usize {
        p.id.len()
            + p.topic.len()
            + p.body.len()
            + p.intervals_ms.len()
            + p.extra.dedup.as_ref().map_or(0, |d| d.key.len() + 64)
            + 48
    }
}

impl PerJob for Pushes {
    const DEF: &'static ScriptDef = &ScriptDef {
        name: "push",
        source: include_str!("push.lua"),
        when_full: false,
        acked: true,
        late_unknown: true,
    };
    // Measured with 32 to 256 single adds in flight (AOF always, where each
    // of Redis's loops that wrote ends in an fsync), against 16: at 64, 128
    // and 256 adds/s rose 1.28-1.32x, 1.14x and 1.07x, at 0.83-0.95x the
    // Redis CPU per add; at 32 no second batch of 32 forms (the same within
    // the noise). A second batch of fewer costs Redis more per push than it
    // saves in waiting; an adaptive threshold (half the calls lately in
    // flight) measured between the two (BENCHMARKS.md).
    const SECOND_AT: Option<usize> = Some(32);

    fn args(p: &Push, cmd: &mut Call) {
        cmd.arg(&p.id)
            .arg(&p.topic)
            .arg(&p.body)
            .arg(p.ttr_ms)
            .arg(p.delay_ms)
            .arg(p.due_at_ms.map_or(-1, |t| t.max(0)))
            .arg(&p.intervals_ms)
            .arg(p.max_attempts)
            .arg(if p.keep { "keep" } else { "replace" })
            .arg(p.extra.arg());
    }

    fn decode(f: &mut Fields) -> Result<PushReply> {
        let status = f.status()?;
        decode_job(status, f)
    }
}

impl Store {
    /// One push. Pushes that arrive while another push call of the same
    /// partition is at Redis go together in the next call (group commit),
    /// which goes at once, beside the first, when 16 or more wait; each job
    /// is still its own upsert. Pushes waiting at the same time have no
    /// order among them. Waits at most `limit`.
    pub(crate) async fn push(
        self: &Arc<Self>,
        p: Push,
        limit: std::time::Duration,
    ) -> Result<PushReply> {
        let part = self.part_of(&p.id);
        self.lanes.pushes.submit(self, part, p, limit).await
    }

    /// Many pushes: one script call per partition (and per
    /// [`Pushes::MAX_ITEMS`] jobs), the partitions' calls at once, a
    /// partition's one after another; each job is still its own upsert,
    /// in the order given, with its own result (a job the
    /// script refuses fails alone). With replica acks asked for, the
    /// pushes are acknowledged only if enough replicas have them.
    pub(crate) async fn push_many(&self, pushes: &[Push]) -> Result<Vec<Result<PushReply>>> {
        self.batch_many::<Pushes>(pushes, |p| self.part_of(&p.id))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn a_push_writes_the_arguments_the_script_takes() {
        let mut call = Call::bare(Pushes::DEF);
        Pushes::args(
            &Push {
                id: "a".into(),
                topic: "t".into(),
                body: String::new(),
                ttr_ms: 1,
                delay_ms: 0,
                due_at_ms: None,
                intervals_ms: String::new(),
                max_attempts: 0,
                keep: false,
                extra: Extra::default(),
            },
            &mut call,
        );
        assert_eq!(call.arg_count(), ARGS);
    }

    #[test]
    fn decodes_each_outcome() {
        let d = |r: &[&str]| decode(Fields::parse::<Status>("push", sample(r)).unwrap());
        let mut f = Fields::parse::<Status>("push", sample(&["0", "0", "7", "0", "3", "5", "1"]))
            .unwrap()
            .1;
        assert_eq!(
            [
                Pushes::decode(&mut f).unwrap(),
                Pushes::decode(&mut f).unwrap()
            ],
            [
                PushReply {
                    outcome: PushOutcome::Created,
                    due_ms: 7,
                    new_head: false,
                    job_id: None
                },
                PushReply {
                    outcome: PushOutcome::Kept,
                    due_ms: 5,
                    new_head: true,
                    job_id: None
                }
            ]
        );
        assert!(Pushes::decode(&mut f).is_err());
        assert_eq!(
            d(&["0", "1700000000000", "1"]).unwrap(),
            PushReply {
                outcome: PushOutcome::Created,
                due_ms: 1_700_000_000_000,
                new_head: true,
                job_id: None
            }
        );
        assert_eq!(d(&["4", "5", "0"]).unwrap().outcome, PushOutcome::Replaced);
        assert_eq!(d(&["3", "5", "0"]).unwrap().outcome, PushOutcome::Kept);
        assert!(d(&["2", "5", "0"]).is_err());
        let dedup = d(&["5", "5", "0", "first"]).unwrap();
        assert_eq!(
            (dedup.outcome, dedup.job_id.as_deref()),
            (PushOutcome::Deduplicated, Some("first"))
        );
        assert_eq!(
            d(&["6", "5", "1", "first"]).unwrap().outcome,
            PushOutcome::Debounced
        );
        assert!(d(&["0", "5"]).is_err());
    }
}
