//! Topic configuration: a TOML file (`--config`) merged with flags. Flags
//! win over the file.
//!
//! ```toml
//! otlp_endpoint = "http://127.0.0.1:4318"   # export traced jobs' spans
//!
//! [defaults]                      # jobs pushed without a policy
//! retry = ["2m", "10m", "1h"]
//! max_attempts = 5
//! keep_finished = "1d"            # finished jobs' records (state finished)
//!
//! events = true                   # the event stream (/v1/events); off by default
//! events_kept = 100000            # events kept per partition (about; default defaults::EVENTS_KEPT)
//!
//! [topics.order-timeout]          # consumed by delayq: POST to the app
//! webhook = "http://127.0.0.1:8080/hooks/order-timeout"
//! timeout = "10s"                 # per request (default 10s)
//! concurrency = 8                 # deliveries in flight (default 8)
//! retry = ["30s", "2m", "10m"]
//! secret_env = "ORDER_HOOK_SECRET"   # or secret = "..." (HMAC signature key)
//! result = true                   # a 2xx reply's body is the job's result (at most 64 KiB)
//!
//! [topics.merchant-notify]        # pull-based, with its own schedule
//! retry = ["2m", "10m", "10m", "1h", "2h", "6h", "15h"]
//!
//! [topics.sms]                    # handed out at most 50 a second
//! rate = { per_second = 50, burst = 100 }
//!
//! [recurring.expiry-reminders]    # a job every day at 09:00 in Shanghai
//! topic = "member-expiry"
//! cron = "0 0 9 * * *"
//! timezone = "Asia/Shanghai"
//! body = "{\"within_days\": 7}"
//! missed = "fire"                 # or "skip" (default "fire")
//! ```
//!
//! Rate limits and recurring schedules live in Redis (so every instance
//! obeys them); at start the file's are written there when they differ
//! from what Redis holds (an unchanged schedule keeps its ticks).
//!
//! A webhook topic without a policy (its own or `[defaults]`) gets
//! [`Webhook::default_retry`] rather than redelivery at once, for ever.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use delayq::duration::parse_duration;
use delayq::webhook::{Secret, Webhook};
use delayq::RetryPolicy;
use serde::Deserialize;

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct File {
    /// The event stream (top level: before any [table]).
    events: Option<bool>,
    events_kept: Option<u64>,
    /// OTLP export of traced jobs' spans (`--otlp-endpoint` wins).
    otlp_endpoint: Option<String>,
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    topics: BTreeMap<String, TopicSpec>,
    #[serde(default)]
    recurring: BTreeMap<String, RecurringSpec>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RecurringSpec {
    topic: String,
    cron: String,
    timezone: Option<String>,
    #[serde(default)]
    body: String,
    ttr: Option<String>,
    /// HTTP's name for `ttr` (integer ms); refused here with the file's
    /// spelling, since the file writes durations with a unit.
    ttr_ms: Option<u64>,
    #[serde(default)]
    missed: delayq::Missed,
    #[serde(flatten)]
    policy: Policy,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct Policy {
    retry: Option<Vec<String>>,
    max_attempts: Option<u32>,
}

impl Policy {
    fn to_policy(&self) -> Result<Option<RetryPolicy>> {
        if self.retry.is_none() && self.max_attempts.is_none() {
            return Ok(None);
        }
        let intervals = self.retry.clone().unwrap_or_default().join(",");
        Ok(Some(
            RetryPolicy::parse(&intervals, self.max_attempts).map_err(anyhow::Error::msg)?,
        ))
    }
}

/// `[defaults]`: the retry policy, and how long finished jobs' records
/// are kept.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct Defaults {
    keep_finished: Option<String>,
    #[serde(flatten)]
    policy: Policy,
}

/// How long finished jobs' records are kept: 1ms to a year (the flag's
/// parser, and the config file's).
pub(super) fn parse_keep_finished(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    delayq::job::check_keep_finished(d)?;
    Ok(d)
}

/// A `keep_finished` of the file ("7d"), checked.
fn keep_finished(text: &Option<String>) -> Result<Option<std::time::Duration>> {
    text.as_deref()
        .map(parse_keep_finished)
        .transpose()
        .map_err(|e| anyhow::anyhow!("keep_finished: {e}"))
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct TopicSpec {
    keep_finished: Option<String>,
    webhook: Option<String>,
    timeout: Option<String>,
    concurrency: Option<usize>,
    secret: Option<String>,
    secret_env: Option<String>,
    result: Option<bool>,
    rate: Option<delayq::RateLimit>,
    #[serde(flatten)]
    policy: Policy,
}

/// What the flags contribute.
pub struct Flags<'a> {
    pub default_retry: &'a str,
    pub default_max_attempts: Option<u32>,
    /// "TOPIC=INTERVALS[;max=N]"
    pub topic_retry: &'a [String],
    /// "TOPIC=URL"
    pub webhooks: &'a [String],
    pub webhook_secret: Option<&'a str>,
}

/// Everything about topics that the server needs.
#[derive(Debug, Default)]
pub struct Topics {
    pub default_retry: RetryPolicy,
    pub topic_retry: HashMap<String, RetryPolicy>,
    pub webhooks: Vec<Webhook>,
    pub rates: Vec<(String, delayq::RateLimit)>,
    pub recurring: Vec<(String, delayq::Recurring)>,
    /// `keep_finished` of `[defaults]` (the flag wins) and per topic.
    pub keep_finished: Option<std::time::Duration>,
    pub topic_keep_finished: HashMap<String, std::time::Duration>,
    /// `events` and `events_kept` of the file (the flags win).
    pub events: Option<bool>,
    pub events_kept: Option<u64>,
}

/// The file's `otlp_endpoint` (read before logging starts).
pub fn otlp_endpoint(file: Option<&Path>) -> Result<Option<String>> {
    Ok(parse(file)?.otlp_endpoint)
}

fn parse(file: Option<&Path>) -> Result<File> {
    Ok(match file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read config file {}", path.display()))?;
            toml::from_str(&text).with_context(|| format!("config file {}", path.display()))?
        }
        None => File::default(),
    })
}

pub fn load(file: Option<&Path>, flags: &Flags) -> Result<Topics> {
    let parsed = parse(file)?;
    if let Some(n) = parsed.events_kept {
        delayq::queue::check_events_kept(n).map_err(anyhow::Error::msg)?;
    }
    let limits = delayq::Limits::default();
    let mut t = Topics {
        default_retry: parsed
            .defaults
            .policy
            .to_policy()
            .context("[defaults]")?
            .unwrap_or_default(),
        keep_finished: keep_finished(&parsed.defaults.keep_finished).context("[defaults]")?,
        events: parsed.events,
        events_kept: parsed.events_kept,
        ..Topics::default()
    };
    for (name, spec) in &parsed.recurring {
        let ctx = || format!("[recurring.{name}]");
        if let Some(ms) = spec.ttr_ms {
            bail!(
                "{}: ttr_ms is the HTTP API's name; the file takes ttr = \"{ms}ms\" (a \
                 duration with a unit, like timeout)",
                ctx()
            );
        }
        delayq::recurring::check_name(name)
            .map_err(anyhow::Error::msg)
            .with_context(ctx)?;
        let r = delayq::Recurring {
            topic: spec.topic.clone(),
            cron: spec.cron.clone(),
            timezone: spec.timezone.clone().unwrap_or_else(|| "UTC".into()),
            body: spec.body.clone(),
            ttr_ms: match &spec.ttr {
                Some(t) => parse_duration(t)
                    .map_err(anyhow::Error::msg)
                    .with_context(ctx)?
                    .as_millis() as u64,
                None => delayq::defaults::TTR.as_millis() as u64,
            },
            retry: spec.policy.to_policy().with_context(ctx)?,
            missed: spec.missed,
        };
        r.check().map_err(anyhow::Error::msg).with_context(ctx)?;
        t.recurring.push((name.clone(), r));
    }
    for (topic, spec) in &parsed.topics {
        let ctx = || format!("[topics.{topic}]");
        if let Some(p) = spec.policy.to_policy().with_context(ctx)? {
            t.topic_retry.insert(topic.clone(), p);
        }
        if let Some(keep) = keep_finished(&spec.keep_finished).with_context(ctx)? {
            t.topic_keep_finished.insert(topic.clone(), keep);
        }
        if let Some(rate) = spec.rate {
            rate.check().map_err(anyhow::Error::msg).with_context(ctx)?;
            t.rates.push((topic.clone(), rate));
        }
        let Some(url) = &spec.webhook else {
            if spec.timeout.is_some()
                || spec.concurrency.is_some()
                || spec.secret.is_some()
                || spec.secret_env.is_some()
                || spec.result.is_some()
            {
                bail!(
                    "{}: timeout, concurrency, secret and result need a webhook",
                    ctx()
                );
            }
            continue;
        };
        let mut hook = Webhook::new(topic, url);
        if let Some(timeout) = &spec.timeout {
            hook.timeout = parse_duration(timeout)
                .map_err(anyhow::Error::msg)
                .with_context(ctx)?;
        }
        if let Some(c) = spec.concurrency {
            hook.concurrency = c;
        }
        hook.result = spec.result.unwrap_or(false);
        hook.secret = match (&spec.secret, &spec.secret_env) {
            (Some(_), Some(_)) => bail!("{}: give secret or secret_env, not both", ctx()),
            (Some(s), None) if s.is_empty() => bail!(
                "{}: secret is empty: an empty key signs nothing a receiver can trust; \
                     give a key, or leave secret out",
                ctx()
            ),
            (Some(s), None) => Some(Secret(s.clone())),
            (None, Some(var)) => {
                let key = std::env::var(var)
                    .with_context(|| format!("{}: environment variable {var} is not set", ctx()))?;
                if key.is_empty() {
                    bail!(
                        "{}: environment variable {var} (secret_env) is empty: an empty \
                             key signs nothing a receiver can trust",
                        ctx()
                    );
                }
                Some(Secret(key))
            }
            (None, None) => None,
        };
        hook.check(&limits)
            .map_err(anyhow::Error::msg)
            .with_context(ctx)?;
        t.webhooks.push(hook);
    }

    // Flags on top.
    if !flags.default_retry.is_empty() || flags.default_max_attempts.is_some() {
        t.default_retry = RetryPolicy::parse(flags.default_retry, flags.default_max_attempts)
            .map_err(anyhow::Error::msg)
            .context("--default-retry")?;
    }
    for spec in flags.topic_retry {
        let (topic, policy) = spec
            .split_once('=')
            .with_context(|| format!("--topic-retry {spec:?}: expected TOPIC=INTERVALS[;max=N]"))?;
        let policy = parse_policy(policy).with_context(|| format!("--topic-retry {spec:?}"))?;
        t.topic_retry.insert(topic.trim().to_owned(), policy);
    }
    for spec in flags.webhooks {
        let (topic, url) = spec
            .split_once('=')
            .with_context(|| format!("--webhook {spec:?}: expected TOPIC=URL"))?;
        let topic = topic.trim();
        t.webhooks.retain(|h| h.topic != topic);
        t.webhooks.push(Webhook::new(topic, url.trim()));
    }
    if let Some(secret) = flags.webhook_secret {
        if secret.is_empty() {
            bail!(
                "--webhook-secret (DELAYQ_WEBHOOK_SECRET) is empty: an empty key signs nothing \
                 a receiver can trust; give a key, or unset it"
            );
        }
        for h in &mut t.webhooks {
            h.secret.get_or_insert_with(|| Secret(secret.to_owned()));
        }
    }
    for h in &t.webhooks {
        limits.check_topic(&h.topic).map_err(anyhow::Error::msg)?;
        h.check(&limits).map_err(anyhow::Error::msg)?;
        // Redelivering a failing request at once, for ever, hammers the
        // receiver: a webhook topic nobody gave a policy backs off.
        if !t.topic_retry.contains_key(&h.topic) && t.default_retry == RetryPolicy::default() {
            t.topic_retry
                .insert(h.topic.clone(), Webhook::default_retry());
        }
    }
    Ok(t)
}

/// Parses "INTERVALS[;max=N]".
fn parse_policy(text: &str) -> Result<RetryPolicy> {
    let (intervals, max) = match text.split_once(";max=") {
        Some((i, m)) => (
            i,
            Some(
                m.trim()
                    .parse::<u32>()
                    .with_context(|| format!("invalid max attempts in {text:?}"))?,
            ),
        ),
        None => (text, None),
    };
    RetryPolicy::parse(intervals, max).map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests;
