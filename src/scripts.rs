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
    Trim,
}

impl Transition {
    /// May run while Redis is at `maxmemory` (function flag `allow-oom`).
    /// Transitions that free memory or barely grow it must keep working when
    /// Redis is full: consumers finish and delete jobs to make room, and
    /// due jobs still fall due. Only what adds jobs (push, reschedule of a
    /// new body) is refused, with an OOM error that names the cause.
    fn allowed_when_full(self) -> bool {
        !matches!(self, Transition::Push | Transition::Reschedule)
    }
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
    (Transition::Trim, "trim", include_str!("scripts/trim.lua")),
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
        for (t, name, src) in ALL {
            let flags = if t.allowed_when_full() {
                "{ 'allow-oom' }"
            } else {
                "{}"
            };
            // Every call's ARGV[2] is its deadline: past it, the script
            // refuses before its first write. It is taken out of ARGV so
            // each script sees its own arguments from ARGV[2] on.
            source.push_str(&format!(
                "redis.register_function{{ function_name = 'dq_{name}_{version}', flags = {flags},\n\
                 callback = function(KEYS, ARGV)\n\
                 P, SCHEDULE = ARGV[1], KEYS[1]\n\
                 local late = past_deadline(table.remove(ARGV, 2))\n\
                 if late then return late end\n{src}\nend }}\n"
            ));
        }
        Library { version, source }
    })
}

/// The FCALL of `t`, with its first key (the schedule) and first arguments
/// (the key prefix, and the Redis time in microseconds after which the call
/// must change nothing, or 0 for no deadline) in place; the caller adds the
/// rest.
pub fn fcall(t: Transition, keys: &Keys, deadline_us: i64) -> Cmd {
    let name = ALL
        .iter()
        .find(|(x, _, _)| *x == t)
        .map(|(_, n, _)| *n)
        .expect("every transition has a script");
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(format!("dq_{name}_{}", library().version))
        .arg(1)
        .arg(keys.schedule())
        .arg(keys.base())
        .arg(deadline_us);
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

/// The call reached Redis after its deadline and changed nothing.
pub fn is_late(e: &RedisError) -> bool {
    e.code() == Some("DQLATE")
}

/// Redis is at `maxmemory` and refused a call that would grow it.
pub fn is_oom(e: &RedisError) -> bool {
    e.code() == Some("OOM")
}

/// A script refused an argument ("DQINVALID <message>"): the message.
pub fn invalid_message(e: &RedisError) -> Option<String> {
    (e.code() == Some("DQINVALID")).then(|| e.detail().unwrap_or("invalid argument").to_owned())
}

/// Another caller loaded the library first: as good as loaded.
pub fn is_already_loaded(e: &RedisError) -> bool {
    e.to_string().contains("already exists")
}
