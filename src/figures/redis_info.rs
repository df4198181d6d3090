//! The Redis delayq runs on, as it reports itself: its memory (`INFO
//! memory`) and the settings delayq depends on (`CONFIG GET`; why each
//! matters: `store::settings`). The store reads them; pushes, `/readyz`,
//! `serve`'s checks and `delayq doctor` judge them.

/// Redis's memory, as `INFO memory` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Memory {
    pub used_bytes: u64,
    /// `maxmemory`; 0 means no limit.
    pub max_bytes: u64,
    /// `maxmemory-policy`.
    pub policy: String,
}

impl Memory {
    /// At `maxmemory`: with `noeviction`, calls that grow memory are refused.
    pub fn full(&self) -> bool {
        self.max_bytes > 0 && self.used_bytes >= self.max_bytes
    }

    /// The policy lets Redis delete keys that carry no TTL, such as jobs.
    /// (`volatile-*` policies evict only keys with a TTL: trigger keys,
    /// which the sweep does without.)
    pub fn evicting(&self) -> bool {
        evicting(&self.policy)
    }
}

/// A `maxmemory-policy` that may delete jobs.
pub fn evicting(policy: &str) -> bool {
    policy.starts_with("allkeys-")
}

/// The Redis settings delayq depends on, as Redis reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub maxmemory_policy: String,
    /// `appendonly yes`, or `save` rules: None when CONFIG is refused.
    pub persistent: Option<bool>,
    /// Expired events are published: None when CONFIG is refused.
    pub expired_events: Option<bool>,
}

impl Settings {
    pub fn evicting(&self) -> bool {
        evicting(&self.maxmemory_policy)
    }
}
