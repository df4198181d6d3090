//! `delayq batch`: a batch created, filled with `delayq push --batch`,
//! closed, read until it fired; cancelled; refusals.

use super::*;
use delayq::http::ServerConfig;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_made_from_the_command_line_fires_once_its_jobs_finish() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let b = s.base.as_str();

    let (ok, out, err) = delayq_cli(
        b,
        &[
            "batch",
            "create",
            "--id",
            "sale-7",
            "--callback-topic",
            "settle",
            "--callback-body",
            "merchant 7",
            "--json",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    // No jobs given: it stays open for `delayq push --batch`.
    assert_eq!(v["batch"]["state"], "open", "{out}");
    let callback_id = v["batch"]["callback_id"].as_str().unwrap().to_owned();
    for i in 1..=3 {
        let id = format!("order-{i}");
        let (ok, _, err) = delayq_cli(
            b,
            &["push", "--topic", "close", "--id", &id, "--batch", "sale-7"],
        )
        .await;
        assert!(ok, "{err}");
    }
    // A job's text names its batch, as its JSON does.
    let (ok, out, err) = delayq_cli(b, &["get", "order-1"]).await;
    assert!(ok, "{err}");
    assert!(
        out.lines().any(|l| l.trim_start() == "batch: sale-7"),
        "{out}"
    );
    let (ok, out, err) = delayq_cli(b, &["batch", "get", "sale-7"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("state: open"), "{out}");
    // The counts as a table: a header row, then the figures (3 jobs, 3
    // pending).
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("jobs"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["jobs", "pending", "finished", "dead", "deleted"],
            vec!["counts", "3", "3", "0", "0", "0"]
        ],
        "{out}"
    );
    let (ok, out, err) = delayq_cli(b, &["batch", "close", "sale-7"]).await;
    assert!(ok && out.contains("state: closed"), "{out}{err}");

    for _ in 0..3 {
        let (ok, out, err) = delayq_cli(b, &["pop", "close", "--wait", "30s", "--json"]).await;
        assert!(ok, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let job = &v["jobs"][0];
        let (id, token) = (job["id"].as_str().unwrap(), job["token"].as_str().unwrap());
        let (ok, _, err) = delayq_cli(b, &["finish", id, "--lease", token]).await;
        assert!(ok, "{err}");
    }
    let out = eventually(Duration::from_secs(30), "the batch fired", || async {
        let (ok, out, _) = delayq_cli(b, &["batch", "get", "sale-7"]).await;
        (ok && out.contains("state: fired")).then_some(out)
    })
    .await;
    assert!(
        out.contains(&callback_id) && out.contains("(settle)"),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("ended:")),
        "{out}"
    );
    let figures: Vec<&str> = out.lines().last().unwrap().split_whitespace().collect();
    assert_eq!(figures, ["counts", "3", "0", "3", "0", "0"], "{out}");
    let (ok, out, err) = delayq_cli(b, &["batch", "get", "sale-7", "--json"]).await;
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["finished"].as_u64()),
        (Some("fired"), Some(3))
    );
    // Its callback job carries the report.
    let cb = s.queue.get(&callback_id).await.unwrap().unwrap();
    assert_eq!(cb.topic, "settle");
    let report: Value = serde_json::from_str(&cb.body).unwrap();
    assert_eq!(
        (report["finished"].as_u64(), report["body"].as_str()),
        (Some(3), Some("merchant 7"))
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_from_a_jobs_file_closes_and_one_cancelled_deletes_its_jobs() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let b = s.base.as_str();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jobs.json");
    std::fs::write(
        &file,
        r#"[{"id": "r-1", "topic": "remind", "delay_ms": 3600000},
            {"id": "r-2", "topic": "remind", "delay_ms": 3600000}]"#,
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let (ok, out, err) = delayq_cli(
        b,
        &[
            "batch",
            "create",
            "--id",
            "nine",
            "--callback-topic",
            "report",
            "--on",
            "finished",
            "--jobs",
            path,
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("state: closed") && out.contains("on: finished"),
        "{out}"
    );
    assert!(out.contains("jobs accepted: 2, refused: 0"), "{out}");
    // A job refused: the batch stays open, and the command fails (a script
    // must not take it for done).
    let dup = dir.path().join("dup.json");
    std::fs::write(
        &dup,
        r#"[{"id": "d-1", "topic": "remind"}, {"id": "d-1", "topic": "remind"}]"#,
    )
    .unwrap();
    let (ok, out, err) = delayq_cli(
        b,
        &[
            "batch",
            "create",
            "--id",
            "dup",
            "--callback-topic",
            "report",
            "--jobs",
            dup.to_str().unwrap(),
        ],
    )
    .await;
    assert!(!ok, "{out}");
    assert!(
        err.contains("1 of the batch's jobs were refused; batch dup stays open"),
        "{err}"
    );
    assert!(out.contains("refused: 1"), "{out}");
    assert_eq!(
        s.queue.batch("dup").await.unwrap().unwrap().state,
        delayq::BatchState::Open
    );
    let (ok, out, err) = delayq_cli(b, &["batch", "cancel", "nine"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("cancelled nine; jobs deleted: 2"), "{out}");
    assert!(s.queue.get("r-1").await.unwrap().is_none());
    // Its counts follow the deletions (each counted as its note reaches
    // the batch's home).
    let v = eventually(Duration::from_secs(30), "the deletions counted", || async {
        let (ok, out, _) = delayq_cli(b, &["batch", "get", "nine", "--json"]).await;
        let v: Value = serde_json::from_str(&out).ok()?;
        (ok && v["deleted"] == 2).then_some(v)
    })
    .await;
    assert_eq!(
        (v["pending"].as_u64(), v["state"].as_str()),
        (Some(0), Some("cancelled"))
    );
    // A cancelled batch refuses to close: the server's word, exit 1.
    let (ok, _, err) = delayq_cli(b, &["batch", "close", "nine"]).await;
    assert!(!ok && err.contains("409"), "{err}");
    // A file that is not a JSON array is named, and nothing is created.
    std::fs::write(&file, "{\"id\": \"r-3\"}").unwrap();
    let (ok, _, err) = delayq_cli(
        b,
        &[
            "batch",
            "create",
            "--id",
            "ten",
            "--callback-topic",
            "report",
            "--jobs",
            path,
        ],
    )
    .await;
    assert!(!ok && err.contains("not a JSON array of jobs"), "{err}");
    let (ok, _, _) = delayq_cli(b, &["batch", "get", "ten"]).await;
    assert!(!ok);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_commands_name_what_is_wrong_and_change_nothing() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let b = s.base.as_str();
    for cmd in ["get", "close", "cancel"] {
        let out = delayq_run(&["batch", cmd, "no-such", "--server", b], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(
            err.contains("404") && err.contains("no batch with id \"no-such\""),
            "{cmd}: {err}"
        );
    }
    // A push into no batch: refused, no job made.
    let (ok, _, err) = delayq_cli(
        b,
        &["push", "--topic", "t", "--id", "j1", "--batch", "no-such"],
    )
    .await;
    assert!(!ok, "{err}");
    assert!(s.queue.get("j1").await.unwrap().is_none());
    // Checked before anything is sent.
    let (ok, _, err) = delayq_cli(
        b,
        &["batch", "create", "--callback-topic", "t", "--on", "done"],
    )
    .await;
    assert!(!ok && err.contains("--on"), "{err}");
    let (ok, _, err) = delayq_cli(b, &["batch", "create", "--callback-topic", "t", "--open"]).await;
    assert!(!ok && err.contains("--jobs"), "{err}");
    // A bad id: the server's reason.
    let long = "b".repeat(201);
    let (ok, _, err) = delayq_cli(
        b,
        &["batch", "create", "--id", &long, "--callback-topic", "t"],
    )
    .await;
    assert!(!ok && err.contains("201 bytes"), "{err}");
    s.stop().await;
}

/// An ended batch is kept for the result retention: the flag's help says
/// so, where an operator looks for it.
#[test]
fn the_result_retention_help_says_it_keeps_an_ended_batch_readable() {
    let out = delayq_run(&["serve", "--help"], &[]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let from = help.find("--result-retention").expect("the flag listed");
    let to = from + help[from..].find("[env: ").expect("its variable");
    let text = help[from..to]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains("a batch that fired or was cancelled stays readable"),
        "{text}"
    );
}
