//! Dispatch: hand due jobs over (delayed -> ready; a lease that ran out ->
//! a failed attempt). The script is `dispatch.lua`; the loops that call it
//! are in `crate::loops`.

use std::time::Duration;

use tokio::time::Instant;

use super::call::Call;
use super::nack::Retention;
use super::script::Script;
use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::redis::Fields;

/// `dispatch.lua`: hands over the jobs of one partition that are due (see
/// [`Store::dispatch`]).
pub(crate) struct Dispatch;

/// What one dispatch call is asked.
pub(crate) struct DispatchArgs<'a> {
    /// Jobs named by expired events; empty: the sweep's, everything due.
    pub ids: &'a [String],
    /// Most jobs moved.
    pub batch: usize,
    pub retention: Retention,
    /// Trigger keys are armed for jobs due within this (zero: none).
    pub horizon: Duration,
    /// Per topic, the caller's idle waiters.
    pub waiting: &'a [(String, usize)],
}

impl Script for Dispatch {
    const DEF: &'static ScriptDef = &ScriptDef {
        name: "dispatch",
        source: include_str!("dispatch.lua"),
        when_full: true,
        acked: false,
        late_unknown: true,
    };
    type Input<'a> = DispatchArgs<'a>;
    type Output = Dispatched;

    fn args(a: DispatchArgs<'_>, call: &mut Call) {
        call.arg(a.batch)
            .arg(a.retention.max_per_topic)
            .arg(a.retention.max_age.as_millis() as u64)
            .arg(a.horizon.as_millis() as u64)
            .arg(a.waiting.len());
        for (topic, n) in a.waiting {
            call.arg(topic).arg(*n);
        }
        for id in a.ids {
            call.arg(id);
        }
    }

    fn decode(reply: (Status, Fields)) -> Result<Dispatched> {
        decode(reply)
    }
}

/// What one dispatch call did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Dispatched {
    /// Redis time when the script ran, in microseconds.
    pub now_us: i64,
    pub moved: usize,
    /// Due time (ms) of the earliest job still in the schedule (a sweep's
    /// only: a call with ids does not look, and says None, or now if it
    /// left due jobs when its time ran out).
    pub next_due_ms: Option<i64>,
    /// Schedule entries the sweep's arming looked at.
    pub armed: usize,
    /// When (Redis ms) the sweep should arm trigger keys again.
    pub next_arm_ms: Option<i64>,
    pub topics: Vec<TopicMoves>,
    /// Per job moved: how late, in microseconds, grouped by topic in the
    /// order of `topics` (each topic's `moved` of them).
    pub lateness_us: Vec<i64>,
}

impl Dispatched {
    /// Each topic with its jobs' lateness.
    pub fn lateness_by_topic(&self) -> impl Iterator<Item = (&str, &[i64])> {
        let mut rest = &self.lateness_us[..];
        self.topics.iter().map(move |t| {
            let (mine, after) = rest.split_at((t.moved as usize).min(rest.len()));
            rest = after;
            (t.topic.as_str(), mine)
        })
    }
}

/// One topic's share of a dispatch call.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TopicMoves {
    pub topic: String,
    pub moved: u64,
    /// Leases that ran out, followed by another attempt...
    pub retried: u64,
    /// ...or by death.
    pub died: u64,
    /// Ready jobs left to the caller's own waiters (not announced).
    pub local: u64,
}

fn decode((status, mut f): (Status, Fields)) -> Result<Dispatched> {
    if status != Status::Done {
        return Err(Error::protocol("dispatch", format!("status {status:?}")));
    }
    let now_us = f.int()?;
    let moved = f.int()?.max(0) as usize;
    let next = f.int()?;
    let armed = f.int()?.max(0) as usize;
    let next_arm = f.int()?;
    let n = f.int()?.max(0) as usize;
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        topics.push(TopicMoves {
            topic: f.string()?,
            moved: f.int()?.max(0) as u64,
            retried: f.int()?.max(0) as u64,
            died: f.int()?.max(0) as u64,
            local: f.int()?.max(0) as u64,
        });
    }
    let mut lateness_us = Vec::with_capacity(f.left());
    while f.left() > 0 {
        lateness_us.push(f.int()?);
    }
    Ok(Dispatched {
        now_us,
        moved,
        next_due_ms: (next >= 0).then_some(next),
        armed,
        next_arm_ms: (next_arm >= 0).then_some(next_arm),
        topics,
        lateness_us,
    })
}

impl Store {
    /// Dispatches `ids` (from expired events), or everything due when `ids`
    /// is empty (the sweep): at most `batch` jobs. `waiting`: per topic,
    /// the caller's idle waiters, who get that many of the jobs made ready
    /// without a notice. A sweep also arms the trigger keys of the jobs
    /// due within `horizon` (zero: none). The reply's Redis time sets the
    /// clock.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn dispatch(
        &self,
        part: usize,
        ids: &[String],
        batch: usize,
        retention: Retention,
        horizon: Duration,
        waiting: &[(String, usize)],
    ) -> Result<Dispatched> {
        let asked = DispatchArgs {
            ids,
            batch,
            retention,
            horizon,
            waiting,
        };
        let call = self.call_of::<Dispatch>(part, asked);
        // The clock reads the reply's Redis time against the call's round trip.
        let sent = Instant::now();
        let d = Dispatch::decode(self.send(call).await?)?;
        self.redis.clock().observe(sent, Instant::now(), d.now_us);
        Ok(d)
    }
}

impl Store {
    /// Announces `n` ready jobs of `topic` on partition `part`'s ready
    /// channel (what `LISTS.notify` in lib/ready.lua sends), for jobs left to
    /// this instance's waiters when some of them had gone. One PUBLISH; a
    /// failure is only logged: every waiter looks again within its recheck.
    pub(crate) async fn notify_ready(&self, part: usize, topic: &str, n: u64) {
        let mut publish = redis::cmd("PUBLISH");
        publish
            .arg(self.parts()[part].ready_channel())
            .arg(super::layout::ready_notice(n, topic));
        if let Err(e) = self
            .redis
            .call(
                "ready notice",
                publish.query_async::<i64>(&mut self.redis.conn()),
            )
            .await
        {
            tracing::debug!(error = %e, "ready notice not sent");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_topics_and_lateness() {
        let d = |r: &[&str]| decode(Fields::parse("dispatch", sample(r)).unwrap());
        let got = d(&[
            "0", "5000000", "3", "-1", "1000", "90000", "2", "order", "2", "1", "0", "1", "sms",
            "1", "0", "1", "0", "1500", "900", "2100",
        ])
        .unwrap();
        assert_eq!((got.moved, got.next_due_ms), (3, None));
        assert_eq!((got.armed, got.next_arm_ms), (1000, Some(90000)));
        assert_eq!(got.topics.len(), 2);
        assert_eq!(
            got.topics[1],
            TopicMoves {
                topic: "sms".into(),
                moved: 1,
                retried: 0,
                died: 1,
                local: 0,
            }
        );
        assert_eq!(got.lateness_us, vec![1500, 900, 2100]);
        let by: Vec<_> = got.lateness_by_topic().collect();
        assert_eq!(by, vec![("order", &[1500, 900][..]), ("sms", &[2100][..])]);
        assert_eq!(
            d(&["0", "1", "0", "77", "0", "-1", "0"])
                .unwrap()
                .next_due_ms,
            Some(77)
        );
        assert!(d(&["0", "1", "0", "77", "0", "-1", "1", "order"]).is_err());
    }
}
