//! `recurring put|list|get|delete|run|pause|resume`.

use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use delayq::wire::{NoContent, RecurringList, RecurringRun, RecurringSpec, RecurringStateBody};
use delayq::Missed;
use reqwest::Method;

use super::http::{recurring_path, Client};
use super::out::{local_time, name, outln, retry_text, table};
use super::{duration_with_unit, ms, retry_spec, ClientArgs};

#[derive(Args, Debug)]
pub struct Recurring {
    #[command(subcommand)]
    command: RecurringCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
pub enum RecurringCommand {
    /// Create or replace a schedule.
    Put {
        name: String,
        /// Topic of its jobs.
        #[arg(long)]
        topic: String,
        /// Six fields, seconds first ("0 0 9 * * *"), or five ("0 9 * * *").
        #[arg(long)]
        cron: String,
        /// IANA time zone of the rule.
        #[arg(long, default_value = "UTC")]
        timezone: String,
        /// Body of each job.
        #[arg(long, default_value = "")]
        body: String,
        /// Time to run of each job.
        #[arg(long, value_parser = duration_with_unit)]
        ttr: Option<Duration>,
        /// Retry intervals of each job, e.g. "2m,10m,1h".
        #[arg(long)]
        retry: Option<String>,
        /// Most attempts of each job.
        #[arg(long)]
        max_attempts: Option<u32>,
        /// A tick missed while no delayq ran: fire it once, or skip it.
        #[arg(long, default_value = "fire", value_parser = ["fire", "skip"])]
        missed: String,
    },
    /// List the schedules with their next fire times.
    List,
    /// Show one schedule.
    Get { name: String },
    /// Delete a schedule.
    Delete { name: String },
    /// Push one job of the schedule now (its ticks are unchanged).
    Run { name: String },
    /// Pause the schedule: no ticks until resumed (kept across restarts).
    Pause { name: String },
    /// Resume a paused schedule: its ticks count from now.
    Resume { name: String },
}

/// One schedule, a field a line.
fn schedule(s: &RecurringStateBody, o: &mut String) {
    let ttr = s.ttr_ms.to_string();
    let missed = name(&s.missed);
    let retry = retry_text(s.retry.as_ref(), "none of its own (the topic's)");
    for (key, value) in [
        ("name", &s.name),
        ("topic", &s.topic),
        ("cron", &s.cron),
        ("timezone", &s.timezone),
        ("missed", &missed),
        ("ttr_ms", &ttr),
        ("retry", &retry),
        ("body", &s.body),
    ] {
        outln!(o, "{key:>10}: {value}");
    }
    if s.paused {
        outln!(o, "{:>10}: since {}", "paused", local_time(s.paused_at_ms));
    }
    outln!(o, "{:>10}: {}", "last tick", local_time(s.last_tick_ms));
    outln!(o, "{:>10}: {}", "next fire", local_time(s.next_fire_ms));
    for t in s.next_runs_ms.iter().skip(1) {
        outln!(o, "{:>10}  {}", "", local_time(Some(*t)));
    }
}

impl Recurring {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        match self.command {
            RecurringCommand::Put {
                name,
                topic,
                cron,
                timezone,
                body,
                ttr,
                retry,
                max_attempts,
                missed,
            } => {
                let spec = RecurringSpec {
                    topic,
                    cron,
                    timezone: Some(timezone),
                    body,
                    ttr_ms: ttr.map(ms),
                    ttr: None,
                    retry: retry_spec(&retry, max_attempts)?,
                    missed: if missed == "skip" {
                        Missed::Skip
                    } else {
                        Missed::Fire
                    },
                };
                let reply = c
                    .call::<RecurringStateBody>(Method::PUT, &recurring_path(&name), Some(&spec))
                    .await?;
                c.show(&reply, schedule)
            }
            RecurringCommand::Get { name } => {
                let reply = c
                    .fetch::<RecurringStateBody>(Method::GET, &recurring_path(&name))
                    .await?;
                c.show(&reply, schedule)
            }
            RecurringCommand::List => {
                let reply = c
                    .fetch::<RecurringList>(Method::GET, "/v1/recurring")
                    .await?;
                c.show(&reply, |all, o| {
                    let mut rows =
                        vec![["name", "topic", "cron", "time zone", "next fire"].map(String::from)];
                    for s in &all.schedules {
                        rows.push([
                            s.name.clone(),
                            s.topic.clone(),
                            s.cron.clone(),
                            s.timezone.clone(),
                            if s.paused {
                                "paused".into()
                            } else {
                                local_time(s.next_fire_ms)
                            },
                        ]);
                    }
                    table(o, &rows);
                })
            }
            RecurringCommand::Delete { name } => {
                let reply = c
                    .fetch::<NoContent>(Method::DELETE, &recurring_path(&name))
                    .await?;
                c.show(&reply, |_, o| outln!(o, "deleted schedule {name}"))
            }
            RecurringCommand::Run { name } => {
                let path = format!("{}/run", recurring_path(&name));
                let reply = c.fetch::<RecurringRun>(Method::POST, &path).await?;
                c.show(&reply, |r, o| {
                    outln!(o, "pushed {} to {} (schedule {})", r.id, r.topic, r.name)
                })
            }
            RecurringCommand::Pause { name } => {
                let path = format!("{}/pause", recurring_path(&name));
                let reply = c.fetch::<RecurringStateBody>(Method::POST, &path).await?;
                c.show(&reply, schedule)
            }
            RecurringCommand::Resume { name } => {
                let path = format!("{}/resume", recurring_path(&name));
                let reply = c.fetch::<RecurringStateBody>(Method::POST, &path).await?;
                c.show(&reply, schedule)
            }
        }
    }
}
