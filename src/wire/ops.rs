//! `/v1/instances` and `/v1/webhooks`: the running delayq instances (from
//! their heartbeats in Redis) and the webhook topics they deliver.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One webhook topic an instance delivers.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone, PartialEq, Eq)]
pub struct WebhookConsumer {
    pub topic: String,
    /// Most deliveries in flight from this instance.
    pub concurrency: u64,
    /// The URL with its password and query values masked (`***`).
    pub url: String,
    pub timeout_ms: u64,
}

/// A running delayq, as its last heartbeat said.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// host-pid-random, stable for the process.
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub version: String,
    pub started_at_ms: i64,
    /// The address it serves HTTP on.
    pub listen: String,
    /// Clients' pops waiting in it now (its webhook deliveries' not counted).
    pub waiting_pops: u64,
    pub webhook_consumers: Vec<WebhookConsumer>,
    /// The partitions whose dispatcher lease it holds: their due jobs it
    /// moves (empty: a standby, or it does not dispatch).
    pub dispatching: Vec<usize>,
    /// Its last heartbeat; it is gone from the list 3 heartbeat periods
    /// after its last.
    pub last_seen_ms: i64,
    /// It writes the event stream (`--events`). Every instance of a queue
    /// has the same setting: one of another is refused at start. Null from
    /// an instance too old to say.
    #[serde(default)]
    pub events: Option<bool>,
}

/// `GET /v1/instances`.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone)]
pub struct Instances {
    /// By id.
    pub instances: Vec<Instance>,
}

/// A webhook topic: where it goes and how its deliveries went, across the
/// instances that deliver it.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone)]
pub struct WebhookStatus {
    pub topic: String,
    /// The URL with its password and query values masked (`***`).
    pub url: String,
    pub concurrency: u64,
    pub timeout_ms: u64,
    /// The last delivery's HTTP status (`"200"`, `"503"`), or what kept
    /// it from having one (`timeout`, `connection_error`); null before the
    /// first.
    pub last_status: Option<String>,
    pub last_at_ms: Option<i64>,
    /// The last failed delivery's error, if the last delivery failed.
    pub last_error: Option<String>,
    /// Deliveries answered 2xx in the last 60 minutes (whole minutes).
    pub delivered_last_hour: u64,
    /// Failed deliveries in the last 60 minutes.
    pub failures_last_hour: u64,
    /// How many running instances deliver it.
    pub instances: u64,
}

/// `GET /v1/webhooks`.
#[derive(Serialize, Deserialize, ToSchema, Debug, Clone)]
pub struct Webhooks {
    /// By topic.
    pub webhooks: Vec<WebhookStatus>,
}
