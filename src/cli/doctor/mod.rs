//! `delayq doctor --redis URL` (or `--redis-cluster URLS`): checks a Redis
//! server, or every master of a cluster, before a user trusts it with jobs. Each check is one verdict (ok, warn, fail) with what was
//! found and the fix. A check that cannot run (a command refused, a reply
//! not understood) is a warn, never a crash. Exits non-zero when any check
//! fails.
//!
//! The checks read what the server reports (INFO, and CONFIG where it is
//! allowed) and try what delayq does (a canary key for expired events,
//! the commands delayq sends for the ACL): managed services rename or
//! refuse CONFIG, so nothing that matters rests on it alone.

mod acl;
mod cluster;
mod events;
mod layout;
mod server;
mod tls;

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use delayq::{defaults, Tls};
use redis::aio::MultiplexedConnection;
use serde::Serialize;

use super::redis_checks;
use super::redis_tls::RedisTlsArgs;

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// The Redis to check (redis://HOST:PORT/DB, rediss://... for TLS,
    /// redis+unix:///PATH), as `serve --redis` takes it.
    #[arg(long, env = "DELAYQ_REDIS", required_unless_present = "redis_cluster")]
    redis: Option<String>,

    /// A Redis Cluster to check: its seed nodes' URLs, comma-separated, as
    /// `serve --redis-cluster` takes them. Every master is checked.
    #[arg(
        long,
        env = "DELAYQ_REDIS_CLUSTER",
        value_name = "URLS",
        conflicts_with = "redis"
    )]
    redis_cluster: Option<String>,

    #[command(flatten)]
    tls: RedisTlsArgs,

    /// The key prefix delayq will use: doctor's few short-lived keys are
    /// named under it, so an ACL that limits keys to it is tried as is.
    #[arg(long, env = "DELAYQ_PREFIX", default_value = defaults::PREFIX)]
    prefix: String,

    /// How long to wait for the canary key's expired event.
    #[arg(long, default_value = "5s", value_parser = positive_duration)]
    events_wait: Duration,

    /// Print the checks as one JSON document.
    #[arg(long)]
    json: bool,
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    match delayq::duration::parse_duration(s)? {
        d if d.is_zero() => Err("must be above 0 (e.g. 500ms, 2s)".into()),
        d => Ok(d),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub check: &'static str,
    /// The cluster master it is about (HOST:PORT); none on a single
    /// server and for the cluster-wide checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub verdict: Verdict,
    pub found: String,
    /// What to do about a warn or fail.
    pub fix: Option<String>,
}

impl Check {
    fn ok(check: &'static str, found: impl Into<String>) -> Check {
        Check {
            check,
            node: None,
            verdict: Verdict::Ok,
            found: found.into(),
            fix: None,
        }
    }
    fn warn(check: &'static str, found: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            check,
            node: None,
            verdict: Verdict::Warn,
            found: found.into(),
            fix: Some(fix.into()),
        }
    }
    fn fail(check: &'static str, found: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            check,
            node: None,
            verdict: Verdict::Fail,
            found: found.into(),
            fix: Some(fix.into()),
        }
    }
    /// A check whose command was refused or failed: a warn naming why.
    fn could_not(check: &'static str, what: &str, e: &redis::RedisError) -> Check {
        let fix = if is_noperm(e) {
            "the ACL refuses it: see the acl check".to_owned()
        } else {
            "run doctor again; if it persists, check the server's log".to_owned()
        };
        Check::warn(check, format!("cannot run ({what}: {e})"), fix)
    }
}

/// The ACL refused a command.
pub(crate) fn is_noperm(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM") || e.to_string().contains("NOPERM")
}

/// What the checks share: the connection, the server's INFO, names.
pub(crate) struct Target {
    pub conn: MultiplexedConnection,
    pub client: redis::Client,
    /// INFO's fields, or why INFO could not be read.
    pub info: std::result::Result<HashMap<String, String>, redis::RedisError>,
    pub prefix: String,
    /// What doctor's keys start with: `{PREFIX}:doctor`, or on a cluster
    /// master a hash tag of its own slots (`{PREFIX:doctor:N}`).
    pub tag: String,
    pub timeout: Duration,
}

impl Target {
    /// A plain connection to `url` and its INFO, or why it could not be
    /// made. Only a connection: no queue (which would load delayq's
    /// functions and start its loops on a server being checked).
    pub async fn reach(
        url: &str,
        tls: &Tls,
        prefix: &str,
    ) -> Result<std::result::Result<Target, redis::RedisError>> {
        let client = delayq::redis_client(url, tls).context("--redis")?;
        let timeout = defaults::REDIS_TIMEOUT.value;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let mut conn = match client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let info = redis::cmd("INFO")
            .query_async::<String>(&mut conn)
            .await
            .map(|text| parse_info(&text));
        Ok(Ok(Target {
            conn,
            client,
            info,
            prefix: prefix.to_owned(),
            tag: format!("{{{prefix}}}:doctor"),
            timeout,
        }))
    }

    pub fn info(&self, field: &str) -> Option<&str> {
        self.info.as_ref().ok()?.get(field).map(String::as_str)
    }

    /// CONFIG GET of one setting; None when refused or unknown.
    pub async fn config(&self, name: &str) -> Option<String> {
        let mut conn = self.conn.clone();
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async(&mut conn)
            .await
            .ok()?;
        pair.into_iter().nth(1)
    }

    /// A doctor-only key under the prefix, in a slot this server holds.
    pub fn key(&self, what: &str) -> String {
        format!("{}:{what}:{}", self.tag, std::process::id())
    }
}

/// Refuses a server that cannot run delayq's scripts (neither FUNCTION
/// nor EVAL for delayq's user, or Redis before 6.2), with the doctor's finding and fix:
/// `serve` asks at start, so such a server is named there instead of
/// every push failing after a ready start. Nothing when the server cannot
/// be asked (the connection check reports that).
pub async fn refuse_unscriptable(url: &str, tls: &Tls) -> Result<()> {
    let Ok(target) = Target::reach(url, tls, defaults::PREFIX).await? else {
        return Ok(());
    };
    let c = server::scripting(&target).await;
    if c.verdict == Verdict::Fail {
        bail!(
            "redis at {} cannot run delayq: {}\nhint: {}",
            redis_checks::redact(url),
            c.found,
            c.fix.unwrap_or_default()
        );
    }
    Ok(())
}

pub async fn run(args: DoctorArgs) -> Result<()> {
    delayq::validate_prefix(&args.prefix).map_err(anyhow::Error::msg)?;
    let tls = args.tls.tls();
    let checks = match (&args.redis_cluster, &args.redis) {
        (Some(seeds), _) => {
            let seeds: Vec<&str> = (seeds.split(','))
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            if seeds.is_empty() {
                bail!("--redis-cluster names no seed: give the nodes' URLs, comma-separated (redis://HOST:PORT,...)");
            }
            cluster::run(&seeds, &tls, &args).await?
        }
        (None, Some(url)) => single(url, &tls, &args).await?,
        (None, None) => bail!("give the Redis to check: --redis URL, or --redis-cluster URLS"),
    };
    print(&checks, args.json)?;
    let failed = checks.iter().filter(|c| c.verdict == Verdict::Fail).count();
    if failed > 0 {
        bail!(
            "{failed} check{} failed",
            if failed == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// One server's checks. A cluster node is named as such and its
/// key-touching checks left out: they would reach only its own slots.
async fn single(url: &str, tls: &Tls, args: &DoctorArgs) -> Result<Vec<Check>> {
    let client = delayq::redis_client(url, tls).context("--redis")?;
    let reached = Target::reach(url, tls, &args.prefix).await?;
    let mut checks = vec![tls::check(&client, tls, reached.as_ref().err())];
    let target = match reached {
        Ok(target) => target,
        Err(e) => {
            checks.push(unreachable(url, &e));
            return Ok(checks);
        }
    };
    checks.extend(server::checks(&target).await);
    if target.info("cluster_enabled") == Some("1") {
        checks.push(cluster::node_without_flag());
        return Ok(checks);
    }
    checks.push(cluster::check(&target).await);
    checks.push(events::check(&target, args.events_wait).await);
    checks.push(acl::check(&target).await);
    checks.push(layout::check(&args.prefix, &|_: &str| Some(target.conn.clone())).await);
    Ok(checks)
}

/// The failed connection to `url`, with the hint for its cause.
fn unreachable(url: &str, e: &redis::RedisError) -> Check {
    let cause = e.to_string();
    Check::fail(
        "connection",
        format!(
            "cannot reach redis at {}: {cause}",
            redis_checks::redact(url)
        ),
        redis_checks::hint(&cause),
    )
}

fn print(checks: &[Check], json: bool) -> Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    if json {
        let doc = serde_json::json!({
            "checks": checks,
            "ok": checks.iter().all(|c| c.verdict != Verdict::Fail),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(());
    }
    // The name column as wide as the longest name, so every finding
    // starts in the same column.
    let width = checks.iter().map(|c| c.check.len()).max().unwrap_or(0);
    for c in checks {
        let node = c
            .node
            .as_ref()
            .map_or_else(String::new, |n| format!("{n}: "));
        let (verdict, check, found) = (c.verdict.word(), c.check, &c.found);
        match &c.fix {
            Some(fix) => writeln!(
                out,
                "{verdict:<4}  {check:<width$}  {node}{found}; fix: {fix}"
            )?,
            None => writeln!(out, "{verdict:<4}  {check:<width$}  {node}{found}")?,
        }
    }
    Ok(())
}

/// INFO's `name:value` lines (section headers and blanks skipped).
fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_info_fields() {
        let info = super::parse_info("# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\r\n# Memory\r\nmaxmemory_policy:noeviction\r\n");
        assert_eq!(info["redis_version"], "7.2.4");
        assert_eq!(info["server_name"], "valkey");
        assert_eq!(info["maxmemory_policy"], "noeviction");
        assert!(!info.contains_key("# Memory"));
    }
}
