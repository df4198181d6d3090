//! Client subcommands: talk to a running delayq over its native API.
//! Human-readable output by default; `--json` prints the server's JSON.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use delayq::duration::parse_duration;
use serde_json::{json, Value};

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The delayq server.
    #[arg(
        long,
        global = true,
        env = "DELAYQ_SERVER",
        default_value = "http://127.0.0.1:9277"
    )]
    server: String,

    /// Print the server's JSON reply instead of text.
    #[arg(long, global = true)]
    json: bool,

    /// Bearer token, when the server requires one.
    #[arg(long, global = true, env = "DELAYQ_AUTH_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Push a job.
    Push {
        /// Topic of the job.
        #[arg(long)]
        topic: String,
        /// Job id (generated when absent).
        #[arg(long)]
        id: Option<String>,
        /// Body (a string).
        #[arg(long, default_value = "")]
        body: String,
        /// Delay: 500ms, 30s, 2m, 1h, 15d.
        #[arg(long, value_parser = parse_duration, conflicts_with = "at")]
        delay: Option<std::time::Duration>,
        /// Absolute due time: Unix ms or RFC 3339.
        #[arg(long)]
        at: Option<String>,
        /// Time to run.
        #[arg(long, value_parser = parse_duration)]
        ttr: Option<std::time::Duration>,
        /// Retry intervals, e.g. "2m,10m,1h".
        #[arg(long)]
        retry: Option<String>,
        /// Most attempts in all.
        #[arg(long)]
        max_attempts: Option<u32>,
        /// Leave an existing job with this id alone.
        #[arg(long)]
        keep: bool,
    },
    /// Show a job.
    Get { id: String },
    /// Delete a job from any state.
    Delete { id: String },
    /// Job counts per topic and state.
    Stats,
    /// Dead letters of a topic.
    Dead {
        #[command(subcommand)]
        command: DeadCommand,
    },
}

#[derive(Subcommand, Debug)]
pub enum DeadCommand {
    /// List dead jobs, oldest first.
    List {
        topic: String,
        #[arg(long, default_value_t = 0)]
        offset: usize,
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Requeue dead jobs (the ids given, or all) with fresh attempts.
    Requeue { topic: String, ids: Vec<String> },
    /// Delete every dead job of the topic.
    Purge { topic: String },
}

pub async fn run(args: ClientArgs, command: ClientCommand) -> Result<()> {
    let c = Client {
        http: reqwest::Client::new(),
        base: args.server.trim_end_matches('/').to_owned(),
        token: args.token.clone(),
    };
    let reply = match &command {
        ClientCommand::Push {
            topic,
            id,
            body,
            delay,
            at,
            ttr,
            retry,
            max_attempts,
            keep,
        } => {
            let mut spec = json!({"topic": topic, "body": body});
            if let Some(id) = id {
                spec["id"] = json!(id);
            }
            if let Some(d) = delay {
                spec["delay_ms"] = json!(d.as_millis() as u64);
            }
            if let Some(at) = at {
                spec["due_at"] = match at.parse::<i64>() {
                    Ok(ms) => json!(ms),
                    Err(_) => json!(at),
                };
            }
            if let Some(t) = ttr {
                spec["ttr_ms"] = json!(t.as_millis() as u64);
            }
            if retry.is_some() || max_attempts.is_some() {
                let intervals: Vec<&str> = retry
                    .as_deref()
                    .unwrap_or("")
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect();
                spec["retry"] = json!({"intervals": intervals, "max_attempts": max_attempts});
            }
            if *keep {
                spec["if_exists"] = json!("keep");
            }
            c.send(reqwest::Method::POST, "/v1/jobs", Some(spec))
                .await?
        }
        ClientCommand::Get { id } => c.send(reqwest::Method::GET, &job_path(id), None).await?,
        ClientCommand::Delete { id } => {
            c.send(reqwest::Method::DELETE, &job_path(id), None).await?
        }
        ClientCommand::Stats => c.send(reqwest::Method::GET, "/v1/topics", None).await?,
        ClientCommand::Dead { command } => match command {
            DeadCommand::List {
                topic,
                offset,
                limit,
            } => {
                let path = format!("{}?offset={offset}&limit={limit}", dead_path(topic));
                c.send(reqwest::Method::GET, &path, None).await?
            }
            DeadCommand::Requeue { topic, ids } => {
                let path = format!("{}/requeue", dead_path(topic));
                c.send(reqwest::Method::POST, &path, Some(json!({ "ids": ids })))
                    .await?
            }
            DeadCommand::Purge { topic } => {
                c.send(reqwest::Method::DELETE, &dead_path(topic), None)
                    .await?
            }
        },
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reply)?);
    } else {
        print_human(&command, &reply);
    }
    Ok(())
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    /// Sends a request; a non-2xx reply becomes an error with the server's
    /// message.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let resp = req.send().await.with_context(|| {
            format!(
                "cannot reach delayq at {} (is it running? --server)",
                self.base
            )
        })?;
        let status = resp.status();
        let text = resp.text().await?;
        let value: Value = if text.is_empty() {
            json!({})
        } else {
            serde_json::from_str(&text).with_context(|| format!("not JSON from {url}: {text}"))?
        };
        if !status.is_success() {
            let msg = value["error"]["message"].as_str().unwrap_or(&text);
            bail!("{status}: {msg}");
        }
        Ok(value)
    }
}

fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn job_path(id: &str) -> String {
    format!("/v1/jobs/{}", encode(id))
}

fn dead_path(topic: &str) -> String {
    format!("/v1/topics/{}/dead", encode(topic))
}

fn print_human(command: &ClientCommand, v: &Value) {
    match command {
        ClientCommand::Push { .. } => {
            println!(
                "{} {} (due at {} ms)",
                v["outcome"].as_str().unwrap_or("pushed"),
                v["id"].as_str().unwrap_or(""),
                v["due_at_ms"]
            );
        }
        ClientCommand::Get { .. } => {
            for key in [
                "id",
                "topic",
                "state",
                "due_at_ms",
                "ttr_ms",
                "attempts",
                "lease_until_ms",
                "dead_at_ms",
                "last_error",
                "body",
            ] {
                if !v[key].is_null() {
                    println!("{key:>15}: {}", plain(&v[key]));
                }
            }
        }
        ClientCommand::Delete { id } => println!("deleted {id}"),
        ClientCommand::Stats => {
            println!(
                "{:<24} {:>10} {:>10} {:>10} {:>10}",
                "topic", "delayed", "ready", "reserved", "dead"
            );
            if let Some(topics) = v["topics"].as_object() {
                for (t, c) in topics {
                    println!(
                        "{t:<24} {:>10} {:>10} {:>10} {:>10}",
                        c["delayed"], c["ready"], c["reserved"], c["dead"]
                    );
                }
            }
            println!(
                "next due at: {} ms; waiting pops: {}",
                plain(&v["next_due_ms"]),
                v["waiting_pops"]
            );
        }
        ClientCommand::Dead { command } => match command {
            DeadCommand::List { .. } => {
                println!(
                    "{:<38} {:>8} {:>15}  last error",
                    "id", "attempts", "dead at (ms)"
                );
                for j in v["jobs"].as_array().into_iter().flatten() {
                    println!(
                        "{:<38} {:>8} {:>15}  {}",
                        plain(&j["id"]),
                        j["attempts"],
                        j["dead_at_ms"],
                        plain(&j["last_error"])
                    );
                }
            }
            DeadCommand::Requeue { topic, .. } => {
                println!("requeued {} dead jobs of {topic}", v["requeued"])
            }
            DeadCommand::Purge { topic } => println!("purged {} dead jobs of {topic}", v["purged"]),
        },
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}
