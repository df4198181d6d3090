//! `delayq serve` as users run it: graceful stop on SIGTERM, the private
//! redis-server when no Redis is named, and the message when redis-server is
//! missing.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

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
    let delayq = DelayqProcess::start(&redis, &[]);
    let push = r#"{"topic":"t","id":"keep","delay":3600,"ttr":5}"#;
    assert_eq!(post(&delayq.base, "/push", push).await["code"], 0);
    // SIGTERM; it must exit 0.
    delayq.terminate();
    let exists: i64 = redis.cmd(&["EXISTS", "{dq}:j:keep"]).await;
    assert_eq!(exists, 1, "a graceful stop lost a job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_url_a_private_redis_server_keeps_jobs_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let delayq = DelayqProcess::spawn(&["--data-dir", data_dir]);
    let push = r#"{"topic":"t","id":"kept","delay":3600,"ttr":5,"body":"b"}"#;
    assert_eq!(post(&delayq.base, "/push", push).await["code"], 0);
    delayq.terminate();
    assert!(dir.path().join("redis.conf").exists());

    let delayq = DelayqProcess::spawn(&["--data-dir", data_dir]);
    let got = post(&delayq.base, "/get", r#"{"id":"kept"}"#).await;
    assert_eq!(got["data"]["body"], "b", "{got}");
    delayq.terminate();
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
