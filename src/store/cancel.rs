//! Cancel: a job leaves the queue whatever its state; one that runs stops
//! being its holder's. The script is `cancel.lua`.

use std::time::Duration;

use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::job::JobState;
use crate::redis::Fields;

pub const SCRIPT: ScriptDef = ScriptDef {
    name: "cancel",
    source: include_str!("cancel.lua"),
    // It frees memory: an operator cancels to make room too.
    when_full: true,
    // A cancel is acknowledged only once replicas have it: a failover
    // must not bring back a job whose cancel was answered.
    acked: true,
    late_unknown: true,
};

/// The reply: the state the job was in, or None (no job).
fn decode((status, mut f): (Status, Fields)) -> Result<Option<JobState>> {
    match status {
        Status::Done => {
            let state = f.string()?;
            JobState::parse(&state)
                .map(Some)
                .ok_or_else(|| Error::protocol("cancel", format!("state {state:?}")))
        }
        Status::Missing => Ok(None),
        other => Err(Error::protocol("cancel", format!("status {other:?}"))),
    }
}

impl Store {
    /// Cancels job `id`; returns the state it was in (None: no such job).
    /// A running job's holder hears "cancelled" until its lease would have
    /// ended and `grace` after. One job hash read and the writes of a
    /// delete: bounded.
    pub(crate) async fn cancel(&self, id: &str, grace: Duration) -> Result<Option<JobState>> {
        let mut cmd = self.script(&SCRIPT, self.part_of(id));
        cmd.arg(id).arg(grace.as_millis() as u64);
        decode(self.send(cmd).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_the_state_it_was_in() {
        let d = |r: &[&str]| decode(Fields::parse("cancel", sample(r)).unwrap());
        assert_eq!(d(&["0", "reserved"]).unwrap(), Some(JobState::Reserved));
        assert_eq!(d(&["1", ""]).unwrap(), None);
        assert!(d(&["0", "gone"]).is_err());
    }
}
