//! The loops that keep a queue's store right while it runs, beside the
//! dispatch loops and started with them: the Sentinel follower, the
//! shards' health watch, the trim of finished jobs' records, and the stats
//! flush.

use std::sync::Arc;
use std::time::Duration;

use crate::figures::Instance;
use crate::shutdown::Shutdown;
use crate::stats::{Recorder, FLUSH_EVERY};
use crate::store::index::Index;
use crate::store::relayout::{Flag, LayoutSwap};
use crate::store::Store;

/// Follows the master until `stop`.
pub(super) async fn follow_sentinels(store: Arc<Store>, stop: Shutdown) {
    loop {
        if let Err(e) = store.redis.follow_master().await {
            store.redis.note_connect_error(Some(e.to_string()));
            tracing::warn!(error = %e, "cannot ask the sentinels where the master is; trying again");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.wait() => return,
        }
    }
}

/// Watches the shards (and a cluster's topology) until `stop`: at the
/// pace [`Health::next_look`](crate::redis::health) says, and at once when
/// the store followed a new master or something suggested a change.
/// `came_back` runs when a partition that was down answers again (waiting
/// pops look at it).
pub(super) async fn watch_health(store: Arc<Store>, stop: Shutdown, came_back: impl Fn() + Send) {
    let mut conns = crate::redis::shards::NodeConns::default();
    loop {
        if store.redis.check_shards(&mut conns).await {
            came_back();
        }
        tokio::select! {
            _ = tokio::time::sleep(store.redis.health.next_look()) => {}
            _ = store.redis.relinked.notified() => store.redis.health.heat(),
            _ = store.redis.health.hint.notified() => store.redis.health.heat(),
            _ = stop.wait() => return,
        }
    }
}

/// Keeps the counts of kept records right where nothing finishes any more
/// (a record's hash expires on its own; its index entry and count go here):
/// every quarter of the shortest window, between a second and
/// [`super::UPKEEP_MAX_EVERY`] (that when this process keeps none, for
/// indexes a window since turned off left behind).
pub(super) async fn trim_history(store: Arc<Store>, stop: Shutdown) {
    let every = store
        .keep
        .shortest()
        .map_or(super::UPKEEP_MAX_EVERY, |d| d / 4)
        .clamp(Duration::from_secs(1), super::UPKEEP_MAX_EVERY);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait() => return,
        }
        if let Err(e) = store.trim_all_history().await {
            tracing::debug!(error = %e, "trimming finished jobs' records failed; trying again later");
        }
    }
}

/// Adds `rec`'s increments into Redis once a second until `stop`, then
/// once more (a closing queue loses nothing it counted).
pub(super) async fn flush_stats(store: Arc<Store>, rec: Arc<Recorder>, stop: Shutdown) {
    loop {
        let stopping = tokio::select! {
            _ = tokio::time::sleep(FLUSH_EVERY) => false,
            _ = stop.wait() => true,
        };
        crate::stats::flush(&store, &rec).await;
        if stopping {
            return;
        }
    }
}

/// How often the topic schedules' backfill looks whether an instance of an
/// older build runs (one read of the heartbeats, only on a leader).
const INDEX_EVERY: Duration = Duration::from_secs(60);

/// How often, besides, while a led partition is in layout 3 and no older
/// build runs, the leader looks whether an instance started (one ZRANGE
/// of the instances' ids), and if so reads the heartbeats at once: an
/// older build fires no delayed job (they are out of the shared schedule),
/// so the flag is lowered and the jobs put back within about this long.
/// Not shorter: an idle queue pays the look (4 commands a minute at 15 s;
/// at 3 s it was 20, doubling an idle instance's commands).
const SPLIT_WATCH_EVERY: Duration = Duration::from_secs(15);

/// Keeps every topic's schedule whole on the partitions this instance
/// leads, until `stop`: runs `index.lua` a batch at a time until a pass
/// has ended (at once on taking a term), and begins a new pass every
/// [`INDEX_EVERY`] while a heartbeat says an older build, which keeps no
/// topic schedules, is alive.
pub(super) async fn index_topics(h: super::Handles) {
    // Each partition taken starts its pass, not only the first one.
    let mut taken = h.leader.taken();
    // Partitions whose pass ended here with no older build alive.
    let mut whole = vec![false; h.store.parts().len()];
    // The layout each partition's last pass saw: a pass more when it
    // crosses 3 (delayed jobs out of the shared schedule, or back).
    let mut seen = vec![0u8; h.store.parts().len()];
    loop {
        let mut watch = false;
        let held = h.leader.held();
        if !held.is_empty() {
            // One read of the heartbeats serves both.
            let beats = live_instances(&h.store).await;
            if let Some(live) = &beats {
                keep_layout(&h.store, &held, live).await;
            }
            if let Ok(flags) = h.store.layout_flags().await {
                for &part in &held {
                    let now = flags.get(part).map_or(1, |f| f.layout);
                    if (now >= 3) != (seen[part] >= 3) {
                        whole[part] = false;
                    }
                    seen[part] = now;
                }
            }
            let older = older_build_alive(beats.as_deref());
            watch = !older && held.iter().any(|&p| seen[p] >= 3);
            for part in held {
                if whole[part] && !older {
                    continue;
                }
                loop {
                    let call = std::time::Instant::now();
                    match h.store.run::<Index>(part, (older,)).await {
                        Ok((_, true)) => {
                            whole[part] = !older;
                            break;
                        }
                        Ok((_, false)) if !h.stop.is_triggered() => {
                            tokio::time::sleep(index_pause(call.elapsed())).await
                        }
                        Ok(_) => return,
                        Err(e) => {
                            tracing::debug!(error = %e, part, "backfilling topic schedules failed; trying again later");
                            break;
                        }
                    }
                }
            }
        }
        tokio::select! {
            _ = next_look(&h.store, watch) => {}
            r = taken.changed() => if r.is_err() { return },
            _ = h.stop.wait() => return,
        }
    }
}

/// Waits until the next look: [`INDEX_EVERY`], or sooner when `watch`
/// and the instances' ids change (an instance started).
async fn next_look(store: &Store, watch: bool) {
    let end = tokio::time::Instant::now() + INDEX_EVERY;
    if !watch {
        return tokio::time::sleep_until(end).await;
    }
    let known = store.instance_ids().await.ok();
    while tokio::time::Instant::now() + SPLIT_WATCH_EVERY < end {
        tokio::time::sleep(SPLIT_WATCH_EVERY).await;
        if store.instance_ids().await.ok() != known {
            return;
        }
    }
    tokio::time::sleep_until(end).await;
}

/// The pause after a backfill call that took `took`: three times as
/// long, so that a pass over millions of jobs (an upgrade, or every minute
/// while an older build runs) takes at most about a quarter of Redis's time
/// and the calls of the queue's users wait behind one batch at most.
fn index_pause(took: Duration) -> Duration {
    (took * 3).clamp(Duration::from_millis(1), Duration::from_millis(500))
}

/// Keeps the layout flag of each partition in `parts` (those this
/// instance leads) right for the live instances: raised to the highest
/// layout every one of them reads, and lowered (with an error logged) when
/// one reads less than the layout in force, so that no more data it cannot
/// read is written, and what was is rewritten whole (paced). A flag the
/// operator holds is left alone. Nothing changes when the heartbeats cannot
/// be read.
async fn keep_layout(store: &Store, parts: &[usize], beats: &[String]) {
    let live: Vec<Instance> = (beats.iter())
        .filter_map(|b| serde_json::from_str(b).ok())
        .collect();
    let readable = live
        .iter()
        .map(|i| i.layout_read())
        .min()
        .unwrap_or(crate::store::layout::LAYOUT_READ)
        .min(crate::store::layout::LAYOUT_READ);
    let Ok(flags) = store.layout_flags().await else {
        return;
    };
    for &part in parts {
        let Some(&flag) = flags.get(part) else {
            continue;
        };
        if flag.layout > readable {
            let older: Vec<&str> = (live.iter())
                .filter(|i| i.layout_read() < flag.layout)
                .map(|i| i.id.as_str())
                .collect();
            tracing::error!(
                part,
                layout = flag.layout,
                instances = ?older,
                "instances that cannot read the storage layout in force are running: jobs written in it are unreadable to them; stop them, run `delayq layout --hold 1`, then start them again"
            );
        }
        if flag.held || flag.layout == readable {
            continue;
        }
        let to = Flag {
            layout: readable,
            held: false,
        };
        // Only if the flag is still as read: an operator's hold written
        // meanwhile stays.
        match store.run::<LayoutSwap>(part, (flag, to)).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(
                    part,
                    "storage layout changed meanwhile; looking again later"
                );
                continue;
            }
            Err(e) => {
                tracing::debug!(error = %e, part, "storage layout not changed; trying again later");
                continue;
            }
        }
        tracing::info!(
            part,
            from = flag.layout,
            to = readable,
            "storage layout changed"
        );
        // Lowered below 3: the index pass that follows (the flag crossed
        // 3) puts the delayed jobs back into the shared schedule. Below 2:
        // what was written in pieces is rewritten whole, so that the
        // instances that cannot read pieces (a pop of one fails) can.
        if readable < 2 && flag.layout >= 2 {
            match store.relayout_all(part).await {
                Ok(n) => tracing::warn!(
                    part,
                    rewritten = n,
                    "pieced bodies rewritten whole for instances of an older build"
                ),
                Err(e) => {
                    tracing::error!(error = %e, part, "pieced bodies not rewritten whole; run `delayq layout --hold 1`")
                }
            }
        }
    }
}

/// The last look of a leader stopping gracefully, for the partitions it
/// still leads, before it gives their terms up. Layout 3 keeps delayed jobs
/// out of the shared schedule, where an instance that reads less fires
/// from: one that started since the last look (up to [`SPLIT_WATCH_EVERY`]
/// ago) would wait forever for them if this was the last instance that
/// reads 3 (a quick roll back). So the flag is lowered and the jobs put
/// back now, paced as the backfill; that takes as long as the delayed jobs
/// are many, and the stop waits for it. Costs one read of the flags when
/// no led partition is in layout 3.
pub(super) async fn last_look(store: &Store, held: &[usize]) {
    let is_split = |flags: &[Flag], p: usize| flags.get(p).is_some_and(|f| f.layout >= 3);
    let Ok(flags) = store.layout_flags().await else {
        return;
    };
    let split: Vec<usize> = (held.iter().copied())
        .filter(|&p| is_split(&flags, p) && !flags[p].held)
        .collect();
    if split.is_empty() {
        return;
    }
    let Some(live) = live_instances(store).await else {
        return;
    };
    keep_layout(store, &split, &live).await;
    let Ok(flags) = store.layout_flags().await else {
        return;
    };
    for part in split.into_iter().filter(|&p| !is_split(&flags, p)) {
        if let Err(e) = store.index_all(part).await {
            tracing::error!(error = %e, part, "delayed jobs not put back into the shared schedule for an older build; run `delayq layout --hold 2`");
        }
    }
}

/// The live instances' heartbeats (JSON), or None when they cannot be
/// read.
async fn live_instances(store: &Store) -> Option<Vec<String>> {
    let now_ms = store.redis.clock().now_ms().await.ok()?;
    store.instances(now_ms).await.ok()
}

/// Whether a live instance's heartbeat lacks `topic_schedules` (an older
/// build). Unread or unreadable heartbeats count as yes: a pass more costs
/// little.
fn older_build_alive(beats: Option<&[String]>) -> bool {
    beats.is_none_or(|beats| {
        beats.iter().any(|b| {
            serde_json::from_str::<Instance>(b).map_or(true, |i| i.topic_schedules != Some(true))
        })
    })
}
