//! `/v1/recurring`: recurring schedules.

use serde::{Deserialize, Serialize};

use super::{Retry, RetrySpec};
use crate::recurring::Missed;

/// `PUT /v1/recurring/{name}`: a job per cron tick.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = ScheduleSpec))]
#[serde(deny_unknown_fields)]
pub struct RecurringSpec {
    #[cfg_attr(feature = "server", schema(max_length = 128))]
    pub topic: String,
    /// Six fields, seconds first (`0 0 9 * * *`), or five (`0 9 * * *`).
    pub cron: String,
    /// IANA name, e.g. Asia/Shanghai (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(default = "UTC"))]
    pub timezone: Option<String>,
    /// Body of each job.
    #[serde(default)]
    pub body: String,
    /// Time to run of each job (default 60000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "server", schema(minimum = 1, default = 60000))]
    pub ttr_ms: Option<u64>,
    /// The config file's name (a duration text): refused, naming `ttr_ms`.
    #[serde(default, skip_serializing)]
    #[cfg_attr(feature = "server", schema(ignore))]
    pub ttr: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetrySpec>,
    /// A tick missed while no delayq ran: fire once at start-up, or skip.
    #[serde(default)]
    #[cfg_attr(feature = "server", schema(default = "fire"))]
    pub missed: Missed,
}

/// A schedule with its next fire time.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Schedule))]
pub struct RecurringStateBody {
    pub name: String,
    pub topic: String,
    pub cron: String,
    pub timezone: String,
    pub body: String,
    pub ttr_ms: u64,
    pub retry: Option<Retry>,
    pub missed: Missed,
    /// The last tick that fired (its job fell due); null until one has.
    pub last_tick_ms: Option<i64>,
    /// Null when the rule has no further tick, or while paused.
    pub next_fire_ms: Option<i64>,
    /// The next 5 ticks from the rule, `next_fire_ms` first; empty while
    /// paused.
    pub next_runs_ms: Vec<i64>,
    /// Paused: no ticks until resumed (then they count from the resume).
    pub paused: bool,
    /// When it was paused; null unless paused.
    pub paused_at_ms: Option<i64>,
}

/// `POST /v1/recurring/{name}/run`: the job pushed now.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
pub struct RecurringRun {
    pub name: String,
    /// `recurring/{name}/run-<uuid>`.
    pub id: String,
    pub topic: String,
    pub due_ms: i64,
}

/// `GET /v1/recurring`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "server", schema(as = Schedules))]
pub struct RecurringList {
    pub schedules: Vec<RecurringStateBody>,
}
