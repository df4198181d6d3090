//! Client subcommands: talk to a running delayq over its native API.
//! Human-readable output by default; `--json` prints the server's JSON.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use delayq::duration::parse_duration;
use serde_json::{json, Value};

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
        default_value = "http://127.0.0.1:9277"
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
    Push {
        #[command(flatten)]
        client: ClientArgs,
        /// Topic of the job.
        #[arg(long)]
        topic: String,
        /// Job id (generated when absent).
        #[arg(long)]
        id: Option<String>,
        /// Body (a string).
        #[arg(long, default_value = "")]
        body: String,
        /// Delay, with a unit: 500ms, 30s, 2m, 1h, 15d.
        #[arg(long, value_parser = duration_with_unit, conflicts_with = "at")]
        delay: Option<std::time::Duration>,
        /// Absolute due time: Unix milliseconds or RFC 3339 with a zone
        /// (2027-03-28T09:00:00Z, ...+08:00).
        #[arg(long, value_parser = parse_at)]
        at: Option<String>,
        /// Time to run.
        #[arg(long, value_parser = duration_with_unit)]
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
    Get {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete a job from any state.
    Delete {
        id: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Job counts per topic and state.
    Stats {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Dead letters of a topic.
    Dead {
        #[command(subcommand)]
        command: DeadCommand,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Lease ready jobs, waiting for one up to --wait.
    Pop {
        /// Topics, tried in order.
        #[arg(required = true)]
        topics: Vec<String>,
        /// Most jobs.
        #[arg(long, default_value_t = 1)]
        count: usize,
        /// Longest wait for a job: 0s, 30s, 2m.
        #[arg(long, value_parser = duration_with_unit, default_value = "0s")]
        wait: std::time::Duration,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Finish a leased job.
    Finish {
        id: String,
        /// The lease token pop gave.
        #[arg(long = "lease", value_name = "TOKEN")]
        lease_token: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Report a failed attempt: the job retries or dies by its policy.
    Nack {
        id: String,
        /// The lease token pop gave.
        #[arg(long = "lease", value_name = "TOKEN")]
        lease_token: String,
        /// Why it failed (kept in the job's history).
        #[arg(long, default_value = "")]
        error: String,
        /// Retry after this instead of the policy's interval.
        #[arg(long, value_parser = duration_with_unit)]
        delay: Option<std::time::Duration>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Extend a lease.
    Touch {
        id: String,
        /// The lease token pop gave.
        #[arg(long = "lease", value_name = "TOKEN")]
        lease_token: String,
        /// New lease length from now (default: the job's ttr).
        #[arg(long, value_parser = duration_with_unit)]
        ttr: Option<std::time::Duration>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Give a job a new due time (and, optionally, body).
    Reschedule {
        id: String,
        /// Due after this long: 30s, 2m, 15d.
        #[arg(long, value_parser = duration_with_unit, conflicts_with = "at")]
        delay: Option<std::time::Duration>,
        /// Due at: Unix milliseconds or RFC 3339 with a zone.
        #[arg(long, value_parser = parse_at)]
        at: Option<String>,
        #[arg(long)]
        body: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List a topic's jobs in one state, a page at a time.
    List {
        topic: String,
        #[arg(long, default_value = "delayed", value_parser = ["delayed", "ready", "reserved", "dead"])]
        state: String,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// The next_cursor a previous page printed.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Stop handing out a topic's jobs (they still fall due).
    Pause {
        topic: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Hand out a paused topic's jobs again.
    Resume {
        topic: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Run a command for each job of a topic: body on stdin, id, topic and
    /// attempt in DELAYQ_JOB_ID, DELAYQ_JOB_TOPIC, DELAYQ_JOB_ATTEMPT; exit 0
    /// finishes the job, anything else nacks it with the end of stderr.
    Work {
        topic: String,
        /// Commands running at once.
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        /// The command and its arguments, after --.
        #[arg(last = true, required = true)]
        command: Vec<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Recurring schedules: a job per cron tick.
    Recurring {
        #[command(subcommand)]
        command: RecurringCommand,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// A topic's rate limit.
    Rate {
        #[command(subcommand)]
        command: RateCommand,
        #[command(flatten)]
        client: ClientArgs,
    },
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
        ttr: Option<std::time::Duration>,
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

impl ClientCommand {
    fn client(&self) -> &ClientArgs {
        match self {
            ClientCommand::Push { client, .. }
            | ClientCommand::Get { client, .. }
            | ClientCommand::Delete { client, .. }
            | ClientCommand::Stats { client }
            | ClientCommand::Dead { client, .. }
            | ClientCommand::Recurring { client, .. }
            | ClientCommand::Rate { client, .. }
            | ClientCommand::Pop { client, .. }
            | ClientCommand::Finish { client, .. }
            | ClientCommand::Nack { client, .. }
            | ClientCommand::Touch { client, .. }
            | ClientCommand::Reschedule { client, .. }
            | ClientCommand::List { client, .. }
            | ClientCommand::Pause { client, .. }
            | ClientCommand::Resume { client, .. }
            | ClientCommand::Work { client, .. } => client,
        }
    }
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
    /// `delayq dead TOPIC`: clap alone would only say the subcommand is
    /// unknown; a topic here most likely means `dead list TOPIC`.
    #[command(external_subcommand)]
    Other(Vec<String>),
}

pub async fn run(command: ClientCommand) -> Result<()> {
    let args = command.client().clone();
    let c = Client::new(&args);
    let reply = match &command {
        ClientCommand::Work {
            topic,
            concurrency,
            command,
            ..
        } => {
            if args.json {
                bail!("work prints no replies: --json does not apply to it");
            }
            return super::worker::run(c, topic, *concurrency, command).await;
        }
        ClientCommand::Pop {
            topics,
            count,
            wait,
            ..
        } => {
            let spec = json!({"topics": topics, "max": count, "wait_ms": wait.as_millis() as u64});
            c.send(reqwest::Method::POST, "/v1/pop", Some(spec)).await?
        }
        ClientCommand::Finish {
            id, lease_token, ..
        } => {
            let path = format!("{}/finish", job_path(id));
            c.send(
                reqwest::Method::POST,
                &path,
                Some(json!({ "token": lease_token })),
            )
            .await?
        }
        ClientCommand::Nack {
            id,
            lease_token,
            error,
            delay,
            ..
        } => {
            let mut spec = json!({"token": lease_token, "error": error});
            if let Some(d) = delay {
                spec["delay_ms"] = json!(d.as_millis() as u64);
            }
            let path = format!("{}/nack", job_path(id));
            c.send(reqwest::Method::POST, &path, Some(spec)).await?
        }
        ClientCommand::Touch {
            id,
            lease_token,
            ttr,
            ..
        } => {
            let mut spec = json!({ "token": lease_token });
            if let Some(t) = ttr {
                spec["ttr_ms"] = json!(t.as_millis() as u64);
            }
            let path = format!("{}/touch", job_path(id));
            c.send(reqwest::Method::POST, &path, Some(spec)).await?
        }
        ClientCommand::Reschedule {
            id,
            delay,
            at,
            body,
            ..
        } => {
            let mut spec = json!({});
            if let Some(d) = delay {
                spec["delay_ms"] = json!(d.as_millis() as u64);
            }
            if let Some(at) = at {
                spec["due_at"] = due_at(at);
            }
            if let Some(b) = body {
                spec["body"] = json!(b);
            }
            let path = format!("{}/reschedule", job_path(id));
            c.send(reqwest::Method::POST, &path, Some(spec)).await?
        }
        ClientCommand::List {
            topic,
            state,
            limit,
            cursor,
            ..
        } => {
            let mut path = format!(
                "/v1/topics/{}/jobs?state={state}&limit={limit}",
                encode(topic)
            );
            if let Some(c) = cursor {
                path.push_str(&format!("&cursor={}", encode(c)));
            }
            c.send(reqwest::Method::GET, &path, None).await?
        }
        ClientCommand::Pause { topic, .. } => pause_or_resume(&c, topic, "pause").await?,
        ClientCommand::Resume { topic, .. } => pause_or_resume(&c, topic, "resume").await?,
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
            ..
        } => {
            let mut spec = json!({"topic": topic, "body": body});
            if let Some(id) = id {
                spec["id"] = json!(id);
            }
            if let Some(d) = delay {
                spec["delay_ms"] = json!(d.as_millis() as u64);
            }
            if let Some(at) = at {
                spec["due_at"] = due_at(at);
            }
            if let Some(t) = ttr {
                spec["ttr_ms"] = json!(t.as_millis() as u64);
            }
            if let Some(r) = retry_spec(retry, max_attempts)? {
                spec["retry"] = r;
            }
            if *keep {
                spec["if_exists"] = json!("keep");
            }
            c.send(reqwest::Method::POST, "/v1/jobs", Some(spec))
                .await?
        }
        ClientCommand::Get { id, .. } => c.send(reqwest::Method::GET, &job_path(id), None).await?,
        ClientCommand::Delete { id, .. } => {
            c.send(reqwest::Method::DELETE, &job_path(id), None).await?
        }
        ClientCommand::Stats { .. } => c.send(reqwest::Method::GET, "/v1/topics", None).await?,
        ClientCommand::Dead { command, .. } => match command {
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
            DeadCommand::Other(words) => {
                let topic = words.first().map_or("TOPIC", String::as_str);
                bail!(
                    "no dead command {topic:?}: to see the dead jobs of topic {topic}, run \
                     `delayq dead list {topic}` (commands: list, requeue, purge)"
                )
            }
        },
        ClientCommand::Recurring { command, .. } => match command {
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
                let mut spec = json!({"topic": topic, "cron": cron, "timezone": timezone,
                    "body": body, "missed": missed});
                if let Some(t) = ttr {
                    spec["ttr_ms"] = json!(t.as_millis() as u64);
                }
                if let Some(r) = retry_spec(retry, max_attempts)? {
                    spec["retry"] = r;
                }
                c.send(reqwest::Method::PUT, &recurring_path(name), Some(spec))
                    .await?
            }
            RecurringCommand::List => c.send(reqwest::Method::GET, "/v1/recurring", None).await?,
            RecurringCommand::Get { name } => {
                c.send(reqwest::Method::GET, &recurring_path(name), None)
                    .await?
            }
            RecurringCommand::Delete { name } => {
                c.send(reqwest::Method::DELETE, &recurring_path(name), None)
                    .await?
            }
        },
        ClientCommand::Rate { command, .. } => match command {
            RateCommand::Set {
                topic,
                per_second,
                burst,
            } => {
                let mut spec = json!({ "per_second": per_second });
                if let Some(b) = burst {
                    spec["burst"] = json!(b);
                }
                c.send(reqwest::Method::PUT, &rate_path(topic), Some(spec))
                    .await?
            }
            RateCommand::Get { topic } => {
                c.send(reqwest::Method::GET, &rate_path(topic), None)
                    .await?
            }
            RateCommand::Clear { topic } => {
                c.send(reqwest::Method::DELETE, &rate_path(topic), None)
                    .await?
            }
        },
    };
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&reply)?)
    } else {
        print_human(&command, &reply);
        OUT.with(|o| std::mem::take(&mut *o.borrow_mut()))
    };
    if let Err(e) = write_out(&text) {
        if let ClientCommand::Pop { .. } = command {
            release_unprinted(&c, &reply).await;
        }
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e).context("writing to stdout");
        }
    }
    Ok(())
}

pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    fn new(args: &ClientArgs) -> Client {
        Client {
            http: delayq::https::client_builder()
                .build()
                .expect("an HTTP client"),
            base: server_base(&args.server),
            token: args.token.clone(),
        }
    }

    /// Sends a request; a non-2xx reply becomes an error with the server's
    /// message.
    pub(crate) async fn send(
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
            if status == reqwest::StatusCode::UNAUTHORIZED {
                let given = if self.token.is_some() {
                    "the token given is not the server's"
                } else {
                    "no token was given"
                };
                bail!("{status}: {msg}\nhint: {given}; pass the server's --auth-token with --token or DELAYQ_CLIENT_TOKEN");
            }
            bail!("{status}: {msg}");
        }
        Ok(value)
    }
}

pub(crate) fn encode(segment: &str) -> String {
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

pub(crate) fn job_path(id: &str) -> String {
    format!("/v1/jobs/{}", encode(id))
}

fn dead_path(topic: &str) -> String {
    format!("/v1/topics/{}/dead", encode(topic))
}

fn rate_path(topic: &str) -> String {
    format!("/v1/topics/{}/rate", encode(topic))
}

fn recurring_path(name: &str) -> String {
    format!("/v1/recurring/{}", encode(name))
}

/// The server's base URL: `HOST:PORT` is taken as `http://HOST:PORT`.
fn server_base(server: &str) -> String {
    let base = server.trim().trim_end_matches('/');
    if base.contains("://") {
        base.to_owned()
    } else {
        format!("http://{base}")
    }
}

/// `delayq pause|resume TOPIC` (`action`), with a note when the server
/// holds no job of `topic`: looked at first, since a paused topic is
/// listed, jobs or none.
async fn pause_or_resume(c: &Client, topic: &str, action: &str) -> Result<serde_json::Value> {
    let unseen = unseen(c, topic).await;
    let path = format!("/v1/topics/{}/{action}", encode(topic));
    let reply = c.send(reqwest::Method::POST, &path, None).await?;
    if unseen {
        eprintln!(
            "delayq: note: no job of topic {topic:?} is stored here (never seen, or all \
             done): is the name right? `delayq stats` lists the topics"
        );
    }
    Ok(reply)
}

/// A typo (`pause orderz`) would pause a topic nobody uses, silently: true
/// when the server holds no job of `topic`.
async fn unseen(c: &Client, topic: &str) -> bool {
    let Ok(v) = c.send(reqwest::Method::GET, "/v1/topics", None).await else {
        return false;
    };
    let counts = &v["topics"][topic];
    ["delayed", "ready", "reserved", "dead"]
        .iter()
        .all(|k| counts[k].as_u64().unwrap_or(0) == 0)
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
fn parse_at(at: &str) -> Result<String, String> {
    use delayq::http::v1::jobs::{numeric_due_at_error, parse_rfc3339_ms, MIN_NUMERIC_DUE_AT_MS};
    match at.trim().parse::<i64>() {
        Ok(n) if n < MIN_NUMERIC_DUE_AT_MS => Err(numeric_due_at_error("--at", n)),
        Ok(_) => Ok(at.trim().to_owned()),
        Err(_) => parse_rfc3339_ms(at).map(|_| at.to_owned()),
    }
}

/// A due time as the API takes it: Unix ms, or RFC 3339 text.
fn due_at(at: &str) -> Value {
    match at.parse::<i64>() {
        Ok(ms) => json!(ms),
        Err(_) => json!(at),
    }
}

/// The API's retry object from "2m,10m,1h" and a maximum.
fn retry_spec(retry: &Option<String>, max_attempts: &Option<u32>) -> Result<Option<Value>> {
    if retry.is_none() && max_attempts.is_none() {
        return Ok(None);
    }
    let intervals: Vec<&str> = retry
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    for i in &intervals {
        duration_with_unit(i).map_err(|e| anyhow::anyhow!("--retry: {e}"))?;
    }
    Ok(Some(
        json!({"intervals": intervals, "max_attempts": max_attempts}),
    ))
}

/// Unix ms as local time, for people.
fn local_time(ms: &Value) -> String {
    use chrono::TimeZone;
    match ms
        .as_i64()
        .and_then(|ms| chrono::Local.timestamp_millis_opt(ms).single())
    {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S %:z").to_string(),
        None => "none".into(),
    }
}

thread_local! {
    /// What a command prints, written to stdout in one go by [`write_out`].
    static OUT: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

macro_rules! outln {
    ($($arg:tt)*) => {
        OUT.with(|o| {
            use std::fmt::Write as _;
            let _ = writeln!(o.borrow_mut(), $($arg)*);
        })
    };
}

/// Writes `text` to stdout. A reader that went away (`| head -1`) is a
/// normal end, not a panic: the caller learns of it as `BrokenPipe`.
fn write_out(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Gives back the jobs a pop leased when their tokens could not be
/// printed: nobody can settle them, so they are ready again at once,
/// their attempts uncounted.
async fn release_unprinted(c: &Client, reply: &Value) {
    for j in reply["jobs"].as_array().into_iter().flatten() {
        let (id, token) = (plain(&j["id"]), plain(&j["token"]));
        let path = format!("{}/release", job_path(&id));
        if let Err(e) = c
            .send(
                reqwest::Method::POST,
                &path,
                Some(json!({ "token": token })),
            )
            .await
        {
            eprintln!("delayq: {id}: its token could not be printed and giving it back failed ({e:#}); it returns after its ttr");
        }
    }
}

fn print_human(command: &ClientCommand, v: &Value) {
    match command {
        ClientCommand::Work { .. } => {}
        ClientCommand::Pop { .. } => {
            let jobs = v["jobs"].as_array().cloned().unwrap_or_default();
            if jobs.is_empty() {
                outln!("none ready");
            }
            for j in jobs {
                // The token second: `| head -2` still has what settles it.
                outln!("id:      {}", plain(&j["id"]));
                outln!("token:   {}", plain(&j["token"]));
                outln!("topic:   {}", plain(&j["topic"]));
                outln!("attempt: {}", plain(&j["attempts"]));
                outln!("due at:  {}", local_time(&j["due_at_ms"]));
                outln!("body:    {}", plain(&j["body"]));
            }
        }
        ClientCommand::Finish { id, .. } => outln!("finished {id}"),
        ClientCommand::Nack { id, .. } => outln!(
            "{id}: {} (due at {})",
            plain(&v["state"]),
            local_time(&v["due_at_ms"])
        ),
        ClientCommand::Touch { id, .. } => {
            outln!("{id}: leased until {}", local_time(&v["lease_until_ms"]))
        }
        ClientCommand::Reschedule { id, .. } => {
            outln!("{id}: due at {}", local_time(&v["due_at_ms"]))
        }
        ClientCommand::List { .. } => {
            let mut rows =
                vec![["id", "state", "attempts", "due at", "last error"].map(String::from)];
            for j in v["jobs"].as_array().into_iter().flatten() {
                rows.push([
                    plain(&j["id"]),
                    plain(&j["state"]),
                    plain(&j["attempts"]),
                    local_time(&j["due_at_ms"]),
                    plain(&j["last_error"]),
                ]);
            }
            if rows.len() == 1 {
                outln!("none");
            } else {
                print_table(&rows);
            }
            if let Some(c) = v["next_cursor"].as_str() {
                outln!("more: --cursor {c}");
            }
        }
        ClientCommand::Pause { topic, .. } => outln!("{topic}: paused"),
        ClientCommand::Resume { topic, .. } => outln!("{topic}: resumed"),
        ClientCommand::Push { .. } => {
            outln!(
                "{} {} (due at {})",
                v["outcome"].as_str().unwrap_or("pushed"),
                v["id"].as_str().unwrap_or(""),
                local_time(&v["due_at_ms"])
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
                    let shown = match key.strip_suffix("_at_ms").or(key.strip_suffix("_until_ms")) {
                        Some(_) => local_time(&v[key]),
                        None => plain(&v[key]),
                    };
                    outln!("{key:>15}: {shown}");
                }
            }
        }
        ClientCommand::Delete { id, .. } => outln!("deleted {id}"),
        ClientCommand::Stats { .. } => {
            let mut rows = vec![[
                "topic",
                "delivered by",
                "delayed",
                "ready",
                "reserved",
                "dead",
            ]
            .map(String::from)];
            if let Some(topics) = v["topics"].as_object() {
                for (t, c) in topics {
                    let hook = v["webhooks"][t].as_str();
                    rows.push([
                        t.clone(),
                        hook.map_or("pop".into(), |h| format!("webhook to {h}")),
                        plain(&c["delayed"]),
                        plain(&c["ready"]),
                        plain(&c["reserved"]),
                        plain(&c["dead"]),
                    ]);
                }
            }
            print_table(&rows);
            match v["next_due_ms"].as_i64() {
                Some(_) => outln!("next due at: {}", local_time(&v["next_due_ms"])),
                None => outln!("next due at: nothing scheduled"),
            }
            outln!("waiting pops: {}", plain(&v["waiting_pops"]));
            if v["webhook_pops"].as_u64().unwrap_or(0) > 0 {
                outln!("webhook deliveries waiting: {}", plain(&v["webhook_pops"]));
            }
        }
        ClientCommand::Dead { command, .. } => match command {
            DeadCommand::List { .. } => {
                let mut rows = vec![["id", "attempts", "died", "last error"].map(String::from)];
                for j in v["jobs"].as_array().into_iter().flatten() {
                    rows.push([
                        plain(&j["id"]),
                        plain(&j["attempts"]),
                        local_time(&j["dead_at_ms"]),
                        plain(&j["last_error"]),
                    ]);
                }
                print_table(&rows);
            }
            DeadCommand::Requeue { topic, .. } => {
                outln!("requeued {} dead jobs of {topic}", v["requeued"])
            }
            DeadCommand::Purge { topic } => outln!("purged {} dead jobs of {topic}", v["purged"]),
            DeadCommand::Other(_) => {}
        },
        ClientCommand::Recurring { command, .. } => match command {
            RecurringCommand::List => {
                let mut rows =
                    vec![["name", "topic", "cron", "time zone", "next fire"].map(String::from)];
                for s in v["schedules"].as_array().into_iter().flatten() {
                    rows.push([
                        plain(&s["name"]),
                        plain(&s["topic"]),
                        plain(&s["cron"]),
                        plain(&s["timezone"]),
                        local_time(&s["next_fire_ms"]),
                    ]);
                }
                print_table(&rows);
            }
            RecurringCommand::Delete { name } => outln!("deleted schedule {name}"),
            RecurringCommand::Put { .. } | RecurringCommand::Get { .. } => {
                for key in [
                    "name", "topic", "cron", "timezone", "missed", "ttr_ms", "body",
                ] {
                    outln!("{key:>10}: {}", plain(&v[key]));
                }
                outln!("{:>10}: {}", "next fire", local_time(&v["next_fire_ms"]));
            }
        },
        ClientCommand::Rate { command, .. } => match command {
            RateCommand::Clear { topic } => outln!("{topic}: no rate limit"),
            RateCommand::Set { .. } | RateCommand::Get { .. } => outln!(
                "{}: at most {} jobs a second, bursts of {}",
                plain(&v["topic"]),
                v["per_second"].as_f64().unwrap_or_default(),
                v["burst"]
            ),
        },
    }
}

/// Prints rows in columns as wide as their widest cell: columns of numbers
/// right-aligned, others left-aligned.
fn print_table<const N: usize>(rows: &[[String; N]]) {
    let width = |c: usize| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..N).map(width).collect();
    let numeric: Vec<bool> = (0..N)
        .map(|c| {
            rows[1..].iter().any(|r| r[c].parse::<f64>().is_ok())
                && rows[1..]
                    .iter()
                    .all(|r| r[c] == "-" || r[c].parse::<f64>().is_ok())
        })
        .collect();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c > 0 {
                line.push_str("  ");
            }
            if c == 0 || !numeric[c] {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        outln!("{}", line.trim_end());
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}
