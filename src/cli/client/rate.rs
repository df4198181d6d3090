//! `rate set|get|clear`.

use anyhow::Result;
use clap::{Args, Subcommand};
use delayq::wire::{self, NoContent, RateSpec};
use reqwest::Method;

use super::http::{topic_path, Client};
use super::out::outln;
use super::ClientArgs;

#[derive(Args, Debug)]
pub struct Rate {
    #[command(subcommand)]
    command: RateCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
pub enum RateCommand {
    /// Limit how fast the topic's jobs are handed out.
    Set {
        topic: String,
        /// Jobs per second.
        per_second: f64,
        /// Most jobs at once after a quiet spell (default: the rate).
        #[arg(long)]
        burst: Option<u32>,
    },
    /// Show the topic's limit.
    Get { topic: String },
    /// Remove the topic's limit.
    Clear { topic: String },
}

fn rate(r: &wire::Rate, o: &mut String) {
    outln!(
        o,
        "{}: at most {} jobs a second, bursts of {}",
        r.topic,
        r.per_second,
        r.burst
    )
}

impl Rate {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        match self.command {
            RateCommand::Set {
                topic,
                per_second,
                burst,
            } => {
                let spec = RateSpec { per_second, burst };
                let path = format!("{}/rate", topic_path(&topic));
                let reply = c
                    .call::<wire::Rate>(Method::PUT, &path, Some(&spec))
                    .await?;
                c.show(&reply, rate)
            }
            RateCommand::Get { topic } => {
                let path = format!("{}/rate", topic_path(&topic));
                let reply = c.fetch::<wire::Rate>(Method::GET, &path).await?;
                c.show(&reply, rate)
            }
            RateCommand::Clear { topic } => {
                let path = format!("{}/rate", topic_path(&topic));
                let reply = c.fetch::<NoContent>(Method::DELETE, &path).await?;
                c.show(&reply, |_, o| outln!(o, "{topic}: no rate limit"))
            }
        }
    }
}
