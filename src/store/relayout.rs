//! The layout switch: `{p}:layout` says which layout writers write (see
//! `super::layout::LAYOUT_READ`), read and set here; going back to layout 1
//! rewrites every pieced body whole with `relayout.lua`, a batch per call.

use super::layout::Keys;
use super::script::{script, Script};
use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::redis::Fields;

script! {
    /// One batch ([`BATCH`] keys SCAN looks at) of a partition's walk back
    /// to layout 1, from `cursor` ("0" to begin): the next cursor ("0":
    /// done) and how many bodies it wrote whole.
    Relayout = "relayout", when_full: false, acked: false, late_unknown: true,
        (cursor: &'a str => (cursor, BATCH)) -> (String, u64) = decode;
    /// The leader's compare-and-set of a partition's layout flag: sets it
    /// to `to` only if it is still `from` (what the caller read): false,
    /// nothing written, if an operator's hold (or another leader) changed
    /// it in between.
    LayoutSwap = "layout_swap", when_full: false, acked: false, late_unknown: true,
        (
            from: Flag => from.value().unwrap_or_default(),
            to: Flag => to.value().unwrap_or_default(),
        ) -> bool = swapped;
}

/// layout_swap's definition, for the test suite's direct calls.
pub const SWAP: &ScriptDef = <LayoutSwap as Script>::DEF;

/// Keys SCAN looks at per call.
pub const BATCH: usize = 500;

/// A partition's layout flag as stored: absent is layout 1, not held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flag {
    /// The layout writers write.
    pub layout: u8,
    /// Set by the operator (`delayq layout --hold`): the upkeep leaves it.
    pub held: bool,
}

impl Flag {
    const HELD: &'static str = " held";

    /// The flag's value: leading digits (as lib/body.lua reads them), and
    /// " held" after them when held. Anything else reads as layout 1.
    pub fn parse(v: Option<&str>) -> Flag {
        let v = v.unwrap_or("");
        let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
        Flag {
            layout: digits.parse().unwrap_or(1),
            held: v.ends_with(Self::HELD),
        }
    }

    /// What to store; None: delete the key (layout 1, not held).
    pub fn value(self) -> Option<String> {
        match (self.layout, self.held) {
            (1, false) => None,
            (n, false) => Some(n.to_string()),
            (n, true) => Some(format!("{n}{}", Self::HELD)),
        }
    }
}

/// The layout flag of each of a queue's `partitions` (for `delayq doctor`,
/// which reads them over a plain connection).
pub fn layout_keys(prefix: &str, partitions: usize) -> Vec<String> {
    Keys::partitions(prefix, partitions)
        .iter()
        .map(Keys::layout)
        .collect()
}

/// relayout's reply: the next cursor and how many bodies it wrote whole.
fn decode((status, mut f): (Status, Fields)) -> Result<(String, u64)> {
    if status != Status::Done {
        return Err(Error::protocol("relayout", format!("status {status:?}")));
    }
    Ok((f.string()?, f.int()?.max(0) as u64))
}

/// layout_swap's reply: whether the flag was still `from` (and is now `to`).
fn swapped((status, mut f): (Status, Fields)) -> Result<bool> {
    if status != Status::Done {
        return Err(Error::protocol("layout_swap", format!("status {status:?}")));
    }
    Ok(f.int()? == 1)
}

impl Store {
    /// Every partition's layout flag, in partition order.
    pub(crate) async fn layout_flags(&self) -> Result<Vec<Flag>> {
        let reads = self.parts().iter().map(|part: &Keys| async move {
            let mut cmd = redis::cmd("GET");
            cmd.arg(part.layout());
            let v: Option<String> = self
                .redis
                .call("layout", cmd.query_async(&mut self.redis.conn()))
                .await?;
            Ok::<_, Error>(Flag::parse(v.as_deref()))
        });
        futures::future::join_all(reads).await.into_iter().collect()
    }

    /// Sets partition `part`'s layout flag.
    pub(crate) async fn set_layout_flag(&self, part: usize, flag: Flag) -> Result<()> {
        let key = self.parts()[part].layout();
        let cmd = match flag.value() {
            Some(v) => {
                let mut c = redis::cmd("SET");
                c.arg(key).arg(v);
                c
            }
            None => {
                let mut c = redis::cmd("DEL");
                c.arg(key);
                c
            }
        };
        let _: redis::Value = self
            .redis
            .call("layout", cmd.query_async(&mut self.redis.conn()))
            .await?;
        Ok(())
    }

    /// Marks partition `part`'s delayed jobs as possibly out of the shared
    /// schedule (`{p}:indexed` field `out`, see index.lua): the next
    /// backfill call below layout 3 puts them back. Written before a flag
    /// of 3, so that no job leaves the schedule unmarked.
    pub(crate) async fn mark_split(&self, part: usize) -> Result<()> {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.parts()[part].indexed()).arg("out").arg("1");
        let _: redis::Value = self
            .redis
            .call("layout", cmd.query_async(&mut self.redis.conn()))
            .await?;
        Ok(())
    }

    /// Partition `part`'s whole walk back to layout 1, paced: after each
    /// call a pause three times as long as it took (at most 500 ms), so
    /// that it takes about a quarter of Redis's time. Returns how many
    /// bodies it wrote whole.
    pub(crate) async fn relayout_all(&self, part: usize) -> Result<u64> {
        let (mut cursor, mut rewritten) = ("0".to_owned(), 0);
        loop {
            let call = std::time::Instant::now();
            let (next, n) = self.run::<Relayout>(part, (cursor.as_str(),)).await?;
            rewritten += n;
            if next == "0" {
                return Ok(rewritten);
            }
            cursor = next;
            let pause = (call.elapsed() * 3).clamp(
                std::time::Duration::from_millis(1),
                std::time::Duration::from_millis(500),
            );
            tokio::time::sleep(pause).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_the_flag() {
        let f = |l, held| Flag { layout: l, held };
        assert_eq!(Flag::parse(None), f(1, false));
        assert_eq!(Flag::parse(Some("2")), f(2, false));
        assert_eq!(Flag::parse(Some("1 held")), f(1, true));
        assert_eq!(Flag::parse(Some("junk")), f(1, false));
        assert_eq!(f(1, false).value(), None);
        assert_eq!(f(2, false).value().as_deref(), Some("2"));
        assert_eq!(f(1, true).value().as_deref(), Some("1 held"));
    }
}
