//! Listing jobs a page at a time: `list.lua` over the schedule (delayed and
//! reserved jobs) or a dead set, and the ready lists.
//! Every page costs Redis time in proportion to the page (and a bounded
//! look-ahead), never to the queue.
//!
//! `list.lua` has a mode per kind of page, one [`Script`] type each
//! ([`ListSorted`], [`NextDues`], [`ListReady`], [`ListGroupLines`]),
//! sharing its one definition: the mode is the call's first argument.

use super::call::Call;
use super::script::Script;
use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::redis::Fields;

mod cursor;

pub use cursor::Cursor;

/// `list.lua`, whichever the mode.
const DEF: &ScriptDef = &ScriptDef {
    name: "list",
    source: include_str!("list.lua"),
    when_full: true,
    acked: false,
    late_unknown: false,
};

/// Most entries one call looks at per partition, whatever it finds.
pub const SCAN_CAP: usize = 2000;

/// The level after every priority: the topic's groups (lib/groups.lua).
const GROUPS_LEVEL: u8 = crate::job::MAX_PRIORITY + 1;

/// What to list from a sorted set.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Sorted<'a> {
    /// Jobs in the schedule in `state` ("delayed" or "reserved"), of one
    /// topic or all.
    Schedule {
        topic: Option<&'a str>,
        state: &'static str,
    },
    Dead {
        topic: &'a str,
    },
    /// A topic's kept records of finished jobs, newest first.
    Finished {
        topic: &'a str,
    },
}

/// A page: ids with their scores (ms), and where the next one starts.
#[derive(Debug, Default)]
pub(crate) struct Page {
    pub ids: Vec<(String, i64)>,
    pub next: Option<Cursor>,
}

/// [`ListSorted`]'s reply.
pub(crate) struct PartPage {
    exhausted: bool,
    last: (f64, String),
    found: Vec<(f64, String, String)>,
}

/// One partition's page of a sorted set ([`Sorted`]) after a cursor's
/// score and id ("-inf" and "" from the start): at most `limit` ids, and
/// at most [`SCAN_CAP`] entries looked at.
pub(crate) struct ListSorted;

impl Script for ListSorted {
    const DEF: &'static ScriptDef = DEF;
    /// What to list, the cursor's score and id, the most ids.
    type Input<'a> = (Sorted<'a>, &'a str, &'a str, usize);
    type Output = PartPage;

    fn args((what, score, id, limit): Self::Input<'_>, call: &mut Call) {
        match what {
            Sorted::Schedule { topic, state } => {
                call.arg("schedule").arg(topic.unwrap_or("")).arg(state)
            }
            Sorted::Dead { topic } => call.arg("dead-letters").arg(topic).arg(""),
            Sorted::Finished { topic } => call
                .arg("history")
                .arg(topic)
                .arg(crate::JobState::Finished.as_str()),
        };
        call.arg(score).arg(id).arg(limit).arg(SCAN_CAP);
    }

    fn decode(reply: (Status, Fields)) -> Result<PartPage> {
        decode(reply)
    }
}

/// Each topic's earliest due time in one partition, in the order given:
/// -1 none delayed, -2 a topic not known yet (see list.lua's "next-dues").
pub(crate) struct NextDues;

impl Script for NextDues {
    const DEF: &'static ScriptDef = DEF;
    type Input<'a> = &'a [String];
    type Output = Vec<i64>;

    fn args(topics: &[String], call: &mut Call) {
        call.arg("next-dues");
        for t in topics {
            call.arg(t);
        }
    }

    fn decode((status, mut f): (Status, Fields)) -> Result<Vec<i64>> {
        if status != Status::Done {
            return Err(Error::protocol("heads", format!("status {status:?}")));
        }
        let mut dues = Vec::with_capacity(f.left());
        while f.left() > 0 {
            dues.push(f.int()?);
        }
        Ok(dues)
    }
}

/// A page of one priority level's ready list in one partition, after the
/// cursor's job (`index` from the push end, "" from the front): at most
/// `want` ids. Costs the page and a look around the cursor's job of at
/// most 2 * [`SCAN_CAP`] entries, and one look at the priority levels.
pub(crate) struct ListReady;

/// [`ListReady`]'s reply.
pub(crate) struct ReadyPart {
    /// Where the last id is, from the push end.
    from: usize,
    /// The next level with jobs after this one (-1: none).
    next_level: i64,
    ids: Vec<String>,
}

impl Script for ListReady {
    const DEF: &'static ScriptDef = DEF;
    /// The topic, the cursor's index and id, the most ids, the level.
    type Input<'a> = (&'a str, usize, &'a str, usize, u8);
    type Output = ReadyPart;

    fn args((topic, index, id, want, level): Self::Input<'_>, call: &mut Call) {
        call.arg("ready-list")
            .arg(topic)
            .arg(index)
            .arg(id)
            .arg(want)
            .arg(SCAN_CAP)
            .arg(level);
    }

    fn decode((status, mut f): (Status, Fields)) -> Result<ReadyPart> {
        if status != Status::Done {
            return Err(Error::protocol("list ready", format!("status {status:?}")));
        }
        let from = f.int()?.max(0) as usize;
        let next_level = f.int()?;
        let mut ids = Vec::with_capacity(f.left());
        while f.left() > 0 {
            ids.push(f.string()?);
        }
        Ok(ReadyPart {
            from,
            next_level,
            ids,
        })
    }
}

/// A page across a topic's groups' lines in one partition (the level
/// after every priority), after the position "<group>\n<last id>" ("" from
/// the first group): at most `want` ids, at most [`SCAN_CAP`] groups looked
/// at (a short page then carries its position on).
pub(crate) struct ListGroupLines;

/// [`ListGroupLines`]'s reply.
pub(crate) struct LinesPart {
    /// False: the last group was reached.
    more: bool,
    /// Where the next page starts.
    pos: String,
    ids: Vec<String>,
}

impl Script for ListGroupLines {
    const DEF: &'static ScriptDef = DEF;
    /// The topic, the position, the most ids.
    type Input<'a> = (&'a str, &'a str, usize);
    type Output = LinesPart;

    fn args((topic, pos, want): Self::Input<'_>, call: &mut Call) {
        call.arg("ready-list").arg(topic).arg(0).arg(pos).arg(want);
        call.arg(SCAN_CAP).arg(GROUPS_LEVEL);
    }

    fn decode((status, mut f): (Status, Fields)) -> Result<LinesPart> {
        if status != Status::Done {
            return Err(Error::protocol("list ready", format!("status {status:?}")));
        }
        let more = f.int()? == 1;
        let pos = f.string()?;
        let mut ids = Vec::with_capacity(f.left());
        while f.left() > 0 {
            ids.push(f.string()?);
        }
        Ok(LinesPart { more, pos, ids })
    }
}

fn decode((status, mut f): (Status, Fields)) -> Result<PartPage> {
    if status != Status::Done {
        return Err(Error::protocol("list", format!("status {status:?}")));
    }
    let exhausted = f.int()? == 1;
    let score = f.string()?;
    let last = (score.parse().unwrap_or(f64::NEG_INFINITY), f.string()?);
    let mut found = Vec::new();
    while f.left() > 0 {
        let id = f.string()?;
        let score = f.string()?;
        found.push((score.parse().unwrap_or(0.0), score, id));
    }
    Ok(PartPage {
        exhausted,
        last,
        found,
    })
}

fn before_or_at(a: (f64, &str), b: (f64, &str)) -> bool {
    a.0 < b.0 || (a.0 == b.0 && a.1 <= b.1)
}

impl Store {
    /// A page of a sorted set, over every partition, in score order.
    pub(crate) async fn list_sorted(
        &self,
        what: Sorted<'_>,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let (score, id) = match after {
            Some(Cursor::After { score, id }) => (score.to_string(), id.clone()),
            Some(Cursor::At { .. }) => {
                return Err(Error::Invalid("that cursor belongs to ready lists".into()))
            }
            None => ("-inf".to_owned(), String::new()),
        };
        let (score, id) = (score.as_str(), id.as_str());
        let calls = (0..self.parts().len())
            .map(|part| self.run::<ListSorted>(part, (what, score, id, limit)));
        let pages: Vec<PartPage> = futures::future::join_all(calls)
            .await
            .into_iter()
            .collect::<Result<_>>()?;
        // Entries past the first partition that stopped early may still
        // have company in it: the page ends there, and the next begins
        // after it.
        let mut stop: Option<(f64, String)> = None;
        for p in pages.iter().filter(|p| !p.exhausted) {
            if stop
                .as_ref()
                .is_none_or(|s| before_or_at((p.last.0, &p.last.1), (s.0, &s.1)))
            {
                stop = Some(p.last.clone());
            }
        }
        let mut all: Vec<(f64, String, String)> = pages
            .into_iter()
            .flat_map(|p| p.found)
            .filter(|(s, _, i)| {
                stop.as_ref()
                    .is_none_or(|st| before_or_at((*s, i), (st.0, &st.1)))
            })
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
        let next = if all.len() > limit {
            all.truncate(limit);
            let (score, _, id) = all.last().expect("not empty").clone();
            Some(Cursor::After {
                score: score as i64,
                id,
            })
        } else {
            // Scores are whole milliseconds.
            stop.map(|(score, id)| Cursor::After {
                score: score as i64,
                id,
            })
        };
        Ok(Page {
            ids: all.into_iter().map(|(s, _, id)| (id, s as i64)).collect(),
            next,
        })
    }

    /// Each of `topics`' earliest due time over every partition, from the
    /// heads of their topic schedules: O(log N) per topic and partition,
    /// 100 topics a call (500 held Redis 2-10 ms at 100,000 topics). A topic left out has none delayed, or is not
    /// known yet (see list.lua's "next-dues").
    pub(crate) async fn topic_heads(
        &self,
        topics: &[String],
    ) -> Result<std::collections::HashMap<String, i64>> {
        let mut out = std::collections::HashMap::new();
        let mut unknown = std::collections::HashSet::new();
        for chunk in topics.chunks(100) {
            for part in 0..self.parts().len() {
                let dues = self.run::<NextDues>(part, chunk).await?;
                if dues.len() != chunk.len() {
                    let got = format!("{} due times for {} topics", dues.len(), chunk.len());
                    return Err(Error::protocol("heads", got));
                }
                for (t, due) in chunk.iter().zip(dues) {
                    match due {
                        -2 => {
                            unknown.insert(t.clone());
                        }
                        due if due >= 0 => {
                            let d = out.entry(t.clone()).or_insert(due);
                            *d = (*d).min(due);
                        }
                        _ => {}
                    }
                }
            }
        }
        out.retain(|t, _| !unknown.contains(t));
        Ok(out)
    }

    /// A page of `topic`'s ready jobs, next to be handed out first,
    /// partition after partition.
    pub(crate) async fn list_ready(
        &self,
        topic: &str,
        at: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let (mut part, mut level, mut after) = match at {
            Some(Cursor::At {
                part,
                level,
                index,
                id,
            }) => (*part, *level, Some((*index, id.clone()))),
            Some(Cursor::After { .. }) => {
                return Err(Error::Invalid(
                    "that cursor does not belong to ready lists".into(),
                ))
            }
            None => (0, 0, None),
        };
        if part >= self.parts().len() {
            return Err(Error::Invalid(format!(
                "that cursor names partition {part}; this queue has {}",
                self.parts().len()
            )));
        }
        let mut ids = Vec::new();
        let mut next = None;
        while part < self.parts().len() && ids.len() < limit {
            let want = limit - ids.len();
            let (index, id) = after.take().unwrap_or((0, String::new()));
            if level == GROUPS_LEVEL {
                // Groups: a page across the topic's groups, at most
                // SCAN_CAP of them looked at a call (a short page then
                // carries its cursor on).
                let lines = self.run::<ListGroupLines>(part, (topic, &id, want)).await?;
                let (more, pos, got) = (lines.more, lines.pos, lines.ids.len());
                ids.extend(lines.ids.into_iter().map(|id| (id, 0)));
                if !more && got < want {
                    (part, level, next) = (part + 1, 0, None);
                    continue;
                }
                next = Some(Cursor::At {
                    part,
                    level,
                    index: 0,
                    id: pos,
                });
                break;
            }
            let input = (topic, index, id.as_str(), want, level);
            let ReadyPart {
                from,
                next_level,
                ids: got,
            } = self.run::<ListReady>(part, input).await?;
            if got.len() < want {
                // This level is done: the next one with jobs, or the next
                // partition.
                match u8::try_from(next_level) {
                    Ok(l) if l > level && l <= GROUPS_LEVEL => level = l,
                    _ => {
                        part += 1;
                        level = 0;
                    }
                }
                next = None;
            } else {
                next = got.last().map(|id| Cursor::At {
                    part,
                    level,
                    index: from,
                    id: id.clone(),
                });
            }
            ids.extend(got.into_iter().map(|id| (id, 0)));
        }
        // A page that ends within a partition ends with its cursor set.
        Ok(Page { ids, next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    /// Each mode writes the arguments list.lua reads (its header).
    #[test]
    fn each_mode_writes_its_arguments() {
        let args = |f: &dyn Fn(&mut Call)| Call::written(DEF, f);
        let dead = Sorted::Dead { topic: "t" };
        assert_eq!(
            args(&|c| ListSorted::args((dead, "-inf", "", 10), c)),
            ["dead-letters", "t", "", "-inf", "", "10", "2000"]
        );
        let delayed = Sorted::Schedule {
            topic: None,
            state: "delayed",
        };
        assert_eq!(
            args(&|c| ListSorted::args((delayed, "5", "a", 1), c)),
            ["schedule", "", "delayed", "5", "a", "1", "2000"]
        );
        let topics = ["a".to_owned(), "b".to_owned()];
        assert_eq!(
            args(&|c| NextDues::args(&topics, c)),
            ["next-dues", "a", "b"]
        );
        assert_eq!(
            args(&|c| ListReady::args(("t", 4, "x", 9, 2), c)),
            ["ready-list", "t", "4", "x", "9", "2000", "2"]
        );
        let level = GROUPS_LEVEL.to_string();
        assert_eq!(
            args(&|c| ListGroupLines::args(("t", "g\nx", 9), c)),
            ["ready-list", "t", "0", "g\nx", "9", "2000", level.as_str()]
        );
    }

    #[test]
    fn decodes_each_modes_reply() {
        let parse = |r: &[&str]| Fields::parse("list", sample(r)).unwrap();
        assert_eq!(
            NextDues::decode(parse(&["0", "-2", "-1", "70"])).unwrap(),
            [-2, -1, 70]
        );
        let ready = ListReady::decode(parse(&["0", "7", "-1", "a", "b"])).unwrap();
        assert_eq!((ready.from, ready.next_level), (7, -1));
        assert_eq!(ready.ids, ["a", "b"]);
        let lines = ListGroupLines::decode(parse(&["0", "1", "g\nb", "a", "b"])).unwrap();
        assert!(lines.more);
        assert_eq!((lines.pos.as_str(), lines.ids.len()), ("g\nb", 2));
        let page = ListSorted::decode(parse(&["0", "1", "5", "x", "a", "3"])).unwrap();
        assert!(page.exhausted);
        assert_eq!(page.found.len(), 1);
        assert!(ListReady::decode(parse(&["1"])).is_err());
    }
}
