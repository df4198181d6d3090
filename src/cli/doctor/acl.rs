//! The ACL's permissions for the commands delayq sends (its functions'
//! own calls included: a script runs with its caller's permissions).
//! With ACL DRYRUN (Redis 7+, for a user allowed it) each is asked about;
//! otherwise each is tried in a harmless form (the library's
//! [`delayq::acl::permissions`], which `serve` asks at start too). The
//! script commands probed are those of the path delayq will take here
//! (the scripting check's): FCALL and FUNCTION LOAD where FCALL runs for
//! this user, else EVALSHA and SCRIPT LOAD.

use delayq::acl::{self, Need, Probe};

use super::{Check, Target};

const C: &str = "acl";

pub async fn check(t: &Target) -> Check {
    let key = t.key("acl");
    let channel = t.key("channel");
    let lib = format!("delayq_doctor_{}", std::process::id());
    let scripts = match super::server::fcall_runs(t).await {
        Ok(()) => acl::FUNCTION_PROBES,
        Err(_) => acl::EVAL_PROBES,
    };
    let probes: Vec<&Probe> = scripts.iter().chain(acl::PROBES).collect();
    let mut conn = t.conn.clone();
    let (how, refused) =
        acl::permissions(&mut conn, &t.client, &probes, &key, &channel, &lib, true).await;
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
        if probe.need != Need::Optional {
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
