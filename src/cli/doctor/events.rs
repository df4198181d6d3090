//! Expired events, tried rather than read: CONFIG GET is renamed away on
//! many managed services, and a setting that reads right can still not
//! publish (a proxy in between, a console setting applied elsewhere). A
//! canary key with a short PX is touched after it expired (a read expires
//! it at once, whatever the server's expiry cycle) and its event awaited.

use std::time::{Duration, Instant};

use futures::StreamExt as _;

use super::{Check, Target};

const C: &str = "events";
/// The canary's life.
const CANARY_PX: u64 = 50;
/// How often the canary is touched again while the event is awaited.
const TOUCH_EVERY: Duration = Duration::from_millis(100);

const FIX: &str = "set notify-keyspace-events Ex (CONFIG SET notify-keyspace-events Ex and \
                   in redis.conf, or the service's console: keyspace notifications, expired \
                   events); delayq serve sets it itself where CONFIG is allowed";

pub async fn check(t: &Target, wait: Duration) -> Check {
    let db = t.client.get_connection_info().redis_settings().db();
    let channel = format!("__keyevent@{db}__:expired");
    let key = t.key("canary");
    let mut pubsub = match tokio::time::timeout(t.timeout, t.client.get_async_pubsub()).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return Check::could_not(C, "a subscriber connection", &e),
        Err(_) => {
            return Check::warn(
                C,
                "cannot run (a subscriber connection timed out)",
                "run doctor again",
            )
        }
    };
    if let Err(e) = pubsub.subscribe(&channel).await {
        return Check::could_not(C, &format!("SUBSCRIBE {channel}"), &e);
    }
    let mut conn = t.conn.clone();
    let set: redis::RedisResult<()> = redis::cmd("SET")
        .arg(&key)
        .arg(1)
        .arg("PX")
        .arg(CANARY_PX)
        .query_async(&mut conn)
        .await;
    if let Err(e) = set {
        return Check::could_not(C, "SET of the canary key", &e);
    }
    let started = Instant::now();
    let deadline = started + wait;
    let mut messages = pubsub.on_message();
    tokio::time::sleep(Duration::from_millis(CANARY_PX)).await;
    loop {
        // A read of an expired key deletes it, and that publishes the event.
        let _: redis::RedisResult<i64> =
            redis::cmd("EXISTS").arg(&key).query_async(&mut conn).await;
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let until = (now + TOUCH_EVERY).min(deadline);
        while let Ok(Some(msg)) = tokio::time::timeout_at(until.into(), messages.next()).await {
            if msg.get_payload::<String>().ok().as_deref() == Some(key.as_str()) {
                return Check::ok(
                    C,
                    format!(
                        "expired events published: the canary's arrived on {channel} {} ms after it was set",
                        started.elapsed().as_millis()
                    ),
                );
            }
        }
    }
    Check::warn(
        C,
        format!(
            "no expired event on {channel} within {} ms of a canary key's expiry: only the sweep \
             fires jobs (still on time; each due job then costs the sweep a wake-up)",
            wait.as_millis()
        ),
        FIX,
    )
}
