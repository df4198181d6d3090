//! Move a page of a tag's jobs in one partition to a new due time. The
//! script is `tag_reschedule.lua`.

use super::script::script;
use super::tag_pages::{last, skipped, TagPage};
use super::Status;
use crate::error::Result;
use crate::redis::Fields;

script! {
    /// Moves the delayed and ready jobs among up to `limit` entries of
    /// `tag`'s index after id `after` (call it on each partition); with
    /// `check`, only finds whether every move is possible (an error if
    /// not) and changes nothing.
    TagReschedule = "tag_reschedule", when_full: false, acked: true, late_unknown: true,
        (
            tag: &'a str,
            after: &'a str,
            limit: usize,
            to: TagMove => match to {
                TagMove::Shift(ms) => (ms, -1),
                TagMove::At(ms) => (0, ms.max(0)),
            },
            check: bool => if check { "1" } else { "0" },
        ) -> TagPage = decode;
}

/// Where a tag's jobs go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagMove {
    /// Each job's own due time plus this many ms (may be negative).
    Shift(i64),
    /// This time (Unix ms).
    At(i64),
}

/// The reply: the cursor, how many moved, whether one is now the head,
/// then each job left alone with its state.
fn decode((_, mut f): (Status, Fields)) -> Result<TagPage> {
    let last = last(&mut f)?;
    let changed = f.int()?.max(0) as u64;
    let new_head = f.int()? == 1;
    Ok(TagPage {
        last,
        changed,
        new_head,
        skipped: skipped(&mut f)?,
        ..TagPage::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_moves_head_and_skipped_jobs() {
        let d = |r: &[&str]| decode(Fields::parse("tag_reschedule", sample(r)).unwrap()).unwrap();
        let p = d(&["0", "k", "2", "1", "x", "dead", "y", "reserved"]);
        assert_eq!(
            (p.last.as_deref(), p.changed, p.new_head),
            (Some("k"), 2, true)
        );
        assert_eq!(p.skipped.len(), 2);
    }
}
