//! Reschedule: a new due time (and maybe body) for an existing job. The
//! script is `reschedule.lua`.

use std::time::Duration;

use super::script::script;
use super::Status;
use crate::error::Result;
use crate::redis::Fields;

script! {
    /// Gives job `id` (call it on the job's partition) a new due time:
    /// `delay` from now, or `due_at_ms` (Unix ms) when given; and `body`
    /// when given. Acknowledged: a failover must not bring back the due
    /// time (or body) it replaced: the job would come early, or with a
    /// body no longer expected.
    Reschedule = "reschedule", when_full: false, acked: true, late_unknown: true,
        (
            id: &'a str,
            delay: Duration => delay.as_millis() as u64,
            due_at_ms: Option<i64> => due_at_ms.map_or(-1, |t| t.max(0)),
            body: Option<&'a str> => (if body.is_some() { "1" } else { "0" }, body.unwrap_or("")),
        ) -> Rescheduled = decode;
}

/// What a reschedule did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Rescheduled {
    pub status: Status,
    /// When Done, the new due time (Unix ms)...
    pub due_ms: i64,
    /// ...and whether the job is now the earliest (sweeps must re-arm).
    pub new_head: bool,
}

/// The reply: the status, the due time and whether it is the head.
fn decode((status, mut f): (Status, Fields)) -> Result<Rescheduled> {
    Ok(Rescheduled {
        status,
        due_ms: f.int()?,
        new_head: f.int()? == 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_due_time_and_head() {
        let d = |r: &[&str]| decode(Fields::parse("reschedule", sample(r)).unwrap());
        let r = d(&["0", "5000", "1"]).unwrap();
        assert_eq!((r.status, r.due_ms, r.new_head), (Status::Done, 5000, true));
        assert!(!d(&["0", "5000", "0"]).unwrap().new_head);
        assert_eq!(d(&["1", "0", "0"]).unwrap().status, Status::Missing);
        assert!(d(&["0", "5000"]).is_err());
    }
}
