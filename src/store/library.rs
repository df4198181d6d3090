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
    &super::hold::SCRIPT,
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
    &super::leader::SCRIPT,
    &super::events::SCRIPT,
    &super::tag_list::SCRIPT,
    &super::tag_cancel::SCRIPT,
    &super::tag_reschedule::SCRIPT,
    &super::cancel::SCRIPT,
    &super::progress::PROGRESS,
    &super::progress::LOG,
    &super::index::SCRIPT,
    &super::relayout::SCRIPT,
    &super::relayout::SWAP,
    &super::group::SCRIPT,
];

struct Library {
    version: String,
    source: String,
    /// Each transition as a script of its own, for EVALSHA.
    eval: Vec<EvalScript>,
}

struct EvalScript {
    name: &'static str,
    body: String,
    sha: String,
}

/// The body every call runs around its transition `name`, for the
/// library's function and the script alike.
///
/// Every call's last two arguments are its deadline (past it, the script
/// refuses before its first write; so it does when the ACL refuses a
/// command the scripts run, CALL.refused in lib/call.lua) and the events setting (EVENTS in
/// lib/counts.lua). They are taken off the end of ARGV, which costs the
/// same whatever the call's size (taken from the front, every argument
/// after them would move), so each script sees its own arguments from
/// ARGV[2] on. The count changes a call gathered are written when it
/// returns. What a call keeps for itself (the layout and the arming
/// watermark it read, heads kept back) is reset first: a library's globals
/// outlive its calls, and a call that failed part-way left them set.
fn wrapper(name: &str) -> String {
    format!(
        "P, SCHEDULE, NOW, COUNTS, BODIES.layout, H.armed, H.heads_later = ARGV[1], KEYS[1], nil, {{}}, nil, nil, nil\n\
         H.ties, H.seq, H.seq_room = nil, nil, nil\n\
         EVENTS = tonumber(table.remove(ARGV))\n\
         local late = CALL.past_deadline(table.remove(ARGV))\n\
         if late then return late end\n\
         local refused = CALL.refused()\n\
         if refused then return refused end\n\
         local reply = dq_{name}(KEYS, ARGV)\n\
         COUNT.flush()\n\
         return reply\n"
    )
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
            source.push_str(&format!(
                "do\nlocal function dq_{name}(KEYS, ARGV)\n{src}\nend\n\
                 redis.register_function{{ function_name = 'dq_{name}_{version}', flags = {flags},\n\
                 callback = function(KEYS, ARGV)\n{wrapper}end }}\nend\n",
                name = s.name,
                src = s.source,
                wrapper = wrapper(s.name),
            ));
        }
        let mut eval = Vec::with_capacity(ALL.len());
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
            eval.push(EvalScript {
                name: s.name,
                body,
                sha,
            });
        }
        Library {
            version,
            source,
            eval,
        }
    })
}

/// How a server runs delayq's scripts: the function library (FCALL), or
/// where FUNCTION is missing (Redis 6.2) or refused (ACL, a renamed
/// command), each transition as a script of its own (EVALSHA). Same keys,
/// arguments and replies either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Function,
    Eval,
}

/// The FCALL of `script` on one partition: its first key (the schedule),
/// the key prefix, the script's own arguments `args`, then the deadline
/// (Redis time in microseconds, 0 for none). With `guard`, the partition's
/// never-written `moving` key is declared as a second key (see
/// [`Keys::moving`]). Events off; see `call_with`.
pub fn fcall(script: &Script, keys: &Keys, guard: bool, deadline_us: i64, args: &Cmd) -> Cmd {
    call_with(Path::Function, script, keys, guard, args, deadline_us, 0)
}

/// [`fcall`] on `path`: an EVALSHA of the script's own text on
/// [`Path::Eval`].
pub fn call(
    path: Path,
    script: &Script,
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
    script: &Script,
    keys: &Keys,
    guard: bool,
    args: &Cmd,
    deadline_us: i64,
    events: u64,
) -> Cmd {
    let mut cmd = match path {
        Path::Function => {
            let mut cmd = redis::cmd("FCALL");
            cmd.arg(format!("dq_{}_{}", script.name, library().version));
            cmd
        }
        Path::Eval => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&eval_script(script).sha);
            cmd
        }
    };
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

fn eval_script(script: &Script) -> &'static EvalScript {
    library()
        .eval
        .iter()
        .find(|e| e.name == script.name)
        .expect("every script is in ALL")
}

/// The EVALSHA script of transition `name` (e.g. "push"): its SHA1 and
/// its text.
pub fn eval_script_of(name: &str) -> Option<(&'static str, &'static str)> {
    let e = library().eval.iter().find(|e| e.name == name)?;
    Some((e.sha.as_str(), e.body.as_str()))
}

/// The SHA1 of every EVALSHA script.
pub fn eval_shas() -> Vec<&'static str> {
    library().eval.iter().map(|e| e.sha.as_str()).collect()
}

/// What makes every script callable on `path`, as one load. FUNCTION
/// LOAD REPLACE of the library: the same text whoever loads it, so loads
/// that race (several delayq processes, every master of a cluster, some of
/// which have it) all succeed. On EVALSHA, a SCRIPT LOAD of each
/// transition's text (idempotent the same way), all sent together: one
/// NOSCRIPT reloads them all, as one "Function not found" reloads the
/// whole library, so after a restart or a flush neither path pays a
/// refusal per script.
pub(crate) fn load_cmds(path: Path) -> Vec<Cmd> {
    match path {
        Path::Function => {
            let mut cmd = redis::cmd("FUNCTION");
            cmd.arg("LOAD").arg("REPLACE").arg(&library().source);
            vec![cmd]
        }
        Path::Eval => library()
            .eval
            .iter()
            .map(|e| {
                let mut cmd = redis::cmd("SCRIPT");
                cmd.arg("LOAD").arg(&e.body);
                cmd
            })
            .collect(),
    }
}

/// Redis does not have this version's functions, or this script (yet): a
/// new or restarted server, FUNCTION FLUSH, SCRIPT FLUSH. Nothing ran.
pub(crate) fn is_missing(e: &RedisError) -> bool {
    e.code() == Some("NOSCRIPT") || e.to_string().contains("Function not found")
}

/// The server has no FCALL (on `path` Function) or no EVALSHA (on Eval)
/// for delayq: unknown (Redis 6.2 has no FCALL; a renamed command, no Lua)
/// or refused to its user by an ACL. Redis refuses either before anything
/// runs.
pub(crate) fn lacks(path: Path, e: &RedisError) -> bool {
    let command = match path {
        Path::Function => "fcall",
        Path::Eval => "evalsha",
    };
    let detail = e.detail().unwrap_or_default().to_ascii_lowercase();
    match e.code() {
        Some("ERR") => {
            detail.starts_with(&format!("unknown command '{command}'"))
                || detail.starts_with(&format!("unknown command `{command}`"))
        }
        Some("NOPERM") => detail.contains(&format!("'{command}' command")),
        _ => false,
    }
}

/// "Redis 7.0.15" or "Valkey 9.1.2" from INFO server's text (Valkey
/// reports redis_version 7.2.4 whatever its own version).
pub(crate) fn engine(info: &str) -> Option<String> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim_end().strip_prefix(name)?.strip_prefix(':'))
    };
    engine_of(field).map(|(name, version)| format!("{name} {version}"))
}

/// The server's engine and version, ("Redis", "7.0.15") or ("Valkey",
/// "9.1.2"), from INFO server's fields as `field` reads them: Valkey
/// reports redis_version 7.2.4 whatever its own version.
pub fn engine_of<'a>(field: impl Fn(&str) -> Option<&'a str>) -> Option<(&'static str, &'a str)> {
    if let Some(v) = field("valkey_version") {
        return Some(("Valkey", v));
    }
    let v = field("redis_version")?;
    match field("server_name") {
        Some("valkey") => Some(("Valkey", v)),
        _ => Some(("Redis", v)),
    }
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
            .chain(lib.eval.iter().map(|e| (e.name, e.body.as_str())));
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

    #[test]
    fn names_the_engine_and_its_version() {
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        assert_eq!(engine(valkey).as_deref(), Some("Valkey 9.1.2"));
        let redis = "# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n";
        assert_eq!(engine(redis).as_deref(), Some("Redis 6.2.14"));
        assert_eq!(engine("# Server\r\n"), None);
    }

    /// The eval scripts are the library's transitions, one each.
    #[test]
    fn each_transition_has_its_own_script() {
        let lib = library();
        assert_eq!(lib.eval.len(), ALL.len());
        for (e, s) in lib.eval.iter().zip(ALL) {
            assert_eq!(e.name, s.name);
            assert!(e.body.contains(s.source));
            assert!(!e.body.starts_with("#!"), "6.2 reads no shebang");
            assert!(!e.body.contains("register_function"));
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
