//! `group list|get|set|pause|resume`.

use anyhow::Result;
use clap::{Args, Subcommand};
use delayq::wire::{self, GroupSpec, RateSpec};
use reqwest::Method;

use super::http::{encode, group_path, topic_path, Client, Reply};
use super::out::outln;
use super::ClientArgs;

#[derive(Args, Debug)]
pub struct Group {
    #[command(subcommand)]
    command: GroupCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// A topic's groups (with ready or reserved jobs, or settings), every
    /// page.
    List { topic: String },
    /// A group's figures and settings.
    Get { topic: String, group: String },
    /// Change a group's settings: those given; the others stay as they are.
    Set {
        topic: String,
        group: String,
        /// Most jobs of the group reserved at once, across every instance.
        #[arg(long, conflicts_with = "no_concurrency")]
        concurrency: Option<u32>,
        /// Remove the concurrency limit.
        #[arg(long)]
        no_concurrency: bool,
        /// Hand out none of the group's jobs (`group resume` ends it).
        #[arg(long)]
        paused: bool,
        /// Most of the group's jobs handed out a second, across every
        /// instance.
        #[arg(long, conflicts_with = "no_rate")]
        rate: Option<f64>,
        /// With --rate: most at once after a quiet spell (default: the rate).
        #[arg(long, requires = "rate")]
        burst: Option<u32>,
        /// Remove the rate limit.
        #[arg(long)]
        no_rate: bool,
    },
    /// Stop handing out a group's jobs.
    Pause { topic: String, group: String },
    /// Hand out a paused group's jobs again.
    Resume { topic: String, group: String },
}

fn line(g: &wire::GroupBody, o: &mut String) {
    let limit = g
        .concurrency
        .map_or("no limit".to_owned(), |n| format!("limit {n}"));
    let paused = if g.paused { ", paused" } else { "" };
    let rate = g.rate.map_or(String::new(), |r| {
        format!(
            ", at most {} a second (bursts of {})",
            r.per_second, r.burst
        )
    });
    outln!(
        o,
        "{}: {} ready ({} held), {} reserved; {limit}{rate}{paused}",
        g.group,
        g.ready,
        g.held,
        g.reserved
    )
}

impl Group {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let one = match self.command {
            GroupCommand::List { topic } => {
                let mut all = Vec::new();
                let mut after = String::new();
                loop {
                    let path = format!(
                        "{}/groups?limit={}&after={}",
                        topic_path(&topic),
                        delayq::defaults::MAX_GROUP_PAGE,
                        encode(&after)
                    );
                    let page = c.fetch::<wire::GroupPageBody>(Method::GET, &path).await?;
                    all.extend(page.value.groups);
                    match page.value.next {
                        Some(n) => after = n,
                        None => break,
                    }
                }
                let value = wire::GroupPageBody {
                    groups: all,
                    next: None,
                };
                let page = Reply {
                    raw: serde_json::to_value(&value)?,
                    value,
                };
                return c.show(&page, |p, o| {
                    if p.groups.is_empty() {
                        outln!(o, "no groups");
                    }
                    for g in &p.groups {
                        line(g, o);
                    }
                });
            }
            GroupCommand::Get { topic, group } => {
                c.fetch::<wire::GroupBody>(Method::GET, &group_path(&topic, &group))
                    .await?
            }
            GroupCommand::Set {
                topic,
                group,
                concurrency,
                no_concurrency,
                paused,
                rate,
                burst,
                no_rate,
            } => {
                let spec = GroupSpec {
                    concurrency: if no_concurrency {
                        Some(None)
                    } else {
                        concurrency.map(Some)
                    },
                    paused: paused.then_some(true),
                    rate: if no_rate {
                        Some(None)
                    } else {
                        rate.map(|per_second| Some(RateSpec { per_second, burst }))
                    },
                };
                c.call::<wire::GroupBody>(Method::PUT, &group_path(&topic, &group), Some(&spec))
                    .await?
            }
            GroupCommand::Pause { topic, group } => {
                let path = format!("{}/pause", group_path(&topic, &group));
                c.fetch::<wire::GroupBody>(Method::POST, &path).await?
            }
            GroupCommand::Resume { topic, group } => {
                let path = format!("{}/resume", group_path(&topic, &group));
                c.fetch::<wire::GroupBody>(Method::POST, &path).await?
            }
        };
        c.show(&one, line)
    }
}
