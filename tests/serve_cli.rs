//! `delayq serve` as users run it: graceful stop on SIGTERM, the private
//! redis-server when no Redis is named, and the message when redis-server is
//! missing.

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn sigterm(child: &std::process::Child) {
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
}

/// Waits for the child to exit, up to `limit`.
fn wait_exit(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "delayq did not exit within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn spawn_serve(args: &[&str], data_dir: &std::path::Path) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(args)
        .env("DELAYQ_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("delayq listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (child, format!("http://{addr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_waiting_pops_at_once() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let q = s.queue.clone();
    let waiting = tokio::spawn({
        let base = s.base.clone();
        async move { post(&base, "/pop", r#"{"topic":"idle"}"#).await }
    });
    eventually(Duration::from_secs(5), "the pop to be held", || async {
        (q.waiting_pops() == 1).then_some(())
    })
    .await;
    let stopping = Instant::now();
    s.stop().await;
    let answered = waiting.await.unwrap();
    assert_eq!(answered["code"], 0);
    assert!(answered["data"].is_null());
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "a 178 s pop held up shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_delayq_cleanly_and_keeps_every_job() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = redis.url();
    let (mut child, base) = spawn_serve(&["--redis", &url], dir.path());
    assert_eq!(
        post(
            &base,
            "/push",
            r#"{"topic":"t","id":"keep","delay":3600,"ttr":5}"#
        )
        .await["code"],
        0
    );
    sigterm(&child);
    let status = wait_exit(&mut child, Duration::from_secs(10));
    assert!(status.success(), "{status}");
    let exists: i64 = redis.cmd(&["EXISTS", "{dq}:job:keep"]).await;
    assert_eq!(exists, 1, "a graceful stop lost a job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_url_a_private_redis_server_keeps_jobs_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, base) = spawn_serve(&[], dir.path());
    assert_eq!(
        post(
            &base,
            "/push",
            r#"{"topic":"t","id":"kept","delay":3600,"ttr":5,"body":"b"}"#
        )
        .await["code"],
        0
    );
    sigterm(&child);
    assert!(wait_exit(&mut child, Duration::from_secs(20)).success());
    assert!(dir.path().join("redis.conf").exists());

    let (mut child, base) = spawn_serve(&[], dir.path());
    let got = post(&base, "/get", r#"{"id":"kept"}"#).await;
    assert_eq!(got["data"]["body"], "b", "{got}");
    sigterm(&child);
    assert!(wait_exit(&mut child, Duration::from_secs(20)).success());
}

#[test]
fn a_missing_redis_server_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("PATH", dir.path())
        .env_remove("DELAYQ_REDIS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("redis-server is not installed"), "{err}");
    assert!(err.contains("apt-get install -y redis-server"), "{err}");
    assert!(err.contains("--redis"), "{err}");
}
