//! `stats`, `dead list|requeue|purge`, `pause`, `resume`.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use delayq::wire::{DeadPage, Paused, Purged, RequeueSpec, Requeued, Topics};
use reqwest::Method;

use super::http::{encode, topic_path, Client};
use super::out::{local_time, or_dash, outln, table};
use super::ClientArgs;

#[derive(Args, Debug)]
pub struct Stats {
    #[command(flatten)]
    client: ClientArgs,
}

impl Stats {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let mut reply = c.fetch::<Topics>(Method::GET, "/v1/topics").await?;
        // Every page, each of which costs the server O(page).
        while let Some(cursor) = reply.value.next_cursor.take() {
            let path = format!("/v1/topics?cursor={}", encode(&cursor));
            let page = c.fetch::<Topics>(Method::GET, &path).await?;
            let more = page.raw.get("topics").and_then(|t| t.as_object());
            let all = reply.raw.get_mut("topics").and_then(|t| t.as_object_mut());
            if let (Some(all), Some(more)) = (all, more) {
                all.extend(more.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            reply.value.topics.extend(page.value.topics);
            reply.value.next_cursor = page.value.next_cursor;
        }
        if let Some(o) = reply.raw.as_object_mut() {
            o.remove("next_cursor");
        }
        c.show(&reply, |v, o| {
            let mut rows = vec![[
                "topic",
                "delivered by",
                "delayed",
                "ready",
                "reserved",
                "dead",
            ]
            .map(String::from)];
            for (t, n) in &v.topics {
                let by = v.webhooks.get(t);
                rows.push([
                    t.clone(),
                    by.map_or("pop".into(), |h| format!("webhook to {h}")),
                    n.delayed.to_string(),
                    n.ready.to_string(),
                    n.reserved.to_string(),
                    n.dead.to_string(),
                ]);
            }
            table(o, &rows);
            match v.next_due_ms {
                Some(ms) => outln!(o, "next due at: {}", local_time(Some(ms))),
                None => outln!(o, "next due at: nothing scheduled"),
            }
            outln!(o, "waiting pops: {}", v.waiting_pops);
            if v.webhook_pops > 0 {
                outln!(o, "webhook deliveries waiting: {}", v.webhook_pops);
            }
        })
    }
}

#[derive(Args, Debug)]
pub struct Dead {
    #[command(subcommand)]
    command: DeadCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
pub enum DeadCommand {
    /// List dead jobs, oldest first.
    List {
        topic: String,
        #[arg(long, default_value_t = 0)]
        offset: usize,
        #[arg(long, default_value_t = delayq::defaults::PAGE)]
        limit: usize,
    },
    /// Requeue dead jobs (the ids given, or all) with fresh attempts.
    Requeue { topic: String, ids: Vec<String> },
    /// Delete every dead job of the topic.
    Purge { topic: String },
    /// `delayq dead TOPIC`: clap alone would only say the subcommand is
    /// unknown; a topic here most likely means `dead list TOPIC`.
    #[command(external_subcommand)]
    Other(Vec<String>),
}

impl Dead {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        match self.command {
            DeadCommand::List {
                topic,
                offset,
                limit,
            } => {
                let path = format!("{}/dead?offset={offset}&limit={limit}", topic_path(&topic));
                let reply = c.fetch::<DeadPage>(Method::GET, &path).await?;
                c.show(&reply, |page, o| {
                    let mut rows = vec![["id", "attempts", "died", "last error"].map(String::from)];
                    for j in &page.jobs {
                        rows.push([
                            j.id.clone(),
                            j.attempts.to_string(),
                            local_time(j.dead_at_ms),
                            or_dash(&j.last_error),
                        ]);
                    }
                    table(o, &rows);
                })
            }
            DeadCommand::Requeue { topic, ids } => {
                let path = format!("{}/dead/requeue", topic_path(&topic));
                let spec = RequeueSpec { ids };
                let reply = c.call::<Requeued>(Method::POST, &path, Some(&spec)).await?;
                c.show(&reply, |r, o| {
                    outln!(o, "requeued {} dead jobs of {topic}", r.requeued)
                })
            }
            DeadCommand::Purge { topic } => {
                let path = format!("{}/dead", topic_path(&topic));
                let reply = c.fetch::<Purged>(Method::DELETE, &path).await?;
                c.show(&reply, |p, o| {
                    outln!(o, "purged {} dead jobs of {topic}", p.purged)
                })
            }
            DeadCommand::Other(words) => {
                let topic = words.first().map_or("TOPIC", String::as_str);
                bail!(
                    "no dead command {topic:?}: to see the dead jobs of topic {topic}, run \
                     `delayq dead list {topic}` (commands: list, requeue, purge)"
                )
            }
        }
    }
}

#[derive(Args, Debug)]
pub struct Pause {
    topic: String,
    #[command(flatten)]
    client: ClientArgs,
}

impl Pause {
    pub(super) async fn run(self) -> Result<()> {
        pause_or_resume(&self.client, &self.topic, "pause").await
    }
}

#[derive(Args, Debug)]
pub struct Resume {
    topic: String,
    #[command(flatten)]
    client: ClientArgs,
}

impl Resume {
    pub(super) async fn run(self) -> Result<()> {
        pause_or_resume(&self.client, &self.topic, "resume").await
    }
}

/// `delayq pause|resume TOPIC` (`action`), with a note when the server
/// holds no job of `topic`: looked at first, since a paused topic is
/// listed, jobs or none.
async fn pause_or_resume(args: &ClientArgs, topic: &str, action: &str) -> Result<()> {
    let c = Client::new(args);
    let unseen = unseen(&c, topic).await;
    let path = format!("{}/{action}", topic_path(topic));
    let reply = c.fetch::<Paused>(Method::POST, &path).await?;
    if unseen {
        eprintln!(
            "delayq: note: no job of topic {topic:?} is stored here (never seen, or all \
             done): is the name right? `delayq stats` lists the topics"
        );
    }
    c.show(&reply, |p, o| {
        let done = if p.paused { "paused" } else { "resumed" };
        outln!(o, "{topic}: {done}")
    })
}

/// A typo (`pause orderz`) would pause a topic nobody uses, silently: true
/// when the server holds no job of `topic`.
async fn unseen(c: &Client, topic: &str) -> bool {
    let path = format!("/v1/topics?topic={}", encode(topic));
    match c.fetch::<Topics>(Method::GET, &path).await {
        Ok(reply) => reply.value.topics.get(topic).is_none_or(|n| n.is_empty()),
        Err(_) => false,
    }
}
