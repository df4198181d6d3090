//! What an ACL refusal asks of delayq's Redis user: a refused command,
//! key or channel named as what to add to the user's ACL. docs/acl.md ("Least
//! privilege") has the whole line.

use redis::aio::MultiplexedConnection;

/// Categories of the commands delayq's scripts run. A refusal inside a
/// script does not say which command it was (Redis 7.0: "The user
/// executing the script can't run this command or subcommand"), so it
/// names all of them.
const SCRIPT_CATEGORIES: &str = "+@hash +@list +@set +@sortedset +@string +@stream +@pubsub";

/// What the scripts' own check of the ACL (lib/call.lua's CALL.refused)
/// says in its refusal.
const GUARD: &str = "found before the script's first write";

/// Whether `detail` (an error reply's text after its code) is an ACL
/// refusal of a command a script ran: Redis's unnamed one, or Valkey's
/// ("ACL failure in script: User delayq has no permissions to run the
/// 'hmget' command"), which names it.
pub(crate) fn refused_in_script(detail: &str) -> bool {
    unnamed_in_script(detail) || detail.contains("failure in script")
}

fn unnamed_in_script(detail: &str) -> bool {
    detail.contains("can't run this command or subcommand")
}

/// What to add to the user's ACL for the refusal `detail` (NOPERM's text,
/// or a script's refusal).
pub(crate) fn what_to_add(detail: &str) -> String {
    let lower = detail.to_lowercase();
    if detail.contains(GUARD) {
        // The scripts' own check (lib/call.lua), which names the command
        // and, for PUBLISH, the channel: either may be what is missing.
        let command = detail.split('\'').nth(1).unwrap_or("").to_lowercase();
        return match command.as_str() {
            "publish" => {
                "+@pubsub, and the channel patterns &{PREFIX}:* &{PREFIX:* if the user lacks them"
                    .to_owned()
            }
            "" => "the commands the ACL line of docs/acl.md (Least privilege) lists".to_owned(),
            c => format!("+{c}"),
        };
    }
    if unnamed_in_script(detail) {
        return format!("{SCRIPT_CATEGORIES} (the commands delayq's scripts run)");
    }
    if lower.contains("access a key") || lower.contains("access one of the keys") {
        return "key patterns covering delayq's keys: ~{PREFIX}:* ~{PREFIX:*".to_owned();
    }
    if lower.contains("channel") {
        return "channel patterns &{PREFIX}:* &{PREFIX:* &__keyevent@*__:expired".to_owned();
    }
    // "no permissions to run the 'hset' command" (or 'function|load').
    let command = detail.split('\'').nth(1).unwrap_or("").to_lowercase();
    let category = match command.split('|').next().unwrap_or("") {
        "hset" | "hget" | "hmget" | "hgetall" | "hdel" | "hincrby" | "hstrlen" | "hexists" => {
            "+@hash"
        }
        "lpush" | "rpush" | "rpop" | "lrange" | "llen" | "ltrim" | "lindex" => "+@list",
        "sadd" | "srem" | "sismember" | "smembers" | "scard" => "+@set",
        "get" | "set" | "mget" | "incr" | "incrby" => "+@string",
        "xadd" | "xrange" | "xinfo" | "xlen" => "+@stream",
        "publish" | "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" => "+@pubsub",
        c if c.starts_with('z') => "+@sortedset",
        _ => "",
    };
    if !category.is_empty() {
        category.to_owned()
    } else if !command.is_empty() {
        format!("+{command}")
    } else {
        "the commands the ACL line of docs/acl.md (Least privilege) lists".to_owned()
    }
}

/// How much delayq needs a command it sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Jobs cannot move without it.
    Needed,
    /// A feature asks for it: WAIT (`--replica-acks`), CONFIG GET (the
    /// settings checks).
    Optional,
    /// The expired events' subscription: without it the sweep fires jobs
    /// (still on time).
    Events,
    /// Only rewriting bodies back to layout 1 (`delayq layout --hold 1`).
    Rewrite,
}

/// One command delayq sends: its name (as ACL DRYRUN and the ACL LOG
/// name it), its ACL category, the word docs/acl.md's least-privilege line
/// grants it by, and how much delayq needs it.
#[derive(Debug)]
pub struct Probe {
    pub name: &'static str,
    pub category: &'static str,
    pub grant: &'static str,
    pub need: Need,
}

impl Probe {
    pub const fn new(
        name: &'static str,
        category: &'static str,
        grant: &'static str,
        need: Need,
    ) -> Probe {
        Probe {
            name,
            category,
            grant,
            need,
        }
    }
}

use Need::*;

/// The script commands of each path: FCALL's, then EVALSHA's. The
/// commands a queue sends besides are the store's to list (given to
/// [`permissions`] with these).
pub const FUNCTION_PROBES: &[Probe] = &[
    Probe::new("fcall", "@scripting", "+fcall", Needed),
    Probe::new("function|load", "@scripting", "+function|load", Needed),
];
pub const EVAL_PROBES: &[Probe] = &[
    Probe::new("evalsha", "@scripting", "+evalsha", Needed),
    Probe::new("script|load", "@scripting", "+script|load", Needed),
];

/// On a cluster, besides: delayq finds the masters with CLUSTER SLOTS.
pub const CLUSTER_PROBES: &[Probe] = &[Probe::new(
    "cluster|slots",
    "@slow",
    "+cluster|slots",
    Needed,
)];

/// The expired events' pattern, written as is (an ACL allows a pattern
/// subscription only to the pattern it lists).
pub const EXPIRED_EVENTS: &str = "__keyevent@*__:expired";

/// The command's arguments: `key` a string key of the caller's own,
/// `channel` a channel under the prefix, `lib` a library name no one uses.
fn args(name: &str, key: &str, channel: &str, lib: &str) -> Vec<String> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
    match name {
        "fcall" => v(&["FCALL", lib, "0"]),
        // Not a library (it registers no function): refused after the ACL.
        "function|load" => v(&["FUNCTION", "LOAD", &format!("#!lua name={lib}\n")]),
        // No such script (NOSCRIPT), and one that does not compile: both
        // refused after the ACL, nothing cached.
        "evalsha" => v(&["EVALSHA", &"0".repeat(40), "0"]),
        "script|load" => v(&["SCRIPT", "LOAD", "delayq probe ("]),
        "set" => v(&["SET", key, "x", "PX", "30000"]),
        "hset" => v(&["HSET", key, "f", "v"]),
        "zadd" => v(&["ZADD", key, "0", "m"]),
        "lpush" => v(&["LPUSH", key, "v"]),
        "sadd" => v(&["SADD", key, "m"]),
        "xadd" => v(&["XADD", key, "*", "f", "v"]),
        "del" => v(&["DEL", key]),
        "exists" => v(&["EXISTS", key]),
        "pttl" => v(&["PTTL", key]),
        "pexpire" => v(&["PEXPIRE", key, "30000"]),
        // Far ahead: the key keeps its life for the probes after it.
        "pexpireat" => v(&["PEXPIREAT", key, "32503680000000"]),
        "scan" => v(&["SCAN", "0", "COUNT", "1"]),
        "cluster|slots" => v(&["CLUSTER", "SLOTS"]),
        "publish" => v(&["PUBLISH", channel, "probe"]),
        "psubscribe" => v(&["PSUBSCRIBE", EXPIRED_EVENTS]),
        "time" => v(&["TIME"]),
        "info" => v(&["INFO", "server"]),
        "wait" => v(&["WAIT", "0", "1"]),
        _ => v(&["CONFIG", "GET", "maxmemory-policy"]),
    }
}

fn cmd(args: &[String]) -> redis::Cmd {
    let mut c = redis::cmd(&args[0]);
    for a in &args[1..] {
        c.arg(a);
    }
    c
}

/// The ACL refused a command.
pub fn is_noperm(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM") || e.to_string().contains("NOPERM")
}

/// Whether FCALL runs for this user (answered "Function not found" for a
/// function no one has): the path delayq's scripts will take here.
pub async fn functions_run(conn: &mut MultiplexedConnection) -> bool {
    let fcall: redis::RedisResult<redis::Value> = redis::cmd("FCALL")
        .arg("delayq_probe_none")
        .arg(0)
        .query_async(conn)
        .await;
    match fcall {
        Err(e) => e.to_string().contains("Function not found"),
        Ok(_) => true,
    }
}

/// Why each refused probe was refused (None: allowed), asked of ACL
/// DRYRUN; None when DRYRUN cannot be used. Cost: one ACL WHOAMI, one
/// DRYRUN a probe, each O(1).
async fn dry_run(
    conn: &mut MultiplexedConnection,
    probes: &[&Probe],
    key: &str,
    channel: &str,
    lib: &str,
) -> Option<Vec<Option<String>>> {
    let user: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(conn)
        .await
        .ok()?;
    let mut out = Vec::new();
    for probe in probes {
        let mut c = redis::cmd("ACL");
        c.arg("DRYRUN").arg(&user);
        for a in args(probe.name, key, channel, lib) {
            c.arg(a);
        }
        // "OK", or a sentence saying what is refused; an error: no DRYRUN.
        let reply: String = c.query_async(conn).await.ok()?;
        out.push((reply != "OK").then_some(reply));
    }
    Some(out)
}

/// Each probe tried in its harmless form: a write meets the string `key`
/// and fails with WRONGTYPE, which the ACL check comes before; the
/// script commands name no function or script. Cost: one O(1) command a
/// probe (SCAN: one key), and one subscription on a connection of its own.
async fn try_each(
    conn: &mut MultiplexedConnection,
    client: &redis::Client,
    probes: &[&Probe],
    key: &str,
    channel: &str,
    lib: &str,
) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for probe in probes {
        let reply = match probe.name {
            // A subscription would change the connection's mode.
            "psubscribe" => match client.get_async_pubsub().await {
                Ok(mut p) => p.psubscribe(EXPIRED_EVENTS).await,
                Err(e) => {
                    out.push(Some(format!("cannot try: {e}")));
                    continue;
                }
            },
            // DEL, PEXPIRE and PEXPIREAT go last: the string key must stay
            // for the writes that are meant to fail on it.
            "del" | "pexpire" | "pexpireat" => Ok(()),
            name => cmd(&args(name, key, channel, lib))
                .query_async::<redis::Value>(conn)
                .await
                .map(|_| ()),
        };
        out.push(refusal(reply));
    }
    for (i, probe) in probes.iter().enumerate() {
        if matches!(probe.name, "pexpire" | "pexpireat" | "del") {
            let r = cmd(&args(probe.name, key, channel, lib))
                .query_async::<redis::Value>(conn)
                .await;
            out[i] = refusal(r.map(|_| ()));
        }
    }
    out
}

/// Why a tried command was refused by the ACL; None for any other reply
/// (WRONGTYPE, NOSCRIPT: the ACL let it through).
fn refusal(reply: redis::RedisResult<()>) -> Option<String> {
    match reply {
        Err(e) if is_noperm(&e) => Some(e.to_string()),
        _ => None,
    }
}

/// Asks the ACL about each of `probes` for the connection's user: with
/// ACL DRYRUN where `dry_run` and the user may run it (Redis 7+), else by
/// trying each. (Asking whether DRYRUN is allowed is itself a refusal in
/// the ACL LOG for a user without it, such as docs/acl.md's.)
/// Returns how ("ACL DRYRUN" or "tried") and, per probe, why it was
/// refused (None: allowed). `key` is a string key of the caller's own
/// (set, then deleted, when tried), `channel` one under the prefix, `lib`
/// a function library name no one uses.
pub async fn permissions(
    conn: &mut MultiplexedConnection,
    client: &redis::Client,
    probes: &[&Probe],
    key: &str,
    channel: &str,
    lib: &str,
    dry_run: bool,
) -> (&'static str, Vec<Option<String>>) {
    let asked = match dry_run {
        true => self::dry_run(conn, probes, key, channel, lib).await,
        false => None,
    };
    match asked {
        Some(r) => ("ACL DRYRUN", r),
        None => (
            "tried",
            try_each(conn, client, probes, key, channel, lib).await,
        ),
    }
}

/// What a refusal of `probe` (`why`, as [`permissions`] gave it) asks to
/// add, in docs/acl.md's words: a channel pattern, key patterns, or the
/// probe's grant.
pub fn grant_for(probe: &Probe, why: &str, prefix: &str) -> String {
    if why.contains("channel") {
        if probe.name == "psubscribe" {
            format!("&{EXPIRED_EVENTS}")
        } else {
            format!("&{{{prefix}}}:* &{{{prefix}:*")
        }
    } else if why.contains(" key") {
        format!("~{{{prefix}}}:* ~{{{prefix}:*")
    } else {
        probe.grant.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_what_to_add() {
        let run = |c: &str| format!("this user has no permissions to run the '{c}' command");
        assert_eq!(what_to_add(&run("hset")), "+@hash");
        assert_eq!(what_to_add(&run("zadd")), "+@sortedset");
        assert_eq!(what_to_add(&run("function|load")), "+function|load");
        assert_eq!(what_to_add(&run("wait")), "+wait");
        assert!(what_to_add(
            "this user has no permissions to access one of the keys used as arguments"
        )
        .starts_with("key patterns"));
        assert!(what_to_add(
            "this user has no permissions to access one of the channels used as arguments"
        )
        .starts_with("channel patterns"));
        let script = "The user executing the script can't run this command or subcommand script: f, on @user_function:2.";
        assert!(refused_in_script(script));
        assert!(what_to_add(script).contains("+@hash"));
        let valkey = "failure in script: User delayq has no permissions to run the 'hmget' command script: on @user_function:476.";
        assert!(refused_in_script(valkey));
        assert_eq!(what_to_add(valkey), "+@hash");
        let guard = |c: &str| {
            format!("this user has no permissions to run the '{c}' command on {{dq}}:wake, {GUARD}: nothing was changed")
        };
        assert_eq!(what_to_add(&guard("del")), "+del");
        assert!(what_to_add(&guard("publish")).starts_with("+@pubsub, and the channel patterns"));
    }
}
