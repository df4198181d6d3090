//! Release: undo a lease that never reached its consumer. The script is
//! `release.lua`.

use super::script::script;
use super::{Status, Store};
use crate::error::Result;
use crate::redis::Fields;

script! {
    /// Undoes the lease `token` of job `id`.
    Release = "release", when_full: true, acked: false, late_unknown: true,
        (id: &'a str, token: &'a str) -> bool = decode;
}

/// The reply: DONE, or STALE or MISSING (nothing changed).
fn decode((status, _): (Status, Fields)) -> Result<bool> {
    Ok(status == Status::Done)
}

impl Store {
    /// True if the lease `token` was undone (the job is ready again, the
    /// attempt uncounted); false if it was no longer current.
    pub(crate) async fn release(&self, id: &str, token: &str) -> Result<bool> {
        self.run::<Release>(self.part_of(id), (id, token)).await
    }
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
