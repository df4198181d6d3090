//! `delayq flow`: a flow pushed from a file (or stdin), read until its
//! parent was released, the parent's children shown by `delayq get`;
//! cancelled; refusals; its help.

use super::*;
use delayq::http::ServerConfig;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

/// `delayq ARGS --server BASE` with `input` on stdin: success, stdout,
/// stderr.
async fn with_stdin(base: &str, args: &[&str], input: &str) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_delayq"));
    cmd.args(args)
        .args(["--server", base])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let input = input.to_owned();
    let out = tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_pushed_from_the_command_line_releases_its_parent_with_its_children() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let b = s.base.as_str();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flow.json");
    std::fs::write(
        &file,
        r#"{"id": "close-1", "topic": "close", "body": "order 1",
            "children": [{"id": "r-1", "topic": "refund"}, {"id": "r-2", "topic": "refund"}]}"#,
    )
    .unwrap();
    let (ok, out, err) = delayq_cli(b, &["flow", "push", file.to_str().unwrap()]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "close-1\n");
    // From stdin, the reply as JSON: every job's id.
    let (ok, out, err) = with_stdin(
        b,
        &["flow", "push", "-", "--json"],
        r#"{"id": "digest-1", "topic": "digest", "on_child_dead": "ignore",
            "children": [{"id": "m-1", "topic": "member", "delay_ms": 3600000}]}"#,
    )
    .await;
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"id": "digest-1", "jobs": ["digest-1", "m-1"]})
    );

    let (ok, out, err) = delayq_cli(b, &["flow", "get", "close-1"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("state: waiting") && out.contains("topic: close"),
        "{out}"
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("children"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["children", "pending", "finished", "dead", "deleted"],
            vec!["counts", "2", "2", "0", "0", "0"]
        ],
        "{out}"
    );
    for _ in 0..2 {
        let d = s
            .queue
            .pop(&topics(&["refund"]), Duration::from_secs(10))
            .await
            .unwrap()
            .expect("a refund to run");
        s.queue
            .finish_with_result(&d.id, &d.token, &serde_json::json!({"ok": d.id}))
            .await
            .unwrap();
    }
    let out = eventually(Duration::from_secs(30), "the parent released", || async {
        let (ok, out, _) = delayq_cli(b, &["flow", "get", "close-1"]).await;
        (ok && out.contains("state: released")).then_some(out)
    })
    .await;
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("ended:")),
        "{out}"
    );
    // The parent as a job: its children, one a line.
    let (ok, out, err) = delayq_cli(b, &["get", "close-1"]).await;
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| *l == "children: 2")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        lines[at + 1..at + 3],
        ["r-1 finished", "r-2 finished"],
        "{out}"
    );
    let (ok, out, _) = delayq_cli(b, &["get", "close-1", "--json"]).await;
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["children"]["r-2"]["result"]["ok"], "r-2", "{out}");
    // Released: cancelling the flow is refused (cancel the job instead).
    let (ok, _, err) = delayq_cli(b, &["flow", "cancel", "close-1"]).await;
    assert!(
        !ok && err.contains("409") && err.contains("cancel the job"),
        "{err}"
    );
    let (ok, out, err) = delayq_cli(b, &["flow", "cancel", "digest-1"]).await;
    assert!(ok, "{err}");
    assert_eq!(out, "cancelled flow digest-1; jobs deleted: 1\n");
    assert!(s.queue.get("m-1").await.unwrap().is_none());
    let (ok, out, _) = delayq_cli(b, &["flow", "get", "digest-1", "--json"]).await;
    assert!(ok);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["on_child_dead"].as_str()),
        (Some("cancelled"), Some("ignore"))
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_commands_name_what_is_wrong_and_change_nothing() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let b = s.base.as_str();
    for cmd in ["get", "cancel"] {
        let out = delayq_run(&["flow", cmd, "no-such", "--server", b], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(
            err.contains("404") && err.contains("no flow with parent id \"no-such\""),
            "{cmd}: {err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flow.json");
    let path = file.to_str().unwrap();
    // Read here: no file, not JSON, not an object; nothing sent.
    let (ok, _, err) = delayq_cli(b, &["flow", "push", path]).await;
    assert!(
        !ok && err.contains(&format!("reading the flow from {path}")),
        "{err}"
    );
    for text in ["{\"id\": ", "[{\"id\": \"p\", \"topic\": \"t\"}]"] {
        std::fs::write(&file, text).unwrap();
        let (ok, _, err) = delayq_cli(b, &["flow", "push", path]).await;
        assert!(
            !ok && err.contains(&format!("{path}: not a JSON object")),
            "{text}: {err}"
        );
    }
    // The server's reasons, naming the job.
    for (text, said) in [
        (r#"{"id": "p", "topic": "t"}"#, "422"),
        (
            r#"{"id": "p", "topic": "t", "children": [{"id": "c", "topic": "t", "batch": "b"}]}"#,
            "flow job \"c\": a job of a flow takes no batch",
        ),
        (
            r#"{"id": "p", "topic": "t", "children": [{"id": "c", "topic": "t", "colour": 1}]}"#,
            "unknown field `colour`",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let (ok, _, err) = delayq_cli(b, &["flow", "push", path]).await;
        assert!(!ok && err.contains(said), "{text}: {err}");
    }
    assert!(s.queue.get("c").await.unwrap().is_none());
    assert!(s.queue.flow("p").await.unwrap().is_none());
    s.stop().await;
}

/// The help names the three commands, and what a flow file holds.
#[test]
fn the_flow_help_says_what_a_flow_file_holds() {
    let out = delayq_run(&["flow", "--help"], &[]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for cmd in ["push", "get", "cancel"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(cmd)),
            "{cmd}: {help}"
        );
    }
    let out = delayq_run(&["flow", "push", "--help"], &[]);
    let help = String::from_utf8(out.stdout).unwrap();
    let text = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        "(`-` for stdin)",
        "\"children\"",
        "\"on_child_dead\"",
        "--json",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
}
