//! `batch create|get|close|cancel`: batches of jobs with one callback
//! (jobs go in with `delayq push --batch ID`).

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use delayq::wire::{
    BatchBody, BatchCancelled, BatchCreated, BatchOnSpec, BatchReply, CallbackSpec, NewBatchSpec,
};
use reqwest::Method;

use super::http::{batch_path, Client};
use super::out::{local_time, outln, table};
use super::{duration_with_unit, ms, retry_spec, ClientArgs};

#[derive(Args, Debug)]
pub struct Batch {
    #[command(subcommand)]
    command: BatchCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
pub enum BatchCommand {
    /// Create a batch. Without --jobs it stays open: push its jobs with
    /// `delayq push --batch ID`, then `delayq batch close ID`.
    Create {
        /// The batch's id (default: a UUID delayq picks).
        #[arg(long)]
        id: Option<String>,
        /// Topic of the callback job pushed once the batch is done.
        #[arg(long)]
        callback_topic: String,
        /// Given back as the `body` of the callback's JSON report.
        #[arg(long, default_value = "")]
        callback_body: String,
        /// Time to run of the callback job.
        #[arg(long, value_parser = duration_with_unit)]
        callback_ttr: Option<Duration>,
        /// Retry intervals of the callback job, e.g. "2m,10m,1h".
        #[arg(long)]
        callback_retry: Option<String>,
        /// Most attempts of the callback job.
        #[arg(long)]
        callback_max_attempts: Option<u32>,
        /// When it fires: once every job finished or died (settled), or
        /// once every job finished (finished).
        #[arg(long, default_value = "settled", value_parser = ["settled", "finished"])]
        on: String,
        /// A file (`-` for stdin) holding a JSON array of jobs, as
        /// `POST /v1/batches` takes them (at most 1,000): pushed into the
        /// batch, which is then closed unless --open.
        #[arg(long)]
        jobs: Option<String>,
        /// With --jobs: leave the batch open after them.
        #[arg(long, requires = "jobs")]
        open: bool,
    },
    /// A batch's state and counts.
    Get { id: String },
    /// Close a batch: its jobs are all in; it fires once they have their
    /// outcomes (at once if they have).
    Close { id: String },
    /// Cancel a batch: it never fires; its jobs not handed out are deleted.
    Cancel { id: String },
}

/// One batch: its fields, then its counts in a table.
fn batch(b: &BatchBody, o: &mut String) {
    let ended = b.ended_at_ms.map(|ms| local_time(Some(ms)));
    for (key, value) in [
        ("id", Some(b.id.clone())),
        ("state", Some(b.state.clone())),
        ("on", Some(b.on.clone())),
        (
            "callback",
            Some(format!("{} ({})", b.callback_id, b.callback_topic)),
        ),
        ("created", Some(local_time(Some(b.created_at_ms)))),
        ("ended", ended),
    ] {
        if let Some(value) = value {
            outln!(o, "{key:>9}: {value}");
        }
    }
    let [jobs, pending, finished, dead, deleted] =
        [b.jobs, b.pending, b.finished, b.dead, b.deleted].map(|n| n.to_string());
    let head = ["", "jobs", "pending", "finished", "dead", "deleted"].map(str::to_owned);
    outln!(o, "");
    table(
        o,
        &[
            head,
            ["counts".into(), jobs, pending, finished, dead, deleted],
        ],
    );
}

/// The refused jobs of a push into a batch, one a line.
fn refusals(r: &BatchReply, o: &mut String) {
    outln!(o, "jobs accepted: {}, refused: {}", r.accepted, r.rejected);
    for j in r.results.iter().filter(|j| j.error.is_some()) {
        let why = j.error.as_ref().map_or("", |e| e.message.as_str());
        outln!(o, "job {} refused ({}): {why}", j.index, j.status);
    }
}

/// The jobs in `path` (`-`: stdin): a JSON array.
fn read_jobs(path: &str) -> Result<Vec<serde_json::Value>> {
    let text = if path == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading jobs from stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading jobs from {path}"))?
    };
    serde_json::from_str(&text).with_context(|| format!("--jobs {path}: not a JSON array of jobs"))
}

impl Batch {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let one = match self.command {
            BatchCommand::Create {
                id,
                callback_topic,
                callback_body,
                callback_ttr,
                callback_retry,
                callback_max_attempts,
                on,
                jobs,
                open,
            } => {
                let spec = NewBatchSpec {
                    id,
                    on: if on == "finished" {
                        BatchOnSpec::Finished
                    } else {
                        BatchOnSpec::Settled
                    },
                    callback: CallbackSpec {
                        topic: callback_topic,
                        body: callback_body,
                        ttr_ms: callback_ttr.map(ms),
                        retry: retry_spec(&callback_retry, callback_max_attempts)?,
                    },
                    jobs: jobs
                        .as_deref()
                        .map(read_jobs)
                        .transpose()?
                        .unwrap_or_default(),
                    // Without jobs, closing would fire it at once, empty.
                    open: open || jobs.is_none(),
                };
                let reply = c
                    .call::<BatchCreated>(Method::POST, "/v1/batches", Some(&spec))
                    .await?;
                c.show(&reply, |r, o| {
                    batch(&r.batch, o);
                    if jobs.is_some() {
                        refusals(&r.jobs, o);
                        if r.jobs.rejected > 0 {
                            outln!(
                                o,
                                "the batch stays open: push the refused jobs again, then close it"
                            );
                        }
                    }
                })?;
                // A script must not take a batch left open for success.
                if reply.value.jobs.rejected > 0 {
                    anyhow::bail!(
                        "{} of the batch's jobs were refused; batch {} stays open",
                        reply.value.jobs.rejected,
                        reply.value.batch.id
                    );
                }
                return Ok(());
            }
            BatchCommand::Get { id } => c.fetch::<BatchBody>(Method::GET, &batch_path(&id)).await?,
            BatchCommand::Close { id } => {
                let path = format!("{}/close", batch_path(&id));
                c.fetch::<BatchBody>(Method::POST, &path).await?
            }
            BatchCommand::Cancel { id } => {
                let path = format!("{}/cancel", batch_path(&id));
                let reply = c.fetch::<BatchCancelled>(Method::POST, &path).await?;
                // Its counts follow the deletions a moment later (`batch get`).
                return c.show(&reply, |r, o| {
                    outln!(
                        o,
                        "{} {}; jobs deleted: {}",
                        r.batch.state,
                        r.batch.id,
                        r.deleted
                    )
                });
            }
        };
        c.show(&one, batch)
    }
}
