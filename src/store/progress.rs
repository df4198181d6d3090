//! Progress and log lines a running job's holder reports: each fenced by
//! its lease token as a touch is. The scripts are `progress.lua` and
//! `log.lua`.

use super::script::script;
use super::{Status, Store};
use crate::error::Result;
pub use crate::job::LogLine;
use crate::redis::Fields;

script! {
    /// Sets job `id`'s progress (JSON text) under lease `token` (call it
    /// on the job's partition).
    Progress = "progress", when_full: false, acked: false, late_unknown: true,
        (id: &'a str, token: &'a str, json: &'a str) -> Status = decode;
    /// Appends `line` to job `id`'s log under lease `token` (call it on
    /// the job's partition).
    Log = "log", when_full: false, acked: false, late_unknown: true,
        (id: &'a str, token: &'a str, line: &'a str) -> Status = decode;
}

/// A line as stored ("<ms> TAB <line>").
fn parse_line(stored: &str) -> LogLine {
    let (at, line) = stored.split_once('\t').unwrap_or(("0", stored));
    LogLine {
        at_ms: at.parse().unwrap_or(0),
        line: line.to_owned(),
    }
}

/// The reply: whether the lease held (DONE), or why not.
fn decode((status, _): (Status, Fields)) -> Result<Status> {
    Ok(status)
}

impl Store {
    /// Job `id`'s log, oldest line first (at most
    /// [`LOG_LINES_KEPT`](crate::defaults::LOG_LINES_KEPT)): one LRANGE.
    pub(crate) async fn logs(&self, id: &str) -> Result<Vec<LogLine>> {
        let key = self.parts()[self.part_of(id)].log(id);
        let mut cmd = redis::cmd("LRANGE");
        cmd.arg(key).arg(0).arg(-1);
        let lines: Vec<String> = self
            .redis
            .call("logs", cmd.query_async(&mut self.redis.conn()))
            .await?;
        Ok(lines.iter().map(|l| parse_line(l)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_line_keeps_its_tabs() {
        let l = parse_line("1700000000000\tstep\t2");
        assert_eq!((l.at_ms, l.line.as_str()), (1_700_000_000_000, "step\t2"));
    }
}
