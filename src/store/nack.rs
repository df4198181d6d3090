//! Nack: a consumer reports a failed attempt; the job's retry policy says
//! where it goes. The script is `nack.lua`.

use std::time::Duration;

use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::job::JobState;
use crate::redis::Fields;

pub const SCRIPT: ScriptDef = ScriptDef {
    name: "nack",
    source: include_str!("nack.lua"),
    when_full: true,
    acked: true,
    late_unknown: true,
};

/// Where a nacked job went (with status Done).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Failed {
    pub status: Status,
    pub state: Option<JobState>,
    /// When the next attempt is due, or when it died (Unix ms).
    pub due_ms: i64,
    pub topic: String,
}

fn decode((status, mut f): (Status, Fields)) -> Result<Failed> {
    let state = f.string()?;
    Ok(Failed {
        status,
        state: JobState::parse(&state),
        due_ms: f.int()?,
        topic: f.string()?,
    })
}

/// Dead-letter retention, as the scripts that can kill a job take it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retention {
    pub max_per_topic: usize,
    pub max_age: Duration,
}

impl Store {
    pub(crate) async fn nack(
        &self,
        id: &str,
        token: &str,
        delay: Option<Duration>,
        error: &str,
        retention: Retention,
        fallback_ms: &str,
    ) -> Result<Failed> {
        let mut cmd = self.script(&SCRIPT, self.part_of(id));
        cmd.arg(retention.max_per_topic)
            .arg(retention.max_age.as_millis() as u64)
            .arg(id)
            .arg(token)
            .arg(delay.map_or(-1, |d| d.as_millis() as i64))
            .arg(error)
            .arg(fallback_ms);
        let failed = decode(self.send(cmd).await?)?;
        if failed.status == Status::Done && failed.state.is_none() {
            return Err(Error::protocol("nack", format!("{failed:?}")));
        }
        Ok(failed)
    }
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
