//! The rule's tests: ticks in zones and across daylight-saving changes,
//! the Unix day of week, the errors, the @ shorthands.

use super::*;

fn at(s: &str) -> i64 {
    DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
}

fn rule(cron: &str, tz: &str) -> Rule {
    Recurring {
        cron: cron.into(),
        timezone: tz.into(),
        ..Recurring::default()
    }
    .rule()
    .unwrap()
}

#[test]
fn five_and_six_fields_and_zones() {
    let r = rule("0 9 * * *", "Asia/Shanghai");
    assert_eq!(
        r.next_after(at("2026-11-22T00:00:00Z")),
        Some(at("2026-11-22T01:00:00Z"))
    );
    let r = rule("*/2 * * * * *", "UTC");
    assert_eq!(
        r.next_after(at("2026-11-22T00:00:01Z")),
        Some(at("2026-11-22T00:00:02Z"))
    );
    assert_eq!(
        r.last_at_or_before(at("2026-11-22T00:00:05.5Z")),
        Some(at("2026-11-22T00:00:04Z"))
    );
    assert_eq!(
        r.last_at_or_before(at("2026-11-22T00:00:04Z")),
        Some(at("2026-11-22T00:00:04Z"))
    );
    let bad = |cron: &str, tz: &str| {
        Recurring {
            cron: cron.into(),
            timezone: tz.into(),
            ..Recurring::default()
        }
        .rule()
        .err()
        .unwrap()
    };
    assert!(bad("* * *", "UTC").contains("3 fields"));
    assert!(bad("0 9 * * *", "Mars/Olympus").contains("unknown"));
    assert!(bad("0 61 * * *", "UTC").contains("hour 61 is out of range"));
    assert!(bad("0 L * * *", "UTC").contains("not valid"));
}

#[test]
fn day_of_week_is_read_the_unix_way_in_five_and_six_fields() {
    // 2026-11-21 is a Saturday; from Friday 2026-11-20 12:00Z:
    let from = at("2026-11-20T12:00:00Z");
    let next = |cron: &str| rule(cron, "UTC").next_after(from).unwrap();
    assert_eq!(
        next("0 9 * * 6"),
        at("2026-11-21T09:00:00Z"),
        "6 = Saturday"
    );
    assert_eq!(next("0 9 * * 1"), at("2026-11-23T09:00:00Z"), "1 = Monday");
    assert_eq!(next("0 9 * * 0"), at("2026-11-22T09:00:00Z"), "0 = Sunday");
    assert_eq!(next("0 9 * * 7"), at("2026-11-22T09:00:00Z"), "7 = Sunday");
    assert_eq!(next("0 9 * * SAT"), at("2026-11-21T09:00:00Z"));
    assert_eq!(next("0 9 * * mon"), at("2026-11-23T09:00:00Z"));
    assert_eq!(next("0 9 * * SUN"), at("2026-11-22T09:00:00Z"));
    assert_eq!(
        next("0 9 * * 5"),
        at("2026-11-20T09:00:00Z") + 7 * 86_400_000
    );
    // Six fields: the same convention.
    assert_eq!(next("0 0 9 * * 6"), at("2026-11-21T09:00:00Z"));
    assert_eq!(next("0 0 9 * * 1"), at("2026-11-23T09:00:00Z"));
    // 1-5 is Monday to Friday: Friday noon's next is Monday.
    assert_eq!(next("0 9 * * 1-5"), at("2026-11-23T09:00:00Z"));
    assert_eq!(next("0 9 * * MON-FRI"), at("2026-11-23T09:00:00Z"));
    let r = rule("0 9 * * 1-5", "UTC");
    let mut t = from;
    let mut days = Vec::new();
    for _ in 0..5 {
        t = r.next_after(t).unwrap();
        days.push(
            DateTime::from_timestamp_millis(t)
                .unwrap()
                .format("%a")
                .to_string(),
        );
    }
    assert_eq!(days, ["Mon", "Tue", "Wed", "Thu", "Fri"]);
    // Lists, steps and a range up to 7 (Sunday).
    assert_eq!(next("0 9 * * 0,6"), at("2026-11-21T09:00:00Z"));
    assert_eq!(next("0 9 * * 6-7"), at("2026-11-21T09:00:00Z"));
    assert_eq!(next("0 9 * * */3"), at("2026-11-21T09:00:00Z"), "0,3,6");
    assert_eq!(next("0 9 * * ?"), at("2026-11-21T09:00:00Z"));
    let bad = |cron: &str| {
        Recurring {
            cron: cron.into(),
            ..Recurring::default()
        }
        .rule()
        .err()
        .unwrap()
    };
    assert!(
        bad("0 9 * * 8").contains("day of week"),
        "{}",
        bad("0 9 * * 8")
    );
    assert!(bad("0 9 * * 5-1").contains("day of week"));
    assert!(bad("0 9 * * FUNDAY").contains("day of week"));
}

#[test]
fn daylight_saving_changes_follow_the_local_clock() {
    // New York: clocks forward 2026-03-08 02:00 -> 03:00, back
    // 2026-11-01 02:00 -> 01:00.
    let r = rule("0 30 2 * * *", "America/New_York");
    // 02:30 does not exist on 03-08: no tick that day.
    assert_eq!(
        r.next_after(at("2026-03-07T08:00:00Z")),
        Some(at("2026-03-09T06:30:00Z"))
    );
    let r = rule("0 0 9 * * *", "America/New_York");
    // 09:00 local is 14:00Z in winter and 13:00Z in summer.
    assert_eq!(
        r.next_after(at("2026-03-07T15:00:00Z")),
        Some(at("2026-03-08T13:00:00Z"))
    );
    // 01:30 happens twice on 11-01: it fires once, at the first.
    let r = rule("0 30 1 * * *", "America/New_York");
    let first = r.next_after(at("2026-11-01T04:00:00Z")).unwrap();
    assert_eq!(first, at("2026-11-01T05:30:00Z"));
    assert_eq!(r.next_after(first), Some(at("2026-11-02T06:30:00Z")));
}

#[test]
fn ticks_only_move_forward_across_daylight_saving_changes() {
    // New York, 2026-11-01: 01:00-01:59 local happens twice, at 05:xxZ
    // (EDT) and 06:xxZ (EST). 2026-03-08: 02:00-02:59 does not exist.
    for (cron, from, to) in [
        (
            "* * * * * *",
            "2026-11-01T04:58:00Z",
            "2026-11-01T07:02:00Z",
        ),
        (
            "0 * * * * *",
            "2026-11-01T04:00:00Z",
            "2026-11-01T08:00:00Z",
        ),
        (
            "*/7 */3 1 * * *",
            "2026-11-01T04:00:00Z",
            "2026-11-02T08:00:00Z",
        ),
        (
            "* * * * * *",
            "2026-03-08T06:58:00Z",
            "2026-03-08T07:02:00Z",
        ),
        (
            "0 * * * * *",
            "2026-03-08T05:00:00Z",
            "2026-03-08T09:00:00Z",
        ),
    ] {
        let r = rule(cron, "America/New_York");
        let mut t = at(from);
        let mut n = 0;
        while t < at(to) {
            let next = r.next_after(t).unwrap();
            assert!(next > t, "{cron}: after {t} came {next}");
            t = next;
            n += 1;
        }
        assert!(n > 0);
    }
    // Every second: the first pass of 01:xx ticks, the second pass
    // (each local time's second occurrence) does not, and a time inside
    // it looks ahead, not an hour back.
    let r = rule("* * * * * *", "America/New_York");
    for (s, next) in [
        ("2026-11-01T05:59:58Z", "2026-11-01T05:59:59Z"),
        ("2026-11-01T05:59:59Z", "2026-11-01T07:00:00Z"),
        ("2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"),
        ("2026-11-01T06:30:00.5Z", "2026-11-01T07:00:00Z"),
        ("2026-11-01T06:59:59Z", "2026-11-01T07:00:00Z"),
        ("2026-11-01T07:00:00Z", "2026-11-01T07:00:01Z"),
        // Spring: 01:59:59 EST is followed by 03:00:00 EDT.
        ("2026-03-08T06:59:59Z", "2026-03-08T07:00:00Z"),
    ] {
        assert_eq!(r.next_after(at(s)), Some(at(next)), "after {s}");
    }
    // The last tick at or before a time is never after it.
    for (s, last) in [
        ("2026-11-01T05:30:00Z", "2026-11-01T05:30:00Z"),
        ("2026-11-01T06:30:00Z", "2026-11-01T05:59:59Z"),
        ("2026-03-08T07:00:00.5Z", "2026-03-08T07:00:00Z"),
    ] {
        assert_eq!(r.last_at_or_before(at(s)), Some(at(last)), "at {s}");
    }
    let r = rule("0 30 2 * * *", "America/New_York");
    assert_eq!(
        r.last_at_or_before(at("2026-03-08T12:00:00Z")),
        Some(at("2026-03-07T07:30:00Z")),
        "no 02:30 on the day clocks go forward"
    );
}

fn error(cron: &str) -> String {
    match (Recurring {
        cron: cron.into(),
        ..Recurring::default()
    })
    .rule()
    {
        Ok(_) => panic!("{cron:?} was accepted"),
        Err(e) => e,
    }
}

#[test]
fn out_of_range_fields_are_named_in_the_users_terms_with_their_bounds() {
    for (cron, said) in [
        ("61 9 * * *", "minute 61 is out of range: 0 to 59"),
        ("60 9 * * *", "minute 60 is out of range: 0 to 59"),
        ("0 24 * * *", "hour 24 is out of range: 0 to 23"),
        ("0 9 32 * *", "day of month 32 is out of range: 1 to 31"),
        ("0 9 0 * *", "day of month 0 is out of range: 1 to 31"),
        ("0 9 * 13 *", "month 13 is out of range: 1 to 12"),
        ("1-70 * * * *", "minute 70 is out of range: 0 to 59"),
        ("*/0 * * * *", "minute step \"0\" is not a positive number"),
        ("0,5,99 9 * * *", "minute 99 is out of range: 0 to 59"),
        ("60 0 9 * * *", "second 60 is out of range: 0 to 59"),
        ("0 0 25 * * *", "hour 25 is out of range: 0 to 23"),
    ] {
        let e = error(cron);
        assert!(e.contains(said), "{cron:?}: {e}");
    }
    // The bounds themselves are fine.
    let ok = |cron: &str| {
        Recurring {
            cron: cron.into(),
            ..Recurring::default()
        }
        .rule()
        .map(|_| ())
    };
    for cron in [
        "59 23 31 12 *",
        "0 0 1 1 *",
        "*/15 0-23 1-31 JAN-DEC *",
        "59 59 23 * * *",
    ] {
        assert_eq!(ok(cron), Ok(()), "{cron:?}");
    }
}

#[test]
fn at_shorthands_are_their_five_field_rules() {
    let base = at("2026-11-25T10:30:00Z");
    for (short, long) in [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ] {
        let (a, b) = (rule(short, "Asia/Shanghai"), rule(long, "Asia/Shanghai"));
        assert_eq!(a.next_after(base), b.next_after(base), "{short}");
        assert!(a.next_after(base).is_some());
    }
    assert_eq!(
        rule("@daily", "UTC").next_after(base),
        Some(at("2026-11-26T00:00:00Z"))
    );
    assert!(error("@fortnightly").contains("@daily"));
}
