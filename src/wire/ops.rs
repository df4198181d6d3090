//! `/v1/instances` and `/v1/webhooks`: the running delayq instances (from
//! their heartbeats in Redis) and the webhook topics they deliver.

use serde::{Deserialize, Serialize};

pub use crate::figures::{Instance, WebhookConsumer, WebhookStatus};

/// `GET /v1/instances`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Instances {
    /// By id.
    pub instances: Vec<Instance>,
}

/// `GET /v1/webhooks`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct Webhooks {
    /// By topic.
    pub webhooks: Vec<WebhookStatus>,
}
