//! The recurring-schedule loop: in every dispatching process, pushes each
//! schedule's next tick when its last one falls due (see
//! [`crate::recurring`] for the rules).
//!
//! What it reads is bounded by what is due: each partition's due index
//! (`{p}:recur_due`, schedule -> last tick) names the schedules whose last
//! tick has come; definitions are kept here by version and read again only
//! when a tick is refused as stale (the schedule was put again). The ticks
//! of every due schedule of a partition go in a few calls of `tick.lua`.
//! The loop wakes at the earliest last tick still ahead, at least once a
//! second while there are schedules, and at once when a schedule is put
//! (through this process, or another's: recur_put.lua publishes a wake
//! notice). With no schedule it sleeps until then (a minute at most: a
//! backstop for a notice lost while the subscriber was down). A loop that
//! stops while there are schedules publishes the same notice, so that the
//! others (an older delayq's asleep) take over at once.
//!
//! Missed ticks: each look notes its time (Redis clock) in
//! `{prefix}:recurring_seen` at its start, after each batch of ticks and at
//! its end (a long look is a loop running, not an outage; a note Redis
//! held up is made again, as of its return), with the time
//! since which looks have followed each other less than `OUTAGE_MS` apart. A look that finds the last
//! one older than that starts a new run of looks: no loop ran in between,
//! and ticks that fell due before the run began were missed, handled as
//! [`Missed`] says. Every process judges by the same recorded start, so a
//! tick is missed or not whichever process pushes it; a late tick while
//! looks went on (a slow loop) is pushed late, never dropped.

use std::collections::HashMap;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::Handles;
use crate::recurring::{tick_id, Missed, Recurring, Rule};
use crate::store::push::Push;
use crate::store::recur::{Tick, TickMode, Ticked};

/// A gap this long between two looks at the schedules is an outage.
const OUTAGE_MS: i64 = 5_000;
/// Longest sleep while schedules exist (well within OUTAGE_MS).
const MAX_IDLE: Duration = Duration::from_secs(1);
/// A note of a look that took longer than this is made again: what it
/// said is that old once it lands, and with the sleep before the next
/// look (MAX_IDLE) the gap stays within OUTAGE_MS.
const HELD_UP: Duration = Duration::from_secs(1);
/// Longest sleep with no schedule.
const NONE_IDLE: Duration = super::leader::IDLE_LENGTH;
/// Due schedules read per call.
const DUE_PER_READ: usize = 1_000;
/// Most late ticks of one schedule pushed in one look (a loop that fell
/// behind catches up over a few looks).
const MAX_CATCH_UP: usize = 60;

/// A schedule's definition, as of its version.
struct Known {
    version: String,
    def: Recurring,
    rule: Option<Rule>,
}

type Cache = HashMap<String, Known>;

pub(crate) async fn run(h: Handles) {
    let mut first = true;
    let mut cache = Cache::new();
    let mut looks: u64 = 0;
    // Whether the last look found schedules (or could not tell).
    let mut any;
    loop {
        // Schedules stored before the due index (or by an older delayq)
        // get their entry: checked at the first look and every 10th.
        let reindex = looks.is_multiple_of(10);
        looks += 1;
        let looked = pass(&h, &mut cache, reindex).await;
        any = !matches!(looked, Ok(None));
        let wait = match looked {
            Ok(Some(next_ms)) => {
                let now = h
                    .store
                    .redis
                    .clock()
                    .estimate_us()
                    .map_or(0, |us| us / 1000);
                Duration::from_millis((next_ms - now).clamp(0, 1000) as u64)
            }
            Ok(None) => NONE_IDLE,
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
            _ = h.stop.wait() => break,
        }
    }
    if any {
        // Handing over: the other instances look at once. An older delayq
        // sleeps up to NONE_IDLE after another instance pushed the tick it
        // was about to push, and would leave the schedule paused that long
        // were this instance the one still ticking.
        h.store.recur_notice(super::subscriber::RECUR_NOTICE).await;
    }
}

/// Which ticks were missed by every process: those before the start of
/// the current run of looks (Unix ms).
#[derive(Clone, Copy, Debug)]
struct Outage {
    run_since: i64,
}

impl Outage {
    fn missed(self, tick_ms: i64) -> bool {
        tick_ms < self.run_since
    }
}

/// One look at every due schedule; returns the earliest pending tick
/// (i64::MAX for none: looked at again within [`MAX_IDLE`]), None with no
/// schedule.
async fn pass(h: &Handles, cache: &mut Cache, reindex: bool) -> crate::Result<Option<i64>> {
    // The look's time is taken before any call: a call held up by Redis
    // (writes paused, the connection queued behind one) is this look
    // running late, not a gap since the last one.
    let now = h.store.redis.clock().now_ms().await?;
    if reindex && !h.store.recur_indexed().await? {
        let n = h.store.recur_reindex().await?;
        debug!(schedules = n, "recurring schedules added to the due index");
    }
    let (seen, any) = h.store.recur_seen().await?;
    if !any {
        // No schedule: nothing can be missed, and an idle queue writes
        // nothing (a schedule put later ticks from its put).
        return Ok(None);
    }
    let since = match seen {
        Some((since, last)) if now - last <= OUTAGE_MS => since,
        // An outage: a new run of looks.
        Some(_) => now,
        // Never noted (a new Redis, or only older delayqs ran): ticks more
        // than OUTAGE_MS late count as missed.
        None => now - OUTAGE_MS,
    };
    h.store.recur_look(since, now).await?;
    let outage = Outage { run_since: since };
    let mut wake: Option<i64> = None;
    // Partitions one after another: each is a few calls, and the cache
    // is shared.
    for part in 0..h.store.parts().len() {
        if let Some(t) = part_pass(h, cache, part, now, outage).await? {
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
    }
    // The look lasted until now (the calls above may have waited long on
    // Redis): the next look measures its gap from here, not the start.
    note_look(h, outage).await?;
    // Nothing pending here (the due ticks were pushed by another instance
    // first, or failed) is no reason for the long sleep: every instance
    // looks once a second while schedules exist, or the one still looking
    // could be the next to stop, leaving the ticks to a loop asleep.
    Ok(Some(wake.unwrap_or(i64::MAX)))
}

/// Brings partition `part`'s due schedules up to date; returns the earliest
/// pending tick.
async fn part_pass(
    h: &Handles,
    cache: &mut Cache,
    part: usize,
    now: i64,
    outage: Outage,
) -> crate::Result<Option<i64>> {
    let mut wake: Option<i64> = None;
    let mut soonest = |t: i64| wake = Some(wake.map_or(t, |w: i64| w.min(t)));
    // A round reads up to DUE_PER_READ due schedules; schedules done move
    // past `now`, so the next round reads others. Bounded: stale reads and
    // full rounds end within a few.
    for _ in 0..32 {
        let (due, next) = h.store.recur_due(part, now, DUE_PER_READ).await?;
        if let Some(t) = next {
            soonest(t);
        }
        if due.is_empty() {
            break;
        }
        let unknown: Vec<String> = due
            .iter()
            .filter(|(n, _)| !cache.contains_key(n))
            .map(|(n, _)| n.clone())
            .collect();
        let park = |name: &str, version: String| Tick {
            name: name.to_owned(),
            version,
            tick_ms: 0,
            mode: TickMode::Park,
            job: None,
        };
        let mut ticks = Vec::new();
        if !unknown.is_empty() {
            let defs = h.store.recur_defs(part, &unknown).await?;
            for (name, got) in unknown.iter().zip(defs) {
                match got {
                    // Gone: the stale tick takes it out of the due index.
                    None => ticks.push(park(name, String::new())),
                    Some((def, version)) => match Recurring::from_json(&def) {
                        Some(def) => {
                            let rule = def.rule().ok();
                            cache.insert(name.clone(), Known { version, def, rule });
                        }
                        // Unreadable: parked until put again.
                        None => ticks.push(park(name, version)),
                    },
                }
            }
        }
        for (name, last) in &due {
            if let Some(k) = cache.get(name) {
                plan(h, name, k, *last, now, outage, &mut ticks);
            }
        }
        let results = h.store.recur_tick(part, &ticks).await?;
        let mut stale = false;
        for (t, r) in ticks.iter().zip(results) {
            match r {
                Ok(Ticked::Stale) => {
                    stale |= cache.remove(&t.name).is_some();
                }
                Ok(Ticked::Done(p)) => {
                    if t.mode != TickMode::Park {
                        soonest(t.tick_ms);
                    }
                    match t.mode {
                        TickMode::Fire | TickMode::Skip => {
                            info!(schedule = %t.name, missed_until = t.tick_ms, mode = ?t.mode, "recurring ticks were missed while delayq was down")
                        }
                        _ => debug!(schedule = %t.name, tick = t.tick_ms, "recurring tick pushed"),
                    }
                    if let (Some(p), Some(job)) = (p, &t.job) {
                        h.pushed(&job.topic, part, &p);
                    }
                }
                Ok(Ticked::Already) => {}
                Err(e) => {
                    warn!(schedule = %t.name, error = %e, "recurring tick failed; trying again")
                }
            }
        }
        // A long look goes on noting itself after each batch, so that it
        // is not taken for an outage by the next look (here or elsewhere).
        note_look(h, outage).await?;
        if !stale && due.len() < DUE_PER_READ {
            break;
        }
    }
    Ok(wake)
}

/// Notes that the loop is still looking, as of now (one SET of a short
/// string: its cost does not grow with the schedules).
///
/// A note Redis held up (writes paused, a stalled connection) lands late
/// but says when it was sent: after the look's last note the next look
/// would see a gap as long as the hold-up and take it for an outage. So a
/// note that took longer than [`HELD_UP`] is made once more, as of its
/// return.
async fn note_look(h: &Handles, outage: Outage) -> crate::Result<()> {
    let sent = std::time::Instant::now();
    note_once(h, outage).await?;
    if sent.elapsed() > HELD_UP {
        note_once(h, outage).await?;
    }
    Ok(())
}

async fn note_once(h: &Handles, outage: Outage) -> crate::Result<()> {
    let at = match h.store.redis.clock().estimate_us() {
        Some(us) => us / 1000,
        None => h.store.redis.clock().now_ms().await?,
    };
    h.store.recur_look(outage.run_since, at).await
}

/// The ticks that bring one due schedule (last tick `last`) up to date.
fn plan(
    h: &Handles,
    name: &str,
    k: &Known,
    last: i64,
    now: i64,
    outage: Outage,
    ticks: &mut Vec<Tick>,
) {
    let tick = |tick_ms: i64, mode: TickMode| Tick {
        name: name.to_owned(),
        version: k.version.clone(),
        tick_ms,
        mode,
        job: matches!(mode, TickMode::Push | TickMode::Fire)
            .then(|| push_of(h, &k.def, &tick_id(name, tick_ms))),
    };
    let park = || tick(0, TickMode::Park);
    let Some(rule) = &k.rule else {
        return ticks.push(park());
    };
    // next_after only moves forward; were it ever not to, the schedule is
    // parked rather than asked again and again for a tick already done.
    let Some(mut next) = rule.next_after(last).filter(|&n| n > last) else {
        return ticks.push(park());
    };
    if outage.missed(next) {
        // Ticks went by while no instance ran. The tick pushed before fires
        // once (or, with skip, is dropped if it never fired); the others
        // are skipped. A schedule with no tick pushed yet fires its last
        // missed tick once.
        let latest = rule.last_at_or_before(now).unwrap_or(next).max(next);
        let mode = match k.def.missed {
            Missed::Fire => TickMode::Fire,
            Missed::Skip => TickMode::Skip,
        };
        ticks.push(tick(latest, mode));
        next = match rule.next_after(latest) {
            Some(n) => n,
            None => return ticks.push(park()),
        };
    }
    // The next tick, and any that a slow loop let go by (pushed late, each
    // once).
    for _ in 0..MAX_CATCH_UP {
        ticks.push(tick(next, TickMode::Push));
        if next > now {
            return;
        }
        next = match rule.next_after(next) {
            Some(n) => n,
            None => return ticks.push(park()),
        };
    }
}

/// The push of a job of schedule `def` (a tick's, or one run now) under
/// `id`: kept if it exists, due at once (a tick's due time is its own).
pub(crate) fn push_of(h: &Handles, def: &Recurring, id: &str) -> Push {
    let policy = def
        .retry
        .clone()
        .unwrap_or_else(|| h.retries.for_topic(&def.topic).clone());
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
        extra: Default::default(),
    }
}
