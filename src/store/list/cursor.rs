//! Where a page of jobs starts, as an opaque text the client sends back:
//! after a (score, id) in a sorted set, or after a job in a ready list.
//! A cursor is read back checking every part, so a forged one is refused
//! before it reaches Redis.

use super::GROUPS_LEVEL;

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
