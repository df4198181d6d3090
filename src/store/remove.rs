//! Remove: finish (with a lease token) or delete (from any state) a job.
//! The script is `remove.lua`. A finish in a topic with a `keep_finished`
//! window leaves the job's record (state `finished`) for that long; a
//! finish with a result leaves it with the result (in a topic without a
//! window, unlisted, for [`Keep::results`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::batch::PerJob;
use super::call::Call;
use super::{ScriptDef, Status, Store};
use crate::error::Result;
use crate::redis::coalesce::Batch;
use crate::redis::Fields;
use crate::JobState;

/// Which removals are allowed.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fence<'a> {
    /// Only while `token` is the job's current lease (finish).
    Lease(&'a str),
    /// A finish whatever the job's state (the compatible `/finish`).
    Finish,
    /// Whatever the job's state, a kept record too, keeping nothing
    /// (delete).
    Any,
}

/// How long finished jobs' records are kept, in every topic and per topic
/// (the topic's wins). Empty: none is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Keep {
    pub default: Option<Duration>,
    pub topics: HashMap<String, Duration>,
    /// How long a result is kept in a topic without a window.
    pub results: Duration,
}

impl Keep {
    /// The window of `topic`, if its records are kept.
    pub fn of(&self, topic: &str) -> Option<Duration> {
        self.topics.get(topic).copied().or(self.default)
    }

    /// The shortest window: how often the trim loop looks.
    pub fn shortest(&self) -> Option<Duration> {
        self.topics.values().copied().chain(self.default).min()
    }

    /// remove.lua's first arguments: the default window and the topics'
    /// own (ms; 0: none).
    fn args(&self, cmd: &mut Call) {
        let ms = |d: Option<Duration>| d.map_or(0, |d| d.as_millis() as u64);
        cmd.arg(ms(self.default)).arg(self.topics.len());
        let mut topics: Vec<_> = self.topics.iter().collect();
        topics.sort();
        for (topic, d) in topics {
            cmd.arg(topic).arg(ms(Some(*d)));
        }
        cmd.arg(ms(Some(self.results)).max(1));
    }
}

/// One removal as the script takes it: id, and the lease token it must
/// hold (None: any state), and a finish's result (JSON; "": none).
#[derive(Debug)]
pub(crate) struct Removal {
    id: String,
    mode: &'static str,
    token: String,
    result: String,
}

/// What a removal did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Removed {
    /// Done, Missing or Stale.
    pub status: Status,
    /// The job's topic (empty when Missing).
    pub topic: String,
    /// The state it was in (None when Missing).
    pub state: Option<JobState>,
}

/// Finishes and deletes, batched while Redis is busy
/// ([`crate::redis::coalesce`]).
pub(crate) struct Removes;

impl Batch for Removes {
    type Item = Removal;
    type Out = Removed;
    const MAX_ITEMS: usize = 256;
    const MAX_BYTES: usize = 1 << 20;

    fn bytes(r: &Removal) -> usize {
        r.id.len() + r.token.len() + r.result.len()
    }
}

impl PerJob for Removes {
    const DEF: &'static ScriptDef = &ScriptDef {
        name: "remove",
        source: include_str!("remove.lua"),
        when_full: true,
        acked: true,
        late_unknown: true,
    };

    fn header(store: &Store, cmd: &mut Call) {
        store.keep.args(cmd);
    }

    fn args(r: &Removal, cmd: &mut Call) {
        cmd.arg(&r.id).arg(r.mode).arg(&r.token).arg(&r.result);
    }

    fn decode(f: &mut Fields) -> Result<Removed> {
        let status = f.status()?;
        let topic = f.string()?;
        let state = f.string()?;
        Ok(Removed {
            status,
            topic,
            state: JobState::parse(&state),
        })
    }
}

impl Store {
    /// Finishes or deletes one job; removals that arrive together go to
    /// Redis as one call.
    pub(crate) async fn remove(self: &Arc<Self>, id: &str, fence: Fence<'_>) -> Result<Removed> {
        self.finish_with(id, fence, String::new()).await
    }

    /// [`remove`](Self::remove), a finish carrying `result` (checked JSON
    /// of at most [`MAX_RESULT_BYTES`](crate::defaults::MAX_RESULT_BYTES);
    /// "": none).
    pub(crate) async fn finish_with(
        self: &Arc<Self>,
        id: &str,
        fence: Fence<'_>,
        result: String,
    ) -> Result<Removed> {
        let (mode, token) = match fence {
            Fence::Lease(t) => ("lease", t),
            Fence::Finish => ("finish", ""),
            Fence::Any => ("any", ""),
        };
        let removal = Removal {
            id: id.to_owned(),
            mode,
            token: token.to_owned(),
            result,
        };
        self.lanes
            .removes
            .submit(self, self.part_of(id), removal, self.redis.timeout())
            .await
    }

    /// Finishes many leased jobs, each under its own token with its own
    /// result ("": none): one script
    /// call per partition (and per [`Removes::MAX_ITEMS`] jobs), the calls
    /// at once; each job is still its own fenced removal, with its own
    /// result (a stale token fails that job alone).
    pub(crate) async fn finish_many(
        &self,
        leases: &[(&str, &str, &str)],
    ) -> Result<Vec<Result<Removed>>> {
        let removals: Vec<Removal> = leases
            .iter()
            .map(|(id, token, result)| Removal {
                id: (*id).to_owned(),
                mode: "lease",
                token: (*token).to_owned(),
                result: (*result).to_owned(),
            })
            .collect();
        self.batch_many::<Removes>(&removals, |r| self.part_of(&r.id))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_status_and_topic() {
        let mut f = Fields::parse::<Status>(
            "remove",
            sample(&[
                "0", "0", "order", "reserved", "2", "order", "ready", "1", "", "",
            ]),
        )
        .unwrap()
        .1;
        let mut d = || {
            let r = Removes::decode(&mut f).unwrap();
            (r.status, r.topic, r.state)
        };
        assert_eq!(
            d(),
            (Status::Done, "order".into(), Some(JobState::Reserved))
        );
        assert_eq!(d(), (Status::Stale, "order".into(), Some(JobState::Ready)));
        assert_eq!(d(), (Status::Missing, String::new(), None));
    }
}
