//! The cluster check: every master up and every slot served, as
//! CLUSTER NODES says.

use super::server::no_info;
use super::{Check, Target};

/// A cluster's masters and slots, from the node delayq reached.
pub(super) async fn check(t: &Target) -> Check {
    const C: &str = "cluster";
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
    Check::ok(
        C,
        format!("{found}: serve it with --redis-cluster SEEDS, not --redis"),
    )
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
