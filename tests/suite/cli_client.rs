//! `delayq push/get/delete/stats/dead` against a running server.

use std::process::Command;

use crate::common::*;
use delayq::{JobState, RetryPolicy};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_subcommands_manage_jobs_and_dead_letters() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = s.base.as_str();

    let (ok, out, err) = delayq_cli(
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

    let (ok, out, _) = delayq_cli(b, &["get", "m1"]).await;
    assert!(ok);
    assert!(
        out.contains("state: delayed") && out.contains("body: renew"),
        "{out}"
    );

    let (ok, out, _) = delayq_cli(b, &["stats"]).await;
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
    let (ok, out, _) = delayq_cli(b, &["dead", "list", "hook"]).await;
    assert!(ok);
    assert!(out.contains("d1") && out.contains("endpoint down"), "{out}");
    let (ok, out, _) = delayq_cli(b, &["dead", "requeue", "hook"]).await;
    assert!(ok);
    assert!(out.contains("requeued 1"), "{out}");
    let (ok, out, _) = delayq_cli(b, &["dead", "purge", "hook", "--json"]).await;
    assert!(ok);
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap()["purged"], 0);

    let (ok, _, _) = delayq_cli(b, &["delete", "m1"]).await;
    assert!(ok);
    // Errors are clear and the exit status says so.
    let (ok, _, err) = delayq_cli(b, &["get", "m1"]).await;
    assert!(!ok);
    assert!(
        err.contains("404") && err.contains("no job with id"),
        "{err}"
    );
    let (ok, _, err) = delayq_cli(b, &["push", "--topic", "t", "--delay", "5y"]).await;
    assert!(!ok);
    assert!(err.contains("unknown unit"), "{err}");
    let (ok, _, err) = delayq_cli("http://127.0.0.1:1", &["stats"]).await;
    assert!(!ok);
    assert!(err.contains("cannot reach delayq"), "{err}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_from_the_command_line_pops_settles_lists_and_pauses() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = s.base.as_str();
    for i in 0..3 {
        s.queue
            .push(&job(&format!("c{i}"), "cli", 0, 60_000))
            .await
            .unwrap();
    }
    eventually(std::time::Duration::from_secs(5), "3 ready", || async {
        (s.queue.topics().await.unwrap().topics["cli"].ready == 3).then_some(())
    })
    .await;
    let (ok, out, err) = delayq_cli(b, &["list", "cli", "--state", "ready"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("c0") && out.contains("c2") && out.contains("ready"),
        "{out}"
    );

    let (ok, out, err) = delayq_cli(b, &["pop", "cli", "--json"]).await;
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let (id, token) = (
        v["jobs"][0]["id"].as_str().unwrap().to_owned(),
        v["jobs"][0]["token"].as_str().unwrap().to_owned(),
    );
    let (ok, out, err) = delayq_cli(b, &["touch", &id, "--lease", &token, "--ttr", "2m"]).await;
    assert!(ok && out.contains("leased until"), "{out} {err}");
    let (ok, out, _) = delayq_cli(
        b,
        &[
            "nack", &id, "--lease", &token, "--error", "flaky", "--delay", "1h",
        ],
    )
    .await;
    assert!(ok && out.contains("delayed"), "{out}");
    let (ok, _, err) = delayq_cli(b, &["finish", &id, "--lease", &token]).await;
    assert!(
        !ok && err.contains("409"),
        "a stale token is refused: {err}"
    );
    let (ok, out, _) = delayq_cli(b, &["reschedule", &id, "--delay", "2h"]).await;
    assert!(ok && out.contains("due at"), "{out}");
    let (ok, out, _) = delayq_cli(b, &["list", "cli", "--state", "delayed"]).await;
    assert!(ok && out.contains(&id), "{out}");
    let (ok, out, _) = delayq_cli(b, &["list", "cli", "--state", "dead"]).await;
    assert!(ok && out.trim() == "none", "{out}");

    let (ok, out, _) = delayq_cli(b, &["pause", "cli"]).await;
    assert!(ok && out.contains("paused"), "{out}");
    let (ok, out, _) = delayq_cli(b, &["pop", "cli"]).await;
    assert!(ok && out.contains("none ready"), "paused: {out}");
    let (ok, _, _) = delayq_cli(b, &["resume", "cli"]).await;
    assert!(ok);
    let (ok, out, _) = delayq_cli(b, &["pop", "cli", "--count", "5", "--json"]).await;
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["jobs"].as_array().unwrap().len(), 2);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayq_work_runs_a_command_per_job_and_stops_gracefully() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let once = RetryPolicy {
        intervals: vec![],
        max_attempts: Some(1),
    };
    for (id, body) in [("w1", "ok"), ("w2", "ok"), ("w3", "fail"), ("w4", "ok")] {
        s.queue
            .push(&delayq::NewJob {
                body: body.into(),
                retry: Some(once.clone()),
                ..job(id, "work", 0, 60_000)
            })
            .await
            .unwrap();
    }
    // A command that runs twice as long as its job's ttr: its lease is
    // extended meanwhile, so it is delivered once.
    s.queue
        .push(&delayq::NewJob {
            body: "slow".into(),
            retry: Some(once.clone()),
            ..job("w5", "work", 0, 1500)
        })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let script = format!(
        "body=$(cat); echo \"$DELAYQ_JOB_ID $DELAYQ_JOB_TOPIC $DELAYQ_JOB_ATTEMPT $body\" >> {}; \
         if [ \"$body\" = slow ]; then sleep 3; fi; \
         if [ \"$body\" = fail ]; then echo 'card declined' >&2; exit 3; fi",
        seen.display()
    );
    use std::os::unix::process::CommandExt;
    let mut worker = Reaped(
        std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args([
                "work",
                "work",
                "--concurrency",
                "2",
                "--server",
                &s.base,
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stderr(std::process::Stdio::null())
            // A group of its own: a failing test stops it and its commands.
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    eventually(
        std::time::Duration::from_secs(15),
        "every job settled",
        || async {
            let c = s.queue.topics().await.unwrap().topics["work"];
            (c.delayed + c.ready + c.reserved == 0 && c.dead == 1).then_some(())
        },
    )
    .await;
    let lines = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(lines.lines().count(), 5, "{lines}");
    assert!(
        lines.contains("w5 work 1 slow") && !lines.contains("w5 work 2"),
        "{lines}"
    );
    assert!(lines.contains("w3 work 1 fail"), "{lines}");
    let dead = s.queue.get("w3").await.unwrap().unwrap();
    assert_eq!(
        dead.last_error.as_deref(),
        Some("exit status 3: card declined")
    );
    // SIGTERM: it stops taking jobs and exits cleanly.
    unsafe {
        libc::kill(worker.0.id() as i32, libc::SIGTERM);
    }
    let status = worker.0.wait().unwrap();
    assert!(status.success(), "{status}");
    s.stop().await;
}

/// A child process group killed when dropped, also when a test fails.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        // SAFETY: signals to our own child's process group.
        unsafe {
            libc::kill(-(self.0.id() as i32), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

/// `delayq work TOPIC --concurrency N --server BASE -- sh -c SCRIPT`, in a
/// process group of its own (a failing test stops it and its commands).
fn work(base: &str, topic: &str, concurrency: usize, script: &str) -> Reaped {
    use std::os::unix::process::CommandExt;
    Reaped(
        std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["work", topic, "--concurrency"])
            .arg(concurrency.to_string())
            .args(["--server", base, "--", "sh", "-c", script])
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    )
}

/// Waits (bounded) for the worker to exit; its status.
async fn exits(worker: &mut Reaped, limit: std::time::Duration) -> std::process::ExitStatus {
    eventually(limit, "the worker exits", || {
        let status = worker.0.try_wait().unwrap();
        async move { status }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayq_work_keeps_a_one_second_lease_through_a_three_second_command() {
    let redis = RedisServer::start();
    let server = DelayqProcess::start(&redis, &[]);
    let q = queue(&redis);
    q.push(&delayq::NewJob {
        retry: Some(RetryPolicy {
            intervals: vec![],
            max_attempts: Some(3),
        }),
        ..job("short-lease", "lease", 0, 1000)
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let script = format!(
        "echo start >> {0}; sleep 3; echo end >> {0}",
        seen.display()
    );
    let mut worker = work(&server.base, "lease", 2, &script);
    eventually(
        std::time::Duration::from_secs(30),
        "the job settled",
        || async {
            match q.get("short-lease").await.unwrap() {
                None => Some(()),
                Some(j) if j.state == JobState::Dead => Some(()),
                Some(_) => None,
            }
        },
    )
    .await;
    let job = q.get("short-lease").await.unwrap();
    assert!(job.is_none(), "not finished: {job:?}");
    let lines = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(lines, "start\nend\n", "the command ran once");
    unsafe {
        libc::kill(worker.0.id() as i32, libc::SIGTERM);
    }
    assert!(exits(&mut worker, std::time::Duration::from_secs(15))
        .await
        .success());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayq_work_never_runs_one_job_id_twice_at_once() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    s.queue
        .push(&delayq::NewJob {
            body: "a".into(),
            ..job("twice", "solo", 0, 60_000)
        })
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (seen, go) = (dir.path().join("seen"), dir.path().join("go"));
    let script = format!(
        "body=$(cat); echo \"start $body\" >> {0}; \
         while [ ! -e {1} ]; do sleep 0.05; done; echo \"end $body\" >> {0}",
        seen.display(),
        go.display()
    );
    let mut worker = work(&s.base, "solo", 2, &script);
    eventually(std::time::Duration::from_secs(15), "a runs", || async {
        std::fs::read_to_string(&seen)
            .ok()
            .filter(|s| s == "start a\n")
    })
    .await;
    // The same id pushed again while its command runs: the worker's other
    // slot takes the new job.
    s.queue
        .push(&delayq::NewJob {
            body: "b".into(),
            ..job("twice", "solo", 0, 60_000)
        })
        .await
        .unwrap();
    eventually(std::time::Duration::from_secs(15), "b taken", || async {
        let j = s.queue.get("twice").await.unwrap()?;
        (j.state == JobState::Reserved).then_some(())
    })
    .await;
    // Give a wrong second start the time to show.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    std::fs::write(&go, "").unwrap();
    eventually(std::time::Duration::from_secs(15), "b finished", || async {
        s.queue.get("twice").await.unwrap().is_none().then_some(())
    })
    .await;
    let lines = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(lines, "start a\nend a\nstart b\nend b\n");
    unsafe {
        libc::kill(worker.0.id() as i32, libc::SIGTERM);
    }
    assert!(exits(&mut worker, std::time::Duration::from_secs(15))
        .await
        .success());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_the_terminal_lets_the_running_command_finish_its_job() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    s.queue
        .push(&job("interrupted", "ctrl-c", 0, 60_000))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (started, seen) = (dir.path().join("started"), dir.path().join("seen"));
    let script = format!(
        "trap 'echo interrupted >> {1}; exit 130' INT; touch {0}; sleep 2; echo done >> {1}",
        started.display(),
        seen.display()
    );
    let mut worker = work(&s.base, "ctrl-c", 1, &script);
    eventually(std::time::Duration::from_secs(15), "it runs", || async {
        started.exists().then_some(())
    })
    .await;
    // What a terminal's Ctrl-C does: SIGINT to the foreground process group.
    unsafe {
        libc::kill(-(worker.0.id() as i32), libc::SIGINT);
    }
    let status = exits(&mut worker, std::time::Duration::from_secs(15)).await;
    assert!(status.success(), "{status}");
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "done\n");
    let job = s.queue.get("interrupted").await.unwrap();
    assert!(job.is_none(), "not finished: {job:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_writes_stderr_before_reading_its_body_does_not_hang_work() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    s.queue
        .push(&delayq::NewJob {
            body: "x".repeat(200_000),
            ..job("chatty", "pipes", 0, 60_000)
        })
        .await
        .unwrap();
    // More than a pipe holds each way: 100 KB to stderr, then 200 KB read.
    let script = "head -c 100000 /dev/zero >&2; test \"$(wc -c)\" -eq 200000";
    let mut worker = work(&s.base, "pipes", 1, script);
    eventually(std::time::Duration::from_secs(15), "finished", || async {
        s.queue.get("chatty").await.unwrap().is_none().then_some(())
    })
    .await;
    unsafe {
        libc::kill(worker.0.id() as i32, libc::SIGTERM);
    }
    let status = exits(&mut worker, std::time::Duration::from_secs(15)).await;
    assert!(status.success(), "{status}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_keeps_only_the_tail_of_a_huge_stderr_in_memory() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    s.queue
        .push(&delayq::NewJob {
            retry: Some(RetryPolicy {
                intervals: vec![],
                max_attempts: Some(1),
            }),
            ..job("loud", "stderr", 0, 60_000)
        })
        .await
        .unwrap();
    // 200 MB of noise, then the line that says what went wrong.
    let script = "head -c 200000000 /dev/zero | tr '\\0' x >&2; echo >&2; \
                  echo 'disk full' >&2; exit 4";
    let mut worker = work(&s.base, "stderr", 1, script);
    let job = eventually(std::time::Duration::from_secs(120), "dead", || async {
        s.queue
            .get("loud")
            .await
            .unwrap()
            .filter(|j| j.state == JobState::Dead)
    })
    .await;
    // The worker's peak memory (VmHWM: the high-water mark of its RSS).
    let status = std::fs::read_to_string(format!("/proc/{}/status", worker.0.id())).unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(peak_kb < 64 * 1024, "peak RSS {peak_kb} kB");
    let error = job.last_error.unwrap();
    assert!(
        error.starts_with("exit status 4: ") && error.ends_with("xxx disk full"),
        "{}",
        &error[error.len().saturating_sub(100)..]
    );
    assert!(error.len() <= 1000, "{} bytes kept", error.len());
    unsafe {
        libc::kill(worker.0.id() as i32, libc::SIGTERM);
    }
    assert!(exits(&mut worker, std::time::Duration::from_secs(15))
        .await
        .success());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_with_url_characters_reach_their_jobs_from_the_command_line() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = s.base.as_str();
    let ids = [
        "a/b", "q?x=1&y", "h#frag", "50%", "%2e%2e", "%2F", "a/../b", "../x", "./", "...",
        "sp ace", "ü+é",
    ];
    for id in ids {
        s.queue.push(&job(id, "odd", 60_000, 1000)).await.unwrap();
    }
    for id in ids {
        let (ok, out, err) = delayq_cli(b, &["get", id, "--json"]).await;
        assert!(ok, "get {id:?}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["id"], id);
        let (ok, _, err) = delayq_cli(b, &["delete", id]).await;
        assert!(ok, "delete {id:?}: {err}");
        assert!(s.queue.get(id).await.unwrap().is_none(), "{id:?} left");
    }
    let (ok, _, err) = delayq_cli(b, &["push", "--topic", "odd", "--id", ".."]).await;
    assert!(!ok && err.contains("path segment"), "{err}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_reaches_an_https_server_trusting_the_bundle_ssl_cert_file_names() {
    let certs = crate::tls::Certs::make();
    let server = crate::tls::HttpsReceiver::start(
        &certs,
        r#"{"topics":{"orders":{"delayed":3,"ready":0,"reserved":0,"dead":0}},"waiting_pops":0}"#,
    )
    .await;
    let stats = |ca: Option<std::path::PathBuf>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_delayq"));
        cmd.args(["stats", "--server", &server.base]);
        if let Some(ca) = ca {
            cmd.env("SSL_CERT_FILE", ca);
        }
        async move {
            let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
                .await
                .unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let (ok, out, err) = stats(Some(certs.path("ca.crt"))).await;
    assert!(ok, "{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("orders") && l.contains('3')),
        "{out}"
    );
    assert_eq!(server.seen()[0].1, "/v1/topics");
    // Without the bundle the test's own CA is trusted by nobody.
    let (ok, _, err) = stats(None).await;
    assert!(!ok, "a certificate nobody vouches for was accepted");
    assert!(err.contains("cannot reach delayq"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_refuses_due_times_and_durations_whose_unit_it_would_guess() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = s.base.as_str();
    for (args, words) in [
        (
            &["push", "--topic", "u", "--at", "1806224400"][..],
            &["--at", "milliseconds", "1806224400000"][..],
        ),
        (
            &["push", "--topic", "u", "--at", "2027-03-28 09:00:00"][..],
            &["time zone"][..],
        ),
        (
            &["push", "--topic", "u", "--delay", "5000"][..],
            &["no unit", "5000ms"][..],
        ),
        (
            &["push", "--topic", "u", "--retry", "30,60"][..],
            &["--retry", "no unit"][..],
        ),
    ] {
        let (ok, _, err) = delayq_cli(b, args).await;
        assert!(!ok, "{args:?} was accepted");
        for w in words {
            assert!(err.contains(w), "{args:?}: {err}");
        }
    }
    let n = redis.cmd::<Vec<String>>(&["KEYS", "{dq}:j:*"]).await;
    assert!(n.is_empty(), "nothing pushed: {n:?}");
    let (ok, out, err) = delayq_cli(
        b,
        &[
            "push",
            "--topic",
            "u",
            "--at",
            "2027-03-28T09:00:00Z",
            "--json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.contains("1806224400000"), "{out}");
    let (ok, _, err) = delayq_cli(b, &["push", "--topic", "u", "--delay", "1500ms"]).await;
    assert!(ok, "{err}");
    s.stop().await;
}

/// Runs the CLI with its stdout closed before it writes (`| head -0`).
async fn delayq_closed_stdout(base: &str, args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_delayq"));
    cmd.args(args)
        .args(["--server", base])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().unwrap();
        drop(child.stdout.take());
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_the_cli_quietly_and_gives_back_a_popped_job() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = s.base.as_str();
    s.queue.push(&job("p1", "pipe", 0, 600_000)).await.unwrap();
    eventually(std::time::Duration::from_secs(5), "ready", || async {
        (s.queue.topics().await.unwrap().topics["pipe"].ready == 1).then_some(())
    })
    .await;
    let (status, err) = delayq_closed_stdout(b, &["list", "pipe", "--state", "ready"]).await;
    assert!(status.success(), "{status:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let (status, err) = delayq_closed_stdout(b, &["pop", "pipe"]).await;
    assert!(status.success(), "{status:?}: {err}");
    // Its token went nowhere: the job is ready again, the attempt uncounted.
    let j = s.queue.get("p1").await.unwrap().unwrap();
    assert_eq!((j.state, j.attempts), (JobState::Ready, 0), "{j:?}");
    // And `| head -2` of a pop keeps what settles the job: id and token.
    let (ok, out, err) = delayq_cli(b, &["pop", "pipe"]).await;
    assert!(ok, "{err}");
    let first_two: Vec<&str> = out.lines().take(2).collect();
    assert!(
        first_two[0].starts_with("id:") && first_two[1].starts_with("token:"),
        "{out}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayq_work_refuses_a_command_it_cannot_start_and_never_counts_it_as_an_attempt() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = s.base.as_str();
    s.queue.push(&job("n1", "nocmd", 0, 60_000)).await.unwrap();
    // At start: refused before any job is taken.
    for cmd in ["/no/such/cmd", "no-such-command-delayq-test"] {
        let (ok, _, err) = delayq_cli(b, &["work", "nocmd", "--", cmd]).await;
        assert!(!ok && err.contains("cannot run"), "{cmd}: {err}");
    }
    let j = s.queue.get("n1").await.unwrap().unwrap();
    assert_eq!((j.state, j.attempts), (JobState::Ready, 0), "{j:?}");
    // Gone after the start: the job is given back uncounted and work ends.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("handler.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    s.queue.delete("n1").await.unwrap();
    use std::os::unix::process::CommandExt;
    let mut worker = Reaped(
        std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["work", "nocmd", "--server", b, "--"])
            .arg(&script)
            .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let stderr = || std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    eventually(std::time::Duration::from_secs(15), "work started", || {
        let started = stderr().contains("taking jobs");
        async move { started.then_some(()) }
    })
    .await;
    std::fs::remove_file(&script).unwrap();
    s.queue.push(&job("n2", "nocmd", 0, 60_000)).await.unwrap();
    let status = exits(&mut worker, std::time::Duration::from_secs(30)).await;
    assert!(!status.success(), "{status}");
    assert!(
        stderr().contains("n2: the job was given back"),
        "{}",
        stderr()
    );
    let j = s.queue.get("n2").await.unwrap().unwrap();
    assert_eq!((j.state, j.attempts), (JobState::Ready, 0), "{j:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayq_work_says_when_a_job_died() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    s.queue
        .push(&delayq::NewJob {
            retry: Some(RetryPolicy {
                intervals: vec![],
                max_attempts: Some(1),
            }),
            ..job("d1", "dies", 0, 60_000)
        })
        .await
        .unwrap();
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let mut worker = Reaped(
        std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args([
                "work", "dies", "--server", &s.base, "--", "sh", "-c", "exit 3",
            ])
            .stderr(std::fs::File::create(&log).unwrap())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let said = eventually(
        std::time::Duration::from_secs(15),
        "work says d1 died",
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            async move {
                text.contains("d1")
                    .then_some(text)
                    .filter(|t| t.contains("dead"))
            }
        },
    )
    .await;
    assert!(said.contains("delayq dead list dies"), "{said}");
    unsafe {
        libc::kill(worker.0.id() as i32, libc::SIGTERM);
    }
    assert!(worker.0.wait().unwrap().success());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_mistakes_get_messages_that_name_the_fix() {
    let redis = RedisServer::start();
    let s = TestServer::start(
        queue(&redis),
        delayq::http::ServerConfig {
            auth_token: Some(delayq::webhook::Secret("t0ken".into())),
            ..Default::default()
        },
    )
    .await;
    let b = s.base.as_str();
    // HOST:PORT is taken as http://HOST:PORT.
    let bare = b.trim_start_matches("http://");
    let (ok, _, err) = delayq_cli(bare, &["stats", "--token", "t0ken"]).await;
    assert!(ok, "{err}");
    // A wrong or missing token names the flag and the variable.
    for args in [&["stats", "--token", "wrong"][..], &["stats"][..]] {
        let (ok, _, err) = delayq_cli(b, args).await;
        assert!(!ok);
        assert!(
            err.contains("401") && err.contains("--token") && err.contains("DELAYQ_CLIENT_TOKEN"),
            "{err}"
        );
    }
    // `dead TOPIC` points at `dead list TOPIC`.
    let (ok, _, err) = delayq_cli(b, &["dead", "app-jobs", "--token", "t0ken"]).await;
    assert!(!ok && err.contains("delayq dead list app-jobs"), "{err}");
    // Pausing a topic the server has never held a job of says so.
    s.queue
        .push(&job("o1", "orders", 60_000, 60_000))
        .await
        .unwrap();
    let (ok, out, err) = delayq_cli(b, &["pause", "orderz", "--token", "t0ken"]).await;
    assert!(ok && out.contains("orderz: paused"), "{out}{err}");
    assert!(err.contains("no job of topic \"orderz\""), "{err}");
    let (ok, _, err) = delayq_cli(b, &["pause", "orders", "--token", "t0ken"]).await;
    assert!(ok && err.is_empty(), "{err}");
    s.stop().await;
}

/// `delayq stats` and `/v1/topics` list every topic delayq knows, jobs or
/// none (configured, webhook, paused, rate-limited), say which go to a
/// webhook (its host only), and count clients' waiting pops without
/// delayq's own webhook deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_lists_every_known_topic_marks_webhooks_and_counts_only_clients_pops() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("delayq.toml");
    std::fs::write(
        &config,
        r#"
[topics.hooked]
webhook = "http://hookuser:hookpass@127.0.0.1:9/deliver?token=urltoken"
secret = "signingkey"
[topics.pulled]
retry = ["1m"]
[topics.limited]
rate = { per_second = 5, burst = 5 }
"#,
    )
    .unwrap();
    let p = DelayqProcess::start(&redis, &["--config", config.to_str().unwrap()]);
    let (ok, _, err) = delayq_cli(&p.base, &["pause", "stopped"]).await;
    assert!(ok, "{err}");
    let get = || async {
        reqwest::get(format!("{}/v1/topics", p.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    // The webhook's consumer is waiting for a job: it is not a client's pop.
    let text = eventually(
        std::time::Duration::from_secs(20),
        "the webhook consumer waiting",
        || async {
            let text = get().await;
            let v: Value = serde_json::from_str(&text).unwrap();
            (v["webhook_pops"].as_u64() >= Some(1)).then_some(text)
        },
    )
    .await;
    let v: Value = serde_json::from_str(&text).unwrap();
    for t in ["hooked", "pulled", "limited", "stopped"] {
        assert!(v["topics"][t].is_object(), "{t} missing: {v}");
    }
    assert_eq!(v["webhooks"], serde_json::json!({"hooked": "127.0.0.1:9"}));
    assert_eq!(v["waiting_pops"], 0, "{v}");
    for secret in ["hookuser", "hookpass", "urltoken", "signingkey", "/deliver"] {
        assert!(!text.contains(secret), "{secret} shown: {text}");
    }

    let (ok, out, err) = delayq_cli(&p.base, &["stats"]).await;
    assert!(ok, "{err}");
    let row = |t: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(t))
            .unwrap_or_else(|| panic!("no row for {t}: {out}"))
            .to_owned()
    };
    assert!(row("hooked").contains("webhook to 127.0.0.1:9"), "{out}");
    for t in ["pulled", "limited", "stopped"] {
        assert!(!row(t).contains("webhook"), "{out}");
    }
    assert!(out.contains("waiting pops: 0"), "{out}");
    assert!(
        !out.contains("hookpass") && !out.contains("urltoken"),
        "{out}"
    );

    // /metrics counts them apart too.
    let metrics = reqwest::get(format!("{}/metrics", p.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let gauge = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse::<u64>().ok())
    };
    assert_eq!(gauge("delayq_waiting_pops"), Some(0), "{metrics}");
    assert!(gauge("delayq_webhook_pops") >= Some(1), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_backs_off_a_failing_command_when_the_job_has_no_retry_policy() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    s.queue.push(&job("s1", "sms", 0, 60_000)).await.unwrap();
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let script = format!("echo run >> {}; exit 3", runs.display());
    let mut worker = Reaped(
        Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args([
                "work", "sms", "--server", &s.base, "--", "sh", "-c", &script,
            ])
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let count = || {
        std::fs::read_to_string(&runs)
            .unwrap_or_default()
            .lines()
            .count()
    };
    // After the second failure the job waits about 5 s for its third run.
    let j = eventually(
        std::time::Duration::from_secs(20),
        "s1 waits after its second failed run",
        || async {
            let j = s.queue.get("s1").await.unwrap().unwrap();
            (j.state == JobState::Delayed && j.attempts == 2).then_some(j)
        },
    )
    .await;
    assert_eq!(count(), 2);
    let failed_at = j.history.last().unwrap().at_ms;
    assert!(j.due_ms - failed_at >= 5_000, "{:?}", j);
    // SAFETY: a plain kill(2) on our own child.
    unsafe {
        libc::kill(worker.0.id() as i32, libc::SIGTERM);
    }
    assert!(worker.0.wait().unwrap().success());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_unknown_outcome_is_reported_as_such_and_not_sent_again() {
    let redis = RedisServer::start();
    let proxy = SlowProxy::start(&redis, std::time::Duration::ZERO).await;
    let q = delayq::Queue::connect(delayq::Config {
        redis: delayq::Redis::Url(proxy.url()),
        redis_timeout: std::time::Duration::from_secs(1),
        ..delayq::Config::default()
    })
    .unwrap();
    let s = TestServer::start(q, Default::default()).await;
    let direct = queue(&redis);
    direct
        .push(&delayq::NewJob {
            tags: vec!["m:1".into()],
            ..job("u", "t", 3_600_000, 60_000)
        })
        .await
        .unwrap();
    // The server's connection is up: its first call is not the slow one.
    let (ok, _, err) = delayq_cli(&s.base, &["get", "u"]).await;
    assert!(ok, "{err}");
    let before = direct.get("u").await.unwrap().unwrap().due_ms;

    // Redis moves the job at once; the reply comes 3 s later, past the 1 s
    // the server waits.
    proxy.set_delay(std::time::Duration::from_secs(3));
    let base = s.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args([
                "tags",
                "reschedule",
                "m:1",
                "--shift",
                "1h",
                "--server",
                &base,
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    proxy.set_delay(std::time::Duration::ZERO);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("may or may not have been applied") && err.contains("not sent again"),
        "{err}"
    );
    // Moved once, not twice.
    let after = direct.get("u").await.unwrap().unwrap().due_ms;
    assert_eq!(after - before, 3_600_000);
    direct.close().await;
    s.stop().await;
}
