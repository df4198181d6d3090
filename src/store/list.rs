//! Listing jobs a page at a time: `list.lua` over the schedule (delayed and
//! reserved jobs) or a dead set, and the ready lists.
//! Every page costs Redis time in proportion to the page (and a bounded
//! look-ahead), never to the queue.

use super::{ScriptDef, Status, Store};
use crate::error::{Error, Result};
use crate::redis::Fields;

pub const SCRIPT: ScriptDef = ScriptDef {
    name: "list",
    source: include_str!("list.lua"),
    when_full: true,
    acked: false,
    late_unknown: false,
};

/// Most entries one call looks at per partition, whatever it finds.
pub const SCAN_CAP: usize = 2000;

/// Where a page starts: after this (score, id), or, in ready lists, after
/// job `id` of partition `part`'s list of priority `level`, last seen
/// `index` entries from the end pushes add to (pops, at the other end, do
/// not move it).
#[derive(Clone, Debug, PartialEq)]
pub enum Cursor {
    After {
        score: i64,
        id: String,
    },
    At {
        part: usize,
        level: u8,
        index: usize,
        id: String,
    },
}

/// The level after every priority: the topic's groups (lib/groups.lua).
const GROUPS_LEVEL: u8 = crate::job::MAX_PRIORITY + 1;

/// Scores are Unix milliseconds: whole, never negative, exact in a double.
const MAX_SCORE: i64 = 1 << 53;
/// A Redis list holds fewer entries than this.
const MAX_INDEX: usize = u32::MAX as usize;

impl Cursor {
    /// An opaque, URL-safe text.
    pub fn encode(&self) -> String {
        let text = match self {
            Cursor::After { score, id } => format!("s\n{score}\n{id}"),
            // Priority 0 keeps the form cursors had before priorities.
            Cursor::At {
                part,
                level: 0,
                index,
                id,
            } => format!("r\n{part}\n{index}\n{id}"),
            Cursor::At {
                part,
                level,
                index,
                id,
            } => format!("p\n{part}\n{level}\n{index}\n{id}"),
        };
        hex::encode(text)
    }

    /// Reads a cursor, checking every part, so that a forged one is refused
    /// here and never reaches Redis.
    pub fn decode(text: &str) -> std::result::Result<Cursor, String> {
        let bad = |why: &str| format!("cursor {text:?} is not one this server gave: {why}");
        let raw = hex::decode(text).map_err(|_| bad("not hex"))?;
        let raw = String::from_utf8(raw).map_err(|_| bad("not UTF-8"))?;
        let number = |part: Option<&str>, max: u64, what: &str| {
            part.filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u64>().ok())
                .filter(|&n| n <= max)
                .ok_or_else(|| bad(&format!("its {what} is not a whole number from 0 to {max}")))
        };
        let (kind, rest) = raw.split_once('\n').unwrap_or((&raw, ""));
        // The id comes last: it may hold anything, even a newline.
        let fields = match kind {
            "s" => 2,
            "r" => 3,
            "p" => 4,
            _ => return Err(bad("unknown kind")),
        };
        let mut parts = rest.splitn(fields, '\n');
        let id = (parts.clone().nth(fields - 1))
            .filter(|id| !id.is_empty())
            .ok_or_else(|| bad("its job id is missing"))?
            .to_owned();
        match kind {
            "s" => {
                let score = number(parts.next(), MAX_SCORE as u64, "score")? as i64;
                Ok(Cursor::After { score, id })
            }
            "r" | "p" => {
                let part = number(parts.next(), u16::MAX as u64, "partition")? as usize;
                let level = match kind {
                    "p" => number(parts.next(), GROUPS_LEVEL.into(), "priority")? as u8,
                    _ => 0,
                };
                let index = number(parts.next(), MAX_INDEX as u64, "index")? as usize;
                Ok(Cursor::At {
                    part,
                    level,
                    index,
                    id,
                })
            }
            _ => unreachable!("kinds are checked above"),
        }
    }
}

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

struct PartPage {
    exhausted: bool,
    last: (f64, String),
    found: Vec<(f64, String, String)>,
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
        let calls = (0..self.parts().len()).map(|part| {
            let mut cmd = self.script(&SCRIPT, part);
            match what {
                Sorted::Schedule { topic, state } => {
                    cmd.arg("schedule").arg(topic.unwrap_or("")).arg(state)
                }
                Sorted::Dead { topic } => cmd.arg("dead-letters").arg(topic).arg(""),
                Sorted::Finished { topic } => cmd
                    .arg("history")
                    .arg(topic)
                    .arg(crate::JobState::Finished.as_str()),
            };
            cmd.arg(&score).arg(&id).arg(limit).arg(SCAN_CAP);
            async move { decode(self.send(cmd).await?) }
        });
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
                let mut cmd = self.script(&SCRIPT, part);
                cmd.arg("next-dues");
                for t in chunk {
                    cmd.arg(t);
                }
                let (status, mut f) = self.send(cmd).await?;
                if status != Status::Done {
                    return Err(Error::protocol("heads", format!("status {status:?}")));
                }
                for t in chunk {
                    match f.int()? {
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
                let mut cmd = self.script(&SCRIPT, part);
                cmd.arg("ready-list").arg(topic).arg(0).arg(&id).arg(want);
                cmd.arg(SCAN_CAP).arg(level);
                let (_, mut f) = self.send(cmd).await?;
                let more = f.int()? == 1;
                let pos = f.string()?;
                let before = ids.len();
                while f.left() > 0 {
                    ids.push((f.string()?, 0));
                }
                if !more && ids.len() - before < want {
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
            let mut cmd = self.script(&SCRIPT, part);
            // Costs the page and a look around the cursor's job of at most
            // 2 * SCAN_CAP entries, and one look at the priority levels.
            cmd.arg("ready-list")
                .arg(topic)
                .arg(index)
                .arg(&id)
                .arg(want)
                .arg(SCAN_CAP)
                .arg(level);
            let (status, mut f) = self.send(cmd).await?;
            if status != Status::Done {
                return Err(Error::protocol("list ready", format!("status {status:?}")));
            }
            let from = f.int()?.max(0) as usize;
            let next_level = f.int()?;
            let mut got = Vec::with_capacity(f.left());
            while f.left() > 0 {
                got.push(f.string()?);
            }
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

    #[test]
    fn cursors_round_trip_and_refuse_strangers() {
        for c in [
            Cursor::After {
                score: 1_700_000_000_000,
                id: "a b/c\nd".into(),
            },
            Cursor::At {
                part: 3,
                level: 0,
                index: 40,
                id: "x\ny".into(),
            },
            Cursor::At {
                part: 1,
                level: 9,
                index: 0,
                id: "p:1".into(),
            },
        ] {
            assert_eq!(Cursor::decode(&c.encode()).unwrap(), c);
        }
        assert!(Cursor::decode("zz").is_err());
        for forged in [
            "s\nx\nid",
            "s\nNaN\nid",
            "s\ninf\nid",
            "s\n-5\nid",
            "s\n1.5\nid",
            "s\n99999999999999999999999\nid",
            "s\n\nid",
            "s\n5\n",
            "s\n5",
            "r\n\n0\nid",
            "r\n0\n\nid",
            "r\n0\n0",
            "r\n0\n0\n",
            "r\n-1\n0\nid",
            "r\n0\n18446744073709551615\nid",
            "q\n0\n0",
            "p\n0\n11\n0\nid",
            "p\n0\n\n0\nid",
            "p\n0\n1\n0",
        ] {
            assert!(Cursor::decode(&hex::encode(forged)).is_err(), "{forged:?}");
        }
    }
}
