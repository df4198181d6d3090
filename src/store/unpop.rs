//! Unpop: give back the jobs of pops whose replies were lost, and of
//! releases that failed. The script is `unpop.lua` (and `release.lua`).
//!
//! A pop whose connection broke, or whose master was replaced (a failover),
//! between the script and its reply may have leased jobs that no consumer
//! received: left alone they wait out their ttr and count an attempt nobody
//! had. Its nonce is kept here and given to `unpop.lua` as soon as Redis
//! answers again (the new master has the lease if it had the pop). A pop
//! whose reply came after its caller had gone is released job by job
//! (`release_all`); a release that fails (Redis stalled or unreachable just
//! then) is kept here too, until it is done or the job's lease has ended.
//! One task at a time sends everything kept, a round at a time.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::release::Release;
use super::script::script;
use super::{Status, Store};
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::job::Delivery;
use crate::redis::Fields;

script! {
    /// Gives back what the pops `nonces` of a partition still hold: the
    /// number of jobs.
    Unpop = "unpop", when_full: true, acked: false, late_unknown: true,
        (nonces: &'a [&'a str]) -> i64 = decode;
}

/// The reply: DONE and how many jobs were given back.
fn decode((status, mut f): (Status, Fields)) -> Result<i64> {
    if status != Status::Done {
        return Err(Error::protocol("unpop", format!("status {status:?}")));
    }
    f.int()
}

/// How long a lost pop is tried: past this, its jobs' leases (ttr) have
/// most likely ended anyway, and the latest-pops list moved on.
const GIVE_UP_AFTER: Duration = Duration::from_secs(600);

/// Lost pops and failed releases not yet given back, and whether a task is
/// sending them.
#[derive(Default)]
pub(crate) struct Lost {
    kept: std::sync::Mutex<Kept>,
    sending: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct Kept {
    /// Partition, nonce, when the pop was lost.
    pops: Vec<(usize, String, Instant)>,
    /// Id, lease token, the lease's end (Redis ms), when first kept.
    releases: Vec<(String, String, i64, Instant)>,
}

impl Kept {
    fn is_empty(&self) -> bool {
        self.pops.is_empty() && self.releases.is_empty()
    }
}

impl Store {
    /// Notes that the pop `nonce` on `part` may have leased jobs whose
    /// reply never came, and sees that they are given back.
    pub(crate) fn unpop_later(self: &Arc<Self>, part: usize, nonce: String) {
        let at = Instant::now();
        self.lanes
            .lost
            .kept
            .lock()
            .unwrap()
            .pops
            .push((part, nonce, at));
        self.send_lost();
    }

    /// Gives back jobs that were reserved for a caller who never received
    /// them (`why` says how), so they do not wait out their ttr. A release
    /// that fails is tried again with the lost pops, until done or until
    /// the job's lease has ended (its end gives the job back then, as a
    /// failed attempt).
    pub(crate) async fn release_all(self: &Arc<Self>, deliveries: Vec<Delivery>, why: &str) {
        let mut later = Vec::new();
        for d in deliveries {
            // Once one failed for want of Redis, the rest wait with it
            // rather than each wait out its timeout now.
            if !later.is_empty() {
                later.push((d.id, d.token, d.lease_until_ms, Instant::now()));
                continue;
            }
            let (id, token) = (d.id.as_str(), d.token.as_str());
            match self.run::<Release>(self.part_of(id), (id, token)).await {
                Ok(_) => tracing::debug!(id = %d.id, why, "released a job nobody received"),
                Err(e) if e.may_pass() => {
                    tracing::warn!(id = %d.id, error = %e, why, "could not release a job nobody received yet; trying again");
                    later.push((d.id, d.token, d.lease_until_ms, Instant::now()));
                }
                Err(e) => {
                    tracing::warn!(id = %d.id, error = %e, why, "could not release a job nobody received; it returns after its ttr")
                }
            }
        }
        if !later.is_empty() {
            self.lanes.lost.kept.lock().unwrap().releases.extend(later);
            self.send_lost();
        }
    }

    /// Starts the task that sends what is kept, unless one runs.
    fn send_lost(self: &Arc<Self>) {
        if self
            .lanes
            .lost
            .sending
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        // Weak: a queue that is dropped takes its lost pops with it.
        let store = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut backoff = Backoff::starting_at(Duration::from_millis(100));
            while let Some(store) = store.upgrade() {
                let Some(wait) = store.send_kept_round(&mut backoff).await else {
                    return;
                };
                drop(store);
                tokio::time::sleep(wait).await;
            }
        });
    }

    /// One round: sends every lost pop and kept release; None when none is
    /// left, else how long to wait before the next round.
    async fn send_kept_round(&self, backoff: &mut Backoff) -> Option<Duration> {
        let now_ms = self.redis.clock().estimate_us().map(|us| us / 1000);
        let (lost, releases) = {
            let mut kept = self.lanes.lost.kept.lock().unwrap();
            kept.pops.retain(|(_, _, at)| at.elapsed() < GIVE_UP_AFTER);
            kept.releases.retain(|(_, _, until, at)| {
                now_ms.is_none_or(|now| now < *until) && at.elapsed() < GIVE_UP_AFTER
            });
            if kept.is_empty() {
                self.lanes
                    .lost
                    .sending
                    .store(false, std::sync::atomic::Ordering::Release);
                return None;
            }
            (kept.pops.clone(), kept.releases.clone())
        };
        let mut parts: Vec<usize> = lost.iter().map(|(p, _, _)| *p).collect();
        parts.sort_unstable();
        parts.dedup();
        let mut failed = false;
        // A partition that fails a call is not asked again this round: its
        // other calls would each wait out the same timeout.
        let mut silent: Vec<usize> = Vec::new();
        for part in parts {
            let nonces: Vec<&str> = (lost.iter())
                .filter(|(p, _, _)| *p == part)
                .map(|(_, n, _)| n.as_str())
                .collect();
            match self.run::<Unpop>(part, (nonces.as_slice(),)).await {
                Ok(given) => {
                    if given > 0 {
                        tracing::info!(
                            part,
                            jobs = given,
                            "gave back jobs whose pop reply was lost"
                        );
                    }
                    (self.lanes.lost.kept.lock().unwrap().pops)
                        .retain(|(p, n, _)| *p != part || !nonces.contains(&n.as_str()));
                }
                Err(e) => {
                    tracing::debug!(part, error = %e, "cannot give back a lost pop's jobs yet");
                    silent.push(part);
                    failed = true;
                }
            }
        }
        for (id, token, _, _) in &releases {
            let part = self.part_of(id);
            if silent.contains(&part) {
                continue;
            }
            match self
                .run::<Release>(part, (id.as_str(), token.as_str()))
                .await
            {
                Ok(done) => {
                    if done {
                        tracing::info!(%id, "released a job nobody received, on a later try");
                    }
                    (self.lanes.lost.kept.lock().unwrap().releases)
                        .retain(|(i, t, _, _)| (i, t) != (id, token));
                }
                Err(e) if e.may_pass() => {
                    tracing::debug!(%id, error = %e, "cannot release a job nobody received yet");
                    silent.push(part);
                    failed = true;
                }
                Err(e) => {
                    tracing::warn!(%id, error = %e, "could not release a job nobody received; it returns after its ttr");
                    (self.lanes.lost.kept.lock().unwrap().releases)
                        .retain(|(i, t, _, _)| (i, t) != (id, token));
                }
            }
        }
        if failed {
            Some(backoff.wait())
        } else {
            backoff.reset();
            Some(Duration::ZERO)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_how_many_were_given_back() {
        let d = |r: &[&str]| decode(Fields::parse("unpop", sample(r)).unwrap());
        assert_eq!(d(&["0", "3"]).unwrap(), 3);
        assert!(d(&["1", "0"]).is_err());
        assert!(d(&["0"]).is_err());
    }
}
