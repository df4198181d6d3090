//! `delayq push/get/delete/stats/dead` against a running server.

use std::process::Command;

use crate::common::*;
use delayq::RetryPolicy;
use serde_json::Value;

async fn delayq(base: &str, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_delayq"));
    cmd.args(args).args(["--server", base]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_subcommands_manage_jobs_and_dead_letters() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = s.base.as_str();

    let (ok, out, err) = delayq(
        b,
        &[
            "push", "--topic", "remind", "--id", "m1", "--body", "renew", "--delay", "15d",
            "--retry", "1m,5m", "--json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"], "created");
    let job = s.queue.get("m1").await.unwrap().unwrap();
    assert_eq!(job.retry, RetryPolicy::parse("1m,5m", None).unwrap());
    assert!(job.due_ms >= redis.time_ms().await + 15 * 86_400_000 - 60_000);

    let (ok, out, _) = delayq(b, &["get", "m1"]).await;
    assert!(ok);
    assert!(
        out.contains("state: delayed") && out.contains("body: renew"),
        "{out}"
    );

    let (ok, out, _) = delayq(b, &["stats"]).await;
    assert!(ok);
    assert!(
        out.lines()
            .any(|l| l.starts_with("remind") && l.contains(" 1 ")),
        "{out}"
    );

    // A dead job to manage.
    s.queue
        .push(&delayq::NewJob {
            id: "d1".into(),
            topic: "hook".into(),
            retry: Some(RetryPolicy {
                intervals: vec![],
                max_attempts: Some(1),
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    let d = s
        .queue
        .pop(&topics(&["hook"]), std::time::Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    s.queue
        .nack("d1", &d.token, None, "endpoint down")
        .await
        .unwrap();
    let (ok, out, _) = delayq(b, &["dead", "list", "hook"]).await;
    assert!(ok);
    assert!(out.contains("d1") && out.contains("endpoint down"), "{out}");
    let (ok, out, _) = delayq(b, &["dead", "requeue", "hook"]).await;
    assert!(ok);
    assert!(out.contains("requeued 1"), "{out}");
    let (ok, out, _) = delayq(b, &["dead", "purge", "hook", "--json"]).await;
    assert!(ok);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["purged"], 0);

    let (ok, _, _) = delayq(b, &["delete", "m1"]).await;
    assert!(ok);
    // Errors are clear and the exit status says so.
    let (ok, _, err) = delayq(b, &["get", "m1"]).await;
    assert!(!ok);
    assert!(
        err.contains("404") && err.contains("no job with id"),
        "{err}"
    );
    let (ok, _, err) = delayq(b, &["push", "--topic", "t", "--delay", "5y"]).await;
    assert!(!ok);
    assert!(err.contains("unknown unit"), "{err}");
    let (ok, _, err) = delayq("http://127.0.0.1:1", &["stats"]).await;
    assert!(!ok);
    assert!(err.contains("cannot reach delayq"), "{err}");
    s.stop().await;
}
