//! The main table: one row per measure, delayq against BullMQ, medians over
//! the repeats with their range (min-max), and the ratio of each repeat's
//! pair.

use std::collections::BTreeMap;

use crate::common::median;
use crate::options::System;

/// The table's rows, in order.
const ROWS: &[&str] = &[
    "add, single, 64 in flight (jobs/s)",
    "Redis CPU per single add (us)",
    "add, batches of 100 (jobs/s)",
    "HTTP /push (compatible), 64 conns, wrk (jobs/s)",
    "HTTP /push (compatible), 64 conns, wrk (jobs/s), Redis CPU per push (us)",
    "HTTP /v1/jobs (native), 64 conns, wrk (jobs/s)",
    "Redis memory per pending job (bytes)",
    "Redis CPU per job lifecycle (us)",
    "Redis script calls per job lifecycle",
    "Redis commands per job lifecycle (run by scripts, or sent)",
    "end to end, add->fire->pop->finish (jobs/s)",
];

/// Results: (row, system) -> samples over repeats.
pub(crate) type Table = BTreeMap<(String, &'static str), Vec<f64>>;

pub(crate) fn record(t: &mut Table, row: &str, system: System, value: f64) {
    t.entry((row.to_owned(), system.column()))
        .or_default()
        .push(value);
}

pub(crate) fn print(t: &Table) {
    println!();
    println!("| scenario | delayq | BullMQ | delayq/BullMQ |");
    println!("|---|---:|---:|---:|");
    for row in ROWS {
        let row = row.to_string();
        let d = t.get(&(row.clone(), "delayq"));
        let b = t.get(&(row.clone(), "bullmq"));
        // The ratio of each repeat's pair (the systems run one after the
        // other within a repeat), then their median and range.
        let ratios: Option<Vec<f64>> = match (d, b) {
            (Some(d), Some(b)) if d.len() == b.len() && b.iter().all(|&b| b > 0.0) => {
                Some(d.iter().zip(b).map(|(d, b)| d / b).collect())
            }
            _ => None,
        };
        let ratio = ratios.map_or("-".into(), |r| spread(&r, |v| format!("{v:.2}"), "x"));
        println!(
            "| {row} | {} | {} | {ratio} |",
            d.map_or("-".into(), |v| spread(v, number, "")),
            b.map_or("-".into(), |v| spread(v, number, "")),
        );
    }
}

fn number(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The median of the repeats and, with more than one, their range:
/// "median (min-max)".
fn spread(v: &[f64], fmt: impl Fn(f64) -> String, unit: &str) -> String {
    let m = median(v.to_vec());
    if v.len() < 2 {
        return format!("{}{unit}", fmt(m));
    }
    let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    format!("{}{unit} ({}-{})", fmt(m), fmt(lo), fmt(hi))
}
