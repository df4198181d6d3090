//! The recurring-schedule loop: in every dispatching process, pushes each
//! schedule's next tick when its last one falls due (see
//! [`crate::recurring`] for the rules). The loop wakes at the earliest
//! pending tick, at least once a second (to see new and changed schedules,
//! also those put through other instances), and at once when a schedule is
//! put through this one.

use std::time::Duration;

use tracing::{debug, info, warn};

use super::Handles;
use crate::recurring::{tick_id, Missed, Recurring};
use crate::store::push::Push;
use crate::store::recur::{Stored, Ticked};

/// A tick this far in the past when its turn comes was missed: no delayq
/// instance ran then.
const MISSED_AFTER_MS: i64 = 5_000;
const MAX_IDLE: Duration = Duration::from_secs(1);

pub(crate) async fn run(h: Handles) {
    let mut first = true;
    loop {
        let wait = match pass(&h).await {
            Ok(Some(next_ms)) => {
                let now = h.store.clock.now_us().map_or(0, |us| us / 1000);
                Duration::from_millis((next_ms - now).clamp(0, 1000) as u64)
            }
            Ok(None) => MAX_IDLE,
            Err(e) => {
                debug!(error = %e, "recurring schedules could not be read; trying again");
                MAX_IDLE
            }
        };
        if first {
            // The sweeps wait for this first look, so that a tick missed
            // while every instance was down is dropped (skip) before a
            // sweep could fire it.
            h.recurring_ready.cancel();
            first = false;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = h.recurring_changed.notified() => {}
            _ = h.stop.wait() => return,
        }
    }
}

/// Redis time now, ms.
async fn now_ms(h: &Handles) -> crate::Result<i64> {
    Ok(h.store.redis_time_us().await? / 1000)
}

/// One look at every schedule; returns the earliest pending tick.
async fn pass(h: &Handles) -> crate::Result<Option<i64>> {
    let all = h.store.recur_all(None).await?;
    if all.is_empty() {
        return Ok(None);
    }
    let now = now_ms(h).await?;
    let mut wake: Option<i64> = None;
    for s in all {
        match step(h, &s, now).await {
            Ok(Some(t)) => wake = Some(wake.map_or(t, |w| w.min(t))),
            Ok(None) => {}
            Err(e) => warn!(schedule = %s.name, error = %e, "recurring tick failed; trying again"),
        }
    }
    Ok(wake)
}

/// Brings one schedule up to date; returns its pending tick.
async fn step(h: &Handles, s: &Stored, now: i64) -> crate::Result<Option<i64>> {
    let Some(def) = Recurring::from_json(&s.def) else {
        return Ok(None);
    };
    let Ok(rule) = def.rule() else {
        return Ok(None);
    };
    if s.last_ms > now {
        return Ok(Some(s.last_ms));
    }
    let mut from = s.last_ms;
    let Some(mut next) = rule.next_after(from) else {
        return Ok(None);
    };
    if next <= now - MISSED_AFTER_MS {
        // Ticks went by while no instance ran. The tick pushed before fires
        // once (or, with skip, is dropped if it never fired); the others
        // are skipped. A schedule with no tick pushed yet fires its last
        // missed tick once.
        let latest = rule.last_at_or_before(now).unwrap_or(next);
        let fire = def.missed == Missed::Fire && s.pending.is_empty();
        let drop = if def.missed == Missed::Skip {
            s.pending.as_str()
        } else {
            ""
        };
        let id = tick_id(&s.name, latest);
        let job = fire.then(|| push_of(h, &def, &id));
        match h.store.tick(s, latest, job.as_ref(), drop).await? {
            Ticked::Stale => return Ok(None),
            _ => {
                info!(schedule = %s.name, missed_until = latest, mode = ?def.missed, "recurring ticks were missed while delayq was down")
            }
        }
        from = latest;
        next = match rule.next_after(from) {
            Some(n) => n,
            None => return Ok(None),
        };
    }
    let id = tick_id(&s.name, next);
    let job = push_of(h, &def, &id);
    if let Ticked::Done(Some(p)) = h.store.tick(s, next, Some(&job), "").await? {
        h.metrics.pushed.inc([&def.topic], 1);
        if p.new_head {
            h.wake.one(h.store.part_of(&id));
        }
        debug!(schedule = %s.name, tick = next, "recurring tick pushed");
    }
    Ok(Some(next))
}

fn push_of(h: &Handles, def: &Recurring, id: &str) -> Push {
    let policy = def
        .retry
        .clone()
        .unwrap_or_else(|| h.default_retry(&def.topic));
    Push {
        id: id.to_owned(),
        topic: def.topic.clone(),
        body: def.body.clone(),
        ttr_ms: def.ttr_ms,
        delay_ms: 0,
        due_at_ms: None,
        intervals_ms: policy.intervals_ms(),
        max_attempts: policy.max_attempts.unwrap_or(0),
        keep: true,
    }
}
