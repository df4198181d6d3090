//! The Redis settings delayq depends on, as Redis reports them.
//!
//! - `maxmemory-policy`: an `allkeys-*` policy lets Redis delete jobs.
//! - persistence (`appendonly`, `save`): without either, a Redis restart
//!   loses every job.
//! - `notify-keyspace-events`: without expired events (`E` and `x`, or
//!   `A`), only the sweep fires jobs (still on time; the events are the
//!   cheap wake-up).
//!
//! Managed services often refuse CONFIG; what cannot be read is `None`.

use super::Store;
use crate::error::Result;
use crate::figures::Settings;

/// `notify-keyspace-events` flags publish expired events.
fn has_expired_events(flags: &str) -> bool {
    flags.contains('E') && (flags.contains('x') || flags.contains('A'))
}

impl Store {
    async fn config_get(&self, name: &'static str) -> Option<String> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(name);
        let pair: Vec<String> = self
            .redis
            .call("read settings", cmd.query_async(&mut self.redis.conn()))
            .await
            .ok()?;
        pair.into_iter().nth(1)
    }

    pub(crate) async fn settings(&self) -> Result<Settings> {
        let memory = self.memory().await?;
        let appendonly = self.config_get("appendonly").await;
        let save = self.config_get("save").await;
        let persistent = match (appendonly, save) {
            (Some(a), Some(s)) => Some(a == "yes" || !s.trim().is_empty()),
            _ => None,
        };
        let expired_events = self
            .config_get("notify-keyspace-events")
            .await
            .map(|f| has_expired_events(&f));
        Ok(Settings {
            maxmemory_policy: memory.policy,
            persistent,
            expired_events,
        })
    }

    /// Turns expired events on (keeping whatever else is on). False when
    /// Redis refuses CONFIG.
    pub(crate) async fn enable_expired_events(&self) -> bool {
        let Some(flags) = self.config_get("notify-keyspace-events").await else {
            return false;
        };
        let mut flags: String = flags;
        for f in ['E', 'x'] {
            if !flags.contains(f) {
                flags.push(f);
            }
        }
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET").arg("notify-keyspace-events").arg(flags);
        self.redis
            .call::<()>(
                "set notify-keyspace-events",
                cmd.query_async(&mut self.redis.conn()),
            )
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_event_flags() {
        assert!(has_expired_events("Ex"));
        assert!(has_expired_events("KEA"));
        assert!(!has_expired_events("Kx"));
        assert!(!has_expired_events(""));
    }
}
