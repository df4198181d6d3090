//! Release: undo a lease that never reached its consumer. The script is
//! `release.lua`.

use super::reply::Fields;
use super::{Script, Status, Store};
use crate::error::Result;

pub const SCRIPT: Script = Script {
    name: "release",
    source: include_str!("release.lua"),
    when_full: true,
    acked: false,
    late_unknown: true,
};

/// The reply: DONE, or STALE or MISSING (nothing changed).
fn decode((status, _): (Status, Fields)) -> bool {
    status == Status::Done
}

impl Store {
    /// True if the lease `token` was undone (the job is ready again, the
    /// attempt uncounted); false if it was no longer current.
    pub(crate) async fn release(&self, id: &str, token: &str) -> Result<bool> {
        let mut cmd = self.script(&SCRIPT, self.part_of(id));
        cmd.arg(id).arg(token);
        let done = decode(self.send(cmd).await?);
        Ok(done)
    }

    /// Gives back jobs that were reserved for a caller who never received
    /// them (`why` says how), so they do not wait out their ttr.
    pub(crate) async fn release_all(&self, deliveries: Vec<crate::job::Delivery>, why: &str) {
        for d in deliveries {
            match self.release(&d.id, &d.token).await {
                Ok(_) => tracing::debug!(id = %d.id, why, "released a job nobody received"),
                Err(e) => {
                    tracing::warn!(id = %d.id, error = %e, why, "could not release a job nobody received; it returns after its ttr")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::sample;

    #[test]
    fn decodes_whether_it_was_done() {
        let d = |r: &[&str]| decode(Fields::parse("release", sample(r)).unwrap());
        assert!(d(&["0"]));
        assert!(!d(&["2"]));
        assert!(Fields::parse("release", sample(&["9"])).is_err());
    }
}
