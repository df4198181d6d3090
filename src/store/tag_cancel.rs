//! Cancel a page of a tag's jobs in one partition. The script is
//! `tag_cancel.lua`.

use super::tag_list::{last, skipped, TagPage};
use super::{Script, Status, Store};
use crate::error::Result;
use crate::redis::Fields;

pub const SCRIPT: Script = Script {
    name: "tag_cancel",
    source: include_str!("tag_cancel.lua"),
    when_full: true,
    acked: true,
    late_unknown: true,
};

fn decode((_, mut f): (Status, Fields)) -> Result<TagPage> {
    let last = last(&mut f)?;
    let changed = f.int()?.max(0) as u64;
    Ok(TagPage {
        last,
        changed,
        skipped: skipped(&mut f)?,
        ..TagPage::default()
    })
}

impl Store {
    /// Deletes the jobs not handed out among up to `limit` entries of
    /// `tag`'s index in partition `part`, after id `after`.
    pub(crate) async fn tag_cancel(
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
    fn decodes_changes_and_skipped_jobs() {
        let d = |r: &[&str]| decode(Fields::parse("tag_cancel", sample(r)).unwrap()).unwrap();
        let p = d(&["0", "", "3", "x", "reserved"]);
        assert_eq!((p.last, p.changed), (None, 3));
        assert_eq!(p.skipped, vec![("x".to_owned(), "reserved".to_owned())]);
    }
}
