//! The subscriber: one pub/sub connection per process that listens to
//!
//! - `__keyevent@*__:expired`: a trigger key expired, so its job is
//!   (probably) due; dispatch it straight away. This is the low-cost path.
//! - `{p}:ready`: some instance made jobs ready; wake that many waiters.
//! - `{p}:wake`: a new earliest job; re-arm the sweep.
//!
//! Pub/sub is fire-and-forget: whatever was published while this connection
//! was down is gone. So every (re)connect is followed by a catch-up: the sweep
//! runs at once and every waiting pop looks again. Reconnects retry for ever,
//! at most a second apart.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use tracing::{debug, info, warn};

use super::{DispatchPath, Handles};

const EXPIRED_PATTERN: &str = "__keyevent@*__:expired";
const MAX_BACKOFF: Duration = Duration::from_secs(1);

pub(crate) async fn run(h: Handles) {
    let mut backoff = Duration::from_millis(20);
    loop {
        let ended = tokio::select! {
            r = session(&h) => r,
            _ = h.stop.wait() => return,
        };
        let was_up = h.subscriber_up.swap(false, Ordering::Relaxed);
        if let Err(e) = &ended {
            h.store.note_connect_error(Some(e.to_string()));
        }
        if was_up {
            warn!(reason = %reason(&ended), "subscriber disconnected; reconnecting");
            backoff = Duration::from_millis(20);
        } else {
            debug!(reason = %reason(&ended), "subscriber cannot connect yet");
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = h.stop.wait() => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Why a session ended, for the log.
fn reason(ended: &Result<(), redis::RedisError>) -> String {
    match ended {
        Ok(()) => "connection closed".into(),
        Err(e) => e.to_string(),
    }
}

/// One connection's life: subscribe, catch up, then serve messages until the
/// connection ends.
async fn session(h: &Handles) -> Result<(), redis::RedisError> {
    let keys = &h.store.keys;
    let timeout = h.store.timeout();
    let mut pubsub = tokio::time::timeout(timeout, h.store.client().get_async_pubsub())
        .await
        .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "connect timed out")))??;
    // Only a dispatching process needs expired events; the others would
    // take every one of them for nothing.
    if h.dispatch {
        pubsub.psubscribe(EXPIRED_PATTERN).await?;
    }
    let (ready_ch, wake_ch) = (keys.ready_channel(), keys.wake_channel());
    pubsub.subscribe(&[&ready_ch, &wake_ch]).await?;

    h.subscriber_up.store(true, Ordering::Relaxed);
    h.store.note_connect_error(None);
    h.metrics.subscriber_connects.inc([], 1);
    info!("subscriber connected");
    h.wake.notify_one();
    h.waiters.wake_all();

    let trigger_prefix = keys.trigger_prefix();
    let mut messages = pubsub.into_on_message().ready_chunks(512);
    loop {
        let batch = tokio::select! {
            batch = messages.next() => match batch {
                Some(batch) => batch,
                None => break,
            },
            // The master moved (Sentinel): listen to the new one.
            _ = h.store.relinked.notified() => {
                info!("redis master moved; the subscriber follows it");
                break;
            }
        };
        let mut due_ids = Vec::new();
        for msg in batch {
            let Ok(payload) = msg.get_payload::<String>() else {
                continue;
            };
            let channel = msg.get_channel_name();
            if channel == ready_ch {
                if let Some((count, topic)) = payload.split_once(' ') {
                    h.waiters.wake(topic, count.parse().unwrap_or(1));
                }
            } else if channel == wake_ch {
                h.wake.notify_one();
            } else if let Some(id) = payload.strip_prefix(&trigger_prefix) {
                due_ids.push(id.to_owned());
            }
        }
        if !due_ids.is_empty() && h.dispatch {
            // Dispatch in its own task: reading events must not wait on it.
            let h = h.clone();
            tokio::spawn(async move {
                if let Err(e) = h.dispatch(&due_ids, DispatchPath::Event).await {
                    // The sweep will fire these; nothing is lost.
                    debug!(error = %e, "event dispatch failed");
                }
            });
        }
    }
    Ok(())
}
