//! A schedule's rule: its cron text (five or six fields, day of week read
//! the Unix way, or an @ shorthand such as `@daily`) in its time zone, and when its ticks are, across
//! daylight-saving changes.

use std::str::FromStr;

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Utc};

use super::Recurring;

/// A rule, parsed: when its ticks are.
pub struct Rule {
    schedule: cron::Schedule,
    tz: chrono_tz::Tz,
}

impl Rule {
    /// The first tick strictly after `after_ms` (Unix ms), if any.
    ///
    /// The rule is matched against local wall-clock times (naive, so the
    /// search itself never goes back), each then placed in absolute time:
    /// a local time that does not exist (clocks forward) has no tick, and
    /// one that happens twice (clocks back) ticks at its first occurrence
    /// only. So ticks only ever move forward in absolute time.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let mut from = self.local(after_ms)?;
        if let Some(end) = self.second_pass_end(after_ms) {
            // Every local time of the repeated hour ticked in its first
            // pass: go on from the end of the second.
            from = end - TimeDelta::milliseconds(1);
        }
        // Each turn moves `from` forward; a few turns at most (a gap).
        for _ in 0..MAX_TURNS {
            let wall = self
                .schedule
                .after(&Utc.from_utc_datetime(&from))
                .next()?
                .naive_utc();
            match self.tz.from_local_datetime(&wall) {
                LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => {
                    let t = t.timestamp_millis();
                    if t > after_ms {
                        return Some(t);
                    }
                    from = wall;
                }
                LocalResult::None => from = self.gap_end(wall).unwrap_or(wall),
            }
        }
        None
    }

    /// The last tick at or before `at_ms`, if any (never after it).
    pub fn last_at_or_before(&self, at_ms: i64) -> Option<i64> {
        let to = match self.second_pass_end(at_ms) {
            Some(end) => end - TimeDelta::milliseconds(1),
            None => self.local(at_ms)?,
        };
        let to = Utc.from_utc_datetime(&(to + TimeDelta::milliseconds(1)));
        let mut back = self.schedule.after(&to);
        // Only local times in a gap are passed over: an hour's worth of
        // seconds at most.
        for _ in 0..MAX_BACK {
            let wall = back.next_back()?.naive_utc();
            if let LocalResult::Single(t) | LocalResult::Ambiguous(t, _) =
                self.tz.from_local_datetime(&wall)
            {
                let t = t.timestamp_millis();
                if t <= at_ms {
                    return Some(t);
                }
            }
        }
        None
    }

    /// The wall-clock time at `ms`.
    fn local(&self, ms: i64) -> Option<NaiveDateTime> {
        Some(self.tz.timestamp_millis_opt(ms).single()?.naive_local())
    }

    /// The zone's UTC offset at `ms`, in ms.
    fn offset_ms(&self, ms: i64) -> i64 {
        let at = DateTime::from_timestamp_millis(ms).unwrap_or_default();
        self.tz
            .offset_from_utc_datetime(&at.naive_utc())
            .fix()
            .local_minus_utc() as i64
            * 1000
    }

    /// The first instant in (lo, hi] whose offset is not lo's (one change
    /// of offset in between: a binary search).
    fn change_between(&self, mut lo: i64, mut hi: i64) -> Option<i64> {
        let before = self.offset_ms(lo);
        if self.offset_ms(hi) == before {
            return None;
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.offset_ms(mid) == before {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some(hi)
    }

    /// When `ms` falls in the second pass of a repeated local hour, the
    /// wall-clock time at which that pass ends.
    fn second_pass_end(&self, ms: i64) -> Option<NaiveDateTime> {
        let LocalResult::Ambiguous(first, second) = self.tz.from_local_datetime(&self.local(ms)?)
        else {
            return None;
        };
        let (first, second) = (first.timestamp_millis(), second.timestamp_millis());
        if second != ms || first >= second {
            return None;
        }
        let change = self.change_between(first, ms)?;
        self.local(change + (second - first))
    }

    /// The first wall-clock time after the gap `wall` falls in.
    fn gap_end(&self, wall: NaiveDateTime) -> Option<NaiveDateTime> {
        // Offsets lie within +-14 h: the change is near `wall` read as UTC.
        let guess = wall.and_utc().timestamp_millis();
        let day = 15 * 3_600_000;
        let end = self.local(self.change_between(guess - day, guess + day)?)?;
        (end > wall).then(|| end - TimeDelta::milliseconds(1))
    }
}

/// Bounds on the searches above, far beyond what any zone needs.
const MAX_TURNS: usize = 64;
const MAX_BACK: usize = 100_000;

/// Day names in Unix order: 0 (and 7) is Sunday.
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Reads a day-of-week field the Unix way (0 or 7 = Sunday, 1 = Monday ...
/// 6 = Saturday, or names; lists, ranges and steps) and writes it the way
/// the `cron` crate reads it (1 = Sunday ... 7 = Saturday).
fn unix_days_of_week(field: &str) -> Result<String, String> {
    let bad = |why: String| {
        Err(format!(
            "day of week {field:?} is not valid: {why}; use 0-7 (0 and 7 are Sunday, 1 Monday ... 6 Saturday) or SUN-SAT"
        ))
    };
    let day = |s: &str| -> Option<u32> {
        if let Ok(n) = s.parse::<u32>() {
            return (n <= 7).then_some(n);
        }
        let s = s.to_ascii_uppercase();
        (0..7)
            .find(|&i| s == DAYS[i] || s == FULL_DAYS[i])
            .map(|i| i as u32)
    };
    let mut on = [false; 7];
    for item in field.split(',') {
        let (base, step) = match item.split_once('/') {
            Some((b, s)) => match s.parse::<u32>() {
                Ok(s) if s > 0 => (b, s),
                _ => return bad(format!("step {s:?} is not a positive number")),
            },
            None => (item, 1),
        };
        let (first, last) = match base {
            "*" | "?" => (0, 6),
            _ => match base.split_once('-') {
                Some((a, b)) => match (day(a), day(b)) {
                    (Some(a), Some(b)) if a <= b => (a, b),
                    (Some(_), Some(_)) => return bad(format!("range {base:?} runs backwards")),
                    _ => return bad(format!("{base:?} is not a day")),
                },
                None => match day(base) {
                    // `5/2` runs from Friday to Saturday in steps.
                    Some(a) if item.contains('/') => (a, 6.max(a)),
                    Some(a) => (a, a),
                    None => return bad(format!("{base:?} is not a day")),
                },
            },
        };
        for d in (first..=last).step_by(step as usize) {
            on[(d % 7) as usize] = true;
        }
    }
    if on.iter().all(|&d| d) {
        return Ok("*".into());
    }
    Ok(DAYS
        .iter()
        .zip(on)
        .filter(|(_, on)| *on)
        .map(|(d, _)| *d)
        .collect::<Vec<_>>()
        .join(","))
}

/// The @ shorthands, as the five fields they stand for.
const SHORTHANDS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// The bounds of the six fields before the day of week (which
/// [`unix_days_of_week`] reads), named as users know them.
const RANGES: [(&str, u32, u32); 5] = [
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
];

/// Checks the numbers of one field (lists, ranges, steps) against its
/// bounds, so the error speaks of the field as written; names (`JAN`) and
/// the rest of the syntax are left to the cron parser.
fn check_range(what: &str, field: &str, lo: u32, hi: u32) -> Result<(), String> {
    for item in field.split(',') {
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => (base, Some(step)),
            None => (item, None),
        };
        if let Some(step) = step {
            if !matches!(step.parse::<u32>(), Ok(n) if n > 0) {
                return Err(format!("{what} step {step:?} is not a positive number"));
            }
        }
        for n in base.split('-').filter_map(|v| v.parse::<u32>().ok()) {
            if !(lo..=hi).contains(&n) {
                return Err(format!("{what} {n} is out of range: {lo} to {hi}"));
            }
        }
    }
    Ok(())
}

const FULL_DAYS: [&str; 7] = [
    "SUNDAY",
    "MONDAY",
    "TUESDAY",
    "WEDNESDAY",
    "THURSDAY",
    "FRIDAY",
    "SATURDAY",
];

impl Recurring {
    /// Parses the rule: the cron text (five or six fields) and the zone.
    pub fn rule(&self) -> Result<Rule, String> {
        let cron = self.cron.trim();
        let cron = match cron.strip_prefix('@') {
            Some(_) => SHORTHANDS
                .iter()
                .find(|(short, _)| short.eq_ignore_ascii_case(cron))
                .map(|(_, fields)| *fields)
                .ok_or_else(|| {
                    format!(
                        "cron {:?} is not a shorthand delayq knows: @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly",
                        self.cron
                    )
                })?,
            None => cron,
        };
        let mut fields: Vec<&str> = cron.split_whitespace().collect();
        if fields.len() == 5 {
            fields.insert(0, "0");
        }
        let text = match fields.len() {
            6 => {
                for (field, (what, lo, hi)) in fields.iter().zip(RANGES) {
                    check_range(what, field, lo, hi)
                        .map_err(|e| format!("cron {:?}: {e}", self.cron))?;
                }
                let dow = unix_days_of_week(fields[5])?;
                format!("{} {dow}", fields[..5].join(" "))
            }
            n => {
                return Err(format!(
                    "cron {:?} has {n} fields; give six (seconds first: \"0 0 9 * * *\") or five (\"0 9 * * *\")",
                    self.cron
                ))
            }
        };
        let schedule = cron::Schedule::from_str(&text)
            .map_err(|e| format!("cron {:?} is not valid: {e}", self.cron))?;
        let tz: chrono_tz::Tz = self.timezone.parse().map_err(|_| {
            format!(
                "time zone {:?} is unknown; use an IANA name such as Asia/Shanghai or UTC",
                self.timezone
            )
        })?;
        Ok(Rule { schedule, tz })
    }
}

#[cfg(test)]
mod tests;
