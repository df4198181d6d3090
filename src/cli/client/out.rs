//! What a command prints: the server's JSON (`--json`) or text for people,
//! written to stdout in one go.

use anyhow::{Context, Result};

use super::http::{Client, Reply};

/// Appends a line to a command's text.
macro_rules! outln {
    ($o:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($o, $($arg)*);
    }};
}
pub(super) use outln;

impl Client {
    /// The text a command prints for `reply`: the server's JSON with
    /// `--json`, else what `human` writes.
    pub(super) fn text<T>(
        &self,
        reply: &Reply<T>,
        human: impl FnOnce(&T, &mut String),
    ) -> Result<String> {
        if self.json {
            return Ok(format!("{}\n", serde_json::to_string_pretty(&reply.raw)?));
        }
        let mut o = String::new();
        human(&reply.value, &mut o);
        Ok(o)
    }

    /// Prints `reply` (see [`Client::text`]).
    pub(super) fn show<T>(
        &self,
        reply: &Reply<T>,
        human: impl FnOnce(&T, &mut String),
    ) -> Result<()> {
        print(&self.text(reply, human)?)
    }
}

/// Writes `text` to stdout; a reader that went away (`| head -1`) is a
/// normal end.
pub(super) fn print(text: &str) -> Result<()> {
    match write_out(text) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(()),
    }
}

/// Writes `text` to stdout. A reader that went away is an error here
/// (`BrokenPipe`), not a panic: pop gives its jobs back on it.
pub(super) fn write_out(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Unix ms as local time, for people.
pub(super) fn local_time(ms: Option<i64>) -> String {
    use chrono::TimeZone;
    match ms.and_then(|ms| chrono::Local.timestamp_millis_opt(ms).single()) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S %:z").to_string(),
        None => "none".into(),
    }
}

/// A stored retry policy as people read it ("1m, 5m, 30m; 4 attempts in
/// all, then dead"); `none` names what applies instead.
pub(super) fn retry_text(r: Option<&delayq::wire::Retry>, none: &str) -> String {
    match r {
        Some(r) => delayq::RetryPolicy {
            intervals: r
                .intervals_ms
                .iter()
                .map(|ms| std::time::Duration::from_millis(*ms))
                .collect(),
            max_attempts: r.max_attempts,
        }
        .to_string(),
        None => none.to_owned(),
    }
}

/// An optional text; `-` when absent.
pub(super) fn or_dash(s: &Option<String>) -> String {
    s.clone().unwrap_or_else(|| "-".into())
}

/// A wire enum's name (`delayed`, `fire`), as the server writes it.
pub(super) fn name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "-".into(),
    }
}

/// Prints rows in columns as wide as their widest cell: columns of numbers
/// right-aligned, others left-aligned.
pub(super) fn table<const N: usize>(o: &mut String, rows: &[[String; N]]) {
    let width = |c: usize| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..N).map(width).collect();
    let numeric: Vec<bool> = (0..N)
        .map(|c| {
            rows[1..].iter().any(|r| r[c].parse::<f64>().is_ok())
                && rows[1..]
                    .iter()
                    .all(|r| r[c] == "-" || r[c].parse::<f64>().is_ok())
        })
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c > 0 {
                line.push_str("  ");
            }
            if c == 0 || !numeric[c] {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        outln!(o, "{}", line.trim_end());
    }
}
