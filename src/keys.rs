//! Redis key layout.
//!
//! Every key starts with `{prefix}:`. The braces make the prefix a hash tag,
//! so every key a script touches lives in one Redis Cluster slot. After the
//! prefix comes a fixed kind (`j:`, `t:`, `ready:`, `dead:`, `schedule`, `count`, `seq`) and
//! only then the user's id or topic, so no id or topic can ever name one of
//! delayq's own keys or another application's.
//!
//! | key                      | type   | holds                                         |
//! |--------------------------|--------|-----------------------------------------------|
//! | `{p}:j:<id>`             | hash   | the job; fields below                         |
//! | `{p}:t:<id>`             | string | trigger: expires when the job is due          |
//! | `{p}:schedule`           | zset   | id -> due time (ms): delayed and leased jobs  |
//! | `{p}:ready:<topic>`      | list   | ids ready to pop, oldest at the right         |
//! | `{p}:dead:<topic>`       | zset   | dead job ids -> time of death (ms)            |
//! | `{p}:count`              | hash   | "<state>:<topic>" -> number of jobs           |
//! | `{p}:seq`                | string | lease token counter                           |
//! | channel `{p}:ready`      | pubsub | "<count> <topic>" when jobs become ready      |
//! | channel `{p}:wake`       | pubsub | due time of a job that became the earliest    |
//!
//! Job hash fields are one letter each, because every pending job carries
//! them (lib.lua names them): `q` topic, `b` body, `r` ttr (ms), `d` due
//! (Unix ms; absent while delayed, when the schedule holds it), `s` state (absent while delayed; `ready`, `reserved`, `dead`),
//! `a` attempts (absent = 0), `k` lease token, `l` lease end, `p` retry
//! intervals (ms, comma-separated), `m` max attempts, `e` last error, `h`
//! history (one "attempt TAB ms TAB error" line per failure), `x` time of
//! death.

/// Names every key and channel for one prefix.
#[derive(Clone, Debug)]
pub struct Keys {
    /// `{prefix}:`, passed to scripts so they can name per-id keys.
    base: String,
}

impl Keys {
    /// Key names for `prefix`, which [`validate_prefix`] has accepted.
    pub fn new(prefix: &str) -> Self {
        Keys {
            base: format!("{{{prefix}}}:"),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }
    pub fn job(&self, id: &str) -> String {
        format!("{}j:{id}", self.base)
    }
    pub fn trigger(&self, id: &str) -> String {
        format!("{}t:{id}", self.base)
    }
    /// The start of every trigger key: expired events for other keys are
    /// none of delayq's business.
    pub fn trigger_prefix(&self) -> String {
        format!("{}t:", self.base)
    }
    pub fn schedule(&self) -> String {
        format!("{}schedule", self.base)
    }
    pub fn dead(&self, topic: &str) -> String {
        format!("{}dead:{topic}", self.base)
    }
    pub fn counts(&self) -> String {
        format!("{}count", self.base)
    }
    pub fn ready_channel(&self) -> String {
        format!("{}ready", self.base)
    }
    pub fn wake_channel(&self) -> String {
        format!("{}wake", self.base)
    }
}

/// A prefix is 1 to 64 characters of `[A-Za-z0-9_.-]`: no braces (it is
/// the hash tag) and nothing that needs quoting in logs or config files.
pub fn validate_prefix(prefix: &str) -> Result<(), String> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 64
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid key prefix {prefix:?}: use 1 to 64 characters from A-Z a-z 0-9 _ . -"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids_cannot_reach_delayq_keys() {
        let k = Keys::new("dq");
        assert_eq!(k.schedule(), "{dq}:schedule");
        // An id that looks like a delayq key still lands under job:/t:.
        assert_eq!(k.job("{dq}:schedule"), "{dq}:j:{dq}:schedule");
        assert_ne!(k.trigger("x"), k.job("x"));
        assert!(k.trigger("a").starts_with(&k.trigger_prefix()));
    }

    #[test]
    fn prefixes_are_checked() {
        assert!(validate_prefix("dq").is_ok());
        assert!(validate_prefix("my-app.dq_1").is_ok());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("a{b}").is_err());
        assert!(validate_prefix(&"x".repeat(65)).is_err());
    }
}
