//! `push`, `get`, `delete`, `reschedule`, `list`.

use std::time::Duration;

use anyhow::Result;
use clap::Args;
use delayq::wire::{
    Cancelled, DedupModeSpec, DedupSpec, DueAt, IfExistsSpec, JobBody, JobSpec, JobsPage,
    NoContent, PushedBody, RescheduleSpec, Rescheduled,
};
use reqwest::Method;

use super::http::{encode, job_path, topic_path, Client};
use super::out::{local_time, name, or_dash, outln, table};
use super::{duration_with_unit, ms, parse_at, retry_spec, ClientArgs};

#[derive(Args, Debug)]
pub struct Push {
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
    delay: Option<Duration>,
    /// Absolute due time: Unix milliseconds or RFC 3339 with a zone
    /// (2027-03-28T09:00:00Z, ...+08:00).
    #[arg(long, value_parser = parse_at)]
    at: Option<DueAt>,
    /// Time to run.
    #[arg(long, value_parser = duration_with_unit)]
    ttr: Option<Duration>,
    /// Retry intervals, e.g. "2m,10m,1h".
    #[arg(long)]
    retry: Option<String>,
    /// Most attempts in all.
    #[arg(long)]
    max_attempts: Option<u32>,
    /// Leave an existing job with this id alone.
    #[arg(long)]
    keep: bool,
    /// Deduplicate by this key (see --dedup-mode).
    #[arg(long)]
    dedup_key: Option<String>,
    /// simple (until the job ends), throttle (first push in the window
    /// wins) or debounce (each push in the window replaces the job and
    /// moves it).
    #[arg(long, requires = "dedup_key", default_value = "simple", value_parser = ["simple", "throttle", "debounce"])]
    dedup_mode: String,
    /// The dedup window (throttle, debounce), with a unit: 30s, 5m.
    #[arg(long, requires = "dedup_key", value_parser = duration_with_unit)]
    dedup_window: Option<Duration>,
    /// Debounce: the latest the job may be due after the first push.
    #[arg(long, requires = "dedup_key", value_parser = duration_with_unit)]
    dedup_max_wait: Option<Duration>,
    /// Priority among the topic's ready jobs: 0 (the default) is handed
    /// out first, then 1, ... 9.
    #[arg(long)]
    priority: Option<i64>,
    /// W3C trace context to keep with the job (default: $TRACEPARENT, so
    /// a `delayq push` inside a traced `delayq work` command carries on
    /// its trace; an empty or invalid $TRACEPARENT is ignored, as an
    /// invalid header is over HTTP).
    #[arg(long)]
    traceparent: Option<String>,
    /// W3C tracestate, with --traceparent (default: $TRACESTATE with
    /// $TRACEPARENT; an invalid one is ignored).
    #[arg(long, requires = "traceparent")]
    tracestate: Option<String>,
    /// A tag (repeat for more, at most 8).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// The job's group within its topic (see `delayq group`).
    #[arg(long)]
    group: Option<String>,
    /// The batch the job joins (see `delayq batch`): only created, never
    /// replacing a job; no dedup with it.
    #[arg(long, conflicts_with = "dedup_key")]
    batch: Option<String>,
}

/// The trace context in the environment, taken as a request's headers
/// are: an empty or invalid TRACEPARENT is none (an invalid one is said on
/// stderr), an invalid TRACESTATE is dropped alone. A push is no place to
/// fail over a caller's tracing.
fn env_trace() -> (Option<String>, Option<String>) {
    let Some(tp) = std::env::var_os("TRACEPARENT").filter(|v| !v.is_empty()) else {
        return (None, None);
    };
    let tp = tp.to_string_lossy();
    let ts = std::env::var("TRACESTATE").ok();
    match delayq::trace::context(&tp, ts.as_deref()) {
        Some((tp, ts)) => (Some(tp), ts),
        None => {
            let why = delayq::trace::check_traceparent(tp.trim())
                .err()
                .unwrap_or_default();
            eprintln!("delayq: ignoring $TRACEPARENT: {why}");
            (None, None)
        }
    }
}

impl Push {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let (traceparent, tracestate) = match self.traceparent {
            // Given as a flag: the server checks it and names what is wrong.
            Some(tp) => (Some(tp), self.tracestate),
            None => env_trace(),
        };
        let spec = JobSpec {
            id: self.id,
            topic: self.topic,
            body: self.body,
            delay_ms: self.delay.map(ms),
            due_at: self.at,
            ttr_ms: self.ttr.map(ms),
            retry: retry_spec(&self.retry, self.max_attempts)?,
            if_exists: if self.keep {
                IfExistsSpec::Keep
            } else {
                IfExistsSpec::Replace
            },
            dedup: self.dedup_key.map(|key| DedupSpec {
                key,
                mode: match self.dedup_mode.as_str() {
                    "throttle" => DedupModeSpec::Throttle,
                    "debounce" => DedupModeSpec::Debounce,
                    _ => DedupModeSpec::Simple,
                },
                window_ms: self.dedup_window.map(ms),
                max_wait_ms: self.dedup_max_wait.map(ms),
            }),
            priority: self.priority,
            batch: self.batch,
            traceparent,
            tracestate,
            tags: self.tags,
            group: self.group,
        };
        let reply = c
            .call::<PushedBody>(Method::POST, "/v1/jobs", Some(&spec))
            .await?;
        c.show(&reply, |p, o| {
            let due = local_time(Some(p.due_at_ms));
            outln!(o, "{} {} (due at {due})", p.outcome.as_str(), p.id)
        })
    }
}

#[derive(Args, Debug)]
pub struct Get {
    id: String,
    #[command(flatten)]
    client: ClientArgs,
}

impl Get {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let reply = c.fetch::<JobBody>(Method::GET, &job_path(&self.id)).await?;
        c.show(&reply, |j, o| {
            let time = |ms: Option<i64>| ms.map(|ms| local_time(Some(ms)));
            let fields = [
                ("id", Some(j.id.clone())),
                ("topic", Some(j.topic.clone())),
                ("state", Some(name(&j.state))),
                ("due", time(Some(j.due_at_ms))),
                ("ttr_ms", Some(j.ttr_ms.to_string())),
                ("attempts", Some(j.attempts.to_string())),
                ("priority", j.priority.map(|p| p.to_string())),
                ("tags", (!j.tags.is_empty()).then(|| j.tags.join(", "))),
                ("group", j.group.clone()),
                ("batch", j.batch.clone()),
                ("flow", j.flow.clone()),
                ("lease until", time(j.lease_until_ms)),
                ("dead since", time(j.dead_at_ms)),
                ("finished at", time(j.finished_at_ms)),
                ("last_error", j.last_error.clone()),
                ("traceparent", j.traceparent.clone()),
                ("tracestate", j.tracestate.clone()),
                ("progress", j.progress.as_ref().map(|p| p.to_string())),
                ("result", j.result.as_ref().map(|r| r.to_string())),
                ("body", Some(j.body.clone())),
            ];
            for (key, shown) in fields {
                if let Some(shown) = shown {
                    outln!(o, "{key:>15}: {shown}");
                }
            }
            // A flow's parent: each child's outcome, one a line (`--json`
            // has their results).
            if let Some(children) = &j.children {
                outln!(o, "{:>15}: {}", "children", children.len());
                for (id, c) in children {
                    outln!(o, "{:>15}  {id} {}", "", c.outcome.as_str());
                }
            }
            // The last lines of its log (`--json` has all it keeps).
            let logs = j.logs.as_deref().unwrap_or_default();
            if !logs.is_empty() {
                outln!(
                    o,
                    "{:>15}: last {} of {}",
                    "log",
                    logs.len().min(10),
                    logs.len()
                );
            }
            for l in logs.iter().skip(logs.len().saturating_sub(10)) {
                outln!(o, "{:>15}  {}", local_time(Some(l.at_ms)), l.line);
            }
        })
    }
}

#[derive(Args, Debug)]
pub struct Delete {
    id: String,
    #[command(flatten)]
    client: ClientArgs,
}

impl Delete {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let reply = c
            .fetch::<NoContent>(Method::DELETE, &job_path(&self.id))
            .await?;
        c.show(&reply, |_, o| outln!(o, "deleted {}", self.id))
    }
}

#[derive(Args, Debug)]
pub struct Cancel {
    id: String,
    #[command(flatten)]
    client: ClientArgs,
}

impl Cancel {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let path = format!("{}/cancel", job_path(&self.id));
        let reply = c.fetch::<Cancelled>(Method::POST, &path).await?;
        c.show(&reply, |r, o| {
            if r.was == delayq::JobState::Reserved {
                outln!(o, "cancelled {} (it was running: its consumer hears so at its next touch, nack or finish)", r.id)
            } else {
                outln!(o, "cancelled {} (it was {})", r.id, r.was.as_str())
            }
        })
    }
}

#[derive(Args, Debug)]
pub struct Reschedule {
    id: String,
    /// Due after this long: 30s, 2m, 15d.
    #[arg(long, value_parser = duration_with_unit, conflicts_with = "at")]
    delay: Option<Duration>,
    /// Due at: Unix milliseconds or RFC 3339 with a zone.
    #[arg(long, value_parser = parse_at)]
    at: Option<DueAt>,
    #[arg(long)]
    body: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

impl Reschedule {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let spec = RescheduleSpec {
            delay_ms: self.delay.map(ms),
            due_at: self.at,
            body: self.body,
        };
        let path = format!("{}/reschedule", job_path(&self.id));
        let reply = c
            .call::<Rescheduled>(Method::POST, &path, Some(&spec))
            .await?;
        c.show(&reply, |r, o| {
            outln!(o, "{}: due at {}", self.id, local_time(Some(r.due_at_ms)))
        })
    }
}

#[derive(Args, Debug)]
pub struct List {
    topic: String,
    #[arg(long, default_value = "delayed", value_parser = delayq::JobState::NAMES)]
    state: String,
    #[arg(long, default_value_t = delayq::defaults::PAGE)]
    limit: usize,
    /// The next_cursor a previous page printed.
    #[arg(long)]
    cursor: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

impl List {
    pub(super) async fn run(self) -> Result<()> {
        let c = Client::new(&self.client);
        let mut path = format!(
            "{}/jobs?state={}&limit={}",
            topic_path(&self.topic),
            self.state,
            self.limit
        );
        if let Some(cursor) = &self.cursor {
            path.push_str(&format!("&cursor={}", encode(cursor)));
        }
        let reply = c.fetch::<JobsPage>(Method::GET, &path).await?;
        c.show(&reply, |page, o| {
            // Kept records of finished jobs: when they finished.
            let finished = page.state == delayq::JobState::Finished;
            let when = if finished { "finished at" } else { "due at" };
            let mut rows = vec![["id", "state", "attempts", when, "last error"].map(String::from)];
            for j in &page.jobs {
                rows.push([
                    j.id.clone(),
                    name(&j.state),
                    j.attempts.to_string(),
                    local_time(if finished {
                        j.finished_at_ms
                    } else {
                        Some(j.due_at_ms)
                    }),
                    or_dash(&j.last_error),
                ]);
            }
            if rows.len() == 1 {
                outln!(o, "none");
            } else {
                table(o, &rows);
            }
            if let Some(next) = &page.next_cursor {
                outln!(o, "more: --cursor {next}");
            }
        })
    }
}
