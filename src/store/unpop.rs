//! Unpop: give back the jobs of pops whose replies were lost. The script is
//! `unpop.lua`.
//!
//! A pop whose connection broke, or whose master was replaced (a failover),
//! between the script and its reply may have leased jobs that no consumer
//! received: left alone they wait out their ttr and count an attempt nobody
//! had. Its nonce is kept here and given to `unpop.lua` as soon as Redis
//! answers again (the new master has the lease if it had the pop); one task
//! at a time sends every lost pop of a partition in one call.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::reply::Fields;
use super::{Script, Status, Store};
use crate::backoff::Backoff;
use crate::error::{Error, Result};

pub const SCRIPT: Script = Script {
    name: "unpop",
    source: include_str!("unpop.lua"),
    when_full: true,
    acked: false,
    late_unknown: true,
};

/// How long a lost pop is tried: past this, its jobs' leases (ttr) have
/// most likely ended anyway, and the latest-pops list moved on.
const GIVE_UP_AFTER: Duration = Duration::from_secs(600);

/// Lost pops not yet given back, and whether a task is sending them.
#[derive(Default)]
pub(crate) struct Lost {
    pops: std::sync::Mutex<Vec<(usize, String, Instant)>>,
    sending: std::sync::atomic::AtomicBool,
}

impl Store {
    /// Notes that the pop `nonce` on `part` may have leased jobs whose
    /// reply never came, and sees that they are given back.
    pub(crate) fn unpop_later(self: &Arc<Self>, part: usize, nonce: String) {
        self.lanes
            .lost
            .pops
            .lock()
            .unwrap()
            .push((part, nonce, Instant::now()));
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
                let Some(wait) = store.send_lost_pops(&mut backoff).await else {
                    return;
                };
                drop(store);
                tokio::time::sleep(wait).await;
            }
        });
    }

    /// One round: sends every lost pop; None when none is left, else how
    /// long to wait before the next round.
    async fn send_lost_pops(&self, backoff: &mut Backoff) -> Option<Duration> {
        {
            let lost: Vec<_> = {
                let mut pops = self.lanes.lost.pops.lock().unwrap();
                pops.retain(|(_, _, at)| at.elapsed() < GIVE_UP_AFTER);
                if pops.is_empty() {
                    self.lanes
                        .lost
                        .sending
                        .store(false, std::sync::atomic::Ordering::Release);
                    return None;
                }
                pops.clone()
            };
            let mut parts: Vec<usize> = lost.iter().map(|(p, _, _)| *p).collect();
            parts.sort_unstable();
            parts.dedup();
            let mut failed = false;
            for part in parts {
                let nonces: Vec<&str> = (lost.iter())
                    .filter(|(p, _, _)| *p == part)
                    .map(|(_, n, _)| n.as_str())
                    .collect();
                match self.unpop(part, &nonces).await {
                    Ok(given) => {
                        if given > 0 {
                            tracing::info!(
                                part,
                                jobs = given,
                                "gave back jobs whose pop reply was lost"
                            );
                        }
                        let done: Vec<String> = nonces.iter().map(|n| n.to_string()).collect();
                        (self.lanes.lost.pops.lock().unwrap())
                            .retain(|(p, n, _)| *p != part || !done.contains(n));
                    }
                    Err(e) => {
                        tracing::debug!(part, error = %e, "cannot give back a lost pop's jobs yet");
                        failed = true;
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

    /// Gives back what the pops `nonces` on `part` still hold: the number
    /// of jobs.
    async fn unpop(&self, part: usize, nonces: &[&str]) -> Result<i64> {
        let mut cmd = self.script(&SCRIPT, part);
        for n in nonces {
            cmd.arg(*n);
        }
        let (status, mut f): (Status, Fields) = self.send(cmd).await?;
        if status != Status::Done {
            return Err(Error::protocol("unpop", format!("status {status:?}")));
        }
        f.int()
    }
}
