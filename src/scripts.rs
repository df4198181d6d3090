//! The Lua scripts, one per atomic state transition.
//!
//! Each script lives in `src/scripts/<transition>.lua` with a header listing
//! its KEYS, ARGV and guarantees. They are compiled into the binary and sent
//! with EVALSHA; `redis::Script` falls back to EVAL when Redis answers
//! NOSCRIPT (after a restart its script cache is empty).

use redis::Script;

/// All of delayq's scripts, hashed once at start-up.
pub struct Scripts {
    pub push: Script,
    pub dispatch: Script,
    pub pop: Script,
    pub remove: Script,
    pub release: Script,
}

impl Scripts {
    pub fn new() -> Self {
        Scripts {
            push: Script::new(include_str!("scripts/push.lua")),
            dispatch: Script::new(include_str!("scripts/dispatch.lua")),
            pop: Script::new(include_str!("scripts/pop.lua")),
            remove: Script::new(include_str!("scripts/remove.lua")),
            release: Script::new(include_str!("scripts/release.lua")),
        }
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Self::new()
    }
}
