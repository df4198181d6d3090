//! The main table: one row per measure, delayq against BullMQ, medians over
//! the repeats.

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
        let d = t.get(&(row.clone(), "delayq")).cloned().map(median);
        let b = t.get(&(row.clone(), "bullmq")).cloned().map(median);
        let fmt = |v: Option<f64>| {
            v.map_or("-".to_owned(), |v| {
                if v >= 100.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.1}")
                }
            })
        };
        let ratio = match (d, b) {
            (Some(d), Some(b)) if b > 0.0 => format!("{:.2}x", d / b),
            _ => "-".into(),
        };
        println!("| {row} | {} | {} | {ratio} |", fmt(d), fmt(b));
    }
}
