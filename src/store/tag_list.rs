//! A page of a tag's jobs in one partition. The script is `tag_list.lua`;
//! paging over partitions is [`crate::Queue::tag_jobs`]'s.

use super::{Script, Status, Store};
use crate::error::Result;
use crate::redis::Fields;

pub const SCRIPT: Script = Script {
    name: "tag_list",
    source: include_str!("tag_list.lua"),
    when_full: true,
    acked: false,
    late_unknown: false,
};

/// One partition's page of a tag's index.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct TagPage {
    /// The last id looked at; None when the partition's index ended.
    pub last: Option<String>,
    /// Ids of jobs listed (list), or left alone with their state (cancel,
    /// reschedule).
    pub ids: Vec<String>,
    pub skipped: Vec<(String, String)>,
    /// Jobs cancelled or moved.
    pub changed: u64,
    /// A moved job is now the earliest (sweeps must re-arm).
    pub new_head: bool,
}

pub(crate) fn last(f: &mut Fields) -> Result<Option<String>> {
    let last = f.string()?;
    Ok((!last.is_empty()).then_some(last))
}

pub(crate) fn skipped(f: &mut Fields) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    while f.left() >= 2 {
        out.push((f.string()?, f.string()?));
    }
    Ok(out)
}

fn decode((_, mut f): (Status, Fields)) -> Result<TagPage> {
    let last = last(&mut f)?;
    let mut ids = Vec::new();
    while f.left() > 0 {
        ids.push(f.string()?);
    }
    Ok(TagPage {
        last,
        ids,
        ..TagPage::default()
    })
}

impl Store {
    /// Up to `limit` entries of `tag`'s index in partition `part`, after
    /// id `after` ("" from the start).
    pub(crate) async fn tag_list(
        &self,
        part: usize,
        tag: &str,
        after: &str,
        limit: usize,
    ) -> Result<TagPage> {
        let mut cmd = self.script(&SCRIPT, part);
        cmd.arg(tag).arg(after).arg(limit);
        decode(self.send(cmd).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_the_cursor_and_ids() {
        let d = |r: &[&str]| decode(Fields::parse("tag_list", sample(r)).unwrap()).unwrap();
        let p = d(&["0", "b", "a", "b"]);
        assert_eq!((p.last.as_deref(), p.ids.len()), (Some("b"), 2));
        assert_eq!(d(&["0", ""]).last, None);
    }
}
