//! Remove: finish (with a lease token) or delete (from any state) a job.
//! The script is `remove.lua`.

use std::sync::Arc;

use super::batch::PerJob;
use super::coalesce::Batch;
use super::exec::Call;
use super::reply::Fields;
use super::{Script, Status, Store};
use crate::error::Result;

pub const SCRIPT: Script = Script {
    name: "remove",
    source: include_str!("remove.lua"),
    when_full: true,
    acked: true,
};

/// Which removals are allowed.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fence<'a> {
    /// Only while `token` is the job's current lease (finish).
    Lease(&'a str),
    /// Whatever the job's state (delete, the compatible `/finish`).
    Any,
}

/// One removal as the script takes it: id, and the lease token it must
/// hold (None: any state).
#[derive(Debug)]
pub(crate) struct Removal {
    id: String,
    token: Option<String>,
}

/// What a removal did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Removed {
    /// Done, Missing or Stale.
    pub status: Status,
    /// The job's topic (empty when Missing).
    pub topic: String,
}

/// Finishes and deletes, batched while Redis is busy
/// ([`super::coalesce`]).
pub(crate) struct Removes;

impl Batch for Removes {
    type Item = Removal;
    type Out = Removed;
    const MAX_ITEMS: usize = 256;
    const MAX_BYTES: usize = 1 << 20;

    fn bytes(r: &Removal) -> usize {
        r.id.len() + r.token.as_ref().map_or(0, String::len)
    }
}

impl PerJob for Removes {
    const SCRIPT: &'static Script = &SCRIPT;

    fn args(r: &Removal, cmd: &mut Call) {
        cmd.arg(&r.id);
        match &r.token {
            Some(token) => cmd.arg("lease").arg(token),
            None => cmd.arg("any").arg(""),
        };
    }

    fn decode(f: &mut Fields) -> Result<Removed> {
        let status = f.status()?;
        Ok(Removed {
            status,
            topic: f.string()?,
        })
    }
}

impl Store {
    /// Finishes or deletes one job; removals that arrive together go to
    /// Redis as one call.
    pub(crate) async fn remove(self: &Arc<Self>, id: &str, fence: Fence<'_>) -> Result<Removed> {
        let removal = Removal {
            id: id.to_owned(),
            token: match fence {
                Fence::Lease(t) => Some(t.to_owned()),
                Fence::Any => None,
            },
        };
        self.removes
            .submit(self, self.part_of(id), removal, self.timeout())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::sample;

    #[test]
    fn decodes_status_and_topic() {
        let mut f = Fields::parse(
            "remove",
            sample(&["0", "0", "order", "2", "order", "1", ""]),
        )
        .unwrap()
        .1;
        let mut d = || {
            let r = Removes::decode(&mut f).unwrap();
            (r.status, r.topic)
        };
        assert_eq!(d(), (Status::Done, "order".into()));
        assert_eq!(d(), (Status::Stale, "order".into()));
        assert_eq!(d(), (Status::Missing, String::new()));
    }
}
