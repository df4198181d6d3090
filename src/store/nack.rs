//! Nack: a consumer reports a failed attempt; the job's retry policy says
//! where it goes. The script is `nack.lua`.

use std::time::Duration;

use super::script::script;
use super::Status;
use crate::error::{Error, Result};
use crate::job::JobState;
use crate::redis::Fields;

script! {
    /// Reports a failed attempt of job `id` under lease `token` (call it
    /// on the job's partition): retried after `delay` (the job's policy
    /// when None, `fallback_ms` its backoff when it has none) or dead,
    /// kept by `retention`; `error` is the attempt's error line.
    Nack = "nack", when_full: true, acked: true, late_unknown: true,
        (
            retention: Retention => (retention.max_per_topic, retention.max_age.as_millis() as u64),
            id: &'a str,
            token: &'a str,
            delay: Option<Duration> => delay.map_or(-1, |d| d.as_millis() as i64),
            error: &'a str,
            fallback_ms: &'a str,
        ) -> Failed = decode;
}

/// Where a nacked job went (with status Done).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Failed {
    pub status: Status,
    pub state: Option<JobState>,
    /// When the next attempt is due, or when it died (Unix ms).
    pub due_ms: i64,
    pub topic: String,
}

/// The reply: the status, then (when Done, always) the state the job went
/// to, its due time and its topic.
fn decode((status, mut f): (Status, Fields)) -> Result<Failed> {
    let state = f.string()?;
    let failed = Failed {
        status,
        state: JobState::parse(&state),
        due_ms: f.int()?,
        topic: f.string()?,
    };
    if failed.status == Status::Done && failed.state.is_none() {
        return Err(Error::protocol("nack", format!("{failed:?}")));
    }
    Ok(failed)
}

/// Dead-letter retention, as the scripts that can kill a job take it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retention {
    pub max_per_topic: usize,
    pub max_age: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_where_the_job_went() {
        let d = |r: &[&str]| decode(Fields::parse("nack", sample(r)).unwrap()).unwrap();
        let f = d(&["0", "delayed", "1700000120000", "notify"]);
        assert_eq!(
            (f.status, f.state, f.due_ms, f.topic.as_str()),
            (
                Status::Done,
                Some(JobState::Delayed),
                1_700_000_120_000,
                "notify"
            )
        );
        assert_eq!(d(&["2", "ready", "0", "notify"]).status, Status::Stale);
        assert_eq!(d(&["1", "", "0", ""]).state, None);
    }
}
