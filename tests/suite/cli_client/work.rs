//! `delayq work`: a command per job, its lease kept, stopped gracefully.

use super::*;

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

/// SIGTERM: `work` says what it does (no more jobs; the running command
/// finishes and its job is settled), not the server's stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayq_work_says_what_it_does_when_stopped() {
    use std::os::unix::process::CommandExt;
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stderr");
    let mut worker = Reaped(
        std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["work", "quiet", "--server", &s.base, "--", "true"])
            .stderr(std::fs::File::create(&log).unwrap())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    eventually(std::time::Duration::from_secs(15), "it starts", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("taking jobs of quiet").then_some(())
    })
    .await;
    unsafe {
        libc::kill(worker.0.id() as i32, libc::SIGTERM);
    }
    let status = exits(&mut worker, std::time::Duration::from_secs(15)).await;
    assert!(status.success(), "{status}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("answering waiting pops"), "{text}");
    assert!(
        text.contains("taking no more jobs; running commands finish and their jobs are settled"),
        "{text}"
    );
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
async fn delayq_work_stops_the_command_of_a_job_cancelled_while_it_runs() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    // A 1.5 s ttr: `work` touches the lease every second or so.
    s.queue.push(&job("c1", "long", 0, 1_500)).await.unwrap();
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let script = format!("echo $$ >> {}; exec sleep 120", pids.display());
    let mut worker = Reaped(
        Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args([
                "work", "long", "--server", &s.base, "--", "sh", "-c", &script,
            ])
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let runs = || std::fs::read_to_string(&pids).unwrap_or_default();
    let pid: i32 = eventually(
        std::time::Duration::from_secs(30),
        "the command runs",
        || async { runs().lines().next()?.trim().parse().ok() },
    )
    .await;
    assert_eq!(
        s.queue.cancel("c1").await.unwrap(),
        Some(JobState::Reserved)
    );
    // Its next touch hears it: the command is stopped.
    eventually(
        std::time::Duration::from_secs(30),
        "the command stopped",
        || async { (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(()) },
    )
    .await;
    // SAFETY: a plain kill(2) on our own child.
    unsafe {
        libc::kill(worker.0.id() as i32, libc::SIGTERM);
    }
    assert!(worker.0.wait().unwrap().success());
    let mut err = String::new();
    std::io::Read::read_to_string(worker.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("c1 was cancelled while it ran"), "{err}");
    assert!(
        !err.contains("finished") && !err.contains("failed"),
        "{err}"
    );
    // Run once, never again.
    assert_eq!(runs().lines().count(), 1);
    assert!(s
        .queue
        .get("c1")
        .await
        .unwrap()
        .is_none_or(|j| j.cancelled_at_ms.is_some()));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_reports_progress_and_log_lines_with_delayq_progress_and_log() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    s.queue
        .push(&delayq::NewJob {
            retry: Some(RetryPolicy {
                intervals: vec![],
                max_attempts: Some(1),
            }),
            ..job("r1", "reports", 0, 60_000)
        })
        .await
        .unwrap();
    // It fails after reporting, so the job (dead) keeps what it reported.
    let bin = env!("CARGO_BIN_EXE_delayq");
    let script = format!(
        "'{bin}' progress \"$DELAYQ_JOB_ID\" --lease \"$DELAYQ_JOB_LEASE\" '{{\"done\":1}}' \
         && '{bin}' log \"$DELAYQ_JOB_ID\" --lease \"$DELAYQ_JOB_LEASE\" 'from the command' \
         && exit 3"
    );
    let _worker = work(&s.base, "reports", 1, &script);
    let dead = eventually(std::time::Duration::from_secs(20), "r1 is dead", || async {
        let j = s.queue.get("r1").await.unwrap()?;
        (j.state == delayq::JobState::Dead).then_some(j)
    })
    .await;
    assert_eq!(dead.progress, Some(serde_json::json!({"done": 1})));
    let logs = s.queue.logs("r1").await.unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0].line, "from the command");
    let (ok, out, err) = delayq_cli(&s.base, &["get", "r1"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("progress: {\"done\":1}"), "{out}");
    assert!(out.contains("from the command"), "{out}");
    s.stop().await;
}

const LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Sends SIGCONT to a stopped process when dropped, also when the test
/// fails.
struct Stopped(u32);
impl Stopped {
    fn new(pid: u32) -> Stopped {
        // SAFETY: a plain kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
        Stopped(pid)
    }
}
impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe {
            libc::kill(self.0 as i32, libc::SIGCONT);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_work_holding_a_groups_only_slot_loses_it_and_its_late_finish_changes_nothing() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let settings = delayq::GroupSettings {
        concurrency: Some(1),
        paused: false,
        rate: None,
    };
    s.queue.set_group("t", "g", settings).await.unwrap();
    let again = RetryPolicy {
        intervals: vec![std::time::Duration::from_millis(100)],
        max_attempts: Some(5),
    };
    for id in ["held", "next"] {
        s.queue
            .push(&delayq::NewJob {
                group: Some("g".into()),
                retry: Some(again.clone()),
                ..job(id, "t", 0, 1_500)
            })
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let (seen, go) = (dir.path().join("seen"), dir.path().join("go"));
    let line = |who: &str| {
        format!(
            "echo \"{who} $DELAYQ_JOB_ID $DELAYQ_JOB_ATTEMPT\" >> {}",
            seen.display()
        )
    };
    let read = || std::fs::read_to_string(&seen).unwrap_or_default();
    // A holds the group's only slot until told to go on.
    let a_script = format!(
        "{}; while [ ! -e {} ]; do sleep 0.05; done",
        line("A"),
        go.display()
    );
    let mut a = work(&s.base, "t", 1, &a_script);
    eventually(LIMIT, "A runs a job", || async {
        read().contains("A held 1").then_some(())
    })
    .await;
    let stopped = Stopped::new(a.0.id());

    // Its lease ends (no touches): B gets both jobs, one at a time.
    let b = work(&s.base, "t", 2, &line("B"));
    eventually(LIMIT, "B finished both jobs", || async {
        let c = s
            .queue
            .topics()
            .await
            .unwrap()
            .topics
            .get("t")
            .copied()
            .unwrap_or_default();
        (c.delayed + c.ready + c.reserved == 0).then_some(())
    })
    .await;
    let g = s.queue.group("t", "g").await.unwrap();
    assert_eq!((g.ready, g.reserved), (0, 0));

    // A goes on: its command ends, its finish (stale) is refused.
    std::fs::write(&go, "").unwrap();
    drop(stopped);
    // SAFETY: a signal to our own child.
    unsafe {
        libc::kill(a.0.id() as i32, libc::SIGTERM);
    }
    exits(&mut a, LIMIT).await;
    let mut lines: Vec<String> = read().lines().map(String::from).collect();
    lines.sort();
    assert_eq!(lines, ["A held 1", "B held 2", "B next 1"]);
    let c = s
        .queue
        .topics()
        .await
        .unwrap()
        .topics
        .get("t")
        .copied()
        .unwrap_or_default();
    assert_eq!((c.ready, c.reserved, c.dead), (0, 0, 0));
    let used: Option<String> = redis.cmd(&["HGET", "{dq}:grp:t\ng", "r"]).await;
    assert_eq!(used, None, "no slot counted");
    assert!(s.queue.get("held").await.unwrap().is_none());
    // The limit still holds: one job of the group out at a time.
    drop(b);
    for id in ["n1", "n2"] {
        s.queue
            .push(&delayq::NewJob {
                group: Some("g".into()),
                ..job(id, "t", 0, 60_000)
            })
            .await
            .unwrap();
    }
    let first = eventually(LIMIT, "one of the group", || async {
        s.queue
            .try_pop(&topics(&["t"]), 2)
            .await
            .unwrap()
            .into_iter()
            .next()
    })
    .await;
    assert!(first.id.starts_with('n'));
    assert!(s
        .queue
        .try_pop(&topics(&["t"]), 2)
        .await
        .unwrap()
        .is_empty());
    s.stop().await;
}
