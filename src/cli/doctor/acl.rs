//! The ACL's permissions for the commands delayq sends (its functions'
//! own calls included: a script runs with its caller's permissions).
//! With ACL DRYRUN (Redis 7+, for a user allowed it) each is asked about;
//! otherwise each is tried in a harmless form (the library's
//! [`delayq::acl::permissions`], which `serve` asks at start too). The
//! script commands probed are those of the path delayq will take here
//! (the scripting check's): FCALL and FUNCTION LOAD where FCALL runs for
//! this user, else EVALSHA and SCRIPT LOAD. A fix grants what docs/acl.md's
//! least-privilege user has: a data-type category (its commands all name
//! keys, so the key patterns bound them), else the single command (a
//! category such as @keyspace would give FLUSHALL too).

use delayq::acl::{self, Need, Probe};
use delayq::queue_commands;

use super::{Check, Target};

const C: &str = "acl";

/// What a command `serve` can do without is for, said where it is refused.
fn used_for(name: &str) -> &'static str {
    match name {
        "wait" => "--replica-acks needs wait",
        "scan" => "`delayq layout --hold 1` (bodies back to layout 1) and `delayq import-ouqiang` need scan",
        _ => "the settings checks (doctor's and serve's) read config|get",
    }
}

pub async fn check(t: &Target) -> Check {
    let key = t.key("acl");
    let channel = t.key("channel");
    let lib = format!("delayq_doctor_{}", std::process::id());
    let scripts = match super::server::fcall_runs(t).await {
        Ok(()) => acl::FUNCTION_PROBES,
        Err(_) => acl::EVAL_PROBES,
    };
    let cluster = if t.info("cluster_enabled") == Some("1") {
        acl::CLUSTER_PROBES
    } else {
        &[]
    };
    let probes: Vec<&Probe> = scripts
        .iter()
        .chain(queue_commands::PROBES)
        .chain(cluster)
        .collect();
    let mut conn = t.conn.clone();
    let (how, refused) =
        acl::permissions(&mut conn, &t.client, &probes, &key, &channel, &lib, true).await;
    let mut needed = Vec::new();
    let mut optional = Vec::new();
    // What to grant, the needed first, in docs/acl.md's words.
    let (mut grant, mut grant_optional): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for (probe, why) in probes.iter().zip(&refused) {
        let Some(why) = why else { continue };
        let what = if why.contains("channel") {
            format!("{} (a channel)", probe.name)
        } else if why.contains(" key") {
            format!("{} (a key)", probe.name)
        } else if probe.grant.starts_with("+@") {
            format!("{} ({})", probe.name, &probe.grant[1..])
        } else {
            probe.name.to_owned()
        };
        let add = acl::grant_for(probe, why, &t.prefix);
        // Serve runs without the optional commands and without SCAN
        // (only the layout switch and the import walk the keys).
        if matches!(probe.need, Need::Optional | Need::Rewrite) {
            optional.push((what, used_for(probe.name)));
            grant_optional.push(add);
        } else {
            needed.push(what);
            grant.push(add);
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
