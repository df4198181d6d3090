//! Hold: check, right before sending, that leases are still held, and
//! extend those that would end too soon. The script is `hold.lua`.

// Only the server's webhook delivery calls this (`server` feature).
#![cfg_attr(not(feature = "server"), allow(dead_code))]

use std::time::Duration;

use super::batch::PerJob;
use super::call::Call;
use super::{ScriptDef, Status, Store};
use crate::error::Result;
use crate::redis::coalesce::Batch;
use crate::redis::Fields;

/// One lease to check: held leases ending within `length` are extended to
/// end then. `attempt` is the one its pop counted.
pub(crate) struct Hold {
    pub id: String,
    pub token: String,
    pub length: Duration,
    pub attempt: u32,
}

/// What the check found of one lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Checked {
    /// Done: still this token's lease; Stale or Missing: not.
    pub status: Status,
    /// When held, the lease's end (Unix ms, Redis time).
    pub lease_until_ms: i64,
    /// When held, ms of it left when the script ran.
    pub left_ms: i64,
}

pub(crate) struct Holds;

impl Batch for Holds {
    type Item = Hold;
    type Out = Checked;
    const MAX_ITEMS: usize = 256;
    const MAX_BYTES: usize = 1 << 20;

    fn bytes(h: &Hold) -> usize {
        h.id.len() + h.token.len()
    }
}

impl PerJob for Holds {
    const DEF: &'static ScriptDef = &ScriptDef {
        name: "hold",
        source: include_str!("hold.lua"),
        when_full: true,
        acked: false,
        // A late check may have extended a lease: harmless, and unknown.
        late_unknown: true,
    };

    fn args(h: &Hold, cmd: &mut Call) {
        cmd.arg(&h.id)
            .arg(&h.token)
            .arg(h.length.as_millis() as u64)
            .arg(h.attempt);
    }

    fn decode(f: &mut Fields) -> Result<Checked> {
        Ok(Checked {
            status: f.status()?,
            lease_until_ms: f.int()?,
            left_ms: f.int()?,
        })
    }
}

impl Store {
    /// Checks many leases at once: one call per partition (and per
    /// [`Holds::MAX_ITEMS`]), the calls at once; a result per lease, in
    /// order.
    pub(crate) async fn hold_many(&self, holds: &[Hold]) -> Result<Vec<Result<Checked>>> {
        self.batch_many::<Holds>(holds, |h| self.part_of(&h.id))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_each_leases_status_end_and_time_left() {
        let mut f =
            Fields::parse::<Status>("hold", sample(&["0", "0", "61000", "30000", "2", "0", "0"]))
                .unwrap()
                .1;
        let h = Holds::decode(&mut f).unwrap();
        assert_eq!(
            (h.status, h.lease_until_ms, h.left_ms),
            (Status::Done, 61_000, 30_000)
        );
        assert_eq!(Holds::decode(&mut f).unwrap().status, Status::Stale);
        assert!(Holds::decode(&mut f).is_err());
    }
}
