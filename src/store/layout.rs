//! Where delayq keeps things in Redis: key kinds, job-hash fields, states and
//! channels, each named once, here. The scripts get the same names as a Lua
//! prelude made from these tables ([`lua_prelude`]), and a test checks that
//! no script writes one of the values as a literal.
//!
//! Every key starts with `{prefix}:`. The braces make the prefix a hash tag,
//! so every key a script touches lives in one Redis Cluster slot. After the
//! prefix comes a fixed kind and only then the user's id or topic, so no id
//! or topic can ever name one of delayq's own keys or another application's.
//!
//! | key                      | type   | holds                                         |
//! |--------------------------|--------|-----------------------------------------------|
//! | `{p}:j:<id>`             | hash   | the job; fields in [`field`]                  |
//! | `{p}:t:<id>`             | string | trigger: expires when the job is due          |
//! | `{p}:schedule`           | zset   | id -> due time (ms): delayed and leased jobs  |
//! | `{p}:ready:<topic>`      | list   | ids ready to pop, oldest at the right         |
//! | `{p}:dead:<topic>`       | zset   | dead job ids -> time of death (ms)            |
//! | `{p}:count`              | hash   | "<state>:<topic>" -> number of jobs           |
//! | `{p}:seq`                | string | lease token counter                           |
//! | channel `{p}:ready`      | pubsub | "<count> <topic>" when jobs become ready      |
//! | channel `{p}:wake`       | pubsub | due time of a job that became the earliest    |

/// Key kinds and channel names, after the prefix.
pub mod kind {
    pub const JOB: &str = "j:";
    pub const TRIGGER: &str = "t:";
    pub const SCHEDULE: &str = "schedule";
    pub const READY: &str = "ready:";
    pub const DEAD: &str = "dead:";
    pub const COUNT: &str = "count";
    pub const SEQ: &str = "seq";
    pub const READY_CHANNEL: &str = "ready";
    pub const WAKE_CHANNEL: &str = "wake";
}

/// Job hash fields. One letter each: millions of pending jobs each carry
/// these names.
pub mod field {
    pub const TOPIC: &str = "q";
    pub const BODY: &str = "b";
    /// Time to run, ms.
    pub const TTR: &str = "r";
    /// Due time, Unix ms; absent while delayed, when the schedule holds it.
    pub const DUE: &str = "d";
    /// Absent while delayed (most jobs, so it costs nothing); otherwise one
    /// of [`super::state`]'s other values.
    pub const STATE: &str = "s";
    /// Deliveries so far; absent means 0.
    pub const ATTEMPTS: &str = "a";
    /// The current lease's token ("" when not reserved).
    pub const TOKEN: &str = "k";
    /// End of the current lease, Unix ms.
    pub const LEASE: &str = "l";
    /// Retry intervals, ms, comma-separated.
    pub const RETRY: &str = "p";
    /// Most attempts.
    pub const MAX: &str = "m";
    /// The last failed attempt's error.
    pub const ERROR: &str = "e";
    /// One "attempt TAB ms TAB error" line per failure, the last 20.
    pub const HISTORY: &str = "h";
    /// Time of death, Unix ms.
    pub const DEAD_AT: &str = "x";
}

/// Job states as stored (field `s`) and counted (`{p}:count`).
pub mod state {
    pub const DELAYED: &str = "delayed";
    pub const READY: &str = "ready";
    pub const RESERVED: &str = "reserved";
    pub const DEAD: &str = "dead";
}

/// The Lua names of everything above: (name in the scripts, value).
const LUA_NAMES: &[(&str, &str)] = &[
    ("JOB_KEY", kind::JOB),
    ("TRIGGER_KEY", kind::TRIGGER),
    ("READY_KEY", kind::READY),
    ("DEAD_KEY", kind::DEAD),
    ("COUNT_KEY", kind::COUNT),
    ("SEQ_KEY", kind::SEQ),
    ("READY_CHANNEL", kind::READY_CHANNEL),
    ("WAKE_CHANNEL", kind::WAKE_CHANNEL),
    ("TOPIC", field::TOPIC),
    ("BODY", field::BODY),
    ("TTR", field::TTR),
    ("DUE", field::DUE),
    ("STATE", field::STATE),
    ("ATTEMPTS", field::ATTEMPTS),
    ("TOKEN", field::TOKEN),
    ("LEASE", field::LEASE),
    ("RETRY", field::RETRY),
    ("MAX", field::MAX),
    ("ERR", field::ERROR),
    ("HIST", field::HISTORY),
    ("DEAD_AT", field::DEAD_AT),
    ("DELAYED", state::DELAYED),
    ("READY", state::READY),
    ("RESERVED", state::RESERVED),
    ("DEAD", state::DEAD),
];

/// `local NAME = 'value'` for every name, for the top of the function
/// library. (The schedule key comes in as KEYS[1].)
pub(crate) fn lua_prelude() -> String {
    let mut out = String::from("-- Generated from src/store/layout.rs.\n");
    for (name, value) in LUA_NAMES {
        out.push_str(&format!("local {name} = '{value}'\n"));
    }
    out
}

/// Every value the scripts must name through the prelude.
#[cfg(test)]
pub(crate) fn values() -> impl Iterator<Item = &'static str> {
    LUA_NAMES.iter().map(|(_, v)| *v).chain([kind::SCHEDULE])
}

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
        format!("{}{}{id}", self.base, kind::JOB)
    }
    pub fn trigger(&self, id: &str) -> String {
        format!("{}{}{id}", self.base, kind::TRIGGER)
    }
    /// The start of every trigger key: expired events for other keys are
    /// none of delayq's business.
    pub fn trigger_prefix(&self) -> String {
        format!("{}{}", self.base, kind::TRIGGER)
    }
    pub fn schedule(&self) -> String {
        format!("{}{}", self.base, kind::SCHEDULE)
    }
    pub fn dead(&self, topic: &str) -> String {
        format!("{}{}{topic}", self.base, kind::DEAD)
    }
    pub fn counts(&self) -> String {
        format!("{}{}", self.base, kind::COUNT)
    }
    pub fn ready_channel(&self) -> String {
        format!("{}{}", self.base, kind::READY_CHANNEL)
    }
    pub fn wake_channel(&self) -> String {
        format!("{}{}", self.base, kind::WAKE_CHANNEL)
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
        // An id that looks like a delayq key still lands under j:/t:.
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
