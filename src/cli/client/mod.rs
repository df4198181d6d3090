//! Client subcommands: talk to a running delayq over its native API.
//! Human-readable output by default; `--json` prints the server's JSON.
//!
//! Requests and replies are the types of [`delayq::wire`], the ones the
//! server reads and writes. One module per group of commands: [`jobs`]
//! (push, get, delete, reschedule, list), [`lease`] (pop, finish, nack,
//! touch), [`running`] (progress, log), [`topics`] (stats, dead letters, pause, resume), [`recurring`]
//! (recurring schedules), [`rate`] (rate limits), [`groups`] (groups), [`batches`]
//! (batches), [`flows`] (flows); [`http`] sends, [`out`] prints.

mod batches;
mod events;
mod flows;
mod groups;
mod http;
mod jobs;
mod lease;
mod out;
mod rate;
mod recurring;
mod result;
mod running;
mod tags;
mod topics;
mod work;

use anyhow::Result;
use clap::{Args, Subcommand};
use delayq::duration::parse_duration;
use delayq::wire::{DueAt, Interval, RetrySpec};

pub(crate) use http::{job_path, Client, JobCancelled, OutcomeUnknown};

/// How a client command reaches the server. These belong to the client
/// commands only: `serve` has its own flags and its own environment
/// variables (`DELAYQ_AUTH_TOKEN` is the server's), so a token exported
/// for the client never turns on authentication in a server.
#[derive(Args, Debug, Clone)]
pub struct ClientArgs {
    /// The delayq server: http(s)://HOST:PORT (HOST:PORT means http://).
    #[arg(
        long,
        global = true,
        env = "DELAYQ_SERVER",
        default_value = delayq::defaults::SERVER
    )]
    server: String,

    /// Print the server's JSON reply instead of text.
    #[arg(long, global = true)]
    json: bool,

    /// Bearer token, when the server requires one.
    #[arg(
        long,
        global = true,
        env = "DELAYQ_CLIENT_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Push a job.
    Push(jobs::Push),
    /// Show a job.
    Get(jobs::Get),
    /// Delete a job from any state.
    Delete(jobs::Delete),
    /// Cancel a job, also one that runs (its consumer is told at its next
    /// touch, nack or finish; `delayq work` stops the job's command).
    Cancel(jobs::Cancel),
    /// Job counts per topic and state.
    Stats(topics::Stats),
    /// Dead letters of a topic.
    Dead(topics::Dead),
    /// Lease ready jobs, waiting for one up to --wait.
    Pop(lease::Pop),
    /// Finish a leased job.
    Finish(lease::Finish),
    /// Report a failed attempt: the job retries or dies by its policy.
    Nack(lease::Nack),
    /// Extend a lease.
    Touch(lease::Touch),
    /// Give a job a new due time (and, optionally, body).
    Reschedule(jobs::Reschedule),
    /// List a topic's jobs in one state, a page at a time.
    List(jobs::List),
    /// Stop handing out a topic's jobs (they still fall due).
    Pause(topics::Pause),
    /// Hand out a paused topic's jobs again.
    Resume(topics::Resume),
    /// Run a command for each job of a topic: body on stdin, id, topic and
    /// attempt in DELAYQ_JOB_ID, DELAYQ_JOB_TOPIC, DELAYQ_JOB_ATTEMPT; exit 0
    /// finishes the job (with a result: --result-stdout, --result-file),
    /// anything else nacks it with the end of stderr.
    /// The job's retry policy says when it runs again; a job with none
    /// waits 1s, 5s, 30s, 2m, 10m, 30m, 1h, 2h, 4h, then 8h each time.
    Work(work::Work),
    /// Recurring schedules: a job per cron tick.
    Recurring(recurring::Recurring),
    /// A topic's rate limit.
    Rate(rate::Rate),
    /// A topic's groups: their figures, concurrency limits and pauses.
    Group(groups::Group),
    /// Batches: jobs pushed with `delayq push --batch ID`, and one
    /// callback job once they all have their outcomes.
    Batch(batches::Batch),
    /// Flows: a parent job that waits for its children (a tree pushed
    /// from a JSON file), then runs with their outcomes and results.
    Flow(flows::Flow),
    /// Follow the event stream (the server needs --events) until Ctrl-C.
    Events(events::Events),
    /// List, cancel or reschedule a tag's jobs, every page.
    Tags(tags::Tags),
    /// Report a leased job's progress (JSON; `delayq get` shows it).
    Progress(running::Progress),
    /// Append a line to a leased job's log (`delayq get` shows the last).
    Log(running::Log),
}

pub async fn run(command: ClientCommand) -> Result<()> {
    match command {
        ClientCommand::Push(c) => c.run().await,
        ClientCommand::Get(c) => c.run().await,
        ClientCommand::Delete(c) => c.run().await,
        ClientCommand::Cancel(c) => c.run().await,
        ClientCommand::Stats(c) => c.run().await,
        ClientCommand::Dead(c) => c.run().await,
        ClientCommand::Pop(c) => c.run().await,
        ClientCommand::Finish(c) => c.run().await,
        ClientCommand::Nack(c) => c.run().await,
        ClientCommand::Touch(c) => c.run().await,
        ClientCommand::Reschedule(c) => c.run().await,
        ClientCommand::List(c) => c.run().await,
        ClientCommand::Pause(c) => c.run().await,
        ClientCommand::Resume(c) => c.run().await,
        ClientCommand::Recurring(c) => c.run().await,
        ClientCommand::Rate(c) => c.run().await,
        ClientCommand::Group(c) => c.run().await,
        ClientCommand::Batch(c) => c.run().await,
        ClientCommand::Flow(c) => c.run().await,
        ClientCommand::Events(c) => c.run().await,
        ClientCommand::Tags(c) => c.run().await,
        ClientCommand::Progress(c) => c.run().await,
        ClientCommand::Log(c) => c.run().await,
        ClientCommand::Work(w) => w.run().await,
    }
}

/// A duration flag of the client: the unit is required (`--delay 5000`
/// would be 83 minutes, not the 5 seconds a user of milliseconds means).
fn duration_with_unit(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    if t != "0" && !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{t:?} has no unit; write {t}ms, {t}s, {t}m, {t}h or {t}d (e.g. 1500ms, 30s, 5m)"
        ));
    }
    parse_duration(t)
}

/// Checks `--at` before anything is sent: a number must be Unix ms of this
/// era (Unix seconds would fire at once), text an RFC 3339 time with a zone.
fn parse_at(at: &str) -> Result<DueAt, String> {
    let due = DueAt::from_text(at);
    due.to_ms("--at").map(|_| due)
}

/// Milliseconds as the API takes them.
fn ms(d: std::time::Duration) -> u64 {
    d.as_millis() as u64
}

/// The API's retry object from "2m,10m,1h" and a maximum.
fn retry_spec(retry: &Option<String>, max_attempts: Option<u32>) -> Result<Option<RetrySpec>> {
    if retry.is_none() && max_attempts.is_none() {
        return Ok(None);
    }
    let intervals: Vec<Interval> = retry
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|i| {
            duration_with_unit(i).map_err(|e| anyhow::anyhow!("--retry: {e}"))?;
            Ok(Interval::Text(i.to_owned()))
        })
        .collect::<Result<_>>()?;
    Ok(Some(RetrySpec {
        intervals,
        max_attempts,
    }))
}
