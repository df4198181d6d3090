//! The storage layout: a running instance that cannot read the layout in
//! force (an older build started without `delayq layout --hold 1` first)
//! fails to pop a job written in it (layout 2), or never fires the delayed
//! jobs (layout 3: they are out of the shared schedule it reads).

use delayq::figures::Instance;
use delayq::StoreKeys;
use redis::aio::MultiplexedConnection;

use super::Check;

const C: &str = "storage layout";

/// The connection to the server that holds a key (on a cluster, its
/// slot's master), or None when that server was not reached.
pub type ConnFor<'a> = &'a dyn Fn(&str) -> Option<MultiplexedConnection>;

/// One command on the server of `key`, or the warn saying why it did not run.
async fn query<T: redis::FromRedisValue>(
    conn_for: ConnFor<'_>,
    key: &str,
    cmd: &redis::Cmd,
    what: &str,
) -> Result<T, Check> {
    let Some(mut conn) = conn_for(key) else {
        return Err(Check::warn(
            C,
            format!("cannot run ({what}: the master of its slot was not reached)"),
            "see the connection check; run doctor again once every master answers",
        ));
    };
    cmd.query_async(&mut conn)
        .await
        .map_err(|e| Check::could_not(C, what, &e))
}

/// Costs a GET per partition (each on its own master on a cluster) and a
/// GET per running instance.
pub async fn check(prefix: &str, conn_for: ConnFor<'_>) -> Check {
    match layouts(prefix, conn_for).await {
        Ok(c) | Err(c) => c,
    }
}

async fn layouts(prefix: &str, conn_for: ConnFor<'_>) -> Result<Check, Check> {
    let count_key = StoreKeys::partition_count(prefix);
    let count: Option<String> = query(
        conn_for,
        &count_key,
        redis::cmd("GET").arg(&count_key),
        "GET of the partition count",
    )
    .await?;
    let count: usize = count.and_then(|v| v.parse().ok()).unwrap_or(1);
    let mut in_force = 1;
    // One GET each: a cluster's partitions are in slots of their own.
    for key in delayq::layout_keys(prefix, count) {
        let flag: Option<String> = query(
            conn_for,
            &key,
            redis::cmd("GET").arg(&key),
            "GET of the layout flags",
        )
        .await?;
        let layout = (flag.as_deref().unwrap_or(""))
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u8>()
            .unwrap_or(1);
        in_force = in_force.max(layout);
    }
    let instances = StoreKeys::instances(prefix);
    let (secs, _): (i64, i64) = query(conn_for, &instances, &redis::cmd("TIME"), "TIME").await?;
    let ids: Vec<String> = query(
        conn_for,
        &instances,
        redis::cmd("ZRANGEBYSCORE")
            .arg(&instances)
            .arg(secs * 1000)
            .arg("+inf"),
        "ZRANGEBYSCORE of the instances",
    )
    .await?;
    let mut older = Vec::new();
    for id in ids {
        let key = StoreKeys::instance(prefix, &id);
        let beat: Option<String> = query(
            conn_for,
            &key,
            redis::cmd("GET").arg(&key),
            "GET of a heartbeat",
        )
        .await?;
        let Some(i) = beat.and_then(|b| serde_json::from_str::<Instance>(&b).ok()) else {
            continue;
        };
        if i.layout_read() < in_force {
            older.push(format!(
                "{} (version {}, reads layout {})",
                i.id,
                i.version,
                i.layout_read()
            ));
        }
    }
    if older.is_empty() {
        return Ok(Check::ok(
            C,
            format!("layout {in_force} in force; every running instance reads it"),
        ));
    }
    Ok(Check::fail(
        C,
        format!(
            "layout {in_force} in force, and running instances read less: {}; {}",
            older.join(", "),
            if in_force >= 3 {
                "they see no delayed job written in it (and their pops fail on long bodies in pieces)"
            } else {
                "their pops fail on jobs written in it"
            }
        ),
        "stop them, run `delayq layout --hold 1` (it puts every job back in layout 1; `--hold 2` for a build that reads 2), then start them again",
    ))
}
