//! `/v1/instances` and `/v1/webhooks`: the running delayq instances (from
//! their heartbeats in Redis) and the webhook topics they deliver.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use crate::figures::{Instance, WebhookConsumer, WebhookStatus};

/// `GET /v1/instances`.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone)]
pub struct Instances {
    /// By id.
    pub instances: Vec<Instance>,
}

/// `GET /v1/webhooks`.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone)]
pub struct Webhooks {
    /// By topic.
    pub webhooks: Vec<WebhookStatus>,
}
