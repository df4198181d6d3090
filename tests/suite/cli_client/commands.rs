//! The client subcommands: push, get, delete, stats, dead, pop and their
//! messages.

use super::*;
use delayq::http::ServerConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_subcommands_manage_jobs_and_dead_letters() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = s.base.as_str();

    let (ok, out, err) = delayq_cli(
        b,
        &[
            "push", "--topic", "remind", "--id", "m1", "--body", "renew", "--delay", "15d",
            "--retry", "1m,5m", "--tag", "renewals", "--tag", "monthly", "--group", "acct-7",
            "--json",
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
    // Its tags and group, as its JSON has them.
    for line in ["tags: renewals, monthly", "group: acct-7"] {
        assert!(out.lines().any(|l| l.trim_start() == line), "{line}: {out}");
    }
    // A time is labelled as one (its raw ms are in --json).
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("due: ")) && !out.contains("due_at_ms"),
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
    // Its last attempt failed from the command line: the time it prints
    // is when it died, not a due time.
    let (ok, out, err) = delayq_cli(
        b,
        &[
            "nack",
            "d1",
            "--lease",
            &d.token,
            "--error",
            "endpoint down",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        out.starts_with("d1: dead (since ") && !out.contains("due at"),
        "{out}"
    );
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
async fn a_change_of_unknown_outcome_is_reported_as_such_and_not_sent_again() {
    let redis = RedisServer::start();
    let proxy = SlowProxy::start(&redis, std::time::Duration::ZERO).await;
    let q = delayq::Queue::connect(delayq::Config {
        redis: delayq::Redis::Url(proxy.url()),
        // Time enough for a busy machine to send the change before its
        // deadline.
        redis_timeout: std::time::Duration::from_secs(5),
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

    // Redis moves the job at once; its reply is held until the server has
    // given up on it.
    proxy.hold(true);
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
    proxy.hold(false);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_token_has_its_own_variable_and_leaves_servers_alone() {
    let redis = RedisServer::start();
    let url = redis.url();
    // A shell where the client's token is exported starts a server: it is
    // open, as its own flags say.
    let open = DelayqProcess::spawn_from(
        std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["serve", "--listen", "127.0.0.1:0", "--redis", &url])
            .env("DELAYQ_CLIENT_TOKEN", "for-the-cli")
            .env("DELAYQ_LOG", "warn"),
    );
    let r = reqwest::get(format!("{}/v1/topics", open.base))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    open.terminate();
    // A server that wants a token; the client sends the one from its own
    // variable.
    let locked = DelayqProcess::start(&redis, &["--auth-token", "s3cret"]);
    let base = locked.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        delayq_run(
            &["stats", "--server", &base],
            &[("DELAYQ_CLIENT_TOKEN", "s3cret")],
        )
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    locked.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_output_is_aligned_and_errors_are_one_line() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let base = s.base.clone();
    let run = move |args: Vec<String>, env: Vec<(&'static str, &'static str)>| {
        let base = base.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
                a.extend(["--server", &base]);
                delayq_run(&a, &env)
            })
            .await
            .unwrap()
        }
    };
    let out = run(vec!["stats".into()], vec![]).await;
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("next due at: nothing scheduled"), "{text}");
    q.push(&job(
        "a",
        "a-topic-name-longer-than-twenty-four-bytes",
        60_000,
        1000,
    ))
    .await
    .unwrap();
    q.push(&job("b", "b", 0, 1000)).await.unwrap();
    let out = run(vec!["stats".into()], vec![]).await;
    let text = String::from_utf8(out.stdout).unwrap();
    let table: Vec<&str> = text.lines().take(3).collect();
    assert!(table.iter().all(|l| l.len() == table[0].len()), "{text}");
    assert!(!text.contains("- ms"), "{text}");
    // An error: one line, no backtrace, whatever RUST_BACKTRACE says.
    let out = run(
        vec!["get".into(), "missing".into()],
        vec![("RUST_BACKTRACE", "1")],
    )
    .await;
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("404"), "{err}");
    s.stop().await;
    q.close().await;
}
