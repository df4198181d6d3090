//! Touch: extend a lease. The script is `touch.lua`.

use std::time::Duration;

use super::{ScriptDef, Status, Store};
use crate::error::Result;
use crate::redis::Fields;

pub const SCRIPT: ScriptDef = ScriptDef {
    name: "touch",
    source: include_str!("touch.lua"),
    when_full: true,
    acked: false,
    late_unknown: true,
};

/// What a touch did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Touched {
    pub status: Status,
    /// When Done, the new end of the lease (Unix ms).
    pub lease_until_ms: i64,
}

fn decode((status, mut f): (Status, Fields)) -> Result<Touched> {
    Ok(Touched {
        status,
        lease_until_ms: f.int()?,
    })
}

impl Store {
    pub(crate) async fn touch(
        &self,
        id: &str,
        token: &str,
        length: Option<Duration>,
    ) -> Result<Touched> {
        let mut cmd = self.script(&SCRIPT, self.part_of(id));
        cmd.arg(id)
            .arg(token)
            .arg(length.map_or(-1, |d| d.as_millis() as i64));
        decode(self.send(cmd).await?)
    }
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
