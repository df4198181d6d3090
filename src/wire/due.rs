//! Due times as the API takes them: Unix milliseconds or RFC 3339 text.

use serde::{Deserialize, Serialize};

/// Unix milliseconds or an RFC 3339 time; a past time means now.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "server", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum DueAt {
    /// Unix milliseconds, at least 100000000000 (smaller numbers are
    /// refused: they are most likely Unix seconds).
    UnixMs(i64),
    /// RFC 3339 with a zone: `2027-03-28T09:00:00Z`, `...+08:00`.
    #[cfg_attr(feature = "server", schema(format = DateTime))]
    Rfc3339(String),
}

impl DueAt {
    /// What a user typed (`--at`): a number is Unix ms, anything else text.
    pub fn from_text(at: &str) -> DueAt {
        match at.trim().parse::<i64>() {
            Ok(ms) => DueAt::UnixMs(ms),
            Err(_) => DueAt::Rfc3339(at.to_owned()),
        }
    }

    /// Unix milliseconds, or why this is no due time (numbers below
    /// [`MIN_NUMERIC_DUE_AT_MS`] are refused: see there). `field` names it.
    pub fn to_ms(&self, field: &str) -> Result<i64, String> {
        match self {
            DueAt::UnixMs(ms) if *ms >= MIN_NUMERIC_DUE_AT_MS => Ok(*ms),
            DueAt::UnixMs(ms) => Err(numeric_due_at_error(field, *ms)),
            DueAt::Rfc3339(s) => parse_rfc3339_ms(s),
        }
    }
}

/// Numeric due times below this (Unix ms of March 1973) are refused: they
/// are Unix seconds far more often than a time in 1970-1973 (the Go
/// server's `/get` gives seconds), and read as ms they would fire now.
pub const MIN_NUMERIC_DUE_AT_MS: i64 = 100_000_000_000;

/// Why a number is refused as a due time, with the unit it is read in.
pub fn numeric_due_at_error(field: &str, n: i64) -> String {
    let seconds = if n > 0 {
        format!(" If it is Unix seconds, send {n}000 (milliseconds).")
    } else {
        String::new()
    };
    format!(
        "{field} {n} is read as Unix milliseconds, which would be before 1973 (so due at once); \
         give Unix milliseconds (e.g. 1806224400000) or an RFC 3339 time (e.g. \
         \"2027-03-28T09:00:00Z\").{seconds}"
    )
}

/// Parses an RFC 3339 time (`2026-11-22T18:00:00Z`, `...+01:00`, fractions
/// of a second allowed) to Unix milliseconds.
pub fn parse_rfc3339_ms(s: &str) -> Result<i64, String> {
    let bad = |why: &str| format!("{s:?} is not an RFC 3339 time: {why}");
    match chrono::DateTime::parse_from_rfc3339(s) {
        Ok(t) => Ok(t.timestamp_millis()),
        // RFC 3339 requires a zone; a local time read as UTC fires hours
        // off, so one without a zone is refused with what to add.
        Err(_) if has_no_zone(s) => Err(bad(
            "it has no time zone; end it with Z (UTC) or an offset like +08:00",
        )),
        Err(e) => Err(bad(&e.to_string())),
    }
}

/// A date and time that would be RFC 3339 with a zone at its end.
fn has_no_zone(s: &str) -> bool {
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .any(|f| chrono::NaiveDateTime::parse_from_str(s, f).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_with_a_zone_read_as_the_same_instant() {
        let utc = 1_924_992_000_000;
        for s in [
            "2031-01-01T00:00:00Z",
            "2031-01-01t00:00:00z",
            "2031-01-01 00:00:00Z",
            "2031-01-01T01:00:00+01:00",
            "2030-12-31T21:30:00-02:30",
        ] {
            assert_eq!(parse_rfc3339_ms(s), Ok(utc), "{s}");
        }
        assert_eq!(parse_rfc3339_ms("2031-01-01T00:00:00.250Z"), Ok(utc + 250));
        for s in ["2031-01-01T00:00:00", "2031-01-01 00:00:00.5"] {
            let e = parse_rfc3339_ms(s).unwrap_err();
            assert!(e.contains("no time zone"), "{s}: {e}");
        }
        for s in [
            "yesterday",
            "2031-01-01T00:00:00+24:00",
            "2031-13-01T00:00:00Z",
        ] {
            let e = parse_rfc3339_ms(s).unwrap_err();
            assert!(e.contains("not an RFC 3339 time"), "{s}: {e}");
        }
    }

    #[test]
    fn a_due_time_reads_the_way_it_is_sent() {
        assert_eq!(
            DueAt::from_text("1806224400000"),
            DueAt::UnixMs(1_806_224_400_000)
        );
        assert_eq!(
            serde_json::to_string(&DueAt::from_text("2027-03-28T09:00:00Z")).unwrap(),
            "\"2027-03-28T09:00:00Z\""
        );
        assert!(DueAt::UnixMs(1_806_224_400)
            .to_ms("--at")
            .unwrap_err()
            .contains("--at"));
    }
}
