//! Recurring schedules: a cron rule that produces one job per tick ("every
//! day at 09:00 Asia/Shanghai, push a reminder job").
//!
//! A schedule is kept in Redis (`{p}:recur:<name>`, in the partition of
//! `{name}`), so every delayq instance sees it and it survives restarts.
//! Each dispatching instance runs the same loop ([`crate::loops`]):
//! when a schedule's last tick falls due, it pushes the next tick's job,
//! due at the tick, with the id `recurring/{name}/<tick, RFC 3339 UTC>`.
//! The push and the record of the tick are one script (`tick.lua`), so
//! however many instances race, each tick is pushed once; the job being due
//! at the tick, the engine never hands it out early.
//!
//! A tick missed while every instance was down: the tick that was already
//! pushed fires once when they come back (the default, [`Missed::Fire`]), or
//! is dropped if it never fired ([`Missed::Skip`]); the ticks after it are
//! skipped either way, never fired one by one.
//!
//! Rules are matched against local wall-clock times: a local time that does
//! not exist on a day (clocks forward) has no tick that day, and one that
//! happens twice (clocks back) fires once, at its first occurrence, so ticks
//! only move forward in absolute time ([`Rule::next_after`]).
//!
//! `rule.rs` parses a schedule's cron text and zone and finds its ticks.

mod rule;

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::retry::RetryPolicy;

pub use rule::Rule;

/// Longest schedule name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// What happens to a tick that fell due while no delayq instance ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Missed {
    /// It fires once, late, when delayq is back (later missed ticks do not).
    #[default]
    Fire,
    /// It does not fire; the next tick after the restart does.
    Skip,
}

/// A recurring schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recurring {
    pub topic: String,
    /// Six fields, seconds first (`0 0 9 * * *`), or the five-field form
    /// without seconds (`0 9 * * *`). Day of week is Unix's in both: 0 and
    /// 7 are Sunday, 1 Monday ... 6 Saturday, or `SUN`..`SAT`.
    pub cron: String,
    /// IANA time zone the rule is read in (`Asia/Shanghai`); UTC by default.
    pub timezone: String,
    pub body: String,
    pub ttr_ms: u64,
    pub retry: Option<RetryPolicy>,
    pub missed: Missed,
}

impl Default for Recurring {
    fn default() -> Self {
        Recurring {
            topic: String::new(),
            cron: String::new(),
            timezone: "UTC".into(),
            body: String::new(),
            ttr_ms: crate::defaults::TTR.as_millis() as u64,
            retry: None,
            missed: Missed::Fire,
        }
    }
}

/// How a schedule is stored (JSON in its hash).
#[derive(Serialize, Deserialize)]
struct Stored {
    topic: String,
    cron: String,
    timezone: String,
    body: String,
    ttr_ms: u64,
    retry_ms: Option<Vec<u64>>,
    max_attempts: Option<u32>,
    missed: Missed,
}

/// Checks a schedule name: like a topic, and no `{`, `}` or `/` (they
/// shape the ids of its jobs).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "schedule name must be 1 to {MAX_NAME_BYTES} bytes, not {}",
            name.len()
        ));
    }
    if name.trim() != name {
        return Err(format!("schedule name {name:?} has surrounding spaces"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_control() || matches!(c, '{' | '}' | '/' | ','))
    {
        return Err(format!(
            "schedule name {name:?} contains {c:?}; braces, slashes, commas and control characters are not allowed"
        ));
    }
    Ok(())
}

impl Recurring {
    /// Checks everything but the topic and body limits (the queue's).
    pub fn check(&self) -> Result<Rule, String> {
        if self.ttr_ms == 0 {
            return Err("ttr_ms must be at least 1".into());
        }
        if let Some(r) = &self.retry {
            r.check()?;
        }
        let rule = self.rule()?;
        if rule.next_after(Utc::now().timestamp_millis()).is_none() {
            return Err(format!("cron {:?} never fires again", self.cron));
        }
        Ok(rule)
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(&Stored {
            topic: self.topic.clone(),
            cron: self.cron.clone(),
            timezone: self.timezone.clone(),
            body: self.body.clone(),
            ttr_ms: self.ttr_ms,
            retry_ms: self
                .retry
                .as_ref()
                .map(|r| r.intervals.iter().map(|d| d.as_millis() as u64).collect()),
            max_attempts: self.retry.as_ref().and_then(|r| r.max_attempts),
            missed: self.missed,
        })
        .expect("a schedule serializes")
    }

    pub(crate) fn from_json(text: &str) -> Option<Recurring> {
        let s: Stored = serde_json::from_str(text).ok()?;
        Some(Recurring {
            topic: s.topic,
            cron: s.cron,
            timezone: s.timezone,
            body: s.body,
            ttr_ms: s.ttr_ms,
            retry: s.retry_ms.map(|ms| RetryPolicy {
                intervals: ms
                    .into_iter()
                    .map(std::time::Duration::from_millis)
                    .collect(),
                max_attempts: s.max_attempts,
            }),
            missed: s.missed,
        })
    }
}

// Defined beside the push limits that refuse such ids (the job model sits
// below recurring schedules).
pub use crate::job::TICK_ID_PREFIX;

/// The id of the job of `name`'s tick at `tick_ms`. The braces keep every
/// tick of a schedule in the schedule's own partition.
pub fn tick_id(name: &str, tick_ms: i64) -> String {
    let at: DateTime<Utc> = Utc
        .timestamp_millis_opt(tick_ms)
        .single()
        .unwrap_or_default();
    format!(
        "{TICK_ID_PREFIX}{name}}}/{}",
        at.format("%Y-%m-%dT%H:%M:%SZ")
    )
}

/// A schedule as it is in Redis now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecurringState {
    pub name: String,
    pub schedule: Recurring,
    /// The last tick that fired (Unix ms): its job fell due. None until
    /// the first has.
    pub last_tick_ms: Option<i64>,
    /// When it fires next (Unix ms): the pushed tick if still ahead, else
    /// the rule's next tick; None while paused.
    pub next_fire_ms: Option<i64>,
    /// The next [`NEXT_RUNS`] ticks from the rule, the first being
    /// `next_fire_ms`; empty while paused.
    pub next_runs_ms: Vec<i64>,
    /// When it was paused (Unix ms), while it is: it makes no ticks until
    /// resumed, and then counts them from the resume.
    pub paused_at_ms: Option<i64>,
}

/// How many next runs a schedule's state lists.
pub const NEXT_RUNS: usize = 5;

/// A job pushed by "run now": one job like a tick's, due at once, with an
/// id of its own (`recurring/{name}/run-<uuid>`); the schedule's own ticks
/// are unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunNow {
    pub id: String,
    pub due_ms: i64,
}

/// The id of a "run now" job of `name`: in the schedule's partition, and
/// never a tick's id.
pub(crate) fn run_id(name: &str) -> String {
    format!(
        "{TICK_ID_PREFIX}{name}}}/run-{}",
        uuid::Uuid::new_v4().simple()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    #[test]
    fn names_and_ids() {
        assert!(check_name("member-expiry").is_ok());
        assert!(check_name("a{b}").is_err());
        assert!(check_name("a/b").is_err());
        assert!(check_name(" a").is_err());
        assert!(check_name("").is_err());
        assert_eq!(
            tick_id("remind", at("2026-11-23T01:00:00Z")),
            "recurring/{remind}/2026-11-23T01:00:00Z"
        );
        let s = Recurring {
            topic: "t".into(),
            cron: "0 9 * * *".into(),
            retry: Some(RetryPolicy {
                intervals: vec![std::time::Duration::from_secs(60)],
                max_attempts: Some(3),
            }),
            missed: Missed::Skip,
            ..Recurring::default()
        };
        assert_eq!(Recurring::from_json(&s.to_json()), Some(s));
    }
}
