//! Release: undo a lease that never reached its consumer. The script is
//! `release.lua`.

use super::script::script;
use super::Status;
use crate::error::Result;
use crate::redis::Fields;

script! {
    /// Undoes the lease `token` of job `id` (call it on the job's
    /// partition): true if it was undone (the job is ready again, the
    /// attempt uncounted), false if it was no longer current.
    Release = "release", when_full: true, acked: false, late_unknown: true,
        (id: &'a str, token: &'a str) -> bool = decode;
}

/// The reply: DONE, or STALE or MISSING (nothing changed).
fn decode((status, _): (Status, Fields)) -> Result<bool> {
    Ok(status == Status::Done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_whether_it_was_done() {
        let d = |r: &[&str]| decode(Fields::parse("release", sample(r)).unwrap()).unwrap();
        assert!(d(&["0"]));
        assert!(!d(&["2"]));
        assert!(Fields::parse::<Status>("release", sample(&["9"])).is_err());
    }
}
