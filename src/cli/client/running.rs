//! The lease holder's reports while a job runs: `progress` and `log`.

use anyhow::{Context, Result};
use clap::Args;
use delayq::wire::{LogSpec, NoContent, ProgressSpec};
use reqwest::Method;

use super::http::{job_path, Client};
use super::out::outln;
use super::ClientArgs;

#[derive(Args, Debug)]
pub struct Progress {
    id: String,
    /// The lease token pop gave.
    #[arg(long = "lease", value_name = "TOKEN")]
    lease_token: String,
    /// The progress, JSON: 42, or '{"done":3,"of":7}' (at most 1024 bytes).
    value: String,
    #[command(flatten)]
    client: ClientArgs,
}

impl Progress {
    pub(super) async fn run(self) -> Result<()> {
        let progress: serde_json::Value = serde_json::from_str(&self.value).with_context(|| {
            format!(
                "progress {:?} is not JSON: give a number, or quote a string ('\"half\"')",
                self.value
            )
        })?;
        let c = Client::new(&self.client);
        let path = format!("{}/progress", job_path(&self.id));
        let spec = ProgressSpec {
            token: self.lease_token,
            progress,
        };
        let reply = c
            .call::<NoContent>(Method::POST, &path, Some(&spec))
            .await?;
        c.show(&reply, |_, o| {
            outln!(o, "{}: progress {}", self.id, self.value)
        })
    }
}

#[derive(Args, Debug)]
pub struct Log {
    id: String,
    /// The lease token pop gave.
    #[arg(long = "lease", value_name = "TOKEN")]
    lease_token: String,
    /// One line (at most 1024 bytes, no control character but tab).
    line: String,
    #[command(flatten)]
    client: ClientArgs,
}

impl Log {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let path = format!("{}/log", job_path(&self.id));
        let spec = LogSpec {
            token: self.lease_token,
            line: self.line,
        };
        let reply = c
            .call::<NoContent>(Method::POST, &path, Some(&spec))
            .await?;
        c.show(&reply, |_, o| outln!(o, "{}: logged", self.id))
    }
}
