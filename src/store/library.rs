//! The scripts as one Redis function library, loaded once and called by
//! name.
//!
//! The library is: the generated prelude (every name in [`layout`] and every
//! [`Status`], as Lua constants), the helpers of `lib/*.lua` in the order of
//! [`HELPERS`], then each transition registered as the function
//! `dq_<name>_<version>`.
//!
//! Why a function library and not EVALSHA: an EVALSHA script's text runs
//! from the top on every call, so every helper is rebuilt each time; a
//! library's helpers are compiled once at FUNCTION LOAD. That halves the
//! Redis CPU of a job's life. The version (a hash of the sources) in every
//! name lets delayq builds with different scripts share one Redis. Functions
//! persist in the AOF; when Redis answers "Function not found" (a fresh
//! server, FUNCTION FLUSH), the caller loads the library and retries.
//!
//! [`layout`]: super::layout

use std::sync::OnceLock;

use redis::{Cmd, RedisError};
use sha2::{Digest, Sha256};

use super::{layout, Keys, Script, Status};

/// The helper files, by concept, in load order: a Lua `local function` is
/// seen only by what comes after it, so each file uses only those above.
const HELPERS: &[(&str, &str)] = &[
    ("lib/call", include_str!("lib/call.lua")),
    ("lib/ready", include_str!("lib/ready.lua")),
    ("lib/counts", include_str!("lib/counts.lua")),
    ("lib/tags", include_str!("lib/tags.lua")),
    ("lib/schedule", include_str!("lib/schedule.lua")),
    ("lib/dedup", include_str!("lib/dedup.lua")),
    ("lib/retries", include_str!("lib/retries.lua")),
    ("lib/rate_limits", include_str!("lib/rate_limits.lua")),
    ("lib/finished", include_str!("lib/finished.lua")),
];

/// Every transition, one script each.
pub(crate) const ALL: &[&Script] = &[
    &super::push::SCRIPT,
    &super::dispatch::SCRIPT,
    &super::pop::SCRIPT,
    &super::remove::SCRIPT,
    &super::release::SCRIPT,
    &super::nack::SCRIPT,
    &super::touch::SCRIPT,
    &super::reschedule::SCRIPT,
    &super::requeue::SCRIPT,
    &super::purge::SCRIPT,
    &super::trim::SCRIPT,
    &super::history::SCRIPT,
    &super::tick::SCRIPT,
    &super::recur_put::SCRIPT,
    &super::list::SCRIPT,
    &super::rate::SCRIPT,
    &super::unpop::SCRIPT,
    &super::lease::SCRIPT,
    &super::events::SCRIPT,
    &super::tag_list::SCRIPT,
    &super::tag_cancel::SCRIPT,
    &super::tag_reschedule::SCRIPT,
];

struct Library {
    version: String,
    source: String,
}

fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let prelude = format!("{}{}", layout::lua_prelude(), Status::lua_prelude());
        let mut hash = Sha256::new();
        hash.update(&prelude);
        for (_, helpers) in HELPERS {
            hash.update(helpers);
        }
        for s in ALL {
            hash.update(s.name);
            hash.update(s.source);
        }
        let version = hex::encode(&hash.finalize()[..6]);
        let mut source = format!("#!lua name=delayq_{version}\n{prelude}");
        for (_, helpers) in HELPERS {
            source.push_str(helpers);
            source.push('\n');
        }
        for s in ALL {
            let flags = if s.when_full { "{ 'allow-oom' }" } else { "{}" };
            // Every call's last two arguments are its deadline (past it,
            // the script refuses before its first write) and the events
            // setting (EVENTS in lib/counts.lua). They are taken off the end of
            // ARGV, which costs the same whatever the call's size (taken
            // from the front, every argument after them would move), so
            // each script sees its own arguments from ARGV[2] on. The count
            // changes a call gathered are written when it returns.
            source.push_str(&format!(
                "local function dq_{name}(KEYS, ARGV)\n{src}\nend\n\
                 redis.register_function{{ function_name = 'dq_{name}_{version}', flags = {flags},\n\
                 callback = function(KEYS, ARGV)\n\
                 P, SCHEDULE, NOW, COUNTS = ARGV[1], KEYS[1], nil, {{}}\n\
                 EVENTS = tonumber(table.remove(ARGV))\n\
                 local late = past_deadline(table.remove(ARGV))\n\
                 if late then return late end\n\
                 local reply = dq_{name}(KEYS, ARGV)\n\
                 flush_counts()\n\
                 return reply\nend }}\n",
                name = s.name,
                src = s.source,
            ));
        }
        Library { version, source }
    })
}

/// The FCALL of `script` on one partition: its first key (the schedule),
/// the key prefix, the script's own arguments `args`, then the deadline
/// (Redis time in microseconds, 0 for none). With `guard`, the partition's
/// never-written `moving` key is declared as a second key (see
/// [`Keys::moving`]). Events off; see [`fcall_with`].
pub fn fcall(script: &Script, keys: &Keys, guard: bool, deadline_us: i64, args: &Cmd) -> Cmd {
    fcall_with(script, keys, guard, args, deadline_us, 0)
}

/// [`fcall`], with `events`: how many events each partition's stream
/// keeps (0: events off, the scripts write none). The deadline and events
/// come last: the library's wrapper takes them off the end of ARGV.
pub fn fcall_with(
    script: &Script,
    keys: &Keys,
    guard: bool,
    args: &Cmd,
    deadline_us: i64,
    events: u64,
) -> Cmd {
    let mut cmd = redis::cmd("FCALL");
    cmd.arg(format!("dq_{}_{}", script.name, library().version));
    if guard {
        cmd.arg(2).arg(keys.schedule()).arg(keys.moving());
    } else {
        cmd.arg(1).arg(keys.schedule());
    }
    cmd.arg(keys.base());
    for arg in args.args_iter() {
        if let redis::Arg::Simple(a) = arg {
            cmd.arg(a);
        }
    }
    cmd.arg(deadline_us).arg(events);
    cmd
}

/// FUNCTION LOAD REPLACE of the library: the same text whoever loads it, so
/// loads that race (several delayq processes, every master of a cluster,
/// some of which have it) all succeed.
pub(crate) fn load_cmd() -> Cmd {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD").arg("REPLACE").arg(&library().source);
    cmd
}

/// Redis does not have this version's functions (yet).
pub(crate) fn is_missing(e: &RedisError) -> bool {
    e.to_string().contains("Function not found")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scripts name keys, fields and states through the prelude only: a
    /// literal would drift from `layout.rs` unnoticed.
    #[test]
    fn no_script_writes_a_layout_name_as_a_literal() {
        let helpers = HELPERS.iter().map(|(name, src)| (*name, *src));
        let sources = ALL.iter().map(|s| (s.name, s.source)).chain(helpers);
        for (name, src) in sources {
            let code: String = src
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            for literal in code.split('\'').skip(1).step_by(2) {
                assert!(
                    !layout::values().any(|v| v == literal),
                    "{name}.lua writes '{literal}'; use its name from layout.rs"
                );
            }
        }
    }

    #[test]
    fn every_script_opens_with_its_contract() {
        for s in ALL {
            let header: String = s
                .source
                .lines()
                .take_while(|l| l.starts_with("--"))
                .collect();
            for part in [
                "KEYS[1]",
                "ARGV[1]",
                "Touches:",
                "Helpers:",
                "Returns",
                "Guarantees:",
            ] {
                assert!(
                    header.contains(part),
                    "{}.lua's header lacks {part}",
                    s.name
                );
            }
        }
    }
}
