//! The cluster check (every master up and every slot served, as
//! CLUSTER NODES says), and doctor on a cluster (`--redis-cluster`): the
//! server checks, expired events and the ACL on every master (each has
//! its own settings, notifications and ACL), the layout through the
//! master of each key's slot.

use anyhow::{Context as _, Result};
use delayq::Tls;

use super::server::no_info;
use super::{Check, DoctorArgs, Target};

const C: &str = "cluster";

/// Doctor pointed at a cluster node with --redis: its key-touching checks
/// would meet MOVED for every slot but its own.
pub(super) fn node_without_flag() -> Check {
    Check::fail(
        C,
        "this is a Redis Cluster node: checked alone, the events, acl and storage layout \
         checks would reach only its own slots",
        "run doctor with --redis-cluster URLS (the seeds you give serve --redis-cluster): \
         it checks every master",
    )
}

/// Every check, on the cluster of `seeds`: the first seed that answers
/// says which masters serve which slots (CLUSTER SLOTS, one reply as long
/// as the cluster has ranges); each master is then reached as the seeds
/// are (their scheme, credentials and TLS).
pub(super) async fn run(seeds: &[&str], tls: &Tls, args: &DoctorArgs) -> Result<Vec<Check>> {
    let mut checks = Vec::new();
    let mut first_failure = None;
    let mut reached = None;
    for &url in seeds {
        let client = delayq::redis_client(url, tls).context("--redis-cluster")?;
        match Target::reach(url, tls, &args.prefix).await? {
            Ok(t) => {
                checks.push(super::tls::check(&client, tls, None));
                reached = Some((url, t));
                break;
            }
            Err(e) => {
                first_failure.get_or_insert((url, client, e));
            }
        }
    }
    let Some((seed_url, seed)) = reached else {
        let (url, client, e) = first_failure.expect("at least one seed");
        checks.push(super::tls::check(&client, tls, Some(&e)));
        let mut c = super::unreachable(url, &e);
        c.found = format!("no seed answers; the first: {}", c.found);
        checks.push(c);
        return Ok(checks);
    };
    if seed.info("cluster_enabled") == Some("0") {
        checks.push(Check::fail(
            C,
            "not a cluster: one server",
            "check it with --redis URL, as serve takes it",
        ));
        return Ok(checks);
    }
    checks.push(check(&seed).await);
    let mut conn = seed.conn.clone();
    let slots: redis::Value = match redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await
    {
        Ok(v) => v,
        Err(e) => {
            checks.push(Check::could_not(C, "CLUSTER SLOTS", &e));
            return Ok(checks);
        }
    };
    let owners = delayq::cluster_slot_owners(&slots);
    let mut masters: Vec<(String, u16)> = Vec::new();
    for (_, _, addr) in &owners {
        if !masters.contains(addr) {
            masters.push(addr.clone());
        }
    }
    // Every master at once: each waits up to --events-wait for its event.
    let nodes = futures::future::join_all(masters.iter().map(|(host, port)| {
        let ranges: Vec<(u16, u16)> = (owners.iter())
            .filter(|(_, _, a)| a.0 == *host && a.1 == *port)
            .map(|&(lo, hi, _)| (lo, hi))
            .collect();
        master(seed_url, host, *port, ranges, tls, args)
    }))
    .await;
    let mut targets = Vec::new();
    for node in nodes {
        let (target, node_checks) = node?;
        targets.push(target);
        checks.extend(node_checks);
    }
    let conn_for = |key: &str| {
        let slot = delayq::testing::slot(key.as_bytes());
        let (_, _, addr) = owners
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))?;
        let i = masters.iter().position(|m| m == addr)?;
        targets[i].as_ref().map(|t| t.conn.clone())
    };
    checks.push(super::layout::check(&args.prefix, &conn_for).await);
    Ok(checks)
}

/// One master's checks, each naming it; its target when it was reached.
async fn master(
    seed_url: &str,
    host: &str,
    port: u16,
    ranges: Vec<(u16, u16)>,
    tls: &Tls,
    args: &DoctorArgs,
) -> Result<(Option<Target>, Vec<Check>)> {
    let url = node_url(seed_url, host, port);
    let (target, mut checks) = match Target::reach(&url, tls, &args.prefix).await? {
        Err(e) => (None, vec![super::unreachable(&url, &e)]),
        Ok(mut t) => {
            if let Some(tag) = tag_in(&args.prefix, &ranges) {
                t.tag = tag;
            }
            let mut checks = super::server::checks(&t).await;
            checks.push(super::events::check(&t, args.events_wait).await);
            checks.push(super::acl::check(&t).await);
            (Some(t), checks)
        }
    };
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    for c in &mut checks {
        c.node = Some(addr.clone());
    }
    Ok((target, checks))
}

/// `seed`'s URL with another node's address (its scheme and credentials
/// kept; database 0, a cluster's only one).
fn node_url(seed: &str, host: &str, port: u16) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let creds = rest.rsplit_once('@').map_or("", |(c, _)| c);
    let at = if creds.is_empty() { "" } else { "@" };
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    format!("{scheme}://{creds}{at}{host}:{port}/0")
}

/// A hash tag for doctor's keys under the prefix whose slot is in
/// `ranges` (the key patterns of docs/acl.md's ACL user, `{PREFIX:*`, allow
/// it); None when none is found, which a master of one slot makes unlikely
/// (a slot is met once in 16384 tags on average).
fn tag_in(prefix: &str, ranges: &[(u16, u16)]) -> Option<String> {
    (0..1_000_000u32)
        .map(|n| format!("{{{prefix}:doctor:{n}}}"))
        .find(|tag| {
            let slot = delayq::testing::slot(tag.as_bytes());
            ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&slot))
        })
}

/// A cluster's masters and slots, from the node delayq reached.
pub(super) async fn check(t: &Target) -> Check {
    let Some(enabled) = t.info("cluster_enabled") else {
        return no_info(C, t);
    };
    if enabled != "1" {
        return Check::ok(C, "not a cluster: one server (use --redis)");
    }
    let mut conn = t.conn.clone();
    let info: String = match redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await
    {
        Ok(i) => i,
        Err(e) => return Check::could_not(C, "CLUSTER INFO", &e),
    };
    let fields = super::parse_info(&info);
    let state = fields
        .get("cluster_state")
        .map_or("unknown", String::as_str);
    let masters = fields.get("cluster_size").map_or("?", String::as_str);
    let count = |f: &str| fields.get(f).and_then(|v| v.parse::<u32>().ok());
    let found = format!("cluster of {masters} masters serving slots, state {state}");
    // The masters this node sees down (`fail`) or not answering (`fail?`),
    // with the slots they hold.
    let nodes: String = match redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
    {
        Ok(n) => n,
        Err(e) => return Check::could_not(C, "CLUSTER NODES", &e),
    };
    let (down, silent) = masters_not_serving(&nodes);
    let unassigned = count("cluster_slots_assigned").map_or(0, |a| SLOTS.saturating_sub(a));
    let mut problems = Vec::new();
    if !down.is_empty() {
        problems.push(format!("master down: {}", down.join(", ")));
    }
    if unassigned > 0 {
        problems.push(format!(
            "{unassigned} of {SLOTS} slots assigned to no master"
        ));
    }
    if state != "ok" || !down.is_empty() || unassigned > 0 {
        let fix = if down.is_empty() {
            "assign every slot (redis-cli --cluster fix) and check CLUSTER INFO, CLUSTER NODES"
        } else {
            "bring the master back, or promote its replica (CLUSTER FAILOVER on the replica); \
             meanwhile delayq passes by the partitions in its slots"
        };
        let mut found = found;
        for p in &problems {
            found.push_str("; ");
            found.push_str(p);
        }
        return Check::fail(C, found, fix);
    }
    if !silent.is_empty() {
        return Check::warn(
            C,
            format!("{found}; master not answering: {}", silent.join(", ")),
            "run doctor again in a few seconds: the cluster marks it failed and its replica \
             takes over, or it answers again",
        );
    }
    Check::ok(C, found)
}

/// Hash slots in a Redis Cluster.
const SLOTS: u32 = 16384;

/// From CLUSTER NODES: the masters marked failed, and those only this
/// node cannot reach (`fail?`), each as "ADDRESS (N slots)".
fn masters_not_serving(nodes: &str) -> (Vec<String>, Vec<String>) {
    let (mut down, mut silent) = (Vec::new(), Vec::new());
    for line in nodes.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 8 {
            continue;
        }
        let flags: Vec<&str> = f[2].split(',').collect();
        if !flags.contains(&"master") {
            continue;
        }
        let slots: u32 = f[8..].iter().map(|r| slot_count(r)).sum();
        let addr = f[1].split('@').next().unwrap_or(f[1]);
        let named = format!("{addr} ({slots} slots)");
        if flags.contains(&"fail") {
            down.push(named);
        } else if flags.contains(&"fail?") {
            silent.push(named);
        }
    }
    (down, silent)
}

/// Slots in one CLUSTER NODES slot field ("0-5460", "42"); slots being
/// migrated ("[...]") count for neither side.
fn slot_count(field: &str) -> u32 {
    if field.starts_with('[') {
        return 0;
    }
    match field.split_once('-') {
        Some((a, b)) => match (a.parse::<u32>(), b.parse::<u32>()) {
            (Ok(a), Ok(b)) if b >= a => b - a + 1,
            _ => 0,
        },
        None => u32::from(field.parse::<u32>().is_ok()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_node_url_keeps_the_seeds_scheme_and_credentials() {
        assert_eq!(
            super::node_url("rediss://u:p@a.example:7000/", "10.0.0.2", 7001),
            "rediss://u:p@10.0.0.2:7001/0"
        );
        assert_eq!(
            super::node_url("redis://127.0.0.1:7000", "::1", 7002),
            "redis://[::1]:7002/0"
        );
    }

    #[test]
    fn a_tag_lands_in_the_masters_slots() {
        let tag = super::tag_in("dq", &[(100, 100)]).unwrap();
        assert_eq!(
            delayq::testing::slot(format!("{tag}:canary").as_bytes()),
            100
        );
        assert!(tag.starts_with("{dq:doctor:"));
    }

    #[test]
    fn names_masters_down_and_not_answering_with_their_slots() {
        let nodes = "a 127.0.0.1:7000@17000 master,fail - 0 0 1 disconnected 0-5460\n\
                     b 127.0.0.1:7001@17001 myself,master - 0 0 2 connected 5461-10922 [5461->-c]\n\
                     c 127.0.0.1:7002@17002 master,fail? - 0 0 3 connected 10923-16383\n\
                     d 127.0.0.1:7003@17003 slave,fail a 0 0 1 disconnected\n";
        let (down, silent) = super::masters_not_serving(nodes);
        assert_eq!(down, ["127.0.0.1:7000 (5461 slots)"]);
        assert_eq!(silent, ["127.0.0.1:7002 (5461 slots)"]);
    }
}
