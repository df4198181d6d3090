//! A page of a tag's index in one partition: listed (`tag_list.lua`) or
//! cancelled (`tag_cancel.lua`), the same arguments and a reply of one
//! shape, so one table ([`script!`]). Moving a page (`tag_reschedule.rs`)
//! reads its reply with the same helpers; paging over partitions is
//! [`crate::Queue::tag_jobs`]'s.

use super::script::script;
use super::Status;
use crate::error::Result;
use crate::redis::Fields;

script! {
    /// Up to `limit` entries of `tag`'s index after id `after` ("" from
    /// the start): their ids.
    TagList = "tag_list", when_full: true, acked: false, late_unknown: false,
        (tag: &'a str, after: &'a str, limit: usize) -> TagPage = listed;
    /// Deletes the jobs not handed out among up to `limit` entries of
    /// `tag`'s index after id `after`: how many, and those left alone with
    /// their state.
    TagCancel = "tag_cancel", when_full: true, acked: true, late_unknown: true,
        (tag: &'a str, after: &'a str, limit: usize) -> TagPage = cancelled;
}

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

/// tag_list's reply: the cursor, then the ids.
fn listed((_, mut f): (Status, Fields)) -> Result<TagPage> {
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

/// tag_cancel's reply: the cursor, how many were cancelled, then each job
/// left alone with its state.
fn cancelled((_, mut f): (Status, Fields)) -> Result<TagPage> {
    let last = last(&mut f)?;
    let changed = f.int()?.max(0) as u64;
    Ok(TagPage {
        last,
        changed,
        skipped: skipped(&mut f)?,
        ..TagPage::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_the_cursor_and_ids() {
        let d = |r: &[&str]| listed(Fields::parse("tag_list", sample(r)).unwrap()).unwrap();
        let p = d(&["0", "b", "a", "b"]);
        assert_eq!((p.last.as_deref(), p.ids.len()), (Some("b"), 2));
        assert_eq!(d(&["0", ""]).last, None);
    }

    #[test]
    fn decodes_changes_and_skipped_jobs() {
        let d = |r: &[&str]| cancelled(Fields::parse("tag_cancel", sample(r)).unwrap()).unwrap();
        let p = d(&["0", "", "3", "x", "reserved"]);
        assert_eq!((p.last, p.changed), (None, 3));
        assert_eq!(p.skipped, vec![("x".to_owned(), "reserved".to_owned())]);
    }
}
