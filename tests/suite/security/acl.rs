//! ACL users: the README's least-privilege line runs a job's whole life,
//! and a refused command names what the user needs.

use std::time::Duration;

use crate::common::*;
use delayq::{Config, Queue};

/// The README's least-privilege ACL line, with `password` in place of
/// PASSWORD: the words after `ACL`.
pub(crate) fn readme_acl_line(password: &str) -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("ACL SETUSER delayq "))
        .expect("README.md gives the ACL line");
    line.split_whitespace()
        .skip(1)
        .map(|w| match w {
            ">PASSWORD" => format!(">{password}"),
            w => w.to_owned(),
        })
        .collect()
}

/// Runs `setuser` (`ACL SETUSER ...`) with `+client|setinfo` added, as
/// README says for servers that know CLIENT SETINFO; without it where the
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
            // Redis 6.2 knows no FCALL nor FUNCTION: README's words for it.
            let readme =
                std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
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
    // The README's addition for servers that know CLIENT SETINFO.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
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
