//! `events`: follow the event stream (`GET /v1/events`), one line per
//! event, until Ctrl-C; a broken connection is resumed after the last
//! event printed.
//!
//! Text: `<local time> <event> <job id> topic=<t> attempt=<n>` then
//! `due=<time>` and `error=<text>` where they apply, and `position=<id>`
//! (what `--after` takes). `--json`: the event's JSON with its
//! `position`, one object per line. A gap (events missed: the position is
//! older than the server keeps) is a line `gap: ...` (JSON: `"event":
//! "gap"`).

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use delayq::wire::{Event, EventGap};
use serde_json::Value;

use super::http::{encode, Client};
use super::out::{local_time, print};
use super::ClientArgs;

#[derive(Args, Debug)]
pub struct Events {
    /// Only these topics, comma-separated.
    #[arg(long)]
    topics: Option<String>,
    /// Start after this event position (a `position=` printed before; `0`:
    /// the oldest the server keeps). Without it: from now on.
    #[arg(long)]
    after: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

/// One SSE message, as the server sends them.
#[derive(Default)]
struct Message {
    id: Option<String>,
    event: Option<String>,
    data: String,
}

/// Takes the complete messages off the front of `buf`.
fn messages(buf: &mut String) -> Vec<Message> {
    let mut out = Vec::new();
    while let Some(end) = buf.find("\n\n") {
        let block: String = buf.drain(..end + 2).collect();
        let mut m = Message::default();
        for line in block.lines() {
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => m.id = Some(value.to_owned()),
                "event" => m.event = Some(value.to_owned()),
                "data" => {
                    if !m.data.is_empty() {
                        m.data.push('\n');
                    }
                    m.data.push_str(value);
                }
                _ => {} // comments (keep-alives)
            }
        }
        if !m.data.is_empty() {
            out.push(m);
        }
    }
    out
}

impl Events {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let mut path = "/v1/events".to_owned();
        if let Some(t) = &self.topics {
            path.push_str(&format!("?topics={}", encode(t)));
        }
        let mut last = self.after.clone();
        let mut first = true;
        loop {
            let mut resp = match c.open(&path, last.as_deref()).await {
                Ok(r) => r,
                // The first answer is the user's to see (events off, a
                // bad position); later, the server may be restarting.
                Err(e) if first => return Err(e),
                Err(e) => {
                    eprintln!("delayq events: {e:#}; trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            first = false;
            let mut buf = String::new();
            loop {
                let chunk = match resp.chunk().await {
                    Ok(Some(c)) => c,
                    Ok(None) => break,
                    Err(e) => {
                        eprintln!("delayq events: connection lost ({e}); resuming");
                        break;
                    }
                };
                buf.push_str(&String::from_utf8_lossy(&chunk));
                for m in messages(&mut buf) {
                    print(&self.line(&c, &m)?)?;
                    if m.id.is_some() {
                        last = m.id;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn line(&self, c: &Client, m: &Message) -> Result<String> {
        if m.event.as_deref() == Some("gap") {
            let gap: EventGap = serde_json::from_str(&m.data).context("a gap from the server")?;
            return Ok(if c.json {
                format!(
                    "{}\n",
                    serde_json::json!({"event": "gap", "partitions": gap.partitions, "message": gap.message})
                )
            } else {
                format!("gap: {}\n", gap.message)
            });
        }
        let pos = m.id.clone().unwrap_or_default();
        if c.json {
            let mut v: Value = serde_json::from_str(&m.data).context("an event from the server")?;
            v["position"] = Value::String(pos);
            return Ok(format!("{v}\n"));
        }
        let e: Event = serde_json::from_str(&m.data).context("an event from the server")?;
        let mut line = format!(
            "{} {} {} topic={} attempt={}",
            local_time(Some(e.at_ms)),
            e.event,
            e.id,
            e.topic,
            e.attempt
        );
        if let Some(due) = e.due_ms {
            line.push_str(&format!(" due={}", local_time(Some(due))));
        }
        if let Some(err) = &e.error {
            line.push_str(&format!(" error={err:?}"));
        }
        line.push_str(&format!(" position={pos}\n"));
        Ok(line)
    }
}
