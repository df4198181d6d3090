//! The storage layout: a running instance that cannot read the layout in
//! force (an older build started without `delayq layout --hold 1` first)
//! fails to pop a job written in it (layout 2), or never fires the delayed
//! jobs (layout 3: they are out of the shared schedule it reads).

use delayq::figures::Instance;
use delayq::StoreKeys;

use super::{Check, Target};

const C: &str = "storage layout";

pub async fn check(t: &Target) -> Check {
    let mut conn = t.conn.clone();
    let count: Option<usize> = match redis::cmd("GET")
        .arg(StoreKeys::partition_count(&t.prefix))
        .query_async::<Option<String>>(&mut conn)
        .await
    {
        Ok(v) => v.and_then(|v| v.parse().ok()),
        Err(e) => return Check::could_not(C, "GET of the partition count", &e),
    };
    let keys = delayq::layout_keys(&t.prefix, count.unwrap_or(1));
    let flags: Vec<Option<String>> =
        match redis::cmd("MGET").arg(&keys).query_async(&mut conn).await {
            Ok(v) => v,
            Err(e) => return Check::could_not(C, "GET of the layout flags", &e),
        };
    let in_force = (flags.iter())
        .map(|f| {
            f.as_deref()
                .unwrap_or("")
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<u8>()
                .unwrap_or(1)
        })
        .max()
        .unwrap_or(1);
    let (secs, _): (i64, i64) = match redis::cmd("TIME").query_async(&mut conn).await {
        Ok(t) => t,
        Err(e) => return Check::could_not(C, "TIME", &e),
    };
    let ids: Vec<String> = match redis::cmd("ZRANGEBYSCORE")
        .arg(StoreKeys::instances(&t.prefix))
        .arg(secs * 1000)
        .arg("+inf")
        .query_async(&mut conn)
        .await
    {
        Ok(v) => v,
        Err(e) => return Check::could_not(C, "ZRANGEBYSCORE of the instances", &e),
    };
    let mut older = Vec::new();
    for id in ids {
        let beat: Option<String> = match redis::cmd("GET")
            .arg(StoreKeys::instance(&t.prefix, &id))
            .query_async(&mut conn)
            .await
        {
            Ok(v) => v,
            Err(e) => return Check::could_not(C, "GET of a heartbeat", &e),
        };
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
        return Check::ok(
            C,
            format!("layout {in_force} in force; every running instance reads it"),
        );
    }
    Check::fail(
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
    )
}
