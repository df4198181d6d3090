//! The loops that keep a queue's store right while it runs, beside the
//! dispatch loops and started with them: the Sentinel follower, the
//! shards' health watch, the trim of finished jobs' records, and the stats
//! flush.

use std::sync::Arc;
use std::time::Duration;

use crate::shutdown::Shutdown;
use crate::stats::{Recorder, FLUSH_EVERY};
use crate::store::Store;

/// Follows the master until `stop`.
pub(super) async fn follow_sentinels(store: Arc<Store>, stop: Shutdown) {
    loop {
        if let Err(e) = store.follow_master().await {
            store.note_connect_error(Some(e.to_string()));
            tracing::warn!(error = %e, "cannot ask the sentinels where the master is; trying again");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.wait() => return,
        }
    }
}

/// Watches the shards (and a cluster's topology) until `stop`: at the
/// pace [`Health::next_look`](crate::store::health) says, and at once when
/// the store followed a new master or something suggested a change.
/// `came_back` runs when a partition that was down answers again (waiting
/// pops look at it).
pub(super) async fn watch_health(store: Arc<Store>, stop: Shutdown, came_back: impl Fn() + Send) {
    let mut conns = crate::store::health::NodeConns::default();
    loop {
        if store.check_shards(&mut conns).await {
            came_back();
        }
        tokio::select! {
            _ = tokio::time::sleep(store.health.next_look()) => {}
            _ = store.relinked.notified() => store.health.heat(),
            _ = store.health.hint.notified() => store.health.heat(),
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
