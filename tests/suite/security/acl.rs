//! ACL users: the least-privilege line of docs/acl.md runs a job's whole life,
//! and a refused command names what the user needs.

use std::time::Duration;

use crate::common::*;
use delayq::{Config, Queue};

/// The least-privilege ACL line of docs/acl.md, with `password` in place of
/// PASSWORD: the words after `ACL`.
pub(crate) fn readme_acl_line(password: &str) -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/acl.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("ACL SETUSER delayq "))
        .expect("docs/acl.md gives the ACL line");
    line.split_whitespace()
        .skip(1)
        .map(|w| match w {
            ">PASSWORD" => format!(">{password}"),
            w => w.to_owned(),
        })
        .collect()
}

/// Runs `setuser` (`ACL SETUSER ...`) with `+client|setinfo` added, as
/// docs/acl.md says for servers that know CLIENT SETINFO; without it where the
/// server refuses the line with it (Redis 7.0).
pub(crate) async fn set_acl_user(redis: &RedisServer, setuser: &[String]) {
    let mut with_setinfo = setuser.to_vec();
    with_setinfo.push("+client|setinfo".into());
    let args: Vec<&str> = with_setinfo.iter().map(String::as_str).collect();
    let r: redis::RedisResult<String> = redis::cmd(args[0])
        .arg(&args[1..])
        .query_async(&mut redis.conn().await)
        .await;
    if r.is_err() {
        let args: Vec<&str> = setuser.iter().map(String::as_str).collect();
        let r: redis::RedisResult<String> = redis::cmd(args[0])
            .arg(&args[1..])
            .query_async(&mut redis.conn().await)
            .await;
        if r.is_err() {
            // Redis 6.2 knows no FCALL nor FUNCTION: docs/acl.md's words for it.
            let readme =
                std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/acl.md"))
                    .unwrap();
            assert!(readme.contains(
                "On Redis 6.2 write `+evalsha +script|load` in place of \
                 `+fcall +function|load +function|list`"
            ));
            let mut args: Vec<&str> = with_setinfo
                .iter()
                .map(String::as_str)
                .filter(|a| !["+fcall", "+function|load", "+function|list"].contains(a))
                .collect();
            args.extend(["+evalsha", "+script|load"]);
            assert!(readme.contains("and `reset resetchannels`"));
            let at = args.iter().position(|a| *a == "reset").unwrap();
            args.insert(at + 1, "resetchannels");
            let ok: String = redis.cmd(&args).await;
            assert_eq!(ok, "OK");
        }
    }
}

/// What the ACL refused, as "<reason> <what>" (`command function|list`,
/// `key {dq}:x`).
async fn acl_refusals(redis: &RedisServer) -> Vec<String> {
    let log: Vec<std::collections::HashMap<String, redis::Value>> =
        redis.cmd(&["ACL", "LOG"]).await;
    let text = |v: Option<&redis::Value>| match v {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    };
    log.iter()
        .map(|e| format!("{} {}", text(e.get("reason")), text(e.get("object"))))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_acl_user_runs_a_jobs_whole_life_with_nothing_refused() {
    let redis = RedisServer::start_with_password("adm1n", &[]);
    let mut setuser = vec!["ACL".to_owned()];
    setuser.extend(readme_acl_line("s3cret"));
    // docs/acl.md's addition for servers that know CLIENT SETINFO.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/acl.md")).unwrap();
    assert!(readme.contains("Valkey add `+client|setinfo`"));
    set_acl_user(&redis, &setuser).await;
    let url = redis.url_as("delayq", "s3cret");
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(url.clone()),
        events: true,
        keep_finished: Some(Duration::from_secs(60)),
        ..Config::default()
    })
    .unwrap();
    eventually(Duration::from_secs(10), "the subscriber", || async {
        q.subscriber_connected().then_some(())
    })
    .await;
    // An idle leader holds its term up to the earliest due time (a minute
    // with nothing due); a push due sooner shortens it (PEXPIREAT). Wait
    // for the long term, so that the push below takes that path.
    eventually(
        Duration::from_secs(60),
        "an idle leader's long term",
        || async {
            let left: i64 = redis.cmd(&["PTTL", "{dq}:dispatcher"]).await;
            (left > 5_000).then_some(())
        },
    )
    .await;
    // Fired (by an expired event or the sweep, whichever comes first),
    // popped, finished.
    q.push(&job("a", "acl", 300, 60_000)).await.unwrap();
    let d = q
        .pop(&topics(&["acl"]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("fired");
    q.finish(&d.id, &d.token).await.unwrap();
    // Nacked to a retry, then dead, then requeued.
    q.push(&delayq::NewJob {
        retry: Some(delayq::RetryPolicy {
            intervals: vec![Duration::ZERO],
            max_attempts: Some(2),
        }),
        ..job("b", "acl", 0, 60_000)
    })
    .await
    .unwrap();
    for expected in [delayq::JobState::Ready, delayq::JobState::Dead] {
        let d = q
            .pop(&topics(&["acl"]), Duration::from_secs(10))
            .await
            .unwrap()
            .expect("ready");
        let n = q.nack(&d.id, &d.token, None, "boom").await.unwrap();
        assert_eq!(n.state, expected);
    }
    assert_eq!(q.requeue_dead("acl", &["b".to_owned()]).await.unwrap(), 1);
    // Tagged, then cancelled by tag.
    q.push(&delayq::NewJob {
        tags: vec!["promo".into()],
        ..job("c", "acl", 3_600_000, 60_000)
    })
    .await
    .unwrap();
    assert_eq!(q.cancel_tag_all("promo").await.unwrap().changed, 1);
    // A recurring schedule ticks.
    q.put_recurring(
        "beat",
        &delayq::Recurring {
            topic: "beat".into(),
            cron: "* * * * * *".into(),
            ..delayq::Recurring::default()
        },
    )
    .await
    .unwrap();
    let tick = q
        .pop(&topics(&["beat"]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a tick");
    q.finish(&tick.id, &tick.token).await.unwrap();
    let read = q.events_after("0", &[], 100).await.unwrap();
    assert!(!read.events.is_empty(), "events recorded");
    q.topics().await.unwrap();
    // The server, under the same user.
    let s = DelayqProcess::spawn(&["--redis", &url, "--events", "--keep-finished", "1m"]);
    let pushed = post(
        &s.base,
        "/push",
        r#"{"topic":"srv","id":"s1","delay":1,"ttr":30}"#,
    )
    .await;
    assert_eq!(pushed["code"], 0, "{pushed}");
    let popped = eventually(Duration::from_secs(10), "s1 popped", || async {
        let v = post(&s.base, "/pop", r#"{"topic":"srv"}"#).await;
        (!v["data"].is_null()).then_some(v)
    })
    .await;
    assert_eq!(popped["data"]["id"], "s1", "{popped}");
    for path in [
        "/readyz",
        "/metrics",
        "/v1/topics",
        "/v1/stats/throughput",
        "/v1/instances",
    ] {
        let resp = reqwest::get(format!("{}{path}", s.base)).await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    s.terminate();
    q.close().await;
    assert_eq!(acl_refusals(&redis).await, Vec::<String>::new());
}

/// A user whose ACL lacks what delayq needs gets an error that says what
/// to add, for a call a script makes and for a plain one, and the push is
/// refused whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_command_names_what_the_acl_user_needs() {
    let redis = RedisServer::start_with_password("adm1n", &[]);
    let mut setuser = vec!["ACL".to_owned()];
    setuser.extend(
        readme_acl_line("s3cret")
            .into_iter()
            .filter(|w| w != "+@hash"),
    );
    set_acl_user(&redis, &setuser).await;
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(redis.url_as("delayq", "s3cret")),
        ..Config::default()
    })
    .unwrap();
    // A script (the push) runs HSET: refused inside it.
    let err = q.push(&job("a", "acl", 60_000, 60_000)).await.unwrap_err();
    assert!(matches!(err, delayq::Error::Refused { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("+@hash") && text.contains("Least privilege"),
        "{text}"
    );
    // A plain call (reading a job: HGETALL) names its own category.
    let err = q.get("a").await.unwrap_err();
    assert!(err.to_string().contains("add +@hash"), "{err}");
    // Nothing was written.
    let keys: Vec<String> = redis.cmd(&["KEYS", "*:j:*"]).await;
    assert!(keys.is_empty(), "{keys:?}");
    q.close().await;
}

/// An ACL changed under a running server to refuse both FCALL and EVALSHA
/// (Redis 6.2 has no FCALL to take away): a push fails naming the server
/// and both refusals, `/readyz` turns false with the reason, and both come
/// back once the ACL does. In CONFORMANCE by its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_acl_user_without_fcall_or_evalsha_is_named_and_not_ready() {
    let redis = RedisServer::start_with_password("adm1n", &[]);
    let mut setuser = vec!["ACL".to_owned()];
    setuser.extend(readme_acl_line("s3cret"));
    set_acl_user(&redis, &setuser).await;
    let info: String = redis.cmd(&["INFO", "server"]).await;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim_end().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
    let engine = match field("valkey_version") {
        Some(v) => format!("Valkey {v}"),
        None => format!("Redis {}", field("redis_version").unwrap()),
    };
    let url = redis.url_as("delayq", "s3cret");
    let s = DelayqProcess::spawn(&["--redis", &url]);
    let readyz = || async {
        let resp = reqwest::get(format!("{}/readyz", s.base)).await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json::<serde_json::Value>().await.unwrap())
    };
    let push = |id: &'static str| {
        let base = s.base.clone();
        async move {
            let body = format!(r#"{{"topic":"acl","id":"{id}","delay":3600,"ttr":30}}"#);
            post(&base, "/push", &body).await
        }
    };
    assert_eq!(push("a").await["code"], 0);
    eventually(Duration::from_secs(10), "ready", || async {
        (readyz().await.0 == 200).then_some(())
    })
    .await;

    // Both taken away (6.2 knows no fcall to name).
    let taken: redis::RedisResult<String> = redis::cmd("ACL")
        .arg(&["SETUSER", "delayq", "-fcall", "-evalsha"])
        .query_async(&mut redis.conn().await)
        .await;
    let given_back = if taken.is_ok() { "+fcall" } else { "+evalsha" };
    if taken.is_err() {
        let ok: String = redis.cmd(&["ACL", "SETUSER", "delayq", "-evalsha"]).await;
        assert_eq!(ok, "OK");
    }
    let refused = push("b").await;
    assert_eq!(refused["code"], 1, "{refused}");
    let text = refused["message"].as_str().unwrap().to_owned();
    for part in [
        engine.as_str(),
        "'evalsha'",
        "+evalsha +script|load",
        "+fcall",
    ] {
        assert!(text.contains(part), "{part} not in: {text}");
    }
    let (status, body) = readyz().await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["scripts"], false, "{body}");
    assert_eq!(body["redis"], true, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&engine) && error.contains("FCALL") && error.contains("EVALSHA"),
        "{body}"
    );

    // Given back: the next push runs, and readiness follows.
    let ok: String = redis.cmd(&["ACL", "SETUSER", "delayq", given_back]).await;
    assert_eq!(ok, "OK");
    assert_eq!(push("c").await["code"], 0);
    let (status, body) = readyz().await;
    assert_eq!(
        (status, &body["scripts"]),
        (200, &serde_json::json!(true)),
        "{body}"
    );
    s.terminate();
}

/// `ACL SETUSER delayq ...` from docs/acl.md's line without the words `taken`.
async fn readme_user_without(redis: &RedisServer, taken: &[&str]) {
    let mut setuser = vec!["ACL".to_owned()];
    setuser.extend(
        readme_acl_line("s3cret")
            .into_iter()
            .filter(|w| !taken.contains(&w.as_str())),
    );
    set_acl_user(redis, &setuser).await;
}

/// `delayq serve ARGS`'s exit and stderr; a serve still running after
/// 60 s (it started) is stopped and fails the test.
fn serve_exit(args: &[&str]) -> (bool, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("DELAYQ_LOG", "warn")
        .env_remove("DELAYQ_AUTH_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve started (still running after 60 s) where it should have refused");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.success(), stderr)
}

/// docs/acl.md's ACL line less a command delayq needs: `serve` does not start,
/// and its error names the one thing to add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_to_start_naming_what_its_acl_user_lacks() {
    let redis = RedisServer::start_with_password("adm1n", &[]);
    let url = redis.url_as("delayq", "s3cret");
    for (taken, named, flags) in [
        (&["+del"][..], "+del", &[][..]),
        (&["+@pubsub"][..], "+@pubsub", &[][..]),
        (&["+pexpireat"][..], "+pexpireat", &[][..]),
        // WAIT is needed only for replica acks.
        (&["+wait"][..], "+wait", &["--replica-acks", "1"][..]),
    ] {
        redis.cmd::<String>(&["ACL", "DELUSER", "delayq"]).await;
        readme_user_without(&redis, taken).await;
        let mut args = vec!["--redis", url.as_str()];
        args.extend_from_slice(flags);
        let (ok, stderr) = serve_exit(&args);
        assert!(!ok, "{stderr}");
        let fix = stderr
            .lines()
            .find(|l| l.contains("ACL SETUSER"))
            .unwrap_or_else(|| panic!("no ACL SETUSER line for {named}: {stderr}"));
        assert!(fix.contains(named), "{named} not in: {fix}");
        assert!(!fix.contains("+@keyspace"), "{fix}");
    }
}

/// docs/acl.md's ACL line less CONFIG GET and SET (optional, docs/acl.md says):
/// serve starts, and warns that persistence went unchecked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_warns_that_config_refused_leaves_persistence_unchecked() {
    let redis = RedisServer::start_with_password("adm1n", &[]);
    let url = redis.url_as("delayq", "s3cret");
    readme_user_without(&redis, &["+config|get", "+config|set"]).await;
    let (s, logs) = DelayqProcess::spawn_logged_at(&["--redis", &url], "warn");
    let line = log_line(&logs, "persistence", Duration::from_secs(30));
    assert!(
        line.contains("WARN") && line.contains("unchecked"),
        "{line}"
    );
    s.terminate();
}

/// The job ids that a queue holds in neither a schedule nor a ready list
/// nor a lease: stranded hashes.
async fn stranded(redis: &RedisServer, ids: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids {
        let hash: i64 = redis.cmd(&["EXISTS", &format!("{{dq}}:j:{id}")]).await;
        let scheduled: Option<f64> = redis.cmd(&["ZSCORE", "{dq}:schedule", id]).await;
        let topic_scheduled: Option<f64> = redis.cmd(&["ZSCORE", "{dq}:s:strand", id]).await;
        let scheduled = scheduled.or(topic_scheduled);
        let ready: Vec<String> = redis.cmd(&["LRANGE", "{dq}:ready:strand", "0", "-1"]).await;
        if hash == 1 && scheduled.is_none() && !ready.contains(id) {
            out.push(id.clone());
        }
    }
    out
}

/// docs/acl.md's user loses DEL under a running queue while jobs fall due:
/// each call refused by the ACL changes nothing (none half done), so no
/// job is stranded out of every schedule; given back, every job is
/// delivered, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn del_taken_from_a_running_queue_strands_no_job() {
    let redis = RedisServer::start_with_password("adm1n", &[]);
    readme_user_without(&redis, &[]).await;
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(redis.url_as("delayq", "s3cret")),
        ..Config::default()
    })
    .unwrap();
    let ids: Vec<String> = (0..11).map(|i| format!("s{i}")).collect();
    let jobs: Vec<_> = (0..11)
        .map(|i| job(&ids[i], "strand", 1_000 + 100 * i as u64, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    let pushed_at = redis.time_ms().await;
    let ok: String = redis.cmd(&["ACL", "SETUSER", "delayq", "-del"]).await;
    assert_eq!(ok, "OK");
    // Every job falls due, and the sweep (and the expired events) try to
    // move each, refused, for a while.
    eventually(
        Duration::from_secs(30),
        "every job due, and 3 s more",
        || async { (redis.time_ms().await > pushed_at + 2_000 + 3_000).then_some(()) },
    )
    .await;
    let lost = stranded(&redis, &ids).await;
    assert!(lost.is_empty(), "stranded: {lost:?} of {}", ids.len());
    let ok: String = redis.cmd(&["ACL", "SETUSER", "delayq", "+del"]).await;
    assert_eq!(ok, "OK");
    let mut got = Vec::new();
    while got.len() < ids.len() {
        let d = q
            .pop(&topics(&["strand"]), Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("only {got:?} delivered"));
        q.finish(&d.id, &d.token).await.unwrap();
        got.push(d.id);
    }
    got.sort();
    got.dedup();
    assert_eq!(got.len(), ids.len(), "{got:?}");
    let more = q
        .pop(&topics(&["strand"]), Duration::from_secs(2))
        .await
        .unwrap();
    assert!(more.is_none(), "delivered again: {more:?}");
    q.close().await;
}

/// docs/acl.md's user loses +@pubsub under a running serve: a push is refused
/// (503 redis_refused, naming +@pubsub) and writes nothing, so the client
/// that repeats it once the ACL is given back gets its job once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_refused_for_pubsub_writes_nothing() {
    let redis = RedisServer::start_with_password("adm1n", &[]);
    readme_user_without(&redis, &[]).await;
    let url = redis.url_as("delayq", "s3cret");
    let s = DelayqProcess::spawn(&["--redis", &url]);
    let push = || {
        request_json(
            reqwest::Method::POST,
            format!("{}/v1/jobs", s.base),
            Some(serde_json::json!({"topic": "once", "id": "p1", "delay_ms": 0, "ttr_ms": 60_000})),
        )
    };
    let ok: String = redis.cmd(&["ACL", "SETUSER", "delayq", "-@pubsub"]).await;
    assert_eq!(ok, "OK");
    let (status, body) = push().await;
    assert_eq!(status, 503, "{body}");
    assert!(body.to_string().contains("redis_refused"), "{body}");
    assert!(body.to_string().contains("+@pubsub"), "{body}");
    let written: i64 = redis.cmd(&["EXISTS", "{dq}:j:p1"]).await;
    assert_eq!(written, 0, "the refused push wrote its job");
    let ok: String = redis.cmd(&["ACL", "SETUSER", "delayq", "+@pubsub"]).await;
    assert_eq!(ok, "OK");
    let (status, body) = push().await;
    assert_eq!(status, 201, "{body}");
    // Every copy there is, leased for a minute: one.
    let pop = |wait_ms: u64| {
        request_json(
            reqwest::Method::POST,
            format!("{}/v1/pop", s.base),
            Some(serde_json::json!({"topics": ["once"], "max": 10, "wait_ms": wait_ms})),
        )
    };
    let (status, popped) = pop(10_000).await;
    assert_eq!(status, 200, "{popped}");
    assert_eq!(popped["jobs"].as_array().map(Vec::len), Some(1), "{popped}");
    assert_eq!(popped["jobs"][0]["id"], "p1", "{popped}");
    let (_, again) = pop(2_000).await;
    assert_eq!(
        again["jobs"].as_array().map(Vec::len),
        Some(0),
        "delivered twice: {again}"
    );
    s.terminate();
}

/// docs/acl.md's user without the expired events' channel: the subscription
/// is refused; serve says so once, as a warning naming the channel, and
/// keeps trying, further and further apart; /readyz stays ready (the
/// sweep fires jobs) with `expired_events: false` and the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_expired_events_subscription_is_warned_once_and_reported() {
    let redis = RedisServer::start_with_password("adm1n", &[]);
    readme_user_without(&redis, &["&__keyevent@*__:expired"]).await;
    let url = redis.url_as("delayq", "s3cret");
    let (s, logs) = DelayqProcess::spawn_logged_at(&["--redis", &url], "warn");
    let body = eventually(Duration::from_secs(30), "expired_events false", || async {
        let (status, body) = get_json(&s.base, "/readyz").await;
        (status == 200 && body["expired_events"] == false).then_some(body)
    })
    .await;
    let why = body["expired_events_error"].as_str().unwrap_or_default();
    assert!(why.contains("&__keyevent@*__:expired"), "{body}");
    // Refused again (its retries), warned once, and backed off: the ACL
    // LOG groups the repeats of a refusal in one entry and counts them.
    let refusals = || async {
        let log: Vec<std::collections::HashMap<String, redis::Value>> =
            redis.cmd(&["ACL", "LOG"]).await;
        log.iter()
            .filter(|e| format!("{:?}", e.get("object")).contains("keyevent"))
            .map(|e| match e.get("count") {
                Some(redis::Value::Int(n)) => *n,
                _ => 1,
            })
            .sum::<i64>()
    };
    let first = refusals().await;
    let from = redis.time_ms().await;
    eventually(Duration::from_secs(60), "a retry", || async {
        (refusals().await > first).then_some(())
    })
    .await;
    // Eight seconds on: retried every second, as before, that was 8 more.
    eventually(Duration::from_secs(60), "8 s of retries", || async {
        (redis.time_ms().await > from + 8_000).then_some(())
    })
    .await;
    let more = refusals().await - first;
    assert!((1..=5).contains(&more), "{more} refusals in 8 s");
    let warned: Vec<String> = logs
        .try_iter()
        .filter(|l| l.contains("expired events' channel"))
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("WARN") && warned[0].contains("&__keyevent@*__:expired"),
        "{warned:?}"
    );
    // Jobs are still fired, by the sweep.
    let pushed = post(
        &s.base,
        "/push",
        r#"{"topic":"sw","id":"w1","delay":1,"ttr":30}"#,
    )
    .await;
    assert_eq!(pushed["code"], 0, "{pushed}");
    let popped = eventually(Duration::from_secs(15), "w1 popped", || async {
        let v = post(&s.base, "/pop", r#"{"topic":"sw"}"#).await;
        (!v["data"].is_null()).then_some(v)
    })
    .await;
    assert_eq!(popped["data"]["id"], "w1");
    s.terminate();
}
