//! Remove: finish (with a lease token) or delete (from any state) a job.
//! The script is `remove.lua`.

use std::sync::Arc;

use redis::Cmd;

use super::batch::PerJob;
use super::coalesce::Batch;
use super::reply::Fields;
use super::{Script, Status, Store};
use crate::error::Result;

pub const SCRIPT: Script = Script {
    name: "remove",
    source: include_str!("remove.lua"),
    when_full: true,
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

/// Finishes and deletes, batched while Redis is busy
/// ([`super::coalesce`]).
pub(crate) struct Removes;

impl Batch for Removes {
    type Item = Removal;
    /// The status (Done, Missing or Stale) and the job's topic.
    type Out = (Status, String);
    const MAX_ITEMS: usize = 256;
    const MAX_BYTES: usize = 1 << 20;

    fn bytes(r: &Removal) -> usize {
        r.id.len() + r.token.as_ref().map_or(0, String::len)
    }
}

impl PerJob for Removes {
    const SCRIPT: &'static Script = &SCRIPT;

    fn args(r: &Removal, cmd: &mut Cmd) {
        cmd.arg(&r.id);
        match &r.token {
            Some(token) => cmd.arg("lease").arg(token),
            None => cmd.arg("any").arg(""),
        };
    }

    fn decode(f: &mut Fields) -> Result<(Status, String)> {
        let status = f.status()?;
        Ok((status, f.string()?))
    }
}

impl Store {
    /// Finishes or deletes one job; removals that arrive together go to
    /// Redis as one call.
    pub(crate) async fn remove(
        self: &Arc<Self>,
        id: &str,
        fence: Fence<'_>,
    ) -> Result<(Status, String)> {
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
        let mut d = || Removes::decode(&mut f).unwrap();
        assert_eq!(d(), (Status::Done, "order".into()));
        assert_eq!(d(), (Status::Stale, "order".into()));
        assert_eq!(d(), (Status::Missing, String::new()));
    }
}
