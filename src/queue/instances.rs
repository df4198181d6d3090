//! Running instances (heartbeats in Redis) and the status of the webhook
//! topics they deliver; the loops that write them are in
//! [`crate::instances`] and [`crate::webhook`].

use std::collections::BTreeMap;
use std::time::Duration;

use super::Queue;
use crate::error::Result;
use crate::figures::{Instance, WebhookStatus};
#[cfg(feature = "server")]
pub(crate) use crate::store::instances::WebhookNote;

impl Queue {
    /// Writes `instance`'s heartbeat (its `last_seen_ms` set to now), to
    /// expire after `ttl` unless written again.
    pub async fn heartbeat(&self, instance: &mut Instance, ttl: Duration) -> Result<()> {
        instance.last_seen_ms = self.clock().now_ms().await?;
        let json = serde_json::to_string(&*instance).expect("an instance serializes");
        self.store()
            .heartbeat(
                &instance.id,
                &json,
                instance.last_seen_ms,
                ttl.as_millis() as u64,
            )
            .await
    }

    /// Takes instance `id` out of the list (a clean stop).
    pub async fn forget_instance(&self, id: &str) -> Result<()> {
        self.store().instance_gone(id).await
    }

    /// The running instances, by id: those whose last heartbeat has not
    /// expired.
    pub async fn instances(&self) -> Result<Vec<Instance>> {
        let now = self.clock().now_ms().await?;
        let mut out: Vec<Instance> = self
            .store()
            .instances(now)
            .await?
            .iter()
            .filter_map(|j| serde_json::from_str(j).ok())
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Every webhook topic of the running instances, by topic: where it
    /// goes (as the first instance by id has it), how many instances
    /// deliver it, its last delivery and its counts over the last hour.
    pub async fn webhooks(&self) -> Result<Vec<WebhookStatus>> {
        let instances = self.instances().await?;
        let mut topics: BTreeMap<String, WebhookStatus> = BTreeMap::new();
        for i in &instances {
            for c in &i.webhook_consumers {
                topics
                    .entry(c.topic.clone())
                    .or_insert_with(|| WebhookStatus {
                        topic: c.topic.clone(),
                        url: c.url.clone(),
                        concurrency: c.concurrency,
                        timeout_ms: c.timeout_ms,
                        last_status: None,
                        last_at_ms: None,
                        last_error: None,
                        delivered_last_hour: 0,
                        failures_last_hour: 0,
                        instances: 0,
                    })
                    .instances += 1;
            }
        }
        let names: Vec<String> = topics.keys().cloned().collect();
        let now_minute = self.clock().now_ms().await?.div_euclid(60_000);
        let mut read = self.store().webhook_read(&names, now_minute).await?;
        Ok(topics
            .into_values()
            .map(|mut w| {
                if let Some(r) = read.remove(&w.topic) {
                    w.last_status = r.last_status;
                    w.last_at_ms = r.last_at_ms;
                    w.last_error = r.last_error;
                    w.delivered_last_hour = r.delivered;
                    w.failures_last_hour = r.failed;
                }
                w
            })
            .collect())
    }

    /// Writes what this process saw of `topic`'s deliveries since it last
    /// wrote.
    #[cfg(feature = "server")]
    pub(crate) async fn note_webhook(&self, topic: &str, note: &WebhookNote) -> Result<()> {
        self.store().webhook_note(topic, note).await
    }
}
