//! A script library as the client is given it, and how it is called and
//! loaded: each function's name, flags and texts come from above (the
//! store assembles delayq's scripts); this module knows the two ways a
//! server runs them, FCALL of the library's function or EVALSHA of the
//! function's own text, and what Redis answers when it lacks them.

use redis::{Cmd, RedisError};

/// A function library, loaded as one (FUNCTION LOAD REPLACE of
/// [`Library::source`]) or, where FUNCTION is missing or refused, each
/// function as a script of its own (SCRIPT LOAD of [`Function::eval`]).
#[derive(Debug)]
pub struct Library {
    /// The library's text for FUNCTION LOAD.
    pub source: String,
    pub functions: Vec<Function>,
}

/// One function of a [`Library`]: what its calls are, and its names.
#[derive(Debug)]
pub struct Function {
    /// Its short name (the op its errors name).
    pub name: &'static str,
    /// Its calls wait for `replica_acks` replicas when they are asked for.
    pub acked: bool,
    /// A call that may have been sent and got no reply in time leaves its
    /// caller not knowing what changed ([`Error::Unknown`](crate::Error::Unknown)).
    pub late_unknown: bool,
    /// A call whose replicas did not confirm it is safe to send again (its
    /// ids make a second one change nothing): it fails as
    /// [`Error::Unreplicated`](crate::Error::Unreplicated).
    pub repeatable: bool,
    /// Its name in the library (FCALL).
    pub function: String,
    /// The same transition as one script's text (EVALSHA), and its SHA1.
    pub eval: String,
    pub sha: String,
}

impl Library {
    /// The function named `name` (the short name).
    pub fn get(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }
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

/// The call of `function` on `path`: its keys, then `args` in order, then
/// the deadline (Redis time in microseconds, 0 for none), then `tail`
/// (what the library's wrapper takes off the end of ARGV after it).
pub fn command(
    path: Path,
    function: &Function,
    keys: &[String],
    args: &[&Cmd],
    deadline_us: i64,
    tail: &Cmd,
) -> Cmd {
    let mut cmd = match path {
        Path::Function => {
            let mut cmd = redis::cmd("FCALL");
            cmd.arg(&function.function);
            cmd
        }
        Path::Eval => {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&function.sha);
            cmd
        }
    };
    cmd.arg(keys.len()).arg(keys);
    for part in args {
        for arg in part.args_iter() {
            if let redis::Arg::Simple(a) = arg {
                cmd.arg(a);
            }
        }
    }
    cmd.arg(deadline_us);
    for arg in tail.args_iter() {
        if let redis::Arg::Simple(a) = arg {
            cmd.arg(a);
        }
    }
    cmd
}

/// What makes every script callable on `path`, as one load. FUNCTION
/// LOAD REPLACE of the library: the same text whoever loads it, so loads
/// that race (several delayq processes, every master of a cluster, some of
/// which have it) all succeed. On EVALSHA, a SCRIPT LOAD of each
/// transition's text (idempotent the same way), all sent together: one
/// NOSCRIPT reloads them all, as one "Function not found" reloads the
/// whole library, so after a restart or a flush neither path pays a
/// refusal per script.
pub(crate) fn load_cmds(library: &Library, path: Path) -> Vec<Cmd> {
    match path {
        Path::Function => {
            let mut cmd = redis::cmd("FUNCTION");
            cmd.arg("LOAD").arg("REPLACE").arg(&library.source);
            vec![cmd]
        }
        Path::Eval => library
            .functions
            .iter()
            .map(|e| {
                let mut cmd = redis::cmd("SCRIPT");
                cmd.arg("LOAD").arg(&e.eval);
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

    #[test]
    fn names_the_engine_and_its_version() {
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        assert_eq!(engine(valkey).as_deref(), Some("Valkey 9.1.2"));
        let redis = "# Server\r\nredis_version:6.2.14\r\nredis_mode:standalone\r\n";
        assert_eq!(engine(redis).as_deref(), Some("Redis 6.2.14"));
        assert_eq!(engine("# Server\r\n"), None);
    }
}
