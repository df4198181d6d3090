//! What Redis's SLOWLOG says a test's calls cost: armed at 0 us, it
//! lists every command with its Redis time, so tests count script calls
//! and bound what a read costs without timing the machine. And what
//! INFO commandstats counts: how often Redis ran a command.

use crate::redis_server::RedisServer;

/// Makes Redis log every call from now on (SLOWLOG at 0 us, room for
/// `calls`), so [`script_calls`] can count them.
pub async fn arm_slowlog(redis: &RedisServer, calls: usize) {
    let mut c = redis.conn().await;
    // One setting a CONFIG SET: Redis 6.2 takes no more.
    for (name, value) in [("slowlog-max-len", calls), ("slowlog-log-slower-than", 0)] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut c)
        .await
        .unwrap();
}

/// The script calls Redis ran since `slowlog` was armed (see
/// [`arm_slowlog`]) whose function is `name` (e.g. "dq_remove").
pub async fn script_calls(redis: &RedisServer, name: &str) -> usize {
    script_call_times(redis, name).await.len()
}

/// How long (us, Redis's own measure) each of those calls ran, oldest first.
pub async fn script_call_times(redis: &RedisServer, name: &str) -> Vec<i64> {
    let prefix = format!("{name}_");
    let sha = delayq::testing::eval_script_of(name.trim_start_matches("dq_"));
    // SLOWLOG GET lists the newest first.
    (slowlog_entries(redis).await.into_iter().rev())
        .filter_map(|(us, args)| {
            let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or_default();
            let ours = (arg(0) == "fcall" && arg(1).starts_with(&prefix))
                || (arg(0) == "evalsha" && sha.as_ref().is_some_and(|(sha, _)| arg(1) == *sha));
            ours.then_some(us)
        })
        .collect()
}

/// The slowlog's entries (see [`arm_slowlog`]), newest first: each
/// command's Redis time in us and its arguments, lowercased.
pub async fn slowlog_entries(redis: &RedisServer) -> Vec<(i64, Vec<String>)> {
    let log: Vec<redis::Value> = redis.cmd(&["SLOWLOG", "GET", "-1"]).await;
    log.iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let (Some(redis::Value::Int(us)), Some(redis::Value::Array(args))) =
                (fields.get(2), fields.get(3))
            else {
                return None;
            };
            let args = args.iter().map(|a| match a {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).to_lowercase(),
                _ => String::new(),
            });
            Some((*us, args.collect()))
        })
        .collect()
}

/// How many times Redis has run `command` since its start (scripts'
/// commands included), from INFO commandstats.
pub async fn command_calls(redis: &RedisServer, command: &str) -> u64 {
    let info: String = redis.cmd(&["INFO", "commandstats"]).await;
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
