//! `pop`, and the lease holder's `finish`, `nack`, `touch`.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use delayq::wire::{
    NackSpec, NackedBody, NoContent, PopSpec, Popped, TokenSpec, TouchSpec, Touched,
};
use delayq::JobState;
use reqwest::Method;

use super::http::{job_path, Client};
use super::out::{local_time, name, outln, write_out};
use super::{duration_with_unit, ms, ClientArgs};

#[derive(Args, Debug)]
pub struct Pop {
    /// Topics, tried in order.
    #[arg(required = true)]
    topics: Vec<String>,
    /// Most jobs.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Longest wait for a job: 0s, 30s, 2m.
    #[arg(long, value_parser = duration_with_unit, default_value = "0s")]
    wait: Duration,
    #[command(flatten)]
    client: ClientArgs,
}

impl Pop {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let spec = PopSpec {
            topics: self.topics,
            max: self.count,
            wait_ms: ms(self.wait),
        };
        let reply = c
            .call::<Popped>(Method::POST, "/v1/pop", Some(&spec))
            .await?;
        let text = c.text(&reply, |p, o| {
            if p.jobs.is_empty() {
                outln!(o, "none ready");
            }
            for j in &p.jobs {
                // The token second: `| head -2` still has what settles it.
                outln!(o, "id:      {}", j.id);
                outln!(o, "token:   {}", j.token);
                outln!(o, "topic:   {}", j.topic);
                outln!(o, "attempt: {}", j.attempts);
                outln!(o, "due at:  {}", local_time(Some(j.due_at_ms)));
                outln!(o, "body:    {}", j.body);
            }
        })?;
        if let Err(e) = write_out(&text) {
            release_unprinted(&c, &reply.value).await;
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                return Err(anyhow::Error::new(e).context("writing to stdout"));
            }
        }
        Ok(())
    }
}

/// Gives back the jobs a pop leased when their tokens could not be
/// printed: nobody can settle them, so they are ready again at once,
/// their attempts uncounted.
async fn release_unprinted(c: &Client, popped: &Popped) {
    for j in &popped.jobs {
        let path = format!("{}/release", job_path(&j.id));
        let spec = TokenSpec {
            token: j.token.clone(),
        };
        if let Err(e) = c.call::<NoContent>(Method::POST, &path, Some(&spec)).await {
            eprintln!("delayq: {}: its token could not be printed and giving it back failed ({e:#}); it returns after its ttr", j.id);
        }
    }
}

#[derive(Args, Debug)]
pub struct Finish {
    id: String,
    /// The lease token pop gave.
    #[arg(long = "lease", value_name = "TOKEN")]
    lease_token: String,
    #[command(flatten)]
    client: ClientArgs,
}

impl Finish {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let path = format!("{}/finish", job_path(&self.id));
        let spec = TokenSpec {
            token: self.lease_token,
        };
        let reply = c
            .call::<NoContent>(Method::POST, &path, Some(&spec))
            .await?;
        c.show(&reply, |_, o| outln!(o, "finished {}", self.id))
    }
}

#[derive(Args, Debug)]
pub struct Nack {
    id: String,
    /// The lease token pop gave.
    #[arg(long = "lease", value_name = "TOKEN")]
    lease_token: String,
    /// Why it failed (kept in the job's history).
    #[arg(long, default_value = "")]
    error: String,
    /// Retry after this instead of the policy's interval.
    #[arg(long, value_parser = duration_with_unit)]
    delay: Option<Duration>,
    #[command(flatten)]
    client: ClientArgs,
}

impl Nack {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let path = format!("{}/nack", job_path(&self.id));
        let spec = NackSpec {
            token: self.lease_token,
            delay_ms: self.delay.map(ms),
            error: self.error,
        };
        let reply = c
            .call::<NackedBody>(Method::POST, &path, Some(&spec))
            .await?;
        c.show(&reply, |n, o| {
            // A dead job's time is when it died, not a due time.
            let when = if n.state == JobState::Dead {
                "since"
            } else {
                "due at"
            };
            let at = local_time(Some(n.due_at_ms));
            outln!(o, "{}: {} ({when} {at})", self.id, name(&n.state))
        })
    }
}

#[derive(Args, Debug)]
pub struct Touch {
    id: String,
    /// The lease token pop gave.
    #[arg(long = "lease", value_name = "TOKEN")]
    lease_token: String,
    /// New lease length from now (default: the job's ttr).
    #[arg(long, value_parser = duration_with_unit)]
    ttr: Option<Duration>,
    #[command(flatten)]
    client: ClientArgs,
}

impl Touch {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let path = format!("{}/touch", job_path(&self.id));
        let spec = TouchSpec {
            token: self.lease_token,
            ttr_ms: self.ttr.map(ms),
        };
        let reply = c.call::<Touched>(Method::POST, &path, Some(&spec)).await?;
        c.show(&reply, |t, o| {
            let until = local_time(Some(t.lease_until_ms));
            outln!(o, "{}: leased until {until}", self.id)
        })
    }
}
