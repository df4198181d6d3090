//! Progress and log lines a running job's holder reports: each fenced by
//! its lease token as a touch is. The scripts are `progress.lua` and
//! `log.lua`.

use super::{ScriptDef, Status, Store};
use crate::error::Result;
pub use crate::job::LogLine;
use crate::redis::Fields;

pub const PROGRESS: ScriptDef = ScriptDef {
    name: "progress",
    source: include_str!("progress.lua"),
    when_full: false,
    acked: false,
    late_unknown: true,
};

pub const LOG: ScriptDef = ScriptDef {
    name: "log",
    source: include_str!("log.lua"),
    when_full: false,
    acked: false,
    late_unknown: true,
};

/// A line as stored ("<ms> TAB <line>").
fn parse_line(stored: &str) -> LogLine {
    let (at, line) = stored.split_once('\t').unwrap_or(("0", stored));
    LogLine {
        at_ms: at.parse().unwrap_or(0),
        line: line.to_owned(),
    }
}

fn decode((status, _): (Status, Fields)) -> Result<Status> {
    Ok(status)
}

impl Store {
    /// Sets job `id`'s progress (JSON text) under lease `token`.
    pub(crate) async fn progress(&self, id: &str, token: &str, json: &str) -> Result<Status> {
        let mut cmd = self.script(&PROGRESS, self.part_of(id));
        cmd.arg(id).arg(token).arg(json);
        decode(self.send(cmd).await?)
    }

    /// Appends `line` to job `id`'s log under lease `token`.
    pub(crate) async fn log(&self, id: &str, token: &str, line: &str) -> Result<Status> {
        let mut cmd = self.script(&LOG, self.part_of(id));
        cmd.arg(id).arg(token).arg(line);
        decode(self.send(cmd).await?)
    }

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
