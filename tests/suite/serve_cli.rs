//! `delayq serve` as users run it: graceful stop on SIGTERM, the private
//! redis-server when no Redis is named, and the message when redis-server is
//! missing; only server flags, sensible values.

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

/// The Debian package recommends redis-server or valkey-server: a machine
/// with only valkey-server on its PATH gets a private server too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_server_is_started_from_valkey_server_when_redis_server_is_absent() {
    let bin = tempfile::tempdir().unwrap();
    let server = crate::redis_server::server_binary();
    let server = which(&server);
    std::os::unix::fs::symlink(&server, bin.path().join("valkey-server")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let delayq = DelayqProcess::spawn_from(
        Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .env("PATH", bin.path())
            .env_remove("DELAYQ_REDIS")
            .env("DELAYQ_LOG", "warn")
            .stderr(std::process::Stdio::inherit()),
    );
    let push = r#"{"topic":"t","id":"v","delay":3600,"ttr":5,"body":"b"}"#;
    assert_eq!(post(&delayq.base, "/push", push).await["code"], 0);
    delayq.terminate();
    assert!(data.path().join("redis.conf").exists());
}

/// A program's path: as given when it has a slash, else found on PATH.
fn which(program: &str) -> std::path::PathBuf {
    if program.contains('/') {
        return program.into();
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} is not on PATH"))
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

/// `delayq serve ARGS` run to its end (it is expected to fail at start).
fn serve_fails(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("DELAYQ_LOG", "warn")
        .output()
        .unwrap();
    assert!(!out.status.success(), "serve {args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_redis_that_cannot_be_reached_at_start_is_named_with_its_cause() {
    let refused = serve_fails(&["--redis", "redis://127.0.0.1:1/"]);
    assert!(
        refused.contains("cannot reach redis") && refused.contains("refused"),
        "{refused}"
    );
    assert!(
        refused.contains("hint: is redis-server running"),
        "{refused}"
    );
    let unknown = serve_fails(&["--redis", "redis://no-such-host.invalid:6379/"]);
    assert!(unknown.contains("check the host name"), "{unknown}");
    let redis = RedisServer::start_with_password("right", &[]);
    let url = format!("redis+unix://{}?pass=wrong", redis.socket().display());
    let wrong = serve_fails(&["--redis", &url]);
    assert!(wrong.contains("user and password"), "{wrong}");
    assert!(!wrong.contains("=wrong"), "the password was shown: {wrong}");
}

#[test]
fn an_evicting_redis_stops_serve_at_start_unless_allowed() {
    let redis = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let err = serve_fails(&["--redis", &redis.url()]);
    assert!(
        err.contains("allkeys-lru") && err.contains("--allow-evicting-redis"),
        "{err}"
    );
    let p = DelayqProcess::start(&redis, &["--allow-evicting-redis"]);
    p.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_settings_are_fixed_or_warned_about() {
    // No persistence, no expired events: delayq turns events on, warns
    // about persistence.
    let redis = RedisServer::start_with(&[
        "--appendonly",
        "no",
        "--save",
        "",
        "--notify-keyspace-events",
        "",
    ]);
    let (p, logs) = DelayqProcess::spawn_logged(&["--redis", &redis.url()]);
    log_line(&logs, "no persistence", Duration::from_secs(10));
    let flags: Vec<String> = redis
        .cmd(&["CONFIG", "GET", "notify-keyspace-events"])
        .await;
    assert!(
        flags[1].contains('E') && flags[1].contains('x'),
        "{flags:?}"
    );
    p.terminate();
    // A Redis that refuses CONFIG: delayq says only the sweep fires jobs.
    let locked = RedisServer::start_with(&[
        "--notify-keyspace-events",
        "",
        "--rename-command",
        "CONFIG",
        "",
    ]);
    let (p, logs) = DelayqProcess::spawn_logged(&["--redis", &locked.url()]);
    log_line(&logs, "only the sweep fires jobs", Duration::from_secs(10));
    p.terminate();
}

fn answers(socket: &std::path::Path) -> bool {
    redis::Client::open(format!("redis+unix://{}", socket.display()))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(500)))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .is_ok()
}

#[test]
fn the_private_redis_server_stops_when_serve_fails_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--listen", &addr, "--data-dir"])
        .arg(&data)
        .env_remove("DELAYQ_REDIS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot listen"));
    assert!(
        !answers(&data.join("redis.sock")),
        "redis-server left running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_private_redis_server_is_stopped_with_delayq() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let socket = dir.path().join("redis.sock");
    // delayq dies; its redis-server lives on...
    DelayqProcess::spawn(&["--data-dir", data]).kill9();
    assert!(answers(&socket));
    // ...and the next delayq adopts it, and stops it when it stops.
    let p = DelayqProcess::spawn(&["--data-dir", data]);
    p.terminate();
    assert!(
        !answers(&socket),
        "the adopted redis-server outlived delayq"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_redis_server_that_dies_is_started_again_on_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let (p, logs) = DelayqProcess::spawn_logged(&["--data-dir", data]);
    let push = r#"{"topic":"t","id":"survivor","delay":3600,"ttr":5,"body":"b"}"#;
    assert_eq!(post(&p.base, "/push", push).await["code"], 0);
    let client = redis::Client::open(format!(
        "redis+unix://{}",
        dir.path().join("redis.sock").display()
    ))
    .unwrap();
    let mut c = client.get_connection().unwrap();
    let info: String = redis::cmd("INFO").arg("server").query(&mut c).unwrap();
    let pid: i32 = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: a plain kill(2) of the redis-server this test's delayq started.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    log_line(&logs, "restarted", Duration::from_secs(20));
    let got = eventually(Duration::from_secs(20), "the job back", || async {
        let got = post(&p.base, "/get", r#"{"id":"survivor"}"#).await;
        (got["data"]["body"] == "b").then_some(got)
    })
    .await;
    assert_eq!(got["code"], 0);
    p.terminate();
}

/// Operators read the version where they look: `/healthz` and
/// `delayq_build_info` in `/metrics` say what `delayq --version` prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_metrics_carry_the_version_delayq_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .arg("--version")
        .output()
        .unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    let version = printed.trim().strip_prefix("delayq ").unwrap().to_owned();
    let redis = RedisServer::start();
    let p = DelayqProcess::start(&redis, &[]);
    let health: serde_json::Value = reqwest::get(format!("{}/healthz", p.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["version"], version.as_str(), "{health}");
    let metrics = reqwest::get(format!("{}/metrics", p.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = format!("delayq_build_info{{version=\"{version}\"}} 1");
    assert!(
        metrics.lines().any(|l| l == line),
        "no {line:?} in /metrics"
    );
    assert!(metrics.contains("# TYPE delayq_build_info gauge"));
    p.terminate();
}

/// `serve --listen` beyond loopback without `--auth-token`: anyone who
/// reaches the port can push, pop and delete; delayq says so at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listening_beyond_loopback_without_a_token_warns_at_start() {
    let redis = RedisServer::start();
    let spawn = |listen: &str, token: Option<&str>| {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_delayq"));
        cmd.args(["serve", "--listen", listen, "--redis", &redis.url()])
            .env("DELAYQ_LOG", "info")
            .env_remove("DELAYQ_AUTH_TOKEN")
            .stderr(Stdio::piped());
        if let Some(t) = token {
            cmd.args(["--auth-token", t]);
        }
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.starts_with("delayq listening on "), "{line:?}");
        // SAFETY: a plain kill(2) on our own child.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let log: Vec<String> = std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect();
        child.wait().unwrap();
        log.join("\n")
    };
    let open = spawn("0.0.0.0:0", None);
    assert!(
        open.contains("WARN") && open.contains("without --auth-token"),
        "{open}"
    );
    let guarded = spawn("0.0.0.0:0", Some("s3cret"));
    assert!(!guarded.contains("without --auth-token"), "{guarded}");
    let local = spawn("127.0.0.1:0", None);
    assert!(!local.contains("without --auth-token"), "{local}");
}

#[test]
fn a_redis_url_that_is_no_redis_url_or_no_redis_is_named_as_such() {
    // --port is no flag of serve: --listen is meant.
    let port = serve_fails(&["--port", "9000"]);
    assert!(port.contains("--listen 127.0.0.1:9000"), "{port}");
    // No scheme.
    let bare = serve_fails(&["--redis", "localhost:6379"]);
    assert!(bare.contains("redis://localhost:6379"), "{bare}");
    // A database the server does not have.
    let redis = RedisServer::start();
    let url = format!("redis+unix://{}?db=99", redis.socket().display());
    let db = serve_fails(&["--redis", &url]);
    assert!(db.contains("database") && db.contains("99"), "{db}");
    assert!(!db.contains("running"), "{db}");
    // An HTTP port.
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = http.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut c in http.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let not_redis = serve_fails(&["--redis", &format!("redis://127.0.0.1:{port}/")]);
    assert!(
        not_redis.contains("does not speak the Redis protocol"),
        "{not_redis}"
    );
}

/// Kills the child on drop (a failed assertion leaves nothing running).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `delayq serve 2>&1 | head -1`, the head gone: logging to a closed stderr
/// (EPIPE on every write) must not stop SIGTERM from stopping delayq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_serve_whose_stderr_reader_has_exited() {
    use std::io::BufRead;
    use std::process::Stdio;
    let redis = RedisServer::start();
    let mut child = Reaped(
        Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["serve", "--listen", "127.0.0.1:0", "--redis", &redis.url()])
            .env("DELAYQ_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The reader of stderr (`| head -1`) takes the first line and exits:
    // its end of the pipe closes.
    let stderr = child.0.stderr.take().unwrap();
    let head = std::thread::spawn(move || {
        let lines = std::io::BufReader::new(stderr).lines();
        lines.map_while(Result::ok).take(1).count()
    });
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = format!(
        "http://{}",
        line.trim().strip_prefix("delayq listening on ").unwrap()
    );
    assert!(
        head.join().unwrap() > 0,
        "no log line before the reader left"
    );
    // Requests log (to the closed stderr) and are still answered.
    let push = r#"{"topic":"t","id":"kept","delay":3600,"ttr":5}"#;
    assert_eq!(post(&base, "/push", push).await["code"], 0);
    // SAFETY: a plain kill(2) on our own child.
    unsafe {
        libc::kill(child.0.id() as i32, libc::SIGTERM);
    }
    let status = eventually(Duration::from_secs(30), "delayq to exit", || {
        let s = child.0.try_wait().unwrap();
        async move { s }
    })
    .await;
    assert!(status.success(), "delayq exited with {status}");
    let exists: i64 = redis.cmd(&["EXISTS", "{dq}:j:kept"]).await;
    assert_eq!(exists, 1);
}

/// The graceful stop waits for deliveries in flight (up to their timeout);
/// a second SIGTERM ends it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_stops_serve_at_once() {
    use std::io::BufRead;
    use std::process::Stdio;
    let redis = RedisServer::start();
    // A receiver that takes the connection and never answers.
    let hook = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("delayq.toml");
    std::fs::write(
        &config,
        format!(
            "[topics.slow]\nwebhook = \"http://{}/\"\ntimeout = \"300s\"\n",
            hook.local_addr().unwrap()
        ),
    )
    .unwrap();
    let mut child = Reaped(
        Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["serve", "--listen", "127.0.0.1:0", "--redis", &redis.url()])
            .arg("--config")
            .arg(&config)
            .env("DELAYQ_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let (tx, logs) = std::sync::mpsc::channel();
    let stderr = child.0.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = format!(
        "http://{}",
        line.trim().strip_prefix("delayq listening on ").unwrap()
    );
    let push = r#"{"topic":"slow","id":"held","delay":1,"ttr":600}"#;
    assert_eq!(post(&base, "/push", push).await["code"], 0);
    // The delivery is in flight: the receiver holds its connection.
    let (_held, _) = hook.accept().unwrap();
    let pid = child.0.id() as i32;
    // SAFETY: plain kill(2)s on our own child.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    log_line(&logs, "stopping", Duration::from_secs(20));
    unsafe { libc::kill(pid, libc::SIGTERM) };
    eventually(Duration::from_secs(60), "delayq to exit", || {
        let s = child.0.try_wait().unwrap();
        async move { s }
    })
    .await;
}

/// Two `./dev serve` in one checkout share `.delayq`: the second is refused
/// (it used to adopt the first's redis-server and stop it on exit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_the_same_data_directory_is_refused_and_the_first_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let socket = dir.path().join("redis.sock");
    let first = DelayqProcess::spawn(&["--data-dir", data]);
    // Its stderr goes to a file: read once it has exited (a second serve
    // that does not exit fails the test instead of hanging it).
    let mut log = tempfile::tempfile().unwrap();
    let mut second = Reaped(
        Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", data])
            .env_remove("DELAYQ_REDIS")
            .env("DELAYQ_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(log.try_clone().unwrap())
            .spawn()
            .unwrap(),
    );
    let status = eventually(
        Duration::from_secs(30),
        "the second serve to give up",
        || {
            let s = second.0.try_wait().unwrap();
            async move { s }
        },
    )
    .await;
    let mut err = String::new();
    {
        use std::io::{Read, Seek};
        log.rewind().unwrap();
        log.read_to_string(&mut err).unwrap();
    }
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("another delayq serve")
            && err.contains(&format!("pid {}", first.pid()))
            && err.contains("--data-dir"),
        "{err}"
    );
    assert!(
        answers(&socket),
        "the second serve stopped the first's redis-server"
    );
    let push = r#"{"topic":"t","id":"still","delay":3600,"ttr":5}"#;
    assert_eq!(post(&first.base, "/push", push).await["code"], 0);
    first.terminate();
    assert!(!answers(&socket));
}

#[test]
fn every_serve_flag_has_an_environment_variable_listed_in_the_packaged_env_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    // Each flag's block: its line (indented by 6 at most) and the
    // description under it.
    let mut blocks: Vec<(String, String)> = Vec::new();
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        if indent > 0 && indent <= 6 && t.starts_with('-') {
            let flag = t
                .split_whitespace()
                .find(|w| w.starts_with("--"))
                .unwrap()
                .trim_end_matches(',')
                .to_owned();
            blocks.push((flag, String::new()));
        } else if let Some((_, text)) = blocks.last_mut() {
            text.push_str(line);
        }
    }
    let env_file = include_str!("../../packaging/delayq.env");
    let mut missing = Vec::new();
    let mut unlisted = Vec::new();
    for (flag, text) in &blocks {
        if flag == "--help" || flag == "--version" {
            continue;
        }
        let Some(at) = text.find("[env: ") else {
            missing.push(flag.clone());
            continue;
        };
        let var: String = text[at + 6..]
            .chars()
            .take_while(|c| *c != '=' && *c != ']')
            .collect();
        let listed = env_file.lines().any(|l| {
            l.trim_start_matches('#')
                .trim()
                .starts_with(&format!("{var}="))
        });
        if !listed {
            unlisted.push(var);
        }
    }
    assert!(blocks.len() > 30, "{help}");
    assert!(missing.is_empty(), "flags without a variable: {missing:?}");
    assert!(
        unlisted.is_empty(),
        "variables not in delayq.env: {unlisted:?}"
    );

    // systemd keeps restarting a delayq that cannot reach Redis yet.
    let unit = include_str!("../../packaging/debian/delayq.service");
    let unit_section = unit.split("[Service]").next().unwrap();
    assert!(
        unit_section
            .lines()
            .any(|l| l.trim() == "StartLimitIntervalSec=0"),
        "{unit_section}"
    );
}

/// The start banner says where the dashboard is (a wildcard address shown
/// as loopback, which a browser can open), and nothing with `--ui off`.
#[test]
fn the_banner_names_the_dashboard() {
    use std::io::Read;
    use std::process::Stdio;
    let redis = RedisServer::start();
    let banner = |extra: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["serve", "--redis", &redis.url()])
            .args(extra)
            .env("DELAYQ_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut text = String::new();
        let mut buf = [0u8; 256];
        // Up to the first line's end, then stopped: the rest to EOF.
        while !text.contains('\n') {
            let n = out.read(&mut buf).unwrap();
            assert!(n > 0, "no banner: {text:?}");
            text.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        // SAFETY: a plain kill(2) on our own child.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        out.read_to_string(&mut text).unwrap();
        assert!(child.wait().unwrap().success());
        text
    };
    let text = banner(&["--listen", "0.0.0.0:0"]);
    let port = text
        .lines()
        .next()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        text.lines().nth(1),
        Some(format!("dashboard: http://127.0.0.1:{port}/ui/").as_str()),
        "{text}"
    );
    let text = banner(&["--listen", "127.0.0.1:0", "--ui", "off"]);
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn serve_has_only_server_flags_and_refuses_nonsense_values() {
    let help = String::from_utf8(delayq_run(&["serve", "--help"], &[]).stdout).unwrap();
    for client_flag in ["--token", "--server", "--json"] {
        assert!(
            !help.contains(client_flag),
            "serve --help shows {client_flag}"
        );
    }
    let push_help = String::from_utf8(delayq_run(&["push", "--help"], &[]).stdout).unwrap();
    assert!(push_help.contains("--token") && push_help.contains("DELAYQ_CLIENT_TOKEN"));
    let out = delayq_run(&["serve", "--token", "abc"], &[]);
    assert!(!out.status.success());
    for (flag, value) in [
        ("--max-connections", "0"),
        ("--redis-timeout", "0s"),
        ("--pop-timeout", "0s"),
        ("--dead-max-age", "0s"),
    ] {
        let out = delayq_run(
            &["serve", flag, value, "--redis", "redis://127.0.0.1:1/"],
            &[],
        );
        assert!(!out.status.success(), "{flag} {value} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{err}");
    }
}
