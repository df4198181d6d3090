//! The main table: one row per measure, delayq against BullMQ (and apalis,
//! in a run that has it), medians over
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
    // apalis's columns only in a run that has it.
    let with_apalis = t.keys().any(|(_, c)| *c == "apalis");
    println!();
    if with_apalis {
        println!("| scenario | delayq | BullMQ | apalis | delayq/BullMQ | delayq/apalis |");
        println!("|---|---:|---:|---:|---:|---:|");
    } else {
        println!("| scenario | delayq | BullMQ | delayq/BullMQ |");
        println!("|---|---:|---:|---:|");
    }
    for row in ROWS {
        let row = row.to_string();
        let d = t.get(&(row.clone(), "delayq"));
        let b = t.get(&(row.clone(), "bullmq"));
        let a = t.get(&(row.clone(), "apalis"));
        let cell = |v: Option<&Vec<f64>>| v.map_or("-".into(), |v| spread(v, number, ""));
        if with_apalis {
            println!(
                "| {row} | {} | {} | {} | {} | {} |",
                cell(d),
                cell(b),
                cell(a),
                ratio(d, b),
                ratio(d, a),
            );
        } else {
            println!("| {row} | {} | {} | {} |", cell(d), cell(b), ratio(d, b));
        }
    }
}

/// The ratio of each repeat's pair (the systems run one after the other
/// within a repeat), then their median and range.
fn ratio(d: Option<&Vec<f64>>, other: Option<&Vec<f64>>) -> String {
    match (d, other) {
        (Some(d), Some(o)) if d.len() == o.len() && o.iter().all(|&o| o > 0.0) => {
            let r: Vec<f64> = d.iter().zip(o).map(|(d, o)| d / o).collect();
            spread(&r, |v| format!("{v:.2}"), "x")
        }
        _ => "-".into(),
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
