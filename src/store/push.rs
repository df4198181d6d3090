//! Push: create a job, or replace (or keep) the one with the same id.
//! The script is `push.lua`.

use redis::Cmd;

use super::reply::Fields;
use super::{Script, Status, Store};
use crate::error::{Error, Result};
use crate::job::PushOutcome;

pub const SCRIPT: Script = Script {
    name: "push",
    source: include_str!("push.lua"),
    when_full: false,
};

/// One push, as the script takes it.
#[derive(Debug)]
pub(crate) struct Push<'a> {
    pub id: &'a str,
    pub topic: &'a str,
    pub body: &'a str,
    pub ttr_ms: u64,
    pub delay_ms: u64,
    pub due_at_ms: Option<i64>,
    /// Retry intervals as stored: "120000,600000".
    pub intervals_ms: String,
    /// 0: no limit beyond the intervals.
    pub max_attempts: u32,
    pub keep: bool,
}

impl Push<'_> {
    fn args(&self, cmd: &mut Cmd) {
        cmd.arg(self.id)
            .arg(self.topic)
            .arg(self.body)
            .arg(self.ttr_ms)
            .arg(self.delay_ms)
            .arg(self.due_at_ms.map_or(-1, |t| t.max(0)))
            .arg(&self.intervals_ms)
            .arg(self.max_attempts)
            .arg(if self.keep { "keep" } else { "replace" });
    }
}

/// What a push did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Pushed {
    pub outcome: PushOutcome,
    /// When the job falls due (for a kept job: its existing due time).
    pub due_ms: i64,
    /// It is now the earliest job in the schedule: sweeps must re-arm.
    pub new_head: bool,
}

pub(crate) fn decode((status, mut f): (Status, Fields)) -> Result<Pushed> {
    let outcome = match status {
        Status::Done => PushOutcome::Created,
        Status::Replaced => PushOutcome::Replaced,
        Status::Kept => PushOutcome::Kept,
        s => return Err(Error::protocol("push", format!("status {s:?}"))),
    };
    Ok(Pushed {
        outcome,
        due_ms: f.int()?,
        new_head: f.int()? == 1,
    })
}

impl Store {
    pub(crate) async fn push(&self, p: &Push<'_>) -> Result<Pushed> {
        Ok(self.push_many(std::slice::from_ref(p)).await?.remove(0))
    }

    /// Many pushes, one round trip per partition (the partitions' calls
    /// run at once); each push is still its own atomic upsert. With replica
    /// acks asked for, the pushes are acknowledged only if enough replicas
    /// have them.
    pub(crate) async fn push_many(&self, pushes: &[Push<'_>]) -> Result<Vec<Pushed>> {
        let mut groups: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for (i, p) in pushes.iter().enumerate() {
            groups.entry(self.part_of(p.id)).or_default().push(i);
        }
        let calls = groups.iter().map(|(&part, members)| {
            let cmds = members
                .iter()
                .map(|&i| {
                    let mut cmd = self.fcall(&SCRIPT, &self.parts()[part]);
                    pushes[i].args(&mut cmd);
                    cmd
                })
                .collect();
            self.run_acked("push", part, cmds, self.timeout())
        });
        let replies = futures::future::join_all(calls).await;
        let mut out: Vec<Option<Pushed>> = (0..pushes.len()).map(|_| None).collect();
        for ((_, members), replies) in groups.iter().zip(replies) {
            for (&i, reply) in members.iter().zip(replies?) {
                out[i] = Some(decode(reply)?);
            }
        }
        out.into_iter()
            .map(|p| p.ok_or_else(|| Error::protocol("push", "a reply is missing".into())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::sample;

    #[test]
    fn decodes_each_outcome() {
        let d = |r: &[&str]| decode(Fields::parse("push", sample(r)).unwrap());
        assert_eq!(
            d(&["0", "1700000000000", "1"]).unwrap(),
            Pushed {
                outcome: PushOutcome::Created,
                due_ms: 1_700_000_000_000,
                new_head: true
            }
        );
        assert_eq!(d(&["4", "5", "0"]).unwrap().outcome, PushOutcome::Replaced);
        assert_eq!(d(&["3", "5", "0"]).unwrap().outcome, PushOutcome::Kept);
        assert!(d(&["2", "5", "0"]).is_err());
        assert!(d(&["0", "5"]).is_err());
    }
}
