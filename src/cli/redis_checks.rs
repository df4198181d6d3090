//! What `delayq serve` checks about its Redis: that it can connect at all
//! (at start, with the real cause and a hint when it cannot), and the
//! settings delayq depends on (at start and every minute).
//!
//! A Redis that cannot be reached at start is fatal: delayq exits with the
//! cause, and a service manager restarts it. Once running, delayq rides out
//! any outage by itself.

use std::time::Duration;

use anyhow::{bail, Result};
use delayq::{Queue, Shutdown};

/// How often the settings are looked at again while running.
const RECHECK: Duration = Duration::from_secs(60);

/// Connects once; on failure, says what failed and what to do about it.
pub async fn connect(queue: &Queue, url: &str) -> Result<()> {
    let Err(e) = queue.check_connection().await else {
        return Ok(());
    };
    let cause = e.to_string();
    let hint = hint(&cause);
    bail!(
        "cannot reach redis at {}: {cause}\nhint: {hint}",
        redact(url)
    )
}

/// What to do about a failed connection, from its cause.
pub fn hint(cause: &str) -> &'static str {
    let lower = cause.to_lowercase();
    if lower.contains("db index") || lower.contains("switch database") {
        "the database number in --redis (redis://HOST:PORT/DB, ?db=DB) is beyond this \
         server's `databases` setting (16 by default: 0 to 15)"
    } else if lower.contains("parse error") || lower.contains("unexpected") {
        "the server at --redis does not speak the Redis protocol: is that the port of \
         another service (an HTTP server, say)? redis-server listens on 6379 by default"
    } else if lower.contains("refused") {
        "is redis-server running there, on that port?"
    } else if lower.contains("lookup")
        || lower.contains("resolve")
        || lower.contains("name or service")
    {
        "check the host name in --redis"
    } else if lower.contains("wrongpass") || lower.contains("auth") || lower.contains("password") {
        "check the user and password in --redis (redis://USER:PASSWORD@HOST:PORT)"
    } else if lower.contains("tls") || lower.contains("certificate") || lower.contains("handshake")
    {
        "check rediss:// and the certificates (--redis-ca, --redis-cert, --redis-key)"
    } else if lower.contains("no answer") || lower.contains("timed out") {
        "is the host reachable from here (firewall, security group)? --redis-timeout sets the wait"
    } else if lower.contains("no such file") {
        "is the unix socket path right, and redis-server running?"
    } else {
        "see the cause above"
    }
}

const NO_EVENTS: &str = "redis does not publish expired events (notify-keyspace-events Ex) and \
                         delayq may not set it: only the sweep fires jobs (still on time)";

/// What is wrong with the settings, as (fatal, message) pairs.
async fn problems(queue: &Queue, allow_evicting: bool, fix_events: bool) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let s = match queue.redis_settings().await {
        Ok(s) => s,
        Err(e) => {
            out.push((false, format!("cannot read redis settings: {e}")));
            return out;
        }
    };
    if s.evicting() {
        out.push((
            !allow_evicting,
            format!(
                "redis maxmemory-policy is {}: redis may silently delete jobs; set it to noeviction \
                 (pushes are refused meanwhile; --allow-evicting-redis starts anyway)",
                s.maxmemory_policy
            ),
        ));
    }
    if s.persistent == Some(false) {
        out.push((
            false,
            "redis has no persistence (appendonly no, no save rules): a redis restart loses every job; \
             turn on appendonly"
                .to_owned(),
        ));
    }
    match s.expired_events {
        Some(true) => {}
        Some(false) if fix_events && queue.enable_expired_events().await => {
            tracing::info!("turned on expired events in redis (notify-keyspace-events Ex)");
        }
        Some(false) => out.push((false, NO_EVENTS.to_owned())),
        // CONFIG refused (managed services rename it): the canary key tells.
        None => match queue.expired_events_heard() {
            Some(true) => {}
            Some(false) => out.push((
                false,
                format!("{NO_EVENTS} (no expired event heard for a canary key)"),
            )),
            // Not known yet: the canary logs its answer when it has one.
            None => tracing::info!(
                "redis refuses CONFIG: whether it publishes expired events is found out with a \
                 canary key (logged, and /readyz expired_events)"
            ),
        },
    }
    out
}

/// At start: fatal problems stop delayq, the rest are warned about, and
/// so are the settings CONFIG GET was refused (docs/acl.md: "delayq warns once
/// and works").
pub async fn settings_at_start(queue: &Queue, allow_evicting: bool) -> Result<()> {
    if let Ok(s) = queue.redis_settings().await {
        if s.persistent.is_none() {
            tracing::warn!(
                "redis refuses CONFIG GET to delayq's user (an ACL without +config|get, or CONFIG \
                 renamed): persistence (appendonly, save) went unchecked, so a redis without it \
                 (which a restart empties) is not named; the eviction policy is read from INFO, \
                 and expired events are found out with a canary key"
            );
        }
    }
    for (fatal, message) in problems(queue, allow_evicting, true).await {
        if fatal {
            bail!("{message}");
        }
        tracing::warn!("{message}");
    }
    Ok(())
}

/// Every minute while running: warns about what went wrong since.
pub async fn settings_every_minute(queue: Queue, allow_evicting: bool, shutdown: Shutdown) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RECHECK) => {}
            _ = shutdown.wait() => return,
        }
        for (_, message) in problems(&queue, allow_evicting, true).await {
            tracing::warn!("{message}");
        }
    }
}

/// The URL without its password (`user:PASSWORD@` or `?pass=PASSWORD`),
/// for messages.
pub fn redact(url: &str) -> String {
    if let Some(i) = url.find("pass=") {
        let end = url[i..].find('&').map_or(url.len(), |e| i + e);
        return format!("{}pass=***{}", &url[..i], &url[end..]);
    }
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_never_show() {
        use super::redact;
        assert_eq!(redact("redis://u:secret@h:1/"), "redis://u:***@h:1/");
        assert_eq!(
            redact("redis+unix:///s?user=u&pass=secret&db=1"),
            "redis+unix:///s?user=u&pass=***&db=1"
        );
        assert_eq!(redact("redis://h:1/"), "redis://h:1/");
    }
}
