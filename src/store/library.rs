//! The scripts as one Redis function library, assembled here and given to
//! the Redis client ([`crate::redis::library`]), which loads it and calls
//! its functions by name.
//!
//! The library is: the generated prelude (every name in [`layout`], the
//! arguments per item of the many-per-call scripts, and every [`Status`],
//! as Lua constants), the helpers of `lib/*.lua` in the order of
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

use redis::Cmd;
use sha2::{Digest, Sha256};

use super::batch::PerJob;
use super::script::Script;
use super::{layout, Keys, ScriptDef, Status};
use crate::redis::library::{command, Function, Library, Path};

/// What Lua allows each function, and the test that the library keeps
/// room under it.
#[cfg(test)]
mod limits;
#[cfg(test)]
mod lua_tokens;

/// The helper files, one concern each. lib/call.lua comes first: it
/// declares the concerns' tables (a local is seen only by the text after
/// it); each other file fills its table, so they may call each other in
/// any order.
const HELPERS: &[(&str, &str)] = &[
    ("lib/call", include_str!("lib/call.lua")),
    ("lib/body", include_str!("lib/body.lua")),
    ("lib/groups", include_str!("lib/groups.lua")),
    ("lib/ready", include_str!("lib/ready.lua")),
    ("lib/counts", include_str!("lib/counts.lua")),
    ("lib/tags", include_str!("lib/tags.lua")),
    ("lib/order", include_str!("lib/order.lua")),
    ("lib/schedule", include_str!("lib/schedule.lua")),
    ("lib/arming", include_str!("lib/arming.lua")),
    ("lib/dedup", include_str!("lib/dedup.lua")),
    ("lib/retries", include_str!("lib/retries.lua")),
    ("lib/rate_limits", include_str!("lib/rate_limits.lua")),
    ("lib/finished", include_str!("lib/finished.lua")),
    ("lib/running", include_str!("lib/running.lua")),
    ("lib/job", include_str!("lib/job.lua")),
    ("lib/batches", include_str!("lib/batches.lua")),
    ("lib/flows", include_str!("lib/flows.lua")),
];

/// Every transition, one script each, by its type's definition: a
/// [`Script`]'s, or a [`PerJob`]'s (the many-per-call push, remove, hold
/// and tick). A script with several modes (group, list) has a type per
/// mode, all sharing its one definition: it is listed once, by its first.
pub(crate) const ALL: &[&ScriptDef] = &[
    super::push::Pushes::DEF,
    super::dispatch::Dispatch::DEF,
    super::pop::Pop::DEF,
    super::remove::Removes::DEF,
    super::release::Release::DEF,
    super::nack::Nack::DEF,
    super::touch::Touch::DEF,
    super::hold::Holds::DEF,
    super::reschedule::Reschedule::DEF,
    super::requeue::Requeue::DEF,
    super::sweeps::Purge::DEF,
    super::sweeps::Trim::DEF,
    super::sweeps::History::DEF,
    super::tick::Tick::DEF,
    super::recur_put::RecurPut::DEF,
    super::list::ListSorted::DEF,
    super::rate::Rate::DEF,
    super::unpop::Unpop::DEF,
    super::leader::Leader::DEF,
    super::events::Events::DEF,
    super::tag_pages::TagList::DEF,
    super::tag_pages::TagCancel::DEF,
    super::tag_reschedule::TagReschedule::DEF,
    super::cancel::Cancel::DEF,
    super::progress::Progress::DEF,
    super::progress::Log::DEF,
    super::index::Index::DEF,
    super::relayout::Relayout::DEF,
    super::relayout::LayoutSwap::DEF,
    super::group::GroupGet::DEF,
    super::batches::BatchOpen::DEF,
    super::batches::BatchAdd::DEF,
    super::batches::BatchSettle::DEF,
    super::batches::BatchNote::DEF,
    super::batches::NotesRead::DEF,
    super::batches::BatchClose::DEF,
    super::batches::BatchCancelJobs::DEF,
];

/// The body every call runs around its transition `name`, for the
/// library's function and the script alike.
///
/// Every call's last two arguments are its deadline (past it, the script
/// refuses before its first write; so it does when the ACL refuses a
/// command the scripts run, CALL.refused in lib/call.lua) and the events setting (EVENTS in
/// lib/counts.lua). They are taken off the end of ARGV, which costs the
/// same whatever the call's size (taken from the front, every argument
/// after them would move), so each script sees its own arguments from
/// `ARGV[2]` on. The count changes a call gathered are written when it
/// returns. What a call keeps for itself (the layout and the arming
/// watermark it read, heads kept back) is reset first: a library's globals
/// outlive its calls, and a call that failed part-way left them set.
fn wrapper(name: &str) -> String {
    format!(
        "P, SCHEDULE, NOW, COUNTS, BODIES.layout, H.armed, H.heads_later = ARGV[1], KEYS[1], nil, {{}}, nil, nil, nil\n\
         H.ties, H.seq, H.seq_room, BATCH.noted = nil, nil, nil, nil\n\
         EVENTS = tonumber(table.remove(ARGV))\n\
         local late = CALL.past_deadline(table.remove(ARGV))\n\
         if late then return late end\n\
         local refused = CALL.refused()\n\
         if refused then return refused end\n\
         local reply = dq_{name}(KEYS, ARGV)\n\
         COUNT.flush()\n\
         if BATCH.noted then redis.call('PUBLISH', P .. WAKE_CHANNEL, BATCH.NOTES_NOTICE) end\n\
         return reply\n"
    )
}

/// The Lua constants every script sees: the layout's names, the
/// arguments per item of the many-per-call scripts (as their Rust sides
/// write them), and every [`Status`].
fn prelude() -> String {
    format!(
        "{}local PUSH_ARGS = {}\nlocal TICK_ARGS = {}\n{}",
        layout::lua_prelude(),
        super::push::ARGS,
        super::tick::ARGS,
        Status::lua_prelude()
    )
}

/// The library, assembled once: what the Redis client is given.
pub(crate) fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let prelude = prelude();
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
            source.push_str(&format!(
                "do\nlocal function dq_{name}(KEYS, ARGV)\n{src}\nend\n\
                 redis.register_function{{ function_name = 'dq_{name}_{version}', flags = {flags},\n\
                 callback = function(KEYS, ARGV)\n{wrapper}end }}\nend\n",
                name = s.name,
                src = s.source,
                wrapper = wrapper(s.name),
            ));
        }
        let mut functions = Vec::with_capacity(ALL.len());
        for s in ALL {
            // The same text as the library's, as one script's top level:
            // the prelude, every helper, the transition and its wrapper.
            // What 7.0 declares with the flag allow-oom, 6.2 decides at a
            // script's first write: one that may grow memory is refused
            // at maxmemory, any later one is not. A first write that cannot
            // (DEL of the never-written `moving` key, in the partition's
            // slot, replicated as nothing) keeps these scripts working
            // when Redis is full, as the flag does.
            let oom = if s.when_full {
                format!("redis.call('DEL', P .. '{}')\n", layout::kind::MOVING)
            } else {
                String::new()
            };
            let mut body = prelude.clone();
            for (_, helpers) in HELPERS {
                body.push_str(helpers);
                body.push('\n');
            }
            body.push_str(&format!(
                "local function dq_{name}(KEYS, ARGV)\n{src}\nend\n{wrapper}",
                name = s.name,
                src = s.source,
                wrapper = wrapper(s.name).replacen(
                    "local reply",
                    &format!("{oom}local reply"),
                    1
                ),
            ));
            let sha = redis::Script::new(&body).get_hash().to_owned();
            functions.push(Function {
                name: s.name,
                acked: s.acked,
                late_unknown: s.late_unknown,
                // A push (or a recurring tick's) is safe to send again:
                // its ids make a second one change nothing.
                repeatable: matches!(s.name, "push" | "tick"),
                function: format!("dq_{}_{version}", s.name),
                eval: body,
                sha,
            });
        }
        Library { source, functions }
    })
}

/// `script`'s function in the library.
pub(crate) fn function(script: &ScriptDef) -> &'static Function {
    library().get(script.name).expect("every script is in ALL")
}

/// The FCALL of `script` on one partition: its first key (the schedule),
/// the key prefix, the script's own arguments `args`, then the deadline
/// (Redis time in microseconds, 0 for none). With `guard`, the partition's
/// never-written `moving` key is declared as a second key (see
/// [`Keys::moving`]). Events off; see `call_with`.
pub fn fcall(script: &ScriptDef, keys: &Keys, guard: bool, deadline_us: i64, args: &Cmd) -> Cmd {
    call_with(Path::Function, script, keys, guard, args, deadline_us, 0)
}

/// [`fcall`] on `path`: an EVALSHA of the script's own text on
/// [`Path::Eval`].
pub fn call(
    path: Path,
    script: &ScriptDef,
    keys: &Keys,
    guard: bool,
    deadline_us: i64,
    args: &Cmd,
) -> Cmd {
    call_with(path, script, keys, guard, args, deadline_us, 0)
}

/// The call of `script` on `path`, with `events`: how many events each
/// partition's stream keeps (0: events off, the scripts write none). The
/// deadline and events come last: the wrapper takes them off the end of
/// ARGV.
pub fn call_with(
    path: Path,
    script: &ScriptDef,
    keys: &Keys,
    guard: bool,
    args: &Cmd,
    deadline_us: i64,
    events: u64,
) -> Cmd {
    let mut names = vec![keys.schedule()];
    if guard {
        names.push(keys.moving());
    }
    let mut head = Cmd::new();
    head.arg(keys.base());
    let mut tail = Cmd::new();
    tail.arg(events);
    command(
        path,
        function(script),
        &names,
        &[&head, args],
        deadline_us,
        &tail,
    )
}

/// The EVALSHA script of transition `name` (e.g. "push"): its SHA1 and
/// its text.
pub fn eval_script_of(name: &str) -> Option<(&'static str, &'static str)> {
    let e = library().get(name)?;
    Some((e.sha.as_str(), e.eval.as_str()))
}

/// The SHA1 of every EVALSHA script.
pub fn eval_shas() -> Vec<&'static str> {
    library().functions.iter().map(|e| e.sha.as_str()).collect()
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

    /// Every text Redis is given (the library, and each script for
    /// EVALSHA) names the command of each `redis.call`/`redis.pcall`
    /// literally: managed services that check a script's commands before
    /// running it (Tair) refuse a name held in a variable.
    #[test]
    fn every_redis_call_names_its_command_literally() {
        let lib = library();
        let texts = std::iter::once(("the library", lib.source.as_str()))
            .chain(lib.functions.iter().map(|e| (e.name, e.eval.as_str())));
        for (name, text) in texts {
            for line in text.lines() {
                let code = line.split("--").next().unwrap_or("");
                for call in ["redis.call(", "redis.pcall("] {
                    for (at, _) in code.match_indices(call) {
                        let arg = code[at + call.len()..].trim_start();
                        assert!(
                            arg.starts_with('\'') || arg.starts_with('"'),
                            "{name}: {call} without a literal command name: {}",
                            line.trim()
                        );
                    }
                }
            }
        }
    }

    /// The eval scripts are the library's transitions, one each.
    #[test]
    fn each_transition_has_its_own_script() {
        let lib = library();
        assert_eq!(lib.functions.len(), ALL.len());
        for (e, s) in lib.functions.iter().zip(ALL) {
            assert_eq!(e.name, s.name);
            assert!(e.eval.contains(s.source));
            assert!(!e.eval.starts_with("#!"), "6.2 reads no shebang");
            assert!(!e.eval.contains("register_function"));
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
