//! The Lua scripts, one per atomic state transition, loaded into Redis once
//! as a function library and called by name.
//!
//! Each transition lives in `src/scripts/<transition>.lua` with a header
//! listing its KEYS, ARGV and guarantees; `lib.lua` holds the helpers they
//! share (counts, the schedule, the retry policy). They are compiled into the
//! binary and put together here as one library: `lib.lua`, then each
//! transition registered as the function `dq_<transition>_<version>`.
//!
//! Why a function library and not EVALSHA: an EVALSHA script's text runs
//! from the top on every call, so every helper is rebuilt each time; a
//! library's helpers are compiled once at FUNCTION LOAD. That halves the
//! Redis CPU of a job's life. The version (a hash of the sources) in every
//! name lets delayq builds with different scripts share one Redis. Functions
//! persist in the AOF; when Redis answers "Function not found" (a fresh
//! server, FUNCTION FLUSH), the caller loads the library and retries.

use std::sync::OnceLock;

use redis::{Cmd, RedisError};
use sha2::{Digest, Sha256};

use crate::keys::Keys;

/// The state transitions, one script each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    Push,
    Dispatch,
    Pop,
    Remove,
    Release,
    Nack,
    Touch,
    Reschedule,
    Requeue,
    Purge,
}

const LIB: &str = include_str!("scripts/lib.lua");

const ALL: &[(Transition, &str, &str)] = &[
    (Transition::Push, "push", include_str!("scripts/push.lua")),
    (
        Transition::Dispatch,
        "dispatch",
        include_str!("scripts/dispatch.lua"),
    ),
    (Transition::Pop, "pop", include_str!("scripts/pop.lua")),
    (
        Transition::Remove,
        "remove",
        include_str!("scripts/remove.lua"),
    ),
    (
        Transition::Release,
        "release",
        include_str!("scripts/release.lua"),
    ),
    (Transition::Nack, "nack", include_str!("scripts/nack.lua")),
    (
        Transition::Touch,
        "touch",
        include_str!("scripts/touch.lua"),
    ),
    (
        Transition::Reschedule,
        "reschedule",
        include_str!("scripts/reschedule.lua"),
    ),
    (
        Transition::Requeue,
        "requeue",
        include_str!("scripts/requeue.lua"),
    ),
    (
        Transition::Purge,
        "purge",
        include_str!("scripts/purge.lua"),
    ),
];

struct Library {
    version: String,
    source: String,
}

fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let mut hash = Sha256::new();
        hash.update(LIB);
        for (_, name, src) in ALL {
            hash.update(name);
            hash.update(src);
        }
        let version = hex::encode(&hash.finalize()[..6]);
        let mut source = format!("#!lua name=delayq_{version}\n{LIB}\n");
        for (_, name, src) in ALL {
            source.push_str(&format!(
                "redis.register_function('dq_{name}_{version}', function(KEYS, ARGV)\n\
                 P, SCHEDULE = ARGV[1], KEYS[1]\n{src}\nend)\n"
            ));
        }
        Library { version, source }
    })
}

/// The FCALL of `t`, with its first key (the schedule) and first argument
/// (the key prefix) in place; the caller adds the rest.
pub fn fcall(t: Transition, keys: &Keys) -> Cmd {
    let name = ALL
        .iter()
        .find(|(x, _, _)| *x == t)
        .map(|(_, n, _)| *n)
        .expect("every transition has a script");
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(format!("dq_{name}_{}", library().version))
        .arg(1)
        .arg(keys.schedule())
        .arg(keys.base());
    cmd
}

/// FUNCTION LOAD of the library.
pub fn load_cmd() -> Cmd {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD").arg(&library().source);
    cmd
}

/// Redis does not have this version's functions (yet).
pub fn is_missing(e: &RedisError) -> bool {
    e.to_string().contains("Function not found")
}

/// Another caller loaded the library first: as good as loaded.
pub fn is_already_loaded(e: &RedisError) -> bool {
    e.to_string().contains("already exists")
}
