//! The checks read from what the server reports: engine, scripting,
//! eviction, persistence, memory, round trip, replicas, cluster; and TLS,
//! from the URL.

use std::time::Instant;

use redis::ConnectionAddr;

use super::{Check, Target};

/// PINGs timed for the round trip; the median is reported.
const PINGS: usize = 5;
/// A round trip above this is a warn: every push and pop waits for at
/// least one.
const SLOW_ROUND_TRIP_MS: f64 = 10.0;
/// Memory use (of maxmemory) from which pushes may soon be refused.
const MEMORY_WARN: f64 = 0.75;
const MEMORY_FAIL: f64 = 0.90;

pub async fn checks(t: &Target) -> Vec<Check> {
    vec![
        engine(t),
        scripting(t).await,
        eviction(t),
        persistence(t).await,
        memory(t),
        round_trip(t).await,
        replicas(t).await,
        cluster(t).await,
    ]
}

/// INFO could not be read: the checks that need it say so.
fn no_info(check: &'static str, t: &Target) -> Check {
    match &t.info {
        Err(e) => Check::could_not(check, "INFO", e),
        Ok(_) => Check::warn(
            check,
            "cannot run (INFO does not report it)",
            "check this setting in the service's console",
        ),
    }
}

/// From the URL, and from the handshake when the connection failed: a
/// certificate refused is named with the flag that fixes it.
pub fn tls(client: &redis::Client, tls: &delayq::Tls, failed: Option<&redis::RedisError>) -> Check {
    const C: &str = "tls";
    let addr = client.get_connection_info().addr();
    if let (ConnectionAddr::TcpTls { host, .. }, Some(e)) = (addr, failed) {
        return handshake_failed(host, tls, e);
    }
    match addr {
        ConnectionAddr::TcpTls { insecure: true, .. } => Check::warn(
            C,
            "TLS (rediss://), but the server's certificate is not checked (--redis-insecure)",
            "give the server's CA with --redis-ca instead of --redis-insecure",
        ),
        ConnectionAddr::TcpTls { .. } => Check::ok(C, "TLS (rediss://), certificate checked"),
        ConnectionAddr::Unix(_) => Check::ok(C, "unix socket: local, no TLS needed"),
        ConnectionAddr::Tcp(host, _) if loopback(host) => {
            Check::ok(C, format!("no TLS, on the loopback address {host}"))
        }
        ConnectionAddr::Tcp(host, _) => Check::warn(
            C,
            format!("no TLS to {host}: the password and every job cross the network in clear"),
            "use rediss:// if the service offers TLS (most managed services do)",
        ),
        _ => Check::warn(C, "unknown kind of address", "use redis:// or rediss://"),
    }
}

/// A rediss:// connection that failed: what the handshake said, and the
/// flag that fixes it.
fn handshake_failed(host: &str, tls: &delayq::Tls, e: &redis::RedisError) -> Check {
    const C: &str = "tls";
    let cause = e.to_string();
    let lower = cause.to_lowercase();
    let found = format!("TLS to {host} failed: {cause}");
    if lower.contains("unknownissuer") || lower.contains("unknown issuer") {
        let fix = if tls.ca_file.is_some() {
            "the CA given with --redis-ca did not sign the server's certificate: give the service's own CA file"
        } else {
            "the server's certificate is not signed by a CA this machine trusts: give the service's CA with --redis-ca FILE (--redis-insecure skips the check, for tests only)"
        };
        return Check::fail(C, found, fix);
    }
    if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        return Check::fail(
            C,
            found,
            format!("the server's certificate does not name {host}: connect by a name it was issued for"),
        );
    }
    if lower.contains("certificaterequired") || lower.contains("certificate required") {
        return Check::fail(
            C,
            found,
            "the server asks for a client certificate: give it with --redis-cert FILE --redis-key FILE",
        );
    }
    if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") {
        return Check::fail(
            C,
            found,
            "check rediss:// and the certificates (--redis-ca, --redis-cert, --redis-key)",
        );
    }
    // Not the handshake (refused, unknown host, ...): the connection check
    // says what.
    Check::warn(
        C,
        format!("TLS to {host} not tried: no connection"),
        "see the connection check",
    )
}

fn loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// "Redis 7.0.15" or "Valkey 8.0.1" (Valkey reports redis_version 7.2.4
/// whatever its own version).
pub fn engine_name(t: &Target) -> Option<(String, String)> {
    if t.info("server_name") == Some("valkey") || t.info("valkey_version").is_some() {
        let v = t.info("valkey_version").or(t.info("redis_version"))?;
        return Some(("Valkey".into(), v.to_owned()));
    }
    Some(("Redis".into(), t.info("redis_version")?.to_owned()))
}

fn engine(t: &Target) -> Check {
    const C: &str = "engine";
    let Some((name, version)) = engine_name(t) else {
        return no_info(C, t);
    };
    let mode = t.info("redis_mode").unwrap_or("standalone");
    Check::ok(C, format!("{name} {version} ({mode})"))
}

/// (major, minor) of a version such as "6.2.14".
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// Whether the server runs FCALL for this user, as delayq's first call
/// finds out: an FCALL of a function no one has, answered "Function not
/// found" (runs nothing); else what FCALL answered. The scripting and
/// ACL checks both decide the path by it, as `serve` does.
pub(crate) async fn fcall_runs(t: &Target) -> Result<(), redis::RedisError> {
    let fcall: redis::RedisResult<redis::Value> = redis::cmd("FCALL")
        .arg("delayq_doctor_none")
        .arg(0)
        .query_async(&mut t.conn.clone())
        .await;
    match fcall {
        Err(e) if e.to_string().contains("Function not found") => Ok(()),
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Which way delayq will call its scripts here, as delayq itself finds it
/// at its first call: FCALL (the function library) wherever the server
/// runs it for this user, else EVALSHA (one script per transition).
/// Asked with calls that run nothing: an FCALL of a function no one has
/// (answered "Function not found"), an EVALSHA of a script no one has
/// (answered NOSCRIPT). Redis before 6.2 lacks commands the scripts use
/// (ZMSCORE, SET PXAT, ZRANGE's BYSCORE form).
pub(crate) async fn scripting(t: &Target) -> Check {
    const C: &str = "scripting";
    let engine = engine_name(t);
    let named = engine
        .as_ref()
        .map_or_else(|| "this server".to_owned(), |(n, v)| format!("{n} {v}"));
    let too_old = engine
        .as_ref()
        .filter(|(n, _)| n == "Redis")
        .and_then(|(_, v)| major_minor(v))
        .is_some_and(|v| v < (6, 2));
    if too_old {
        return Check::fail(
            C,
            format!(
                "{named} is older than 6.2: delayq's scripts use commands 6.2 added \
                 (ZMSCORE, SET PXAT, ZRANGE BYSCORE)"
            ),
            "use Redis 6.2 or later (or Valkey)",
        );
    }
    let mut conn = t.conn.clone();
    let Err(fcall) = fcall_runs(t).await else {
        return Check::ok(
            C,
            format!("{named}: FUNCTION, scripts called by FCALL (the function library)"),
        );
    };
    let evalsha: redis::RedisResult<redis::Value> = redis::cmd("EVALSHA")
        .arg("0".repeat(40))
        .arg(0)
        .query_async(&mut conn)
        .await;
    match evalsha {
        Err(e) if e.code() == Some("NOSCRIPT") => Check::ok(
            C,
            format!(
                "{named}: no FCALL here ({}), scripts called by EVAL/EVALSHA \
                 (one script per transition, loaded once per server)",
                fcall.detail().unwrap_or("refused")
            ),
        ),
        Ok(_) => Check::ok(
            C,
            format!("{named}: no FCALL here, scripts called by EVAL/EVALSHA"),
        ),
        Err(e) => Check::fail(
            C,
            format!(
                "{named} runs no scripts for delayq: neither FUNCTION (FCALL answered: {fcall}) \
                 nor EVAL (EVALSHA answered: {e})"
            ),
            "use a server with Lua scripting (Redis 6.2+, Valkey), and allow delayq's user \
             +fcall +function|load, or +evalsha +script|load",
        ),
    }
}

fn eviction(t: &Target) -> Check {
    const C: &str = "eviction";
    let Some(policy) = t.info("maxmemory_policy") else {
        return no_info(C, t);
    };
    if policy == "noeviction" {
        Check::ok(
            C,
            "maxmemory-policy noeviction: Redis never deletes keys to make room",
        )
    } else if policy.starts_with("volatile-") {
        // Only trigger keys carry a TTL: losing one delays no job past
        // the sweep.
        Check::ok(
            C,
            format!(
                "maxmemory-policy {policy}: when full, Redis deletes only keys with a TTL; \
                 delayq's trigger keys carry TTLs and the sweep fires their jobs without them"
            ),
        )
    } else {
        Check::fail(
            C,
            format!("maxmemory-policy {policy}: when full, Redis deletes any key, jobs included"),
            "set maxmemory-policy noeviction (CONFIG SET, redis.conf, or the service's console)",
        )
    }
}

async fn persistence(t: &Target) -> Check {
    const C: &str = "persistence";
    let Some(aof) = t.info("aof_enabled") else {
        return no_info(C, t);
    };
    if aof == "1" {
        return match t.config("appendfsync").await.as_deref() {
            Some("always") => Check::ok(C, "AOF on, appendfsync always: a crash loses no acknowledged write"),
            Some("everysec") => Check::ok(
                C,
                "AOF on, appendfsync everysec: a crash of the machine can lose the last second of writes",
            ),
            Some(other) => Check::warn(
                C,
                format!("AOF on, appendfsync {other}: the OS decides when writes reach the disk (often 30 s)"),
                "set appendfsync everysec (or always)",
            ),
            None => Check::ok(C, "AOF on (its fsync policy unknown: CONFIG GET refused)"),
        };
    }
    let fix = "turn on AOF: appendonly yes with appendfsync everysec (or the service's persistence setting)";
    match t.config("save").await {
        Some(rules) if rules.trim().is_empty() => Check::fail(
            C,
            "no persistence (AOF off, no RDB save rules): a restart loses every job",
            fix,
        ),
        Some(rules) => Check::warn(
            C,
            format!("RDB snapshots only (save {rules}): a crash loses every write since the last snapshot"),
            fix,
        ),
        None => Check::warn(
            C,
            "AOF off; RDB rules unknown (CONFIG GET refused): at best a crash loses the writes since the last snapshot",
            fix,
        ),
    }
}

fn memory(t: &Target) -> Check {
    const C: &str = "memory";
    let num = |f: &str| t.info(f).and_then(|v| v.parse::<f64>().ok());
    let (Some(used), Some(max)) = (num("used_memory"), num("maxmemory")) else {
        return no_info(C, t);
    };
    let mb = |b: f64| format!("{:.1} MB", b / 1e6);
    if max == 0.0 {
        let machine = num("total_system_memory")
            .map_or_else(String::new, |m| format!(" (the machine has {})", mb(m)));
        return Check::ok(
            C,
            format!("{} used, no maxmemory: Redis may grow until the machine's memory runs out{machine}", mb(used)),
        );
    }
    let share = used / max;
    let found = format!(
        "{} used of maxmemory {} ({:.0}%)",
        mb(used),
        mb(max),
        share * 100.0
    );
    let fix = "raise maxmemory (a bigger plan), or drain backlogs and dead letters";
    if share >= MEMORY_FAIL {
        Check::fail(C, format!("{found}: pushes will soon be refused"), fix)
    } else if share >= MEMORY_WARN {
        Check::warn(C, found, fix)
    } else {
        Check::ok(C, found)
    }
}

async fn round_trip(t: &Target) -> Check {
    const C: &str = "round trip";
    let mut conn = t.conn.clone();
    let mut times = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let start = Instant::now();
        if let Err(e) = redis::cmd("PING").query_async::<String>(&mut conn).await {
            return Check::could_not(C, "PING", &e);
        }
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    let median = times[PINGS / 2];
    let found = format!("median of {PINGS} PINGs {median:.2} ms");
    if median > SLOW_ROUND_TRIP_MS {
        Check::warn(
            C,
            format!("{found}: every push and pop waits at least this long"),
            "run delayq near Redis (same region or zone)",
        )
    } else {
        Check::ok(C, found)
    }
}

async fn replicas(t: &Target) -> Check {
    const C: &str = "replicas";
    let Some(role) = t.info("role") else {
        return no_info(C, t);
    };
    if role != "master" {
        return Check::fail(
            C,
            format!("this server is a {role}: it refuses writes"),
            "point --redis at the master (or use --redis-sentinel)",
        );
    }
    let connected: u64 = t
        .info("connected_slaves")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let min = t.config("min-replicas-to-write").await;
    let min_n: Option<u64> = min.as_deref().and_then(|v| v.parse().ok());
    let min_text = match min_n {
        Some(0) => "min-replicas-to-write 0".to_owned(),
        Some(n) => format!("min-replicas-to-write {n}"),
        None => "min-replicas-to-write unknown, CONFIG GET refused".to_owned(),
    };
    match min_n {
        Some(n) if n > connected => Check::fail(
            C,
            format!("{connected} replicas connected, {min_text}: the master refuses writes"),
            "connect the replicas, or lower min-replicas-to-write",
        ),
        _ if connected == 0 => Check::ok(
            C,
            format!("no replicas, {min_text}: a lost machine loses what persistence has not saved"),
        ),
        _ => Check::ok(
            C,
            format!(
                "{connected} replica{} connected, {min_text} (delayq's --replica-acks N waits for N on each push)",
                if connected == 1 { "" } else { "s" }
            ),
        ),
    }
}

async fn cluster(t: &Target) -> Check {
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
