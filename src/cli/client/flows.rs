//! `flow push|get|cancel`: flows, a parent job that waits for its
//! children (a tree pushed in one request).

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use delayq::wire::{FlowBody, FlowCancelled, FlowPushedBody};
use reqwest::Method;

use super::http::{flow_path, Client};
use super::out::{local_time, outln, table};
use super::ClientArgs;

#[derive(Args, Debug)]
pub struct Flow {
    #[command(subcommand)]
    command: FlowCommand,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Subcommand, Debug)]
pub enum FlowCommand {
    /// Push a flow from a JSON file (`-` for stdin): one job as `POST
    /// /v1/jobs` takes it, with "children" (each a job of the same shape)
    /// and, on a parent, "on_child_dead" ("fail", the default, or
    /// "ignore"). Prints the root's id (--json: every job's id).
    Push {
        /// The file holding the flow's root.
        file: String,
    },
    /// A flow's state and its children's counts, by its parent's id.
    Get { id: String },
    /// Cancel a waiting flow: its parent never runs; its children not
    /// handed out are deleted, down the tree.
    Cancel { id: String },
}

/// One flow: its fields, then its children's counts in a table.
fn flow(f: &FlowBody, o: &mut String) {
    let ended = f.ended_at_ms.map(|ms| local_time(Some(ms)));
    for (key, value) in [
        ("id", Some(f.id.clone())),
        ("topic", Some(f.topic.clone())),
        ("state", Some(f.state.clone())),
        ("on dead child", Some(f.on_child_dead.clone())),
        ("failed by", f.failed_by.clone()),
        ("parent", f.parent.clone()),
        ("created", Some(local_time(Some(f.created_at_ms)))),
        ("ended", ended),
    ] {
        if let Some(value) = value {
            outln!(o, "{key:>13}: {value}");
        }
    }
    let [children, pending, finished, dead, deleted] =
        [f.children, f.pending, f.finished, f.dead, f.deleted].map(|n| n.to_string());
    let head = ["", "children", "pending", "finished", "dead", "deleted"].map(str::to_owned);
    outln!(o, "");
    table(
        o,
        &[
            head,
            ["counts".into(), children, pending, finished, dead, deleted],
        ],
    );
}

/// The flow in `path` (`-`: stdin): a JSON object, sent as it is (the
/// server names what is wrong in it).
fn read_flow(path: &str) -> Result<serde_json::Value> {
    let text = if path == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading the flow from stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading the flow from {path}"))?
    };
    let what = || format!("{path}: not a JSON object (the flow's root, with its children)");
    let v: serde_json::Value = serde_json::from_str(&text).with_context(what)?;
    if !v.is_object() {
        anyhow::bail!(what());
    }
    Ok(v)
}

impl Flow {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        match self.command {
            FlowCommand::Push { file } => {
                let spec = read_flow(&file)?;
                let reply = c
                    .call::<FlowPushedBody>(Method::POST, "/v1/flows", Some(&spec))
                    .await?;
                c.show(&reply, |r, o| outln!(o, "{}", r.id))
            }
            FlowCommand::Get { id } => {
                let reply = c.fetch::<FlowBody>(Method::GET, &flow_path(&id)).await?;
                c.show(&reply, flow)
            }
            FlowCommand::Cancel { id } => {
                let path = format!("{}/cancel", flow_path(&id));
                let reply = c.fetch::<FlowCancelled>(Method::POST, &path).await?;
                c.show(&reply, |r, o| {
                    outln!(o, "cancelled flow {id}; jobs deleted: {}", r.deleted)
                })
            }
        }
    }
}
