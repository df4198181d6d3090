//! The checks read from what the server reports: engine, scripting,
//! eviction, persistence, memory, round trip, replicas (the cluster's in
//! cluster.rs, TLS's in tls.rs).

use std::time::Instant;

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
    ]
}

/// INFO could not be read: the checks that need it say so.
pub(super) fn no_info(check: &'static str, t: &Target) -> Check {
    match &t.info {
        Err(e) => Check::could_not(check, "INFO", e),
        Ok(_) => Check::warn(
            check,
            "cannot run (INFO does not report it)",
            "check this setting in the service's console",
        ),
    }
}

/// "Redis 7.0.15" or "Valkey 8.0.1" (Valkey reports redis_version 7.2.4
/// whatever its own version).
pub fn engine_name(t: &Target) -> Option<(String, String)> {
    let (name, version) = delayq::engine_of(|f| t.info(f))?;
    Some((name.to_owned(), version.to_owned()))
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
        // A master cut off from every replica (a split) goes on taking
        // writes that the replica promoted on the other side never sees.
        Some(0) => Check::warn(
            C,
            format!(
                "{connected} replica{} connected, {min_text}: a master cut off from its replicas keeps taking writes that a failover discards",
                if connected == 1 { "" } else { "s" }
            ),
            "set min-replicas-to-write 1 and min-replicas-max-lag 10 (the master refuses writes once no replica has answered for 10 s);              run delayq with --replica-acks 1 (nothing acknowledged or handed out that a replica did not confirm) and keep appendfsync always (or everysec) on every node",
        ),
        _ => Check::ok(
            C,
            format!(
                "{connected} replica{} connected, {min_text} (delayq's --replica-acks N acknowledges a change, and hands a job out, only once N replicas have it)",
                if connected == 1 { "" } else { "s" }
            ),
        ),
    }
}
