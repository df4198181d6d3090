//! Tick: push the jobs of recurring schedules' ticks, each once, many per
//! call. The script is `tick.lua`.

use tokio::time::Instant;

use super::batch::PerJob;
use super::call::Call;
use super::push::{Push, PushReply};
use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::job::PushOutcome;
use crate::redis::coalesce::{chunks, Batch};
use crate::redis::Fields;

/// What a tick asks of `tick.lua` (see its header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TickMode {
    /// Push the tick's job.
    Push,
    /// A tick missed while no delayq ran: its job, unless the tick before
    /// it has one (which then fires in its place).
    Fire,
    /// A missed tick: drop the tick before it if still delayed; no job.
    Skip,
    /// The rule has no next tick: out of the due index until put again.
    Park,
}

impl TickMode {
    fn as_str(self) -> &'static str {
        match self {
            TickMode::Push => "push",
            TickMode::Fire => "fire",
            TickMode::Skip => "skip",
            TickMode::Park => "park",
        }
    }
}

/// Arguments per tick that tick.lua takes (its prelude's TICK_ARGS).
pub(crate) const ARGS: usize = 10;

/// One tick of one schedule.
#[derive(Debug)]
pub(crate) struct Tick {
    pub name: String,
    pub version: String,
    pub tick_ms: i64,
    pub mode: TickMode,
    /// The tick's job (Push and Fire).
    pub job: Option<Push>,
}

/// What a tick did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ticked {
    /// Recorded, and its job pushed if it had one.
    Done(Option<PushReply>),
    /// This tick or a later one was done already.
    Already,
    /// The schedule changed or is gone.
    Stale,
}

impl Batch for Tick {
    type Item = Tick;
    type Out = Ticked;
    const MAX_ITEMS: usize = 128;
    const MAX_BYTES: usize = 1 << 20;

    fn bytes(t: &Tick) -> usize {
        t.name.len()
            + t.version.len()
            + t.job.as_ref().map_or(0, |j| {
                j.id.len() + j.topic.len() + j.body.len() + j.intervals_ms.len()
            })
            + 64
    }
}

impl PerJob for Tick {
    const DEF: &'static ScriptDef = &ScriptDef {
        name: "tick",
        source: include_str!("tick.lua"),
        when_full: false,
        acked: true,
        late_unknown: true,
    };

    fn args(t: &Tick, cmd: &mut Call) {
        cmd.arg(&t.name)
            .arg(&t.version)
            .arg(t.tick_ms)
            .arg(t.mode.as_str());
        match &t.job {
            Some(j) => cmd
                .arg(&j.id)
                .arg(&j.topic)
                .arg(&j.body)
                .arg(j.ttr_ms)
                .arg(&j.intervals_ms)
                .arg(j.max_attempts),
            None => cmd.arg("").arg("").arg("").arg(0).arg("").arg(0),
        };
    }

    fn decode(f: &mut Fields) -> Result<Ticked> {
        let status = f.status()?;
        let pushed = f.int()? == 1;
        let due_ms = f.int()?;
        let new_head = f.int()? == 1;
        Ok(match (status, pushed) {
            (Status::Stale, _) => Ticked::Stale,
            (Status::Kept, false) => Ticked::Already,
            (Status::Done, false) => Ticked::Done(None),
            (s, true) => Ticked::Done(Some(PushReply {
                outcome: match s {
                    Status::Done => PushOutcome::Created,
                    Status::Replaced => PushOutcome::Replaced,
                    Status::Kept => PushOutcome::Kept,
                    s => return Err(Error::protocol("tick", format!("status {s:?}"))),
                },
                due_ms,
                new_head,
                job_id: None,
            })),
            (s, false) => return Err(Error::protocol("tick", format!("status {s:?}"))),
        })
    }
}

impl Store {
    /// Ticks of partition `part`'s schedules, in order (a schedule's ticks
    /// stay in order: the calls go one after another), as few calls as
    /// [`Tick`]'s limits allow; each tick has its own result.
    pub(crate) async fn recur_tick(
        &self,
        part: usize,
        ticks: &[Tick],
    ) -> Result<Vec<Result<Ticked>>> {
        let mut out = Vec::with_capacity(ticks.len());
        for chunk in chunks::<Tick, _>(ticks, |t| Tick::bytes(t)) {
            let deadline = Instant::now() + self.redis.timeout();
            out.extend(self.batch_each::<Tick>(part, &chunk, deadline).await?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn a_tick_writes_the_arguments_the_script_takes() {
        for job in [
            None,
            Some(Push {
                id: "a".into(),
                topic: "t".into(),
                body: String::new(),
                ttr_ms: 1,
                delay_ms: 0,
                due_at_ms: None,
                intervals_ms: String::new(),
                max_attempts: 0,
                keep: true,
                extra: Default::default(),
            }),
        ] {
            let mut call = Call::bare(Tick::DEF);
            let tick = Tick {
                name: "n".into(),
                version: "v".into(),
                tick_ms: 1,
                mode: TickMode::Push,
                job,
            };
            Tick::args(&tick, &mut call);
            assert_eq!(call.arg_count(), ARGS);
        }
    }

    #[test]
    fn decodes_each_tick() {
        let (status, mut f) = Fields::parse::<Status>(
            "tick",
            sample(&[
                "0",
                "2",
                "0",
                "0",
                "0",
                "3",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "1",
                "1700000000000",
                "1",
                "3",
                "1",
                "5",
                "0",
            ]),
        )
        .unwrap();
        assert_eq!(status, Status::Done);
        let mut next = || Tick::decode(&mut f).unwrap();
        assert_eq!(next(), Ticked::Stale);
        assert_eq!(next(), Ticked::Already);
        assert_eq!(next(), Ticked::Done(None));
        assert_eq!(
            next(),
            Ticked::Done(Some(PushReply {
                outcome: PushOutcome::Created,
                due_ms: 1_700_000_000_000,
                new_head: true,
                job_id: None
            }))
        );
        assert_eq!(
            next(),
            Ticked::Done(Some(PushReply {
                outcome: PushOutcome::Kept,
                due_ms: 5,
                new_head: false,
                job_id: None
            }))
        );
        assert!(Tick::decode(&mut f).is_err(), "nothing left");
        let mut f = Fields::parse::<Status>("tick", sample(&["0", "1", "0", "0", "0"]))
            .unwrap()
            .1;
        assert!(Tick::decode(&mut f).is_err(), "MISSING is no tick's status");
    }
}
