//! Instances: each `delayq serve` writes a heartbeat to Redis every
//! [`PERIOD`] (`{prefix}:instance:<id>`, expiring after 3 periods, and its
//! id in `{prefix}:instances` by expiry), and at once (within [`LOOK`])
//! when what it reports changes (waiting pops, partitions dispatched), so
//! every instance can list the running ones without a SCAN; one killed
//! drops out within 3 periods, one stopped cleanly at once. Nothing but the
//! list rests on it (dispatch has its terms), so the period is long: an
//! idle instance writes 3 commands every 20 s.

use std::time::Duration;

use crate::figures::{Instance, WebhookConsumer};
use crate::queue::Queue;
use crate::shutdown::Shutdown;

/// How often an instance writes its heartbeat when nothing it reports
/// changed.
pub const PERIOD: Duration = Duration::from_secs(20);
/// How often it looks (in this process) whether what it reports changed.
pub const LOOK: Duration = Duration::from_secs(2);
/// A heartbeat not renewed for this long is gone.
pub const TTL: Duration = Duration::from_secs(3 * PERIOD.as_secs());

/// A new instance of this process on `host`: id host-pid-random, started
/// now; `events`: it writes the event stream.
pub fn this_process(
    host: &str,
    listen: &str,
    webhook_consumers: Vec<WebhookConsumer>,
    events: bool,
) -> Instance {
    let host = host.to_owned();
    let pid = std::process::id();
    let random = &uuid::Uuid::new_v4().simple().to_string()[..8];
    Instance {
        id: format!("{host}-{pid}-{random}"),
        host,
        pid,
        version: crate::VERSION.into(),
        // Set at the first heartbeat, from the Redis clock.
        started_at_ms: 0,
        listen: listen.to_owned(),
        waiting_pops: 0,
        webhook_consumers,
        dispatching: Vec::new(),
        last_seen_ms: 0,
        events: Some(events),
        topic_schedules: Some(true),
        layout: Some(crate::queue::LAYOUT),
        batches: Some(true),
    }
}

/// Writes `instance`'s heartbeat every [`PERIOD`], and within [`LOOK`] of
/// a change, until `shutdown`, then takes it out of the list.
pub async fn run(queue: Queue, mut instance: Instance, shutdown: Shutdown) {
    let mut written: Option<tokio::time::Instant> = None;
    loop {
        let waiting = queue
            .waiting_pops()
            .saturating_sub(queue.waiting_webhook_pops()) as u64;
        let dispatching = queue.dispatching_partitions();
        let changed = waiting != instance.waiting_pops || dispatching != instance.dispatching;
        if changed || written.is_none_or(|at| at.elapsed() + LOOK / 2 >= PERIOD) {
            instance.waiting_pops = waiting;
            instance.dispatching = dispatching;
            if instance.started_at_ms == 0 {
                instance.started_at_ms = queue.clock().now_ms().await.unwrap_or(0);
            }
            match queue.heartbeat(&mut instance, TTL).await {
                Ok(()) => written = Some(tokio::time::Instant::now()),
                Err(e) => {
                    written = None;
                    tracing::debug!(error = %e, "heartbeat not written; trying again");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(LOOK) => {}
            _ = shutdown.wait() => break,
        }
    }
    if let Err(e) = queue.forget_instance(&instance.id).await {
        tracing::debug!(error = %e, "heartbeat not removed; it expires");
    }
}
