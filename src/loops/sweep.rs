//! The sweep: fires due jobs on time by itself.
//!
//! Expired events alone are late by seconds once many keys carry a TTL, and
//! lost across disconnects and restarts (see docs/DESIGN.md). So the sweep
//! is the clock: after each dispatch call it knows the earliest due time
//! left in the schedule (from the same script, in Redis time) and sleeps
//! until then (at most a minute), counted from the call's send, the last
//! stretch on a thread (tokio's timer is a millisecond coarse). A push,
//! pop, touch, nack or reschedule that makes a job (or a lease end) the new
//! earliest wakes it (directly in this process, through the `{p}:wake`
//! channel in others), and so does a subscriber reconnect, after which
//! events and notices may have been missed; the leader's term renewal
//! reads the schedule's head and wakes a sweep that aims past it. So an
//! idle sweep costs one call a minute; while the subscriber is down, one
//! per `DEAF_EVERY`.
//!
//! The sweep also writes the trigger keys of jobs that come within the
//! trigger horizon (pushed beyond it, they got none): when the watermark
//! is less than half the horizon ahead, the dispatch script arms the jobs
//! after it due within the horizon, a batch a call, and moves it; it says
//! when to arm again (half a horizon later, or at once after a full
//! batch). So arming costs a call per half horizon: at the default hour,
//! fewer than an idle sweep makes anyway.
//!
//! Only the partition's leader (the instance holding its term) sweeps it
//! (see [`super::leader`]); the others wait for its term. Two that
//! sweep at once for a moment (a term changing hands) are harmless: the
//! dispatch script moves each due job once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use super::{DispatchPath, Handles};
use crate::backoff::Backoff;
use crate::store::sweeps::Trim;

/// Longest sleep between sweeps even when nothing is due: every change
/// that makes a job earlier wakes the sweep (in this process, or by the
/// wake notice, and a subscriber reconnect wakes every sweep), and the
/// holder's term renewal, about once a minute while idle, reads the
/// schedule's head and wakes a sweep that aims past it. So this is a
/// backstop only (a wake lost while Redis restarted, a term lost and
/// taken again), and what an idle sweep costs: one call a minute.
const MAX_IDLE: Duration = super::leader::IDLE_LENGTH;

/// While the subscriber is down, wake notices go unheard (a job pushed by
/// another instance may be the new earliest): the sweep looks at least
/// this often until it is back.
const DEAF_EVERY: Duration = super::leader::RENEW_EVERY;

/// tokio's timer works in whole milliseconds and wakes up to ~2 ms late
/// (median ~1.1 ms); a thread's sleep wakes ~0.1 ms late. So the sweep
/// sleeps on tokio until this much before its wake-up, then the rest on a
/// blocking thread.
const FINE_STRETCH: Duration = Duration::from_millis(2);

pub(crate) async fn run(h: Handles, part: usize) {
    // A tick missed while every instance was down may have to be dropped
    // (see crate::recurring) before a sweep fires it.
    tokio::select! {
        _ = h.recurring_ready.cancelled() => {}
        _ = tokio::time::sleep(h.store.redis.timeout() * 2) => {}
        _ = h.stop.wait() => return,
    }
    let mut backoff = Backoff::default();
    let mut failing = false;
    // The due time last aimed at from a call's send: if it is still the
    // earliest after the next call, that look was early, and the wait for it
    // counts from the reply instead (one early look per due time at most).
    let mut aimed_from_send: Option<i64> = None;
    // A burst's first call reads no more than a sixteenth of a batch (62
    // of 1,000: about what a call moves in its time on a slow machine);
    // the limit doubles from there while calls move all of it.
    let mut limit = (h.batch / 16).max(MIN_LIMIT).min(h.batch);
    loop {
        if !h.leader.holds(part) {
            h.wake.set_catching_up(part, false);
            // Standing by: the term keeper wakes this when it takes the
            // partition over.
            tokio::select! {
                _ = tokio::time::sleep(MAX_IDLE) => {}
                _ = h.wake.of(part).notified() => {}
                _ = h.stop.wait() => return,
            }
            continue;
        }
        let sent = Instant::now();
        let until = match h.dispatch(part, &[], DispatchPath::Sweep, limit).await {
            Ok(out) => {
                if failing {
                    tracing::info!("sweep reaches redis again");
                    failing = false;
                }
                backoff.reset();
                let left = out.next_due_ms.is_some_and(|d| d * 1000 <= out.now_us);
                let moved_all = out.moved >= limit;
                limit = next_limit(limit, out.moved, left, h.batch);
                // Either way the next call goes at once: until then, the
                // subscriber leaves expired ids to this loop.
                h.wake.set_catching_up(part, left || moved_all);
                if moved_all {
                    // More is due than one call may move: go on at once.
                    continue;
                }
                // Redis read now_us between `sent` and now. Counted from
                // the reply, the wait errs late by the reply's trip (with
                // AOF always, an fsync); from the send, early by the call's
                // trip, which only costs an empty look. dispatch.lua never
                // moves a job before its due time either way.
                let from = if out.next_due_ms.is_some() && out.next_due_ms == aimed_from_send {
                    Instant::now()
                } else {
                    aimed_from_send = out.next_due_ms;
                    sent
                };
                let wait = match out.next_due_ms {
                    // The job is due at due_ms.000 Redis time; the script saw
                    // now_us.
                    Some(due_ms) => Duration::from_micros(
                        due_ms
                            .saturating_mul(1000)
                            .saturating_sub(out.now_us)
                            .max(0) as u64,
                    ),
                    None => MAX_IDLE,
                };
                // The term is taken up to the earliest due time.
                h.leader
                    .note_due(part, out.next_due_ms.is_some().then_some(from + wait));
                let most = if h.subscriber_up.load(Ordering::Relaxed) {
                    MAX_IDLE
                } else {
                    DEAF_EVERY
                };
                // Arming again when the script says: the watermark half the
                // horizon away (each key is written between half the horizon
                // and all of it ahead), or now after a full batch.
                if out.armed > 0 {
                    tracing::debug!(entries = out.armed, "trigger keys armed");
                }
                let arm = out.next_arm_ms.map(|at| {
                    Duration::from_micros(
                        at.saturating_mul(1000).saturating_sub(out.now_us).max(0) as u64
                    )
                });
                from + wait.min(most).min(arm.unwrap_or(MAX_IDLE))
            }
            Err(e) => {
                h.wake.set_catching_up(part, false);
                if !failing {
                    warn!(error = %e, "sweep cannot reach redis; retrying");
                    failing = true;
                }
                Instant::now() + backoff.wait()
            }
        };
        tokio::select! {
            _ = sleep_until_fine(until) => {}
            _ = h.wake.of(part).notified() => {}
            _ = h.stop.wait() => return,
        }
    }
}

/// The most jobs the sweep's next call may move, after one that moved
/// `moved` of `limit` (`left`: jobs due remain). A call reads its limit's
/// worth of due entries before it moves any, and stops moving after about
/// a millisecond of its run (dispatch.lua): after a call that stopped at less than
/// half its limit with jobs left, the limit comes down to about what it
/// moved (so little is read for nothing); after one that came near its
/// limit (a call also leaves a millisecond's ties whole for the next), it
/// doubles, up to `batch`. So it settles where a call's time runs out at
/// a half to all of its limit.
fn next_limit(limit: usize, moved: usize, left: bool, batch: usize) -> usize {
    if moved * 4 >= limit * 3 {
        (limit * 2).min(batch)
    } else if left && moved * 2 < limit {
        (moved + moved / 4).max(MIN_LIMIT).min(batch)
    } else {
        limit
    }
}

/// The least the sweep's limit comes down to.
const MIN_LIMIT: usize = 16;

/// Sleeps until `until`, never earlier, ~0.1 ms late rather than tokio's
/// ~1 ms. Dropped early, the thread sleeps out its last stretch unseen.
async fn sleep_until_fine(until: Instant) {
    if let Some(coarse) = until.checked_sub(FINE_STRETCH) {
        tokio::time::sleep_until(coarse).await;
    }
    let rest = until.saturating_duration_since(Instant::now());
    if !rest.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
    }
}

/// Dead-letter retention for topics where nothing dies any more (a death
/// trims its own topic): every `max_age / 4`, between a second and
/// [`super::UPKEEP_MAX_EVERY`], each topic with dead jobs is trimmed to the configured count and
/// age.
pub(crate) async fn retention(h: Handles) {
    let every = (h.retention.max_age / 4).clamp(Duration::from_secs(1), super::UPKEEP_MAX_EVERY);
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
    // The partitions' leaders trim them: one instance each.
    if h.leader.held().is_empty() {
        return Ok(());
    }
    for (topic, counts) in h.store.topic_counts().await? {
        if counts.dead > 0 {
            for part in h.leader.held() {
                let trim = (topic.as_str(), h.retention);
                while h.store.run::<Trim>(part, trim).await? > 0 {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_follows_what_a_call_moved_in_its_time() {
        // Stopped short by time: down to about what it moved.
        assert_eq!(next_limit(1000, 80, true, 1000), 100);
        assert_eq!(next_limit(1000, 3, true, 1000), MIN_LIMIT);
        // Full, or near it (ties left whole): doubles, up to the batch.
        assert_eq!(next_limit(100, 100, true, 1000), 200);
        assert_eq!(next_limit(25, 20, true, 1000), 50);
        assert_eq!(next_limit(800, 800, false, 1000), 1000);
        // Between: unchanged; so is a call that moved everything due.
        assert_eq!(next_limit(400, 250, true, 1000), 400);
        assert_eq!(next_limit(100, 40, false, 1000), 100);
        // A batch below the least limit is still the most.
        assert_eq!(next_limit(8, 2, true, 8), 8);
    }
}
