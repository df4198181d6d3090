//! `delayq doctor`: each check's verdict on a redis-server set up right
//! (redis-conf/) and on ones set up wrong in one way each.

use std::collections::HashMap;

use crate::common::delayq_run;
use crate::redis_server::RedisServer;

/// Runs doctor --json: (exit success, check name -> (verdict, found, fix)).
fn doctor(url: &str, extra: &[&str]) -> (bool, HashMap<String, (String, String, String)>) {
    let mut args = vec!["doctor", "--redis", url, "--json"];
    args.extend_from_slice(extra);
    let out = delayq_run(&args, &[("DELAYQ_REDIS", "")]);
    let text = String::from_utf8_lossy(&out.stdout);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let checks = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |f: &str| c[f].as_str().unwrap_or_default().to_owned();
            (s("check"), (s("verdict"), s("found"), s("fix")))
        })
        .collect();
    (out.status.success(), checks)
}

fn verdict(checks: &HashMap<String, (String, String, String)>, name: &str) -> String {
    checks
        .get(name)
        .unwrap_or_else(|| panic!("no {name} check in {checks:?}"))
        .0
        .clone()
}

/// Every check the doctor runs on a reachable server.
const ALL: [&str; 11] = [
    "tls",
    "engine",
    "scripting",
    "eviction",
    "persistence",
    "memory",
    "round trip",
    "replicas",
    "cluster",
    "events",
    "acl",
];

/// Every verdict ok; the round trip's depends on the machine's load (a
/// warn above 10 ms), so only its figure is asserted.
fn assert_all_ok(checks: &HashMap<String, (String, String, String)>) {
    for name in ALL.iter().filter(|n| **n != "round trip") {
        assert_eq!(verdict(checks, name), "ok", "{name}: {:?}", checks[*name]);
    }
    assert!(checks["round trip"].1.starts_with("median of 5 PINGs"));
}

#[tokio::test]
async fn a_server_set_up_right_passes_every_check_and_is_left_as_it_was() {
    let r = RedisServer::start();
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_all_ok(&checks);
    assert!(passed);
    assert!(
        checks["engine"].1.starts_with("Redis 7"),
        "{:?}",
        checks["engine"]
    );
    assert!(checks["persistence"].1.contains("appendfsync always"));
    assert!(checks["acl"].1.starts_with("ACL DRYRUN"));
    // Doctor's canary and probe keys are gone, and no function was loaded.
    assert_eq!(r.cmd::<i64>(&["DBSIZE"]).await, 0);
    let libraries: Vec<redis::Value> = r.cmd(&["FUNCTION", "LIST"]).await;
    assert!(libraries.is_empty());
}

#[tokio::test]
async fn text_output_is_one_line_per_check() {
    let r = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let out = delayq_run(&["doctor", "--redis", &r.url()], &[("DELAYQ_REDIS", "")]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), ALL.len(), "{text}");
    let eviction = text.lines().find(|l| l.contains("eviction")).unwrap();
    assert!(eviction.starts_with("fail"), "{eviction}");
    assert!(
        eviction.contains("fix: set maxmemory-policy noeviction"),
        "{eviction}"
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 check failed"));
}

#[tokio::test]
async fn expired_events_off_is_a_warning_naming_the_setting() {
    let r = RedisServer::start_with(&["--notify-keyspace-events", ""]);
    let (passed, checks) = doctor(&r.url(), &["--events-wait", "1s"]);
    assert_eq!(verdict(&checks, "events"), "warn", "{:?}", checks["events"]);
    assert!(checks["events"].2.contains("notify-keyspace-events Ex"));
    // Only a warning: the sweep still fires jobs on time.
    assert!(passed);
}

#[tokio::test]
async fn an_evicting_policy_fails_and_a_volatile_one_passes() {
    let r = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_eq!(verdict(&checks, "eviction"), "fail");
    assert!(!passed);
    let r = RedisServer::start_with(&["--maxmemory-policy", "volatile-ttl"]);
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_eq!(verdict(&checks, "eviction"), "ok");
    assert!(checks["eviction"].1.contains("trigger keys carry TTLs"));
    assert!(passed);
}

#[tokio::test]
async fn no_aof_fails_without_snapshots_and_warns_with_them() {
    // redis-conf/ has no save rules: without AOF nothing is kept.
    let r = RedisServer::start_with(&["--appendonly", "no"]);
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_eq!(verdict(&checks, "persistence"), "fail");
    assert!(!passed);
    let r = RedisServer::start_with(&["--appendonly", "no", "--save", "3600 1"]);
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_eq!(verdict(&checks, "persistence"), "warn");
    assert!(checks["persistence"].1.contains("RDB snapshots only"));
    assert!(passed);
}

#[tokio::test]
async fn a_user_lacking_a_category_fails_the_acl_check_naming_it() {
    let r = RedisServer::start();
    // Allowed ACL DRYRUN (it has @admin): asked.
    r.cmd::<()>(&[
        "ACL",
        "SETUSER",
        "noscript",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-@scripting",
    ])
    .await;
    let (passed, checks) = doctor(&r.url_as("noscript", "pw"), &[]);
    assert_eq!(verdict(&checks, "acl"), "fail", "{:?}", checks["acl"]);
    assert!(checks["acl"].1.starts_with("ACL DRYRUN"));
    assert!(checks["acl"].1.contains("fcall (@scripting)"));
    assert!(checks["acl"].2.contains("+@scripting"));
    assert!(!passed);
    // No @admin: no DRYRUN and no CONFIG; each command is tried instead.
    r.cmd::<()>(&[
        "ACL", "SETUSER", "nohash", "on", ">pw", "~*", "&*", "+@all", "-@admin", "-@hash",
    ])
    .await;
    let (passed, checks) = doctor(&r.url_as("nohash", "pw"), &[]);
    assert_eq!(verdict(&checks, "acl"), "fail", "{:?}", checks["acl"]);
    assert!(checks["acl"].1.starts_with("tried"));
    assert!(checks["acl"].1.contains("hset (@hash)"));
    assert!(checks["acl"].1.contains("config|get (@admin)"));
    assert!(!passed);
    // What CONFIG would have said is a warn, not a crash.
    assert_eq!(verdict(&checks, "persistence"), "ok");
    assert!(checks["persistence"].1.contains("CONFIG GET refused"));
    // The tried writes left nothing.
    assert_eq!(r.cmd::<i64>(&["DBSIZE"]).await, 0);
}

#[tokio::test]
async fn a_password_is_used_and_a_wrong_one_is_a_failed_connection() {
    let r = RedisServer::start_with_password("s3cret", &[]);
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_all_ok(&checks);
    assert!(passed);
    let wrong = r.url().replace("s3cret", "wrong");
    let (passed, checks) = doctor(&wrong, &[]);
    assert_eq!(verdict(&checks, "connection"), "fail");
    assert!(checks["connection"].2.contains("password"));
    assert!(!checks["connection"].1.contains("wrong"), "password shown");
    assert!(!passed);
}
