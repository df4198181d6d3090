//! Remove: finish (with a lease token) or delete (from any state) a job.
//! The script is `remove.lua`.

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

/// The status (Done, Missing or Stale) and the job's topic.
fn decode((status, mut f): (Status, Fields)) -> Result<(Status, String)> {
    Ok((status, f.string()?))
}

impl Store {
    pub(crate) async fn remove(&self, id: &str, fence: Fence<'_>) -> Result<(Status, String)> {
        let mut cmd = self.fcall(&SCRIPT, self.part(id));
        cmd.arg(id);
        match fence {
            Fence::Lease(token) => cmd.arg("lease").arg(token),
            Fence::Any => cmd.arg("any"),
        };
        let mut replies = self
            .run_acked("remove", self.part_of(id), vec![cmd], self.timeout())
            .await?;
        decode(replies.remove(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::sample;

    #[test]
    fn decodes_status_and_topic() {
        let d = |r: &[&str]| decode(Fields::parse("remove", sample(r)).unwrap()).unwrap();
        assert_eq!(d(&["0", "order"]), (Status::Done, "order".into()));
        assert_eq!(d(&["2", "order"]), (Status::Stale, "order".into()));
        assert_eq!(d(&["1", ""]), (Status::Missing, String::new()));
    }
}
