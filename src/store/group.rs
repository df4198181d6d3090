//! Groups: a group's settings and figures, and a page of a topic's groups
//! (`group.lua`). A group lives whole in its home partition
//! ([`Store::group_home`]): a group's calls go there, a topic's listing and
//! gauges read every partition.
//!
//! `group.lua` has three modes, one [`Script`] type each ([`GroupGet`],
//! [`GroupSet`], [`GroupPages`]), sharing its one definition: the mode is
//! the call's first argument.

use super::call::Call;
use super::script::Script;
use super::{layout, ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::group::{Group, GroupChange, GroupPage};
use crate::rate::RateLimit;
use crate::redis::Fields;
use std::collections::BTreeMap;

/// `group.lua`, whichever the mode.
const DEF: &ScriptDef = &ScriptDef {
    name: "group",
    source: include_str!("group.lua"),
    when_full: true,
    acked: false,
    late_unknown: true,
};

/// A group's figures and settings (all zero for a group never seen). The
/// reply does not name the group: the [`Group`] comes with an empty name,
/// which the caller fills.
pub(crate) struct GroupGet;

impl Script for GroupGet {
    const DEF: &'static ScriptDef = DEF;
    /// The topic and the group.
    type Input<'a> = (&'a str, &'a str);
    type Output = Group;

    fn args((topic, group): (&str, &str), call: &mut Call) {
        call.arg("get").arg(topic).arg(group);
    }

    fn decode(reply: (Status, Fields)) -> Result<Group> {
        decode_one(reply)
    }
}

/// Changes some of a group's settings (what the change leaves None stays);
/// its figures after, with an empty name as [`GroupGet`]'s.
pub(crate) struct GroupSet;

impl Script for GroupSet {
    const DEF: &'static ScriptDef = DEF;
    /// The topic, the group and the change.
    type Input<'a> = (&'a str, &'a str, GroupChange);
    type Output = Group;

    fn args((topic, group, change): (&str, &str, GroupChange), call: &mut Call) {
        call.arg("set").arg(topic).arg(group);
        match change.concurrency {
            None => call.arg("-"),
            Some(None) => call.arg(""),
            Some(Some(n)) => call.arg(n),
        };
        match change.paused {
            None => call.arg("-"),
            Some(p) => call.arg(if p { "1" } else { "0" }),
        };
        match change.rate {
            None => call.arg("-").arg(0),
            Some(None) => call.arg("").arg(0),
            Some(Some(r)) => call.arg(r.per_second).arg(r.burst),
        };
    }

    fn decode(reply: (Status, Fields)) -> Result<Group> {
        decode_one(reply)
    }
}

/// One partition's page of a topic's groups after a name ("" from the
/// start), at most `limit`, with their figures.
pub(crate) struct GroupPages;

impl Script for GroupPages {
    const DEF: &'static ScriptDef = DEF;
    /// The topic, the last group of the previous page, the most groups.
    type Input<'a> = (&'a str, &'a str, usize);
    type Output = GroupPage;

    fn args((topic, after, limit): (&str, &str, usize), call: &mut Call) {
        call.arg("list").arg(topic).arg(after).arg(limit);
    }

    fn decode(reply: (Status, Fields)) -> Result<GroupPage> {
        decode_page(reply)
    }
}

fn figures(group: String, f: &mut Fields) -> Result<Group> {
    let count = |v: i64| v.max(0) as u64;
    Ok(Group {
        group,
        ready: count(f.int()?),
        reserved: count(f.int()?),
        held: count(f.int()?),
        concurrency: u32::try_from(f.int()?).ok(),
        paused: f.int()? == 1,
        oldest_ready_ms: u64::try_from(f.int()?).ok(),
        rate: {
            let per_second: f64 = f
                .string()?
                .parse()
                .map_err(|_| Error::protocol("group", "a rate that is no number".into()))?;
            let burst = f.int()?;
            (per_second > 0.0).then_some(RateLimit {
                per_second,
                burst: burst.clamp(1, u32::MAX.into()) as u32,
            })
        },
    })
}

fn decode_one((status, mut f): (Status, Fields)) -> Result<Group> {
    if status != Status::Done {
        return Err(Error::protocol("group", format!("status {status:?}")));
    }
    figures(String::new(), &mut f)
}

fn decode_page((status, mut f): (Status, Fields)) -> Result<GroupPage> {
    if status != Status::Done {
        return Err(Error::protocol("groups", format!("status {status:?}")));
    }
    let last = f.string()?;
    let mut groups = Vec::new();
    while f.left() > 0 {
        let name = f.string()?;
        groups.push(figures(name, &mut f)?);
    }
    Ok(GroupPage {
        groups,
        next: (!last.is_empty()).then_some(last),
    })
}

impl Store {
    /// A group's figures and settings (all zero for a group never seen).
    pub(crate) async fn group(&self, topic: &str, group: &str) -> Result<Group> {
        let home = self.group_home(group);
        let figures = self.run::<GroupGet>(home, (topic, group)).await?;
        Ok(Group {
            group: group.to_owned(),
            ..figures
        })
    }

    /// Sets a group's settings; returns its figures after.
    pub(crate) async fn set_group(
        &self,
        topic: &str,
        group: &str,
        concurrency: Option<Option<u32>>,
        paused: Option<bool>,
        rate: Option<Option<RateLimit>>,
    ) -> Result<Group> {
        let change = GroupChange {
            concurrency,
            paused,
            rate,
        };
        let home = self.group_home(group);
        let figures = self.run::<GroupSet>(home, (topic, group, change)).await?;
        Ok(Group {
            group: group.to_owned(),
            ..figures
        })
    }

    /// Per topic of `topics` that has groups: how many, how many in turn,
    /// how many waiting for a token, over every partition. Three reads a
    /// topic and partition, pipelined per partition.
    pub(crate) async fn group_gauges(
        &self,
        topics: &[String],
    ) -> Result<BTreeMap<String, crate::figures::GroupGauges>> {
        let mut out = BTreeMap::new();
        if topics.is_empty() {
            return Ok(out);
        }
        for part in self.parts() {
            let mut pipe = redis::pipe();
            for t in topics {
                pipe.cmd("ZCARD")
                    .arg(part.groups_of(layout::kind::GROUPS, t))
                    .cmd("LLEN")
                    .arg(part.groups_of(layout::kind::GROUP_TURNS, t))
                    .cmd("ZCARD")
                    .arg(part.groups_of(layout::kind::GROUP_WAIT, t));
            }
            let got: Vec<u64> = self
                .redis
                .call("group gauges", pipe.query_async(&mut self.redis.conn()))
                .await?;
            for (t, n) in topics.iter().zip(got.chunks(3)) {
                if n.iter().any(|v| *v > 0) {
                    let g: &mut crate::figures::GroupGauges = out.entry(t.clone()).or_default();
                    g.known += n[0];
                    g.in_turn += n[1];
                    g.waiting_token += n[2];
                }
            }
        }
        Ok(out)
    }

    /// A page of `topic`'s groups after `after` ("" from the start): a page
    /// from every partition (each group is whole in one), merged by name.
    pub(crate) async fn groups(&self, topic: &str, after: &str, limit: usize) -> Result<GroupPage> {
        let mut all = Vec::new();
        let mut more = false;
        for part in 0..self.parts().len() {
            let page = self.run::<GroupPages>(part, (topic, after, limit)).await?;
            more |= page.next.is_some();
            all.extend(page.groups);
        }
        all.sort_by(|a, b| a.group.cmp(&b.group));
        more |= all.len() > limit;
        all.truncate(limit);
        let next = if more {
            all.last().map(|g| g.group.clone())
        } else {
            None
        };
        Ok(GroupPage { groups: all, next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    /// Each mode writes the arguments group.lua reads (its header).
    #[test]
    fn each_mode_writes_its_arguments() {
        let args = |f: &dyn Fn(&mut Call)| Call::written(DEF, f);
        assert_eq!(args(&|c| GroupGet::args(("t", "g"), c)), ["get", "t", "g"]);
        let change = GroupChange {
            concurrency: Some(None),
            paused: Some(true),
            rate: Some(Some(RateLimit {
                per_second: 2.5,
                burst: 3,
            })),
        };
        assert_eq!(
            args(&|c| GroupSet::args(("t", "g", change), c)),
            ["set", "t", "g", "", "1", "2.5", "3"]
        );
        assert_eq!(
            args(&|c| GroupSet::args(("t", "g", GroupChange::default()), c)),
            ["set", "t", "g", "-", "-", "-", "0"]
        );
        assert_eq!(
            args(&|c| GroupPages::args(("t", "b", 50), c)),
            ["list", "t", "b", "50"]
        );
    }

    #[test]
    fn decodes_figures_and_pages() {
        let one = |r: &[&str]| decode_one(Fields::parse("group", sample(r)).unwrap());
        let g = one(&["0", "5", "2", "5", "2", "1", "70", "2.5", "3"]).unwrap();
        assert_eq!(g.oldest_ready_ms, Some(70));
        assert_eq!(
            g.rate,
            Some(RateLimit {
                per_second: 2.5,
                burst: 3
            })
        );
        assert_eq!((g.ready, g.reserved, g.held), (5, 2, 5));
        assert_eq!((g.concurrency, g.paused), (Some(2), true));
        assert_eq!(
            one(&["0", "0", "0", "0", "-1", "0", "-1", "-1", "0"])
                .unwrap()
                .concurrency,
            None
        );
        assert!(one(&["0", "1"]).is_err());
        let page = |r: &[&str]| decode_page(Fields::parse("groups", sample(r)).unwrap());
        let p = page(&[
            "0", "b", "a", "1", "0", "0", "-1", "0", "5", "-1", "0", "b", "0", "1", "0", "3", "0",
            "-1", "-1", "0",
        ])
        .unwrap();
        assert_eq!(p.next.as_deref(), Some("b"));
        assert_eq!(p.groups.len(), 2);
        assert_eq!(p.groups[1].reserved, 1);
        assert_eq!(
            page(&["0", ""]).unwrap(),
            GroupPage {
                groups: vec![],
                next: None
            }
        );
    }
}
