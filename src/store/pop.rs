//! Pop: lease ready jobs to a consumer. The script is `pop.lua`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::call::Call;
use super::rate::Grant;
use super::script::Script;
use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::job::Delivery;
use crate::redis::Fields;

mod batch;

pub(crate) use batch::{PopRequest, Pops};

/// `pop.lua`: leases ready jobs of some topics in one partition. Its
/// calls are made by `Store::pop_call`, which sets their deadline and
/// wait and gives back the jobs of a call that may have run unanswered;
/// pops that arrive together are batched by [`Pops`].
pub(crate) struct Pop;

/// What one pop call may take.
pub(crate) struct Room<'a> {
    jobs: usize,
    bytes: usize,
    /// Per topic, the jobs its rate limit granted (None: no limit), from
    /// the topic's one bucket; empty: this partition's buckets decide.
    allowed: &'a [Option<u64>],
}

impl Script for Pop {
    const DEF: &'static ScriptDef = &ScriptDef {
        name: "pop",
        source: include_str!("pop.lua"),
        when_full: true,
        acked: true,
        // A late pop's jobs are given back (unpop): to its caller, nothing
        // changed.
        late_unknown: false,
    };
    /// The call's nonce (its leases' tokens start with it), the topics in
    /// the order they are tried, and what the call may take.
    type Input<'a> = (&'a str, &'a [String], Room<'a>);
    type Output = Popped;

    fn args((nonce, topics, room): Self::Input<'_>, call: &mut Call) {
        let allowed: Vec<String> = (room.allowed.iter())
            .map(|a| a.map_or("-".to_owned(), |n| n.to_string()))
            .collect();
        call.arg(room.jobs)
            .arg(room.bytes)
            .arg(nonce)
            .arg(allowed.join(","));
        for t in topics {
            call.arg(t);
        }
    }

    fn decode(reply: (Status, Fields)) -> Result<Popped> {
        decode(reply)
    }
}

/// Ready jobs that a rate limit kept from a pop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Held {
    /// How many (up to the number asked for).
    pub jobs: u64,
    /// When the limit lets the next one out, ms from now (0: none held).
    pub retry_ms: u64,
    /// A topic had a limit the caller took no tokens for (partitioned
    /// queues): nothing of it was handed out.
    pub ungranted: bool,
    /// The call stopped after skipping its most stale ready-list entries
    /// (jobs deleted, rescheduled or cancelled while ready): ready jobs may
    /// wait behind more of them, so the caller looks again at once.
    pub again: bool,
}

impl Held {
    fn add(&mut self, other: Held) {
        self.jobs += other.jobs;
        self.ungranted |= other.ungranted;
        self.again |= other.again;
        if other.retry_ms > 0 && (self.retry_ms == 0 || other.retry_ms < self.retry_ms) {
            self.retry_ms = other.retry_ms;
        }
    }
}

/// What one pop call did.
#[derive(Debug)]
pub(crate) struct Popped {
    /// Redis time at the call (us).
    now_us: i64,
    held: Held,
    deliveries: Vec<Delivery>,
}

/// The reply: Redis time (us), what was held back, the number of jobs n,
/// seven values per job, then three per job with trace context (its place
/// 1..n, traceparent, tracestate) and per flow parent (minus its place,
/// its children's outcomes, "").
fn decode((status, mut f): (Status, Fields)) -> Result<Popped> {
    if status != Status::Done {
        return Err(Error::protocol("pop", format!("status {status:?}")));
    }
    let popped_at_us = f.int()?;
    let held = Held {
        jobs: f.int()?.max(0) as u64,
        retry_ms: f.int()?.max(0) as u64,
        ungranted: f.int()? == 1,
        again: f.int()? == 1,
    };
    let n = f.int()?.max(0) as usize;
    let bad =
        |left: usize| Error::protocol("pop", format!("{left} values after the time for {n} jobs"));
    if f.left() < n * 7 || !(f.left() - n * 7).is_multiple_of(3) {
        return Err(bad(f.left()));
    }
    let mut deliveries = Vec::with_capacity(n);
    for _ in 0..n {
        deliveries.push(Delivery {
            id: f.string()?,
            topic: f.string()?,
            body: f.string()?,
            token: f.string()?,
            due_ms: f.int()?,
            popped_at_us,
            attempts: f.int()? as u32,
            lease_until_ms: f.int()?,
            traceparent: None,
            tracestate: None,
            children: None,
        });
    }
    while f.left() > 0 {
        let k = f.int()?;
        let d = usize::try_from(k.abs() - 1)
            .ok()
            .and_then(|i| deliveries.get_mut(i))
            .ok_or_else(|| bad(f.left()))?;
        if k < 0 {
            d.children = Some(crate::job::children_of(&f.string()?));
            f.string()?;
        } else {
            d.traceparent = Some(f.string()?).filter(|s| !s.is_empty());
            d.tracestate = Some(f.string()?).filter(|s| !s.is_empty());
        }
    }
    Ok(Popped {
        now_us: popped_at_us,
        held,
        deliveries,
    })
}

impl Store {
    /// Leases up to `max` ready jobs (bodies of at most `max_bytes` in all,
    /// and always one when one is ready) from `topics`, tried in order,
    /// for a caller who waits `patience` (`woken`: by a ready notice, after
    /// finding nothing); waits at most `limit` for the reply (longer, so that a late reply's jobs are given back). The reply's Redis time sets the
    /// clock.
    ///
    /// Pops of a partition that arrive together are batched ([`Pops`]).
    /// A partitioned queue's partitions are tried one after another, from
    /// the one whose turn it is (the turn passes at each reply from it),
    /// until `max` jobs are leased: no partition waits behind another, and
    /// no more jobs are reserved than asked. If a partition fails after others gave jobs, those jobs
    /// are returned (they are leased: dropping them would strand them).
    pub(crate) async fn pop(
        self: &Arc<Self>,
        topics: &[String],
        max: usize,
        max_bytes: usize,
        patience: Duration,
        limit: Duration,
        woken: bool,
    ) -> Result<(Vec<Delivery>, Held)> {
        let n = self.parts().len();
        // Redis must not reserve jobs after the caller stopped waiting.
        let until = Instant::now() + patience;
        if n == 1 {
            let request = PopRequest {
                topics: topics.to_vec(),
                max,
                max_bytes,
                until,
            };
            return self.lanes.pops.submit(self, 0, request, limit).await;
        }
        // Each topic's limit is one bucket for the whole queue: its tokens
        // are taken first, and what the partitions did not use is given
        // back, so all partitions together never exceed it. Topics this
        // process has not seen with a limit take none; a partition that
        // finds one limited says so, and its tokens are taken then.
        let known: Vec<bool> = {
            let limited = self.limited.lock().unwrap();
            topics.iter().map(|t| limited.contains(t)).collect()
        };
        let mut grants: Vec<Option<Grant>> = vec![None; topics.len()];
        for (i, topic) in topics.iter().enumerate() {
            if known[i] {
                match self.rate_take(topic, max).await {
                    Ok(g) => grants[i] = g,
                    Err(e) => {
                        let allowed: Vec<_> =
                            grants.iter().map(|g| g.map(|g| g.granted as u64)).collect();
                        self.rate_give(topics, &allowed).await;
                        return Err(e);
                    }
                }
            }
        }
        let mut allowed: Vec<Option<u64>> =
            grants.iter().map(|g| g.map(|g| g.granted as u64)).collect();
        let mut learned = false;
        let mut held = Held::default();
        let start = self.pop_start(topics, woken);
        let mut got: Vec<Delivery> = Vec::new();
        let mut bytes = 0;
        let mut first_error = None;
        let mut k = 0;
        while k < n {
            let part = (start + k) % n;
            // A partition whose master does not answer is passed by: the
            // others' jobs keep flowing (the health watch, or the next
            // call after a short while, looks at it again).
            if self.redis.health.is_down(part) {
                self.popped_at(part);
                k += 1;
                continue;
            }
            let room = Room {
                jobs: max - got.len(),
                bytes: max_bytes - bytes,
                allowed: &allowed,
            };
            let limit = limit.min(self.redis.timeout());
            // Without a limit's tokens in hand, pops that reach a partition
            // together go to it as one call (the consumers its ready notice
            // woke, or those passing by): a call each cost the cluster most
            // of a job's Redis CPU. Tokens are this pop's own, so a pop
            // holding some calls alone.
            let reply = if allowed.iter().all(Option::is_none) {
                let request = PopRequest {
                    topics: topics.to_vec(),
                    max: room.jobs,
                    max_bytes: room.bytes,
                    until,
                };
                self.lanes
                    .pops
                    .submit(self, part, request, limit)
                    .await
                    .map(|(deliveries, held)| (held, deliveries))
            } else {
                self.pop_call(part, topics, room, until, limit).await
            };
            // Answered or failed, the turn passes: a partition that does
            // not answer holds up no later pops.
            self.popped_at(part);
            let (part_held, deliveries) = match reply {
                Ok(r) => r,
                Err(e) if e.is_unavailable() => {
                    tracing::warn!(part, error = %e, "a partition's pop failed; trying the others");
                    self.redis.health.mark_down(part);
                    first_error.get_or_insert(e);
                    k += 1;
                    continue;
                }
                Err(e) if got.is_empty() => {
                    self.rate_give(topics, &allowed).await;
                    return Err(e);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a partition's pop failed; returning what others gave");
                    break;
                }
            };
            held.add(part_held);
            if deliveries.is_empty() && !part_held.ungranted {
                self.drop_ready_hint(topics, part);
            }
            for d in &deliveries {
                if let Some(i) = topics.iter().position(|t| *t == d.topic) {
                    if let Some(a) = &mut allowed[i] {
                        *a = a.saturating_sub(1);
                    }
                }
            }
            bytes += deliveries.iter().map(|d| d.body.len()).sum::<usize>();
            got.extend(deliveries);
            if got.len() >= max || bytes >= max_bytes {
                break;
            }
            if part_held.ungranted && !learned {
                // A limit this process had not seen: take its tokens, then
                // look in this partition again.
                learned = true;
                for (i, topic) in topics.iter().enumerate() {
                    if grants[i].is_some() {
                        continue;
                    }
                    match self.rate_take(topic, max).await {
                        Ok(g) => {
                            grants[i] = g;
                            allowed[i] = g.map(|g| g.granted as u64);
                        }
                        Err(e) if got.is_empty() => {
                            self.rate_give(topics, &allowed).await;
                            return Err(e);
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot take rate tokens; returning what partitions gave");
                            break;
                        }
                    }
                }
                continue;
            }
            k += 1;
        }
        self.rate_give(topics, &allowed).await;
        if held.jobs > 0 {
            // The limits that ran short say when their next token is due.
            held.retry_ms = grants
                .iter()
                .flatten()
                .map(|g| g.next_ms)
                .filter(|&w| w > 0)
                .min()
                .unwrap_or(0);
        }
        held.ungranted = false;
        match first_error {
            // No partition answers: the caller hears why.
            Some(e) if got.is_empty() && held.jobs == 0 && self.redis.health.all_down() => Err(e),
            _ => Ok((got, held)),
        }
    }

    /// One pop call on partition `part`, changing nothing after `until`,
    /// waiting at most `limit`. The reply's Redis time sets the clock.
    async fn pop_call(
        self: &Arc<Self>,
        part: usize,
        topics: &[String],
        room: Room<'_>,
        until: Instant,
        limit: Duration,
    ) -> Result<(Held, Vec<Delivery>)> {
        // A token is this call's random nonce and a counter: unique
        // without a counter in Redis that a failover could roll back.
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let cmd = (self.call_of::<Pop>(part, (&nonce[..16], topics, room)))
            .until(until)
            .within(limit);
        let sent = Instant::now();
        let reply = match self.send(cmd).await {
            Err(e) if e.may_have_run() => {
                // Its jobs may be leased to nobody: give them back once
                // Redis answers again.
                self.unpop_later(part, nonce[..16].to_owned());
                return Err(e);
            }
            r => r?,
        };
        let popped = Pop::decode(reply)?;
        self.redis
            .clock()
            .observe(sent, Instant::now(), popped.now_us);
        Ok((popped.held, popped.deliveries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_deliveries() {
        let d = |r: &[&str]| decode(Fields::parse("pop", sample(r)).unwrap());
        let p = d(&[
            "0", "1000500", "3", "200", "0", "0", "2", "a", "t", "body", "7", "990", "1", "61001",
            "b", "t", "", "8", "995", "2", "61001", "1", "tp", "",
        ])
        .unwrap();
        let (now, held, got) = (p.now_us, p.held, p.deliveries);
        assert_eq!(now, 1_000_500);
        assert_eq!(
            held,
            Held {
                jobs: 3,
                retry_ms: 200,
                ungranted: false,
                again: false,
            }
        );
        assert_eq!(got.len(), 2);
        assert_eq!(
            (
                got[0].id.as_str(),
                got[0].body.as_str(),
                got[0].token.as_str()
            ),
            ("a", "body", "7")
        );
        assert_eq!(
            (got[1].attempts, got[1].lease_until_ms, got[1].due_ms),
            (2, 61_001, 995)
        );
        // Trace context only where the job has it.
        assert_eq!(
            (got[0].traceparent.as_deref(), got[0].tracestate.as_deref()),
            (Some("tp"), None)
        );
        assert_eq!(got[1].traceparent, None);
        // A reply without trace context: seven values per job, nothing after.
        let plain = d(&[
            "0", "1", "0", "0", "0", "0", "1", "a", "t", "b", "7", "990", "1", "61001",
        ])
        .unwrap();
        assert_eq!(plain.deliveries.len(), 1);
        assert_eq!(plain.deliveries[0].lease_until_ms, 61_001);
        assert_eq!(plain.deliveries[0].traceparent, None);
        assert!(
            d(&["0", "1", "0", "0", "1", "0", "0"])
                .unwrap()
                .held
                .ungranted
        );
        assert!(d(&["0", "1", "0", "0", "0", "1", "0"]).unwrap().held.again);
        assert!(d(&["0", "1", "0", "0", "0", "0", "0"])
            .unwrap()
            .deliveries
            .is_empty());
        assert!(d(&["0", "1", "0", "0", "0", "0", "1", "a", "t"]).is_err());
        // A trace entry for a job the reply does not have.
        let seven = [
            "0", "1", "0", "0", "0", "0", "1", "a", "t", "b", "7", "990", "1", "61001",
        ];
        assert!(d(&[&seven[..], &["2", "tp", ""]].concat()).is_err());
        assert!(d(&[&seven[..], &["0", "tp", ""]].concat()).is_err());
        assert!(d(&[&seven[..], &["1", "tp"]].concat()).is_err());
        assert!(d(&["0", "1"]).is_err());
    }
}
