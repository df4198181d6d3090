//! The ACL's permissions for the commands delayq sends (its functions'
//! own calls included: a script runs with its caller's permissions).
//! With ACL DRYRUN (Redis 7+, for a user allowed it) each is asked about;
//! otherwise each is tried in a harmless form: a write meets a string
//! key of doctor's own and fails with WRONGTYPE, which the ACL check
//! comes before; the function calls name no function or library. The
//! script commands probed are those of the path delayq will take here
//! (the scripting check's): FCALL and FUNCTION LOAD where FCALL runs for
//! this user, else EVALSHA and SCRIPT LOAD.

use super::{is_noperm, Check, Target};

const C: &str = "acl";

/// One command delayq sends, what to grant for it (a data-type category
/// where every command names its keys, so the key patterns bound it; else
/// the command alone, as the README's least-privilege user has it: a
/// category such as @keyspace would give FLUSHALL too), and whether
/// `serve` cannot do without it.
struct Probe {
    name: &'static str,
    grant: &'static str,
    needed: bool,
}

const fn p(name: &'static str, grant: &'static str, needed: bool) -> Probe {
    Probe {
        name,
        grant,
        needed,
    }
}

/// The script commands of each path: FCALL's, then EVALSHA's.
const FUNCTION_PROBES: &[Probe] = &[
    p("fcall", "fcall", true),
    p("function|load", "function|load", true),
];
const EVAL_PROBES: &[Probe] = &[
    p("evalsha", "evalsha", true),
    p("script|load", "script|load", true),
];

const PROBES: &[Probe] = &[
    p("set", "@string", true),
    p("hset", "@hash", true),
    p("zadd", "@sortedset", true),
    p("lpush", "@list", true),
    p("sadd", "@set", true),
    p("xadd", "@stream", true),
    p("del", "del", true),
    p("pexpire", "pexpire", true),
    // A new earliest job shortens an idle leader's term to its due time.
    p("pexpireat", "pexpireat", true),
    // Only `delayq layout --hold 1` and `import-ouqiang` walk the keys
    // (README: not in the least-privilege line).
    p("scan", "scan", false),
    p("publish", "@pubsub", true),
    p("psubscribe", "@pubsub", true),
    p("time", "time", true),
    p("info", "info", true),
    p("wait", "wait", false),
    p("config|get", "config|get", false),
];

/// On a cluster, besides: delayq finds the masters with CLUSTER SLOTS.
const CLUSTER_PROBES: &[Probe] = &[p("cluster|slots", "cluster|slots", true)];

/// What an optional command is for, said where it is refused.
fn used_for(name: &str) -> &'static str {
    match name {
        "wait" => "--replica-acks needs wait",
        "scan" => "`delayq layout --hold 1` (bodies back to layout 1) and `delayq import-ouqiang` need scan",
        _ => "the settings checks (doctor's and serve's) read config|get",
    }
}

/// The command's arguments: `key` a doctor-only string key, `channel` a
/// channel under the prefix, `lib` a library name no one uses.
fn args(name: &str, key: &str, channel: &str, lib: &str) -> Vec<String> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
    match name {
        "fcall" => v(&["FCALL", lib, "0"]),
        // Not a library (it registers no function): refused after the ACL.
        "function|load" => v(&["FUNCTION", "LOAD", &format!("#!lua name={lib}\n")]),
        // No such script (NOSCRIPT), and one that does not compile: both
        // refused after the ACL, nothing cached.
        "evalsha" => v(&["EVALSHA", &"0".repeat(40), "0"]),
        "script|load" => v(&["SCRIPT", "LOAD", "delayq doctor ("]),
        "set" => v(&["SET", key, "x", "PX", "30000"]),
        "hset" => v(&["HSET", key, "f", "v"]),
        "zadd" => v(&["ZADD", key, "0", "m"]),
        "lpush" => v(&["LPUSH", key, "v"]),
        "sadd" => v(&["SADD", key, "m"]),
        "xadd" => v(&["XADD", key, "*", "f", "v"]),
        "del" => v(&["DEL", key]),
        "pexpire" => v(&["PEXPIRE", key, "30000"]),
        // Far ahead: the key keeps its life for the probes after it.
        "pexpireat" => v(&["PEXPIREAT", key, "32503680000000"]),
        "scan" => v(&["SCAN", "0", "COUNT", "1"]),
        "cluster|slots" => v(&["CLUSTER", "SLOTS"]),
        "publish" => v(&["PUBLISH", channel, "doctor"]),
        "psubscribe" => v(&["PSUBSCRIBE", "__keyevent@*__:expired"]),
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

/// Why each refused probe was refused (None: allowed), asked of ACL
/// DRYRUN; None when DRYRUN cannot be used.
async fn dry_run(
    t: &Target,
    probes: &[&Probe],
    key: &str,
    channel: &str,
    lib: &str,
) -> Option<Vec<Option<String>>> {
    let mut conn = t.conn.clone();
    let user: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut conn)
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
        let reply: String = c.query_async(&mut conn).await.ok()?;
        out.push((reply != "OK").then_some(reply));
    }
    Some(out)
}

/// Each probe tried in its harmless form.
async fn try_each(
    t: &Target,
    probes: &[&Probe],
    key: &str,
    channel: &str,
    lib: &str,
) -> Vec<Option<String>> {
    let mut conn = t.conn.clone();
    let mut out = Vec::new();
    for probe in probes {
        let reply = match probe.name {
            // A subscription would change the connection's mode: the
            // events check subscribed on a connection of its own.
            "psubscribe" => {
                let mut p = match t.client.get_async_pubsub().await {
                    Ok(p) => p,
                    Err(e) => {
                        out.push(Some(format!("cannot try: {e}")));
                        continue;
                    }
                };
                p.psubscribe("__keyevent@*__:expired").await
            }
            // DEL, PEXPIRE and PEXPIREAT go last: the string key must stay for the
            // writes that are meant to fail on it.
            "del" | "pexpire" | "pexpireat" => Ok(()),
            name => cmd(&args(name, key, channel, lib))
                .query_async::<redis::Value>(&mut conn)
                .await
                .map(|_| ()),
        };
        out.push(match reply {
            Err(e) if is_noperm(&e) => Some(e.to_string()),
            _ => None,
        });
    }
    for (i, probe) in probes.iter().enumerate() {
        if matches!(probe.name, "pexpire" | "pexpireat" | "del") {
            let r = cmd(&args(probe.name, key, channel, lib))
                .query_async::<redis::Value>(&mut conn)
                .await;
            out[i] = match r {
                Err(e) if is_noperm(&e) => Some(e.to_string()),
                _ => None,
            };
        }
    }
    out
}

pub async fn check(t: &Target) -> Check {
    let key = t.key("acl");
    let channel = t.key("channel");
    let lib = format!("delayq_doctor_{}", std::process::id());
    let scripts = match super::server::fcall_runs(t).await {
        Ok(()) => FUNCTION_PROBES,
        Err(_) => EVAL_PROBES,
    };
    let cluster = if t.info("cluster_enabled") == Some("1") {
        CLUSTER_PROBES
    } else {
        &[]
    };
    let probes: Vec<&Probe> = scripts.iter().chain(PROBES).chain(cluster).collect();
    let (how, refused) = match dry_run(t, &probes, &key, &channel, &lib).await {
        Some(r) => ("ACL DRYRUN", r),
        None => ("tried", try_each(t, &probes, &key, &channel, &lib).await),
    };
    let mut needed = Vec::new();
    let mut optional = Vec::new();
    // What to grant, the needed first: a key or channel pattern as the
    // README's user has it, else the probe's own grant.
    let (mut grant, mut grant_optional): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let prefix = &t.prefix;
    for (probe, why) in probes.iter().zip(&refused) {
        let Some(why) = why else { continue };
        let (what, add) = if why.contains("channel") {
            (
                format!("{} (a channel)", probe.name),
                format!("&{{{prefix}}}:* &{{{prefix}:* &__keyevent@*__:expired"),
            )
        } else if why.contains(" key") {
            (
                format!("{} (a key)", probe.name),
                format!("~{{{prefix}}}:* ~{{{prefix}:*"),
            )
        } else if probe.grant.starts_with('@') {
            (
                format!("{} ({})", probe.name, probe.grant),
                format!("+{}", probe.grant),
            )
        } else {
            (probe.name.to_owned(), format!("+{}", probe.grant))
        };
        if probe.needed {
            needed.push(what);
            grant.push(add);
        } else {
            optional.push((what, used_for(probe.name)));
            grant_optional.push(add);
        }
    }
    let grants = |mut g: Vec<String>| {
        g.sort_unstable();
        g.dedup();
        g.join(" ")
    };
    let console = "(or the service's console: the user's permissions)";
    let (optional, uses): (Vec<String>, Vec<&str>) = optional.into_iter().unzip();
    if !needed.is_empty() {
        let mut found = format!("{how}: refused {}", needed.join(", "));
        let mut fix = format!("ACL SETUSER <user> {} {console}", grants(grant));
        if !optional.is_empty() {
            found.push_str(&format!("; and, optional, {}", optional.join(", ")));
            fix.push_str(&format!("; optional: {}", grants(grant_optional)));
        }
        return Check::fail(C, found, fix);
    }
    if !optional.is_empty() {
        return Check::warn(
            C,
            format!(
                "{how}: every command serve needs is allowed; refused (optional) {}: {}",
                optional.join(", "),
                uses.join("; ")
            ),
            format!(
                "only for those: ACL SETUSER <user> {} {console}",
                grants(grant_optional)
            ),
        );
    }
    Check::ok(
        C,
        format!(
            "{how}: every command delayq sends is allowed ({} tried, scripts by {})",
            probes.len(),
            scripts[0].name.to_uppercase()
        ),
    )
}
