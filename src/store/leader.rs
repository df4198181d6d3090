//! The leader term of a partition: which instance acts on its expired
//! events and runs its sweep. The script is `leader.lua`; the loop that
//! keeps it is `crate::loops::leader`.

use std::time::Duration;

use super::script::script;
use super::Status;
use crate::error::{Error, Result};
use crate::redis::Fields;

script! {
    /// Takes or extends a partition's leader term for `length` as
    /// instance `id`; `length` zero gives it up if `id` holds it. One key
    /// read and at most one written: bounded. It runs when Redis is full:
    /// due jobs still fall due then.
    Leader = "leader", when_full: true, acked: false, late_unknown: true,
        (id: &'a str, length: Duration => length.as_millis() as u64) -> Term = decode;
}

/// What a term call found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Term {
    /// The caller holds it, for this long (what it asked for, or less:
    /// a long term ends by the schedule's earliest due time); and, when
    /// the script read the schedule (a long term asked for) and it holds a
    /// job, ms from the call to its earliest due time (0 or less: due).
    Held(Duration, Option<i64>),
    /// Another instance does, for this much longer (zero: nobody).
    Other(Duration),
}

/// The reply: held or not, the time left, and (held) the head's.
fn decode((status, mut f): (Status, Fields)) -> Result<Term> {
    if status != Status::Done {
        return Err(Error::protocol("leader", format!("status {status:?}")));
    }
    let held = f.int()? == 1;
    let ms = Duration::from_millis(f.int()?.max(0) as u64);
    Ok(if held {
        let head = if f.left() > 0 { Some(f.int()?) } else { None };
        Term::Held(ms, head)
    } else {
        Term::Other(ms)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_held_and_the_holders_time_left() {
        let d = |r: &[&str]| decode(Fields::parse("leader", sample(r)).unwrap());
        assert_eq!(
            d(&["0", "1", "2000"]).unwrap(),
            Term::Held(Duration::from_millis(2000), None)
        );
        assert_eq!(
            d(&["0", "1", "60000", "-3"]).unwrap(),
            Term::Held(Duration::from_millis(60000), Some(-3))
        );
        assert_eq!(
            d(&["0", "0", "1500"]).unwrap(),
            Term::Other(Duration::from_millis(1500))
        );
        assert!(d(&["0", "1"]).is_err());
    }
}
