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
                None => delayq::job::DEFAULT_TTR.as_millis() as u64,
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
            {
                bail!("{}: timeout, concurrency and secret need a webhook", ctx());
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
mod tests {
    use super::*;

    fn no_flags() -> Flags<'static> {
        Flags {
            default_retry: "",
            default_max_attempts: None,
            topic_retry: &[],
            webhooks: &[],
            webhook_secret: None,
        }
    }

    #[test]
    fn file_and_flags_merge() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("delayq.toml");
        std::fs::write(
            &path,
            r#"
[defaults]
max_attempts = 4
[topics.hook]
webhook = "http://127.0.0.1:9/x"
timeout = "2s"
concurrency = 3
secret = "s3"
retry = ["1m"]
[topics.pull]
retry = ["2m", "10m"]
"#,
        )
        .unwrap();
        let t = load(Some(&path), &no_flags()).unwrap();
        assert_eq!(t.default_retry.max_attempts, Some(4));
        assert_eq!(t.topic_retry.len(), 2);
        let h = &t.webhooks[0];
        assert_eq!(
            (h.topic.as_str(), h.concurrency, h.timeout.as_secs()),
            ("hook", 3, 2)
        );
        assert_eq!(h.secret, Some(Secret("s3".into())));

        let hooks = vec!["hook=http://127.0.0.1:9/y".to_string()];
        let flags = Flags {
            webhooks: &hooks,
            webhook_secret: Some("global"),
            ..no_flags()
        };
        let t = load(Some(&path), &flags).unwrap();
        assert_eq!(t.webhooks[0].url, "http://127.0.0.1:9/y");
        assert_eq!(t.webhooks[0].secret, Some(Secret("global".into())));

        let hooks = vec!["bare=http://127.0.0.1:9/z".to_string()];
        let flags = Flags {
            webhooks: &hooks,
            ..no_flags()
        };
        let t = load(None, &flags).unwrap();
        assert_eq!(t.topic_retry["bare"], Webhook::default_retry());

        std::fs::write(&path, "[topics.x]\nwebhok = \"http://a\"\n").unwrap();
        let e = format!("{:#}", load(Some(&path), &no_flags()).unwrap_err());
        assert!(e.contains("webhok"), "{e}");
        std::fs::write(&path, "[topics.x]\ntimeout = \"1s\"\n").unwrap();
        let e = format!("{:#}", load(Some(&path), &no_flags()).unwrap_err());
        assert!(e.contains("need a webhook"), "{e}");
    }

    /// A webhook setting that could not work is refused, named with its
    /// value and limit: a timeout its lease cannot outlast (every delivery
    /// failed before a request was sent), an empty secret.
    #[test]
    fn webhook_settings_that_could_not_work_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("delayq.toml");
        let hook = "[topics.h]\nwebhook = \"http://127.0.0.1:9/x\"\n";
        // SAFETY: no other test reads this variable.
        unsafe { std::env::set_var("DELAYQ_UNIT_EMPTY_HOOK_SECRET", "") };
        for (extra, says) in [
            (
                "timeout = \"8d\"",
                "timeout 8d is too long: at most 604799s",
            ),
            ("timeout = \"7d\"", "timeout 7d is too long"),
            ("secret = \"\"", "[topics.h]: secret is empty"),
            (
                "secret_env = \"DELAYQ_UNIT_EMPTY_HOOK_SECRET\"",
                "DELAYQ_UNIT_EMPTY_HOOK_SECRET (secret_env) is empty",
            ),
            (
                "secret_env = \"DELAYQ_UNIT_UNSET_HOOK_SECRET\"",
                "DELAYQ_UNIT_UNSET_HOOK_SECRET is not set",
            ),
        ] {
            std::fs::write(&path, format!("{hook}{extra}\n")).unwrap();
            let e = format!("{:#}", load(Some(&path), &no_flags()).unwrap_err());
            assert!(e.contains(says), "{extra}: {e}");
        }
        std::fs::write(&path, format!("{hook}timeout = \"604799s\"\n")).unwrap();
        assert!(load(Some(&path), &no_flags()).is_ok());
        let flags = Flags {
            webhook_secret: Some(""),
            ..no_flags()
        };
        let e = format!("{:#}", load(Some(&path), &flags).unwrap_err());
        assert!(
            e.contains("--webhook-secret (DELAYQ_WEBHOOK_SECRET) is empty"),
            "{e}"
        );
    }

    #[test]
    fn keep_finished_is_read_from_defaults_and_topics_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("delayq.toml");
        std::fs::write(
            &path,
            "[defaults]\nkeep_finished = \"7d\"\nmax_attempts = 2\n[topics.a]\nkeep_finished = \"10m\"\n",
        )
        .unwrap();
        let t = load(Some(&path), &no_flags()).unwrap();
        assert_eq!(
            t.keep_finished,
            Some(std::time::Duration::from_secs(7 * 86400))
        );
        assert_eq!(t.topic_keep_finished["a"].as_secs(), 600);
        assert_eq!(t.default_retry.max_attempts, Some(2));
        for (file, says) in [
            ("[defaults]\nkeep_finished = \"0\"\n", "at least 1ms"),
            ("[topics.a]\nkeep_finished = \"-1s\"\n", "invalid duration"),
            ("[topics.a]\nkeep_finished = \"400d\"\n", "at most 365d"),
            ("[defaults]\nkeep_finishd = \"1d\"\n", "keep_finishd"),
        ] {
            std::fs::write(&path, file).unwrap();
            let e = format!("{:#}", load(Some(&path), &no_flags()).unwrap_err());
            assert!(e.contains(says), "{file}: {e}");
        }
    }

    #[test]
    fn a_recurring_ttr_under_the_http_name_is_refused_naming_the_file_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("delayq.toml");
        let file =
            |ttr: &str| format!("[recurring.r]\ntopic = \"t\"\ncron = \"0 0 9 * * *\"\n{ttr}\n");
        std::fs::write(&path, file("ttr = \"10m\"")).unwrap();
        let t = load(Some(&path), &no_flags()).unwrap();
        assert_eq!(t.recurring[0].1.ttr_ms, 600_000);
        std::fs::write(&path, file("ttr_ms = 600000")).unwrap();
        let e = format!("{:#}", load(Some(&path), &no_flags()).unwrap_err());
        assert!(e.contains("ttr = \"600000ms\""), "{e}");
    }

    /// README's reference of the file is real and whole: it loads, and
    /// every key it shows took effect (a key left out of it fails here).
    #[test]
    fn the_readme_reference_sets_every_key() {
        let readme = include_str!("../../README.md");
        let at = readme.find("### The config file").unwrap();
        let text = readme[at..].split("```toml\n").nth(1).unwrap();
        let text = text.split("```").next().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("delayq.toml");
        std::fs::write(&path, text).unwrap();
        // SAFETY: no other test reads this variable.
        unsafe { std::env::set_var("ORDER_HOOK_SECRET", "from-env") };
        let t = load(Some(&path), &no_flags()).unwrap();
        assert_eq!(t.default_retry.max_attempts, Some(5));
        assert_eq!(t.default_retry.intervals.len(), 3);
        assert_eq!(t.keep_finished.unwrap().as_secs(), 86400);
        assert_eq!(t.topic_keep_finished["order-timeout"].as_secs(), 7 * 86400);
        let hook = t
            .webhooks
            .iter()
            .find(|h| h.topic == "order-timeout")
            .unwrap();
        assert_eq!((hook.timeout.as_secs(), hook.concurrency), (10, 8));
        assert_eq!(hook.secret, Some(Secret("from-env".into())));
        assert_eq!(t.topic_retry["order-timeout"].max_attempts, Some(4));
        let sms = t
            .webhooks
            .iter()
            .find(|h| h.topic == "member-reminder")
            .unwrap();
        assert_eq!(sms.secret, Some(Secret("change-me".into())));
        assert_eq!(t.rates[0].0, "sms");
        assert_eq!((t.rates[0].1.per_second, t.rates[0].1.burst), (50.0, 100));
        let (name, r) = &t.recurring[0];
        assert_eq!(name, "expiry-reminders");
        assert_eq!(
            (r.topic.as_str(), r.cron.as_str(), r.timezone.as_str()),
            ("member-expiry", "0 0 9 * * *", "Asia/Shanghai")
        );
        assert_eq!(
            (r.body.as_str(), r.ttr_ms),
            ("{\"within_days\": 7}", 600_000)
        );
        assert_eq!(r.missed, delayq::Missed::Fire);
        assert_eq!(r.retry.as_ref().unwrap().max_attempts, Some(3));
        assert_eq!((t.events, t.events_kept), (Some(true), Some(100_000)));
        assert_eq!(
            otlp_endpoint(Some(&path)).unwrap().as_deref(),
            Some("http://127.0.0.1:4318")
        );
    }
}
