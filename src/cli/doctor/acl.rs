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

/// One command delayq sends, the ACL category it is in, and whether
/// delayq cannot do without it.
struct Probe {
    name: &'static str,
    category: &'static str,
    needed: bool,
}

const fn p(name: &'static str, category: &'static str, needed: bool) -> Probe {
    Probe {
        name,
        category,
        needed,
    }
}

/// The script commands of each path: FCALL's, then EVALSHA's.
const FUNCTION_PROBES: &[Probe] = &[
    p("fcall", "@scripting", true),
    p("function|load", "@scripting", true),
];
const EVAL_PROBES: &[Probe] = &[
    p("evalsha", "@scripting", true),
    p("script|load", "@scripting", true),
];

const PROBES: &[Probe] = &[
    p("set", "@string", true),
    p("hset", "@hash", true),
    p("zadd", "@sortedset", true),
    p("lpush", "@list", true),
    p("sadd", "@set", true),
    p("xadd", "@stream", true),
    p("del", "@keyspace", true),
    p("pexpire", "@keyspace", true),
    // A new earliest job shortens an idle leader's term to its due time.
    p("pexpireat", "@keyspace", true),
    p("scan", "@keyspace", true),
    p("publish", "@pubsub", true),
    p("psubscribe", "@pubsub", true),
    p("time", "@fast", true),
    p("info", "@dangerous", true),
    p("wait", "@connection", false),
    p("config|get", "@admin", false),
];

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
    let probes: Vec<&Probe> = scripts.iter().chain(PROBES).collect();
    let (how, refused) = match dry_run(t, &probes, &key, &channel, &lib).await {
        Some(r) => ("ACL DRYRUN", r),
        None => ("tried", try_each(t, &probes, &key, &channel, &lib).await),
    };
    let mut needed = Vec::new();
    let mut optional = Vec::new();
    let mut grant: Vec<&str> = Vec::new();
    for (probe, why) in probes.iter().zip(&refused) {
        let Some(why) = why else { continue };
        let channel_refused = why.contains("channel");
        let key_refused = why.contains(" key");
        let what = if channel_refused {
            grant.push("&* (or allchannels)");
            format!("{} (a channel)", probe.name)
        } else if key_refused {
            grant.push("~* (or the prefix's keys)");
            format!("{} (a key)", probe.name)
        } else {
            grant.push(probe.category);
            format!("{} ({})", probe.name, probe.category)
        };
        if probe.needed {
            needed.push(what);
        } else {
            optional.push(what);
        }
    }
    grant.sort_unstable();
    grant.dedup();
    let add = grant
        .iter()
        .map(|g| match *g {
            g if g.starts_with('@') => format!("+{g}"),
            g => g.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ");
    let fix =
        format!("ACL SETUSER <user> {add} (or the service's console: the user's permissions)");
    if !needed.is_empty() {
        let mut found = format!("{how}: refused {}", needed.join(", "));
        if !optional.is_empty() {
            found.push_str(&format!("; and, optional, {}", optional.join(", ")));
        }
        return Check::fail(C, found, fix);
    }
    if !optional.is_empty() {
        return Check::warn(
            C,
            format!(
                "{how}: every command delayq needs is allowed; refused (optional) {}: \
                 --replica-acks needs wait, the settings checks config|get",
                optional.join(", ")
            ),
            fix,
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
