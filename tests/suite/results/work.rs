//! `delayq work`'s results: a command's standard output
//! (`--result-stdout`) or what it writes to the file `DELAYQ_RESULT_FILE`
//! names (`--result-file`), on the same terms; the files one per job,
//! removed however the command ended.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use delayq::http::ServerConfig;
use delayq::{JobState, Queue};
use serde_json::{json, Value};

use crate::common::*;

/// A child process group killed when dropped, also when a test fails.
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        // SAFETY: signals to our own child's process group.
        unsafe {
            libc::kill(-(self.0.id() as i32), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

/// `delayq work TOPIC FLAG... --server BASE -- sh -c SCRIPT` with TMPDIR
/// set to `tmp` (where result files are made) and its stderr written to
/// `stderr`, in a process group of its own.
fn work(
    base: &str,
    topic: &str,
    flags: &[&str],
    script: &str,
    tmp: &Path,
    stderr: &Path,
) -> KilledOnDrop {
    KilledOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["work", topic])
            .args(flags)
            .args(["--server", base, "--", "sh", "-c", script])
            .env("TMPDIR", tmp)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(stderr).unwrap())
            .process_group(0)
            .spawn()
            .unwrap(),
    )
}

/// Waits until none of `topic`'s jobs is delayed, ready or reserved.
async fn settled(q: &Queue, topic: &str) {
    eventually(Duration::from_secs(90), "every job settled", || async {
        let t = q.topics().await.ok()?.topics;
        let c = t.get(topic).copied().unwrap_or_default();
        (c.delayed + c.ready + c.reserved == 0).then_some(())
    })
    .await;
}

/// JSON nested one level deeper than a result may be (64 levels).
fn too_deep() -> String {
    format!("{}{}", "[".repeat(65), "]".repeat(65))
}

/// The result `GET /v1/jobs/{id}` shows; None when the job is gone (a
/// finish without a result keeps nothing).
async fn read_result(base: &str, id: &str) -> Option<Value> {
    let (status, v) = get_json(base, &format!("/v1/jobs/{id}")).await;
    match status {
        404 => None,
        200 => Some(v["result"].clone()),
        _ => panic!("{id}: {status} {v}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_result_stdout_a_commands_output_is_its_jobs_result() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), ServerConfig::default()).await;
    for (id, body) in [
        ("r1", "json"),
        ("r2", "text"),
        ("r3", "huge"),
        ("r4", "none"),
        ("r5", "deep"),
    ] {
        s.queue
            .push(&delayq::NewJob {
                body: body.into(),
                ..job(id, "close", 0, 60_000)
            })
            .await
            .unwrap();
    }
    let script = format!(
        "case $(cat) in \
         json) echo '{{\"refunded\": true, \"id\": \"r-991\"}}';; \
         text) printf 'refunded, id r-991\\n';; \
         huge) head -c 70000 /dev/zero | tr '\\0' x;; \
         deep) echo '{}';; \
         esac",
        too_deep()
    );
    let dir = tempfile::tempdir().unwrap();
    let err = dir.path().join("stderr");
    let _worker = work(
        &s.base,
        "close",
        &["--result-stdout"],
        &script,
        dir.path(),
        &err,
    );
    settled(&s.queue, "close").await;
    assert_eq!(
        read_result(&s.base, "r1").await,
        Some(json!({"refunded": true, "id": "r-991"}))
    );
    assert_eq!(
        read_result(&s.base, "r2").await,
        Some(json!("refunded, id r-991"))
    );
    // Over 64 KiB, nested deeper than a result may be (the server would
    // refuse the finish, and the job stay leased), no output at all:
    // finished without a result, and `work` says why.
    for id in ["r3", "r4", "r5"] {
        assert_eq!(read_result(&s.base, id).await, None, "{id}");
    }
    let said = std::fs::read_to_string(&err).unwrap();
    assert!(
        said.contains("r3: its output is over 65536 bytes"),
        "{said}"
    );
    assert!(said.contains("r5: its output nests 65 levels"), "{said}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_result_file_each_job_has_a_file_of_its_own_read_as_its_result_then_removed() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), ServerConfig::default()).await;
    for (id, body) in [
        ("p1", "pair"),
        ("p2", "pair"),
        ("f-text", "text"),
        ("f-huge", "huge"),
        ("f-deep", "deep"),
        ("f-empty", "empty"),
        ("f-fifo", "fifo"),
        ("f-fail", "fail"),
    ] {
        s.queue
            .push(&delayq::NewJob {
                body: body.into(),
                retry: one_attempt(),
                ..job(id, "close", 0, 60_000)
            })
            .await
            .unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let m = marks.path().display();
    // The two "pair" jobs wait (bounded) for each other, so they run at
    // once, each writing its own result to its own file.
    let script = format!(
        "body=$(cat); F=\"$DELAYQ_RESULT_FILE\"; echo \"$DELAYQ_JOB_ID $F\" >> {m}/seen; \
         case $body in \
         pair) touch {m}/started-$DELAYQ_JOB_ID; i=0; \
               while [ $(ls {m} | grep -c '^started-') -lt 2 ] && [ $i -lt 600 ]; \
               do sleep 0.1; i=$((i+1)); done; \
               printf '{{\"job\": \"%s\", \"together\": %s}}' \"$DELAYQ_JOB_ID\" \
                 $(ls {m} | grep -c '^started-') > \"$F\";; \
         text) echo 'refunded, id r-991' > \"$F\";; \
         huge) head -c 70000 /dev/zero | tr '\\0' x > \"$F\";; \
         deep) echo '{deep}' > \"$F\";; \
         empty) ;; \
         fifo) rm \"$F\"; mkfifo \"$F\";; \
         fail) echo '{{\"never\": true}}' > \"$F\"; echo 'card declined' >&2; exit 1;; \
         esac",
        deep = too_deep()
    );
    let err = marks.path().join("stderr");
    let flags = ["--result-file", "--concurrency", "2"];
    let _worker = work(&s.base, "close", &flags, &script, tmp.path(), &err);
    settled(&s.queue, "close").await;
    for id in ["p1", "p2"] {
        assert_eq!(
            read_result(&s.base, id).await,
            Some(json!({"job": id, "together": 2}))
        );
    }
    // Other text is a JSON string, as from standard output.
    assert_eq!(
        read_result(&s.base, "f-text").await,
        Some(json!("refunded, id r-991"))
    );
    // Over 64 KiB, too deep, empty, a pipe put in its place: finished
    // without a result.
    for id in ["f-huge", "f-deep", "f-empty", "f-fifo"] {
        assert_eq!(read_result(&s.base, id).await, None, "{id}");
    }
    // A command that fails: nacked (dead, its one attempt used), what it
    // wrote is no result.
    let (status, v) = get_json(&s.base, "/v1/jobs/f-fail").await;
    assert_eq!((status, v["state"].as_str()), (200, Some("dead")), "{v}");
    assert!(v["result"].is_null(), "{v}");
    let said = std::fs::read_to_string(&err).unwrap();
    for why in [
        "f-huge: its result file is over 65536 bytes",
        "f-deep: its result file nests 65 levels",
        "not a regular file; the job finishes without a result",
    ] {
        assert!(said.contains(why), "{why}: {said}");
    }
    // One file per job, each named only to its own command, under TMPDIR;
    // none left, whichever way the command ended.
    let seen = std::fs::read_to_string(marks.path().join("seen")).unwrap();
    let files: std::collections::HashSet<&str> = seen
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(_, f)| f)
        .collect();
    assert_eq!((seen.lines().count(), files.len()), (8, 8), "{seen}");
    assert!(
        files.iter().all(|f| Path::new(f).starts_with(tmp.path())),
        "{seen}"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
    assert_eq!(
        s.queue.get("f-fail").await.unwrap().map(|j| j.state),
        Some(JobState::Dead)
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_file_goes_when_its_job_is_cancelled_while_the_command_runs() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), ServerConfig::default()).await;
    // A 1.5 s ttr: `work` touches the lease every second or so and hears
    // the cancel then.
    s.queue.push(&job("c1", "long", 0, 1_500)).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let path = marks.path().join("path");
    let script = format!(
        "echo '{{\"half\": true}}' > \"$DELAYQ_RESULT_FILE\"; \
         echo \"$DELAYQ_RESULT_FILE\" > {}; exec sleep 120",
        path.display()
    );
    let err = marks.path().join("stderr");
    let _worker = work(
        &s.base,
        "long",
        &["--result-file"],
        &script,
        tmp.path(),
        &err,
    );
    let file = eventually(Duration::from_secs(30), "the command runs", || async {
        let p = std::fs::read_to_string(&path).ok()?;
        let p = p.trim().to_owned();
        (!p.is_empty()).then_some(p)
    })
    .await;
    assert!(Path::new(&file).exists(), "{file}");
    assert_eq!(
        s.queue.cancel("c1").await.unwrap(),
        Some(JobState::Reserved)
    );
    eventually(
        Duration::from_secs(60),
        "the result file removed",
        || async { (!Path::new(&file).exists()).then_some(()) },
    )
    .await;
    eventually(Duration::from_secs(30), "work says so", || async {
        let said = std::fs::read_to_string(&err).unwrap();
        said.contains("c1 was cancelled while it ran").then_some(())
    })
    .await;
    s.stop().await;
}

#[test]
fn result_from_stdout_and_from_a_file_at_once_or_with_no_room_for_files_is_refused_at_start() {
    let out = delayq_run(
        &[
            "work",
            "t",
            "--result-stdout",
            "--result-file",
            "--",
            "true",
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("'--result-stdout' cannot be used with '--result-file'"),
        "{err}"
    );
    // No server is reached: the temporary directory is checked first.
    let out = delayq_run(
        &[
            "work",
            "t",
            "--result-file",
            "--server",
            "127.0.0.1:1",
            "--",
            "true",
        ],
        &[("TMPDIR", "/nonexistent/delayq-test")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("cannot create a result file in /nonexistent/delayq-test"),
        "{err}"
    );
}
