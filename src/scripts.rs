//! The Lua scripts, one per atomic state transition.
//!
//! Each script lives in `src/scripts/<transition>.lua` with a header listing
//! its KEYS, ARGV and guarantees. `lib.lua` (shared helpers: counts, the
//! schedule, the retry policy) is prepended to each at compile time, so each
//! still runs as one atomic script. They are sent with EVALSHA;
//! `redis::Script` falls back to EVAL when Redis answers NOSCRIPT (after a
//! restart its script cache is empty).

use redis::Script;

macro_rules! script {
    ($name:literal) => {
        Script::new(concat!(
            include_str!("scripts/lib.lua"),
            include_str!(concat!("scripts/", $name, ".lua"))
        ))
    };
}

/// All of delayq's scripts, hashed once at start-up.
pub struct Scripts {
    pub push: Script,
    pub dispatch: Script,
    pub pop: Script,
    pub remove: Script,
    pub release: Script,
    pub nack: Script,
    pub touch: Script,
    pub reschedule: Script,
    pub requeue: Script,
    pub purge: Script,
}

impl Scripts {
    pub fn new() -> Self {
        Scripts {
            push: script!("push"),
            dispatch: script!("dispatch"),
            pop: script!("pop"),
            remove: script!("remove"),
            release: script!("release"),
            nack: script!("nack"),
            touch: script!("touch"),
            reschedule: script!("reschedule"),
            requeue: script!("requeue"),
            purge: script!("purge"),
        }
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}
