//! Webhook settings: every instance knows every webhook topic, a topic
//! without a secret is warned about, settings that could not work are
//! refused at start.

use super::*;

/// Which topics are delivered by webhook is read from Redis (the running
/// instances' heartbeats), not from the asked instance's own flags:
/// `/v1/topics` and `delayq stats` say the same on an instance that
/// delivers nothing as on the one that delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_names_the_webhook_topics_of_every_other() {
    let redis = RedisServer::start();
    let delivering = DelayqProcess::start(
        &redis,
        &[
            "--webhook",
            "remote=http://127.0.0.1:9/in?key=k",
            "--webhook-secret",
            "s3cret",
        ],
    );
    let other = DelayqProcess::start(&redis, &[]);
    for base in [&delivering.base, &other.base] {
        let what = format!("the webhook topic at {base}");
        let by = eventually(Duration::from_secs(20), &what, || async {
            let (_, v) = get_json(base, "/v1/topics").await;
            v["webhooks"]["remote"].as_str().map(str::to_owned)
        })
        .await;
        assert_eq!(by, "127.0.0.1:9", "at {base}");
        let (ok, out, err) = delayq_cli(base, &["stats"]).await;
        assert!(ok, "{err}");
        let row = out.lines().find(|l| l.starts_with("remote")).unwrap_or("");
        assert!(row.contains("webhook to 127.0.0.1:9"), "at {base}: {out}");
    }
    // Stopped cleanly, its heartbeat is gone: nobody delivers the topic.
    delivering.terminate();
    let (_, v) = get_json(&other.base, "/v1/topics").await;
    assert_eq!(v["webhooks"].get("remote"), None, "{v}");
    drop(other);
}

/// A webhook topic without any secret is delivered, and delayq warns at
/// start: its receiver cannot tell delayq's requests from anyone's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_topic_without_a_secret_is_warned_about_at_start() {
    let redis = RedisServer::start();
    let (p, logs) = DelayqProcess::spawn_logged(&[
        "--redis",
        &redis.url(),
        "--webhook",
        "unsigned=http://127.0.0.1:9/in",
    ]);
    let line = log_line(&logs, "no secret", Duration::from_secs(20));
    assert!(line.contains("WARN") && line.contains("unsigned"), "{line}");
    p.terminate();
}

/// `delayq serve ARGS` (on a Redis that cannot be reached, so nothing
/// starts whatever the check says) with `env` set: its stderr.
fn serve_refuses(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--redis",
            "redis://127.0.0.1:1/",
        ])
        .args(args)
        .env_remove("DELAYQ_WEBHOOK_SECRET")
        .envs(env.iter().copied())
        .env("DELAYQ_LOG", "warn")
        .output()
        .unwrap();
    assert!(!out.status.success(), "serve {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Webhook settings that could not work are refused at start, naming the
/// setting, its value and the limit: a timeout the lease cannot outlast
/// (every delivery failed before a request was sent, and the jobs died),
/// an empty secret (requests signed with an empty key).
#[test]
fn webhook_settings_that_could_not_work_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("[topics.hook]\nwebhook = \"http://127.0.0.1:9/in\"\n{text}\n"),
        )
        .unwrap();
        path.to_str().unwrap().to_owned()
    };
    let long = file("long.toml", "timeout = \"8d\"\nsecret = \"s\"");
    let e = serve_refuses(&["--config", &long], &[]);
    assert!(
        e.contains("[topics.hook]") && e.contains("timeout 8d") && e.contains("at most"),
        "{e}"
    );
    let from_env = file("env.toml", "secret_env = \"HOOK_SECRET_UNDER_TEST\"");
    let e = serve_refuses(&["--config", &from_env], &[("HOOK_SECRET_UNDER_TEST", "")]);
    assert!(
        e.contains("HOOK_SECRET_UNDER_TEST") && e.contains("empty"),
        "{e}"
    );
    let written = file("written.toml", "secret = \"\"");
    let e = serve_refuses(&["--config", &written], &[]);
    assert!(
        e.contains("[topics.hook]") && e.contains("secret is empty"),
        "{e}"
    );
    let e = serve_refuses(
        &[
            "--webhook",
            "hook=http://127.0.0.1:9/in",
            "--webhook-secret",
            "",
        ],
        &[],
    );
    assert!(e.contains("--webhook-secret") && e.contains("empty"), "{e}");
    let e = serve_refuses(
        &["--webhook", "hook=http://127.0.0.1:9/in"],
        &[("DELAYQ_WEBHOOK_SECRET", "")],
    );
    assert!(
        e.contains("DELAYQ_WEBHOOK_SECRET") && e.contains("empty"),
        "{e}"
    );
}
