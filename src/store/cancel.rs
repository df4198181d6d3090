//! Cancel: a job leaves the queue whatever its state; one that runs stops
//! being its holder's. The script is `cancel.lua`.

use std::time::Duration;

use super::script::script;
use super::Status;
use crate::error::{Error, Result};
use crate::job::JobState;
use crate::redis::Fields;

script! {
    /// Cancels job `id` (call it on the job's partition): the state it was
    /// in, None if there was no such job. A running job's holder hears
    /// "cancelled" until its lease would have ended and `grace` after. One
    /// job hash read and the writes of a delete: bounded.
    ///
    /// It runs when Redis is full: it frees memory, and an operator
    /// cancels to make room too. It is acknowledged only once replicas
    /// have it: a failover must not bring back a job whose cancel was
    /// answered.
    Cancel = "cancel", when_full: true, acked: true, late_unknown: true,
        (id: &'a str, grace: Duration => grace.as_millis() as u64) -> Option<JobState> = decode;
}

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
