//! At start, the ACL's permissions for every command, key pattern and
//! channel `serve` needs (the library's probes, as `delayq doctor` asks
//! them, each tried in a harmless form): a refused needed one stops `serve` with the one line to add to
//! its user's ACL, since every transition would be refused at its first
//! call; a refused optional one is warned about.

use anyhow::{bail, Result};
use delayq::acl::{self, Need, Probe};
use delayq::queue_commands;
use delayq::{defaults, Tls};

use crate::cli::redis_checks;

/// Refuses to start where the user may not run what delayq needs. Nothing
/// when the server cannot be asked (the connection check reports that).
/// Cost: one O(1) command a probe (about twenty), once.
pub async fn refuse_unpermitted(
    url: &str,
    tls: &Tls,
    prefix: &str,
    replica_acks: usize,
) -> Result<()> {
    let Ok(client) = delayq::redis_client(url, tls) else {
        return Ok(());
    };
    let timeout = defaults::REDIS_TIMEOUT.value;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    let Ok(mut conn) = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
    else {
        return Ok(());
    };
    let scripts = match acl::functions_run(&mut conn).await {
        true => acl::FUNCTION_PROBES,
        false => acl::EVAL_PROBES,
    };
    // Not SCAN, which only a rewrite to layout 1 runs (docs/acl.md leaves it
    // out of the line): tried, its refusal would sit in the ACL LOG.
    let probes: Vec<&Probe> = scripts
        .iter()
        .chain(queue_commands::PROBES)
        .chain(queue_commands::SCRIPT_READS)
        .filter(|p| p.need != Need::Rewrite)
        .collect();
    let pid = std::process::id();
    let key = format!("{{{prefix}}}:serve:acl:{pid}");
    let channel = format!("{{{prefix}}}:serve:channel:{pid}");
    let lib = format!("delayq_serve_{pid}");
    // Tried, not asked of ACL DRYRUN: docs/acl.md's user may not run ACL, and
    // asking would leave a refusal in the ACL LOG at every start.
    let (how, refused) =
        acl::permissions(&mut conn, &client, &probes, &key, &channel, &lib, false).await;
    let mut needed: Vec<String> = Vec::new();
    let mut names = Vec::new();
    for (probe, why) in probes.iter().zip(&refused) {
        let Some(why) = why else { continue };
        let grant = acl::grant_for(probe, why, prefix);
        // WAIT is what --replica-acks runs: needed with it.
        let need = match probe.need {
            Need::Optional if probe.name == "wait" && replica_acks > 0 => Need::Needed,
            need => need,
        };
        match need {
            Need::Needed => {
                names.push(probe.name);
                if !needed.contains(&grant) {
                    needed.push(grant);
                }
            }
            Need::Optional if probe.name == "wait" => tracing::warn!(
                "redis refuses WAIT to delayq's user ({how}): --replica-acks could not be \
                 used; add {grant} to its ACL"
            ),
            // CONFIG GET: the settings check says what went unchecked
            // (also where CONFIG is renamed away, which is no refusal).
            // The subscriber names a refused subscription itself, and the
            // sweep fires jobs meanwhile; SCAN only rewrites to layout 1.
            Need::Optional | Need::Events | Need::Rewrite => {}
        }
    }
    if !needed.is_empty() {
        bail!(
            "redis at {} refuses delayq's user commands it needs ({how}: {}); delayq cannot work without them.\n\
             hint: ACL SETUSER <user> {} (docs/acl.md: Least privilege)",
            redis_checks::redact(url),
            names.join(", "),
            needed.join(" "),
        );
    }
    Ok(())
}
