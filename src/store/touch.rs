//! Touch: extend a lease. The script is `touch.lua`.

use std::time::Duration;

use super::script::script;
use super::Status;
use crate::error::Result;
use crate::redis::Fields;

script! {
    /// Extends the lease `token` of job `id` (call it on the job's
    /// partition) to `length` from now, the job's own ttr when None.
    Touch = "touch", when_full: true, acked: false, late_unknown: true,
        (
            id: &'a str,
            token: &'a str,
            length: Option<Duration> => length.map_or(-1, |d| d.as_millis() as i64),
        ) -> Touched = decode;
}

/// What a touch did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Touched {
    pub status: Status,
    /// When Done, the new end of the lease (Unix ms).
    pub lease_until_ms: i64,
}

/// The reply: the status and, when Done, the lease's new end.
fn decode((status, mut f): (Status, Fields)) -> Result<Touched> {
    Ok(Touched {
        status,
        lease_until_ms: f.int()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_status_and_lease() {
        let d = |r: &[&str]| decode(Fields::parse("touch", sample(r)).unwrap());
        let t = d(&["0", "61000"]).unwrap();
        assert_eq!((t.status, t.lease_until_ms), (Status::Done, 61_000));
        assert_eq!(d(&["2", "0"]).unwrap().status, Status::Stale);
        assert!(d(&["1"]).is_err());
    }
}
