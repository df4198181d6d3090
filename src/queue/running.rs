//! What a running job's holder reports while it runs: its progress and
//! log lines, each fenced by the lease token as a touch is.

use super::Queue;
use crate::defaults::{
    MAX_LOG_LINE_BYTES, MAX_PROGRESS_BYTES, MAX_PROGRESS_DEPTH, MAX_RESULT_BYTES,
};
use crate::error::{Error, Result};
use crate::job::LogLine;
use crate::store::progress::{Log, Progress};
use crate::store::Status;

/// A progress value as stored: its JSON text, if within the limit.
pub fn check_progress(value: &serde_json::Value) -> std::result::Result<String, String> {
    if value.is_null() {
        return Err("progress is null; give a number or a JSON value".into());
    }
    bounded_json(
        "progress",
        value,
        MAX_PROGRESS_BYTES,
        &MAX_PROGRESS_BYTES.to_string(),
    )
}

/// A result as stored: its JSON text, if within the limits (any JSON
/// value, null too).
pub fn check_result(value: &serde_json::Value) -> std::result::Result<String, String> {
    bounded_json(
        "result",
        value,
        MAX_RESULT_BYTES,
        &format!("{MAX_RESULT_BYTES} (64 KiB)"),
    )
}

/// `value`'s JSON text, if it nests at most [`MAX_PROGRESS_DEPTH`] levels
/// and takes at most `most` bytes (said `most_said` in the refusal); the
/// refusal names `what`. The depth is checked before serializing: a read
/// parses the stored text with a bounded depth, and one deeper would come
/// back as a string.
fn bounded_json(
    what: &str,
    value: &serde_json::Value,
    most: usize,
    most_said: &str,
) -> std::result::Result<String, String> {
    let depth = depth(value);
    if depth > MAX_PROGRESS_DEPTH {
        return Err(format!(
            "{what} nests {depth} levels of arrays and objects; at most {MAX_PROGRESS_DEPTH}"
        ));
    }
    let json = value.to_string();
    if json.len() > most {
        return Err(format!(
            "{what} is {} bytes of JSON; at most {most_said} are kept",
            json.len()
        ));
    }
    Ok(json)
}

/// Levels of arrays and objects in `value` (a scalar: 0), without
/// recursion, so any depth a caller built is measured.
fn depth(value: &serde_json::Value) -> usize {
    let mut deepest = 0;
    let mut open = vec![(value, 1)];
    while let Some((v, d)) = open.pop() {
        let inner: Box<dyn Iterator<Item = &serde_json::Value>> = match v {
            serde_json::Value::Array(a) => Box::new(a.iter()),
            serde_json::Value::Object(o) => Box::new(o.values()),
            _ => continue,
        };
        deepest = deepest.max(d);
        open.extend(inner.map(|i| (i, d + 1)));
    }
    deepest
}

/// Checks a log line: bounded, one line, no control character but tab.
pub fn check_log_line(line: &str) -> std::result::Result<(), String> {
    if line.len() > MAX_LOG_LINE_BYTES {
        return Err(format!(
            "log line is {} bytes; at most {MAX_LOG_LINE_BYTES}",
            line.len()
        ));
    }
    if let Some(c) = line.chars().find(|c| c.is_control() && *c != '\t') {
        return Err(format!(
            "log line holds the control character {:?}; none but tab is allowed (one line per call)",
            c
        ));
    }
    Ok(())
}

impl Queue {
    /// Sets the progress of the job that lease `token` holds: any JSON
    /// value (a number, or a small object) of at most
    /// [`MAX_PROGRESS_BYTES`] serialized and [`MAX_PROGRESS_DEPTH`] levels
    /// of arrays and objects. It replaces the last one, stays
    /// across attempts, and is kept in a finished job's record;
    /// [`get`](Self::get) reads it. Fails as [`touch`](Self::touch) does
    /// when the lease is not the job's current one or has ended
    /// ([`Error::StaleLease`]), when the job was cancelled
    /// ([`Error::Cancelled`]) or is gone ([`Error::NotFound`]); then it
    /// wrote nothing.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn progress(&self, id: &str, token: &str, value: &serde_json::Value) -> Result<()> {
        let l = self.limits();
        l.check_id(id).map_err(Error::Invalid)?;
        l.check_token(token).map_err(Error::Invalid)?;
        let json = check_progress(value).map_err(Error::Invalid)?;
        let store = self.store();
        let status = store
            .run::<Progress>(store.part_of(id), (id, token, json.as_str()))
            .await?;
        reported(id, status)
    }

    /// Appends `line` to the log of the job that lease `token` holds: at
    /// most [`MAX_LOG_LINE_BYTES`], no control character but tab. The log
    /// keeps the last [`LOG_LINES_KEPT`](crate::defaults::LOG_LINES_KEPT) lines, across attempts, and goes
    /// with the job (kept as long as a finished job's record). Fails as
    /// [`progress`](Self::progress) does.
    #[tracing::instrument(skip_all, fields(id = %id))]
    pub async fn log(&self, id: &str, token: &str, line: &str) -> Result<()> {
        let l = self.limits();
        l.check_id(id).map_err(Error::Invalid)?;
        l.check_token(token).map_err(Error::Invalid)?;
        check_log_line(line).map_err(Error::Invalid)?;
        let store = self.store();
        let status = store
            .run::<Log>(store.part_of(id), (id, token, line))
            .await?;
        reported(id, status)
    }

    /// Job `id`'s log, oldest line first: at most [`LOG_LINES_KEPT`](crate::defaults::LOG_LINES_KEPT)
    /// lines of at most [`MAX_LOG_LINE_BYTES`] each (empty: none, or no
    /// such job).
    pub async fn logs(&self, id: &str) -> Result<Vec<LogLine>> {
        self.limits().check_id(id).map_err(Error::Invalid)?;
        self.store().logs(id).await
    }
}

fn reported(id: &str, status: Status) -> Result<()> {
    match status {
        Status::Done => Ok(()),
        Status::Stale => Err(Error::StaleLease(id.to_owned())),
        Status::Cancelled => Err(Error::Cancelled(id.to_owned())),
        _ => Err(Error::NotFound(id.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_problem() {
        let big = serde_json::Value::String("x".repeat(MAX_PROGRESS_BYTES));
        assert!(check_progress(&big).unwrap_err().contains("progress is"));
        assert_eq!(check_progress(&serde_json::json!(42)).unwrap(), "42");
        assert!(check_log_line("a\tb").is_ok());
        assert!(check_log_line("a\nb").unwrap_err().contains("control"));
        assert!(check_log_line("\u{85}").unwrap_err().contains("control"));
        let long = "x".repeat(MAX_LOG_LINE_BYTES + 1);
        assert!(check_log_line(&long).unwrap_err().contains("bytes"));
    }
}
