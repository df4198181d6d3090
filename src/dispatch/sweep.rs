//! The sweep: fires due jobs on time by itself.
//!
//! Expired events alone are late by seconds once many keys carry a TTL, and
//! lost across disconnects and restarts (see docs/DESIGN.md). So the sweep
//! is the clock: after each dispatch call it knows the earliest due time
//! left in the schedule (from the same script, in Redis time) and sleeps
//! exactly until then. A push that becomes the new earliest job wakes it
//! (directly in this process, through the `{p}:wake` channel in others),
//! and so does a subscriber reconnect, after which events may have been
//! missed.
//!
//! Only the instance holding the partition's dispatcher lease sweeps it
//! (see [`super::lease`]); the others' sweeps wait for the lease. Two that
//! sweep at once for a moment (a lease changing hands) are harmless: the
//! dispatch script moves each due job once.

use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use super::{Backoff, DispatchPath, Handles};

/// Longest sleep between sweeps even when nothing is due: a backstop for a
/// wake-up lost while the subscriber was down.
const MAX_IDLE: Duration = Duration::from_secs(1);

pub(crate) async fn run(h: Handles, part: usize) {
    // A tick missed while every instance was down may have to be dropped
    // (see crate::recurring) before a sweep fires it.
    tokio::select! {
        _ = h.recurring_ready.cancelled() => {}
        _ = tokio::time::sleep(h.store.timeout() * 2) => {}
        _ = h.stop.wait() => return,
    }
    let mut backoff = Backoff::default();
    let mut failing = false;
    loop {
        if !h.leases.holds(part) {
            // Standing by: the lease keeper wakes this when it takes the
            // partition over.
            tokio::select! {
                _ = tokio::time::sleep(MAX_IDLE) => {}
                _ = h.wake.of(part).notified() => {}
                _ = h.stop.wait() => return,
            }
            continue;
        }
        let until = match h.dispatch(part, &[], DispatchPath::Sweep).await {
            Ok(out) => {
                if failing {
                    tracing::info!("sweep reaches redis again");
                    failing = false;
                }
                backoff.reset();
                if out.moved >= h.batch {
                    // More is due than one call may move: go on at once.
                    continue;
                }
                let received = Instant::now();
                let wait = match out.next_due_ms {
                    // The job is due at due_ms.000 Redis time; the script saw
                    // now_us. Sleeping the difference from when the reply
                    // arrived can only err late, never early.
                    Some(due_ms) => Duration::from_micros(
                        due_ms
                            .saturating_mul(1000)
                            .saturating_sub(out.now_us)
                            .max(0) as u64,
                    ),
                    None => MAX_IDLE,
                };
                received + wait.min(MAX_IDLE)
            }
            Err(e) => {
                if !failing {
                    warn!(error = %e, "sweep cannot reach redis; retrying");
                    failing = true;
                }
                Instant::now() + backoff.wait()
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(until) => {}
            _ = h.wake.of(part).notified() => {}
            _ = h.stop.wait() => return,
        }
    }
}

/// Dead-letter retention for topics where nothing dies any more (a death
/// trims its own topic): every `max_age / 4`, between a second and a
/// minute, each topic with dead jobs is trimmed to the configured count and
/// age.
pub(crate) async fn retention(h: Handles) {
    let every = (h.retention.max_age / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = h.stop.wait() => return,
        }
        if let Err(e) = trim_dead_letters(&h).await {
            tracing::debug!(error = %e, "dead-letter retention failed; trying again later");
        }
    }
}

async fn trim_dead_letters(h: &Handles) -> crate::Result<()> {
    // The partitions' lease holders trim them: one instance each.
    if h.leases.held().is_empty() {
        return Ok(());
    }
    for (topic, counts) in h.store.overview().await?.topics {
        if counts.dead > 0 {
            for part in h.leases.held() {
                while h.store.trim(part, &topic, h.retention).await? > 0 {}
            }
        }
    }
    Ok(())
}
