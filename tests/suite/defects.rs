//! Defects found by an adversarial trial, each reproduced for real against
//! redis-server: calls that time out and run later, far-off times, a full
//! Redis, an evicting Redis, names with spaces, empty lease tokens, a
//! stalled process, dead letters on quiet topics.

use std::time::Duration;

use crate::common::*;
use delayq::http::ServerConfig;
use delayq::testing::{fcall, push, remove, Keys};
use delayq::{Config, Error, JobState, NewJob, Queue, RetryPolicy};
use serde_json::{json, Value};

fn once() -> Option<RetryPolicy> {
    Some(RetryPolicy {
        intervals: vec![],
        max_attempts: Some(1),
    })
}

async fn http(method: reqwest::Method, url: String, body: Option<Value>) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, url);
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Waits until Redis answers this queue again (after a pause).
async fn answering(q: &Queue) {
    eventually(Duration::from_secs(10), "redis to answer", || async {
        q.topics().await.ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_reach_a_paused_redis_after_their_timeout_change_nothing() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        redis_timeout: Duration::from_millis(500),
        ..config(&redis)
    })
    .unwrap();
    for i in 0..10 {
        q.push(&NewJob {
            retry: once(),
            ..job(&format!("p{i}"), "paused", 0, 60_000)
        })
        .await
        .unwrap();
    }
    eventually(Duration::from_secs(5), "all ten ready", || async {
        let o = q.topics().await.ok()?;
        (o.topics.get("paused")?.ready == 10).then_some(())
    })
    .await;

    // Redis stops serving clients for 1.5 s; delayq gives up after 0.5 s.
    let _: String = redis.cmd(&["CLIENT", "PAUSE", "1500", "ALL"]).await;
    let e = q.try_pop(&topics(&["paused"]), 10).await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    // A producer told "unavailable" pushes again, with a new generated id.
    let e = q
        .push(&job("generated-1", "paused", 0, 60_000))
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    answering(&q).await;

    // The pop that Redis ran late leased nothing, so nothing is stranded
    // and no attempt was spent; the push that was refused wrote nothing.
    let o = q.topics().await.unwrap();
    let c = o.topics["paused"];
    assert_eq!((c.ready, c.reserved, c.dead), (10, 0, 0), "{c:?}");
    for i in 0..10 {
        let j = q.get(&format!("p{i}")).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempts), (JobState::Ready, 0));
    }
    assert!(q.get("generated-1").await.unwrap().is_none());
    // And every job is delivered now, first time.
    let got = q.try_pop(&topics(&["paused"]), 10).await.unwrap();
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|d| d.attempts == 1));
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pops_of_large_bodies_are_bounded_in_bytes_and_strand_nothing() {
    let redis = RedisServer::start_with(&["--appendonly", "no"]);
    let q = queue(&redis);
    let body = "x".repeat(1024 * 1024);
    let jobs: Vec<NewJob> = (0..200)
        .map(|i| NewJob {
            body: body.clone(),
            ..job(&format!("big{i}"), "big", 0, 60_000)
        })
        .collect();
    for chunk in jobs.chunks(20) {
        for r in q.push_many(chunk).await.unwrap() {
            r.unwrap();
        }
    }
    eventually(Duration::from_secs(20), "all ready", || async {
        let o = q.topics().await.ok()?;
        (o.topics.get("big")?.ready == 200).then_some(())
    })
    .await;
    let pops: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.try_pop(&topics(&["big"]), 100).await })
        })
        .collect();
    let mut delivered = 0;
    let budget = q.limits().max_pop_bytes;
    for p in pops {
        let got = p.await.unwrap().expect("a bounded pop answers in time");
        let bytes: usize = got.iter().map(|d| d.body.len()).sum();
        assert!(!got.is_empty());
        assert!(bytes < budget + body.len(), "{bytes} bytes in one pop");
        delivered += got.len() as u64;
    }
    let c = q.topics().await.unwrap().topics["big"];
    assert_eq!(c.reserved, delivered, "every lease went to a caller");
    assert_eq!(c.ready, 200 - delivered);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_past_year_9999_are_refused_before_anything_is_written() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let far = 100_000_000_000_000_000; // 1e17 ms
    let e = q
        .push(&NewJob {
            due_at_ms: Some(far),
            ..job("far", "far", 0, 1000)
        })
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Invalid(ref m) if m.contains("year 9999")),
        "{e}"
    );

    q.push(&job("near", "far", 0, 60_000)).await.unwrap();
    let d = q
        .pop(&topics(&["far"]), Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let e = q
        .nack(
            &d.id,
            &d.token,
            Some(Duration::from_millis(far as u64)),
            "x",
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let e = q
        .reschedule("near", Duration::ZERO, Some(far), None)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");

    // The script checks too, before its first write.
    let before: i64 = redis.data_keys().await;
    // A call of many jobs checks every due time before it writes any.
    let mut args = redis::Cmd::new();
    args.arg("fine")
        .arg("far")
        .arg("")
        .arg(1000)
        .arg(0)
        .arg(-1)
        .arg("")
        .arg(0)
        .arg("replace")
        .arg("");
    args.arg("raw")
        .arg("far")
        .arg("")
        .arg(1000)
        .arg(0)
        .arg(far)
        .arg("")
        .arg(0)
        .arg("replace")
        .arg("");
    let cmd = fcall(&push::SCRIPT, &Keys::new("dq"), false, 0, &args);
    let r: redis::RedisResult<redis::Value> = cmd.query_async(&mut redis.conn().await).await;
    let e = r.unwrap_err();
    assert_eq!(e.code(), Some("DQINVALID"), "{e}");
    assert!(e.to_string().contains("job 2:"), "{e}");
    let after: i64 = redis.data_keys().await;
    assert_eq!(before, after);

    // Counts and the schedule stay readable.
    let o = q.topics().await.unwrap();
    assert_eq!(o.topics["far"].reserved, 1);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_still_pops_finishes_deletes_and_fires_and_refuses_pushes_clearly() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    for i in 0..3 {
        q.push(&job(&format!("now{i}"), "full", 0, 60_000))
            .await
            .unwrap();
    }
    q.push(&job("later", "full", 1500, 60_000)).await.unwrap();
    eventually(Duration::from_secs(5), "ready", || async {
        let o = q.topics().await.ok()?;
        (o.topics.get("full")?.ready == 3).then_some(())
    })
    .await;

    // Below what is in use: with noeviction every write is refused.
    let half = (redis.info("memory", "used_memory") / 2.0) as u64;
    let _: String = redis
        .cmd(&["CONFIG", "SET", "maxmemory", &half.to_string()])
        .await;
    let e = q.push(&job("refused", "full", 0, 1000)).await.unwrap_err();
    assert!(matches!(e, Error::Full), "{e}");
    assert!(e.to_string().contains("out of memory"), "{e}");
    assert!(q.get("refused").await.unwrap().is_none());
    let (st, v) = http(reqwest::Method::GET, format!("{}/readyz", s.base), None).await;
    assert_eq!((st, &v["memory"]), (503, &json!("full")), "{v}");

    let d = q.try_pop(&topics(&["full"]), 1).await.unwrap().remove(0);
    q.finish(&d.id, &d.token).await.unwrap();
    assert!(q.delete("now1").await.unwrap());
    let d = q.try_pop(&topics(&["full"]), 1).await.unwrap().remove(0);
    q.nack(&d.id, &d.token, Some(Duration::from_secs(60)), "later")
        .await
        .unwrap();
    // The sweep still hands over what falls due.
    let d = q
        .pop(&topics(&["full"]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a job that fell due while redis was full");
    assert_eq!(d.id, "later");
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_redis_gets_no_jobs_and_is_named_as_the_problem() {
    // Over TCP, as most deployments reach Redis.
    let redis = RedisServer::start_tcp(&["--maxmemory-policy", "allkeys-lru"]);
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let e = q.push(&job("a", "ev", 0, 1000)).await.unwrap_err();
    assert!(
        matches!(e, Error::Evicting(ref p) if p == "allkeys-lru"),
        "{e}"
    );
    assert!(e.to_string().contains("noeviction"), "{e}");
    let (st, v) = http(
        reqwest::Method::POST,
        format!("{}/v1/jobs", s.base),
        Some(json!({"topic": "ev"})),
    )
    .await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (503, &json!("redis_evicts")),
        "{v}"
    );
    let (st, v) = http(reqwest::Method::GET, format!("{}/readyz", s.base), None).await;
    assert_eq!((st, &v["memory"]), (503, &json!("evicting")), "{v}");
    let keys: Vec<String> = redis.cmd(&["KEYS", "{dq}:j:*"]).await;
    assert!(keys.is_empty(), "{keys:?}");

    // Fixed at runtime: pushes go through again.
    let _: String = redis
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .await;
    eventually(Duration::from_secs(5), "pushes accepted", || async {
        q.push(&job("a", "ev", 0, 1000)).await.ok()
    })
    .await;
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_surrounding_spaces_are_refused_everywhere() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    for spec in [
        json!({"topic": " order "}),
        json!({"topic": "order", "id": " 7"}),
    ] {
        let (st, v) = http(
            reqwest::Method::POST,
            format!("{}/v1/jobs", s.base),
            Some(spec),
        )
        .await;
        assert_eq!(st, 422, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("white space"),
            "{v}"
        );
    }
    let (st, v) = http(
        reqwest::Method::POST,
        format!("{}/v1/pop", s.base),
        Some(json!({"topics": [" order "]})),
    )
    .await;
    assert_eq!(st, 422, "{v}");
    let e = q.push(&job("x", "order ", 0, 1000)).await.unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let keys: Vec<String> = redis.cmd(&["KEYS", "*"]).await;
    assert!(keys.iter().all(|k| !k.contains(":j:")), "{keys:?}");
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_lease_token_settles_nothing() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    q.push(&job("leased", "fence", 0, 60_000)).await.unwrap();
    let d = q
        .pop(&topics(&["fence"]), Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    q.push(&job("waiting", "fence", 0, 60_000)).await.unwrap();
    for id in ["leased", "waiting"] {
        for action in ["finish", "nack", "touch"] {
            let (st, v) = http(
                reqwest::Method::POST,
                format!("{}/v1/jobs/{id}/{action}", s.base),
                Some(json!({"token": ""})),
            )
            .await;
            assert_eq!(st, 422, "{action} {id}: {v}");
        }
        let e = q.finish(id, "").await.unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
    }
    // The raw script refuses an empty token too.
    // (No finished jobs' records kept: window 0, no topic windows.)
    let mut args = redis::Cmd::new();
    args.arg(0).arg(0).arg("waiting").arg("lease").arg("");
    let cmd = fcall(&remove::SCRIPT, &Keys::new("dq"), false, 0, &args);
    let reply: (i64, i64, String, String) = cmd.query_async(&mut redis.conn().await).await.unwrap();
    assert_eq!(reply.1, delayq::testing::Status::Stale as i64);
    let j = q.get("leased").await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Reserved);
    assert!(q.get("waiting").await.unwrap().is_some());
    q.finish(&d.id, &d.token).await.unwrap();
    s.stop().await;
    q.close().await;
}

/// The whole process stalls (as under SIGSTOP or a long GC-like pause of
/// the host) between Redis running a pop and the reply being read: here the
/// one runtime thread is blocked until the lease has ended.
#[tokio::test(flavor = "current_thread")]
async fn a_pop_reply_read_after_its_lease_ended_is_not_handed_over() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let mut sync = redis.client().get_connection().unwrap();
    let hget = |c: &mut redis::Connection, field: &str| -> Option<String> {
        redis::cmd("HGET")
            .arg("{dq}:j:stalled")
            .arg(field)
            .query(c)
            .unwrap()
    };
    for attempt in 0..20 {
        q.push(&job("stalled", "stall", 0, 300)).await.unwrap();
        eventually(Duration::from_secs(30), "ready", || async {
            let j = q.get("stalled").await.ok()??;
            (j.state == JobState::Ready).then_some(())
        })
        .await;
        let popper = q.clone();
        let pop = tokio::spawn(async move {
            popper
                .pop(&topics(&["stall"]), Duration::from_secs(60))
                .await
        });
        // Let the pop reach Redis...
        while hget(&mut sync, "s").as_deref() != Some("reserved") {
            tokio::task::yield_now().await;
        }
        if pop.is_finished() {
            // The reply was read before the stall began: try again.
            let d = pop.await.unwrap().unwrap().unwrap();
            q.finish(&d.id, &d.token).await.unwrap();
            continue;
        }
        // ...then stall until its lease has ended (Redis clock) by more
        // than the process's estimate of Redis time may lag behind (the
        // round trip of the reply it was read from: at most 100 ms; on a
        // busy machine it is near that).
        let stale_token = hget(&mut sync, "k").unwrap();
        let lease_end: i64 = hget(&mut sync, "l").unwrap().parse().unwrap();
        loop {
            let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut sync).unwrap();
            if s * 1000 + us / 1000 > lease_end + 250 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let d = pop.await.unwrap().unwrap().expect("delivered afresh");
        assert_ne!(
            d.token, stale_token,
            "attempt {attempt}: the stale lease was handed over"
        );
        assert!(d.lease_until_ms > lease_end);
        q.finish(&d.id, &d.token).await.unwrap();
        q.close().await;
        return;
    }
    panic!("the pop's reply was always read before the stall could begin");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_age_out_on_a_quiet_topic() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        dead_max_age: Duration::from_secs(1),
        ..config(&redis)
    })
    .unwrap();
    q.push(&NewJob {
        retry: once(),
        ..job("old", "quiet", 0, 60_000)
    })
    .await
    .unwrap();
    let d = q
        .pop(&topics(&["quiet"]), Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let n = q.nack(&d.id, &d.token, None, "fails").await.unwrap();
    assert_eq!(n.state, JobState::Dead);
    // Nothing else dies on this topic; the dead letter still goes.
    eventually(
        Duration::from_secs(10),
        "the old dead letter dropped",
        || async { q.get("old").await.unwrap().is_none().then_some(()) },
    )
    .await;
    let o = q.topics().await.unwrap();
    assert!(!o.topics.contains_key("quiet"), "{:?}", o.topics);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_bodies_cannot_hold_every_connection() {
    use tokio::io::AsyncWriteExt;
    let redis = RedisServer::start();
    let s = TestServer::start(
        queue(&redis),
        ServerConfig {
            body_timeout: Duration::from_secs(1),
            max_connections: 4,
            ..ServerConfig::default()
        },
    )
    .await;
    let addr = s.base.strip_prefix("http://").unwrap().to_owned();
    // Four clients take every slot, then send one byte every 200 ms: never
    // idle long, never done.
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
        c.write_all(b"POST /v1/jobs HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n")
            .await
            .unwrap();
        slow.push(tokio::spawn(async move {
            for _ in 0..100 {
                if c.write_all(b" ").await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }));
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(8))
        .build()
        .unwrap();
    let r = client
        .get(format!("{}/healthz", s.base))
        .send()
        .await
        .expect("a slot freed once the slow bodies ran out of time");
    assert_eq!(r.status(), 200);
    for t in slow {
        t.abort();
    }
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_stay_bounded_however_many_topics_come_and_go() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let n = delayq::metrics::MAX_TOPIC_SERIES + 500;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| job(&format!("j{i}"), &format!("topic-{i}"), 60_000, 1000))
        .collect();
    for chunk in jobs.chunks(250) {
        for r in q.push_many(chunk).await.unwrap() {
            r.unwrap();
        }
    }
    let text = reqwest::get(format!("{}/metrics", s.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for j in &jobs {
        assert!(q.delete(&j.id).await.unwrap());
    }
    let topics: std::collections::BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.split("topic=\"").nth(1)?.split('"').next())
        .collect();
    assert!(
        topics.len() <= delayq::metrics::MAX_TOPIC_SERIES + 1,
        "{}",
        topics.len()
    );
    assert!(topics.contains(delayq::metrics::OTHER_TOPICS));
    assert!(text.contains("delayq_jobs{topic=\"_other\",state=\"delayed\"} 500\n"));
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_http_defects_stay_fixed() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(
        q.clone(),
        ServerConfig {
            auth_token: Some(delayq::webhook::Secret("tok".into())),
            ..ServerConfig::default()
        },
    )
    .await;
    let c = reqwest::Client::new();
    let send = |req: reqwest::RequestBuilder| async move {
        let r = req
            .header("authorization", "bearer tok")
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (
            status,
            serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)),
        )
    };
    // GET on a POST route: a JSON 405 (and the lowercase scheme is taken).
    let (st, v) = send(c.get(format!("{}/v1/pop", s.base))).await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (405, &json!("method_not_allowed")),
        "{v}"
    );
    // Invalid UTF-8 in a path: a JSON 400.
    let (st, v) = send(c.get(format!("{}/v1/jobs/%FF%FE", s.base))).await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (400, &json!("bad_request")),
        "{v}"
    );
    // An offset past i64: a 422 that says so, not "redis unavailable".
    let (st, v) = send(c.get(format!(
        "{}/v1/topics/t/dead?offset=18446744073709551615",
        s.base
    )))
    .await;
    assert_eq!((st, &v["error"]["code"]), (422, &json!("invalid")), "{v}");
    // RFC 3339 with an offset: the same instant as in UTC.
    let (st, v) = send(c.post(format!("{}/v1/jobs", s.base)).body(
        json!({"topic": "t", "id": "tz", "due_at": "2031-01-01T01:00:00+01:00"}).to_string(),
    ))
    .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["due_at_ms"], json!(1_924_992_000_000i64));
    let (st, v) = send(
        c.post(format!("{}/v1/jobs", s.base))
            .body(json!({"topic": "t", "due_at": "2031-01-01T00:00:00.250-02:30"}).to_string()),
    )
    .await;
    assert_eq!(
        (st, &v["due_at_ms"]),
        (201, &json!(1_924_992_000_000i64 + 9_000_000 + 250)),
        "{v}"
    );
    s.stop().await;
    q.close().await;
}

fn delayq_cli(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"));
    cmd.args(args).env_remove("DELAYQ_AUTH_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn serve_has_only_server_flags_and_refuses_nonsense_values() {
    let help = String::from_utf8(delayq_cli(&["serve", "--help"], &[]).stdout).unwrap();
    for client_flag in ["--token", "--server", "--json"] {
        assert!(
            !help.contains(client_flag),
            "serve --help shows {client_flag}"
        );
    }
    let push_help = String::from_utf8(delayq_cli(&["push", "--help"], &[]).stdout).unwrap();
    assert!(push_help.contains("--token") && push_help.contains("DELAYQ_CLIENT_TOKEN"));
    let out = delayq_cli(&["serve", "--token", "abc"], &[]);
    assert!(!out.status.success());
    for (flag, value) in [
        ("--max-connections", "0"),
        ("--redis-timeout", "0s"),
        ("--pop-timeout", "0s"),
        ("--dead-max-age", "0s"),
    ] {
        let out = delayq_cli(
            &["serve", flag, value, "--redis", "redis://127.0.0.1:1/"],
            &[],
        );
        assert!(!out.status.success(), "{flag} {value} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{err}");
    }
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
        delayq_cli(
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
                delayq_cli(&a, &env)
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

/// `npm ci` refuses a lock file that lacks any package a locked package
/// names (optional ones included): the BullMQ side of the benchmark must
/// install from a clean checkout.
#[test]
fn the_bullmq_lock_file_is_in_step_with_package_json() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/bullmq");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{f}")).unwrap()).unwrap()
    };
    let (package, lock) = (read("package.json"), read("package-lock.json"));
    let packages = lock["packages"].as_object().unwrap();
    assert_eq!(packages[""]["dependencies"], package["dependencies"]);
    for (path, p) in packages {
        for field in ["dependencies", "optionalDependencies"] {
            for name in p[field].as_object().into_iter().flatten().map(|(n, _)| n) {
                let nested = format!("{path}/node_modules/{name}");
                let top = format!("node_modules/{name}");
                assert!(
                    packages.contains_key(&nested) || packages.contains_key(&top),
                    "{path} needs {name}, which the lock file lacks"
                );
            }
        }
    }
}

/// A lane's sender that dies with its batch at Redis (here: it ran on a
/// caller's short-lived runtime, shut down meanwhile) does not stop the
/// later acknowledged writes of its partition: the next one starts a new
/// sender.
#[tokio::test(flavor = "multi_thread")]
async fn acked_writes_go_on_after_their_lane_sender_died() {
    let (master, _replica) = crate::sentinel::master_and_replica();
    let q = Queue::connect(Config {
        replica_acks: 1,
        // No sweep: the acknowledged batch is the only write at Redis.
        dispatch: false,
        ..config(&master)
    })
    .unwrap();
    // Functions, clock and connections, made on this runtime.
    q.push(&job("warm", "t", 60_000, 30_000)).await.unwrap();

    // Writes wait at Redis until unpaused.
    let _: String = master.cmd(&["CLIENT", "PAUSE", "60000", "WRITE"]).await;
    let (q2, blocked) = (q.clone(), master.client());
    let stranding = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.spawn(async move { q2.push(&job("stranded", "t", 60_000, 30_000)).await });
        rt.block_on(eventually(
            Duration::from_secs(20),
            "the acknowledged batch at Redis",
            || {
                let blocked = blocked.clone();
                async move {
                    let mut c = blocked.get_multiplexed_async_connection().await.ok()?;
                    let info: String = redis::cmd("INFO")
                        .arg("clients")
                        .query_async(&mut c)
                        .await
                        .ok()?;
                    info.contains("blocked_clients:1").then_some(())
                }
            },
        ));
        // The runtime ends with the batch's sender in it.
        drop(rt);
    });
    // Joined off the runtime's workers: a worker blocked in join() could
    // hold the task that drives the connection (a busy machine hung here).
    tokio::task::spawn_blocking(move || stranding.join())
        .await
        .unwrap()
        .unwrap();
    let _: String = master.cmd(&["CLIENT", "UNPAUSE"]).await;
    // Due jobs are dispatched by another instance.
    let _dispatcher = queue(&master);

    let pushed = q.push(&job("after", "t", 0, 30_000)).await;
    assert!(pushed.is_ok(), "a later push: {pushed:?}");
    let d = eventually(Duration::from_secs(10), "the job to pop", || async {
        q.pop(&topics(&["t"]), Duration::ZERO).await.unwrap()
    })
    .await;
    let nacked = q.nack(&d.id, &d.token, None, "again").await;
    assert!(nacked.is_ok(), "a later nack: {nacked:?}");
}

/// What `redis-cli monitor` sees, line by line; killed on drop.
struct Monitor {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Monitor {
    fn start(redis: &RedisServer) -> Monitor {
        use std::io::BufRead;
        let mut child = std::process::Command::new("redis-cli")
            .arg("-s")
            .arg(redis.socket())
            .arg("monitor")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let m = Monitor { child, lines };
        m.next_with("OK");
        m
    }

    fn next_with(&self, text: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("monitor: no line with {text:?}"));
            if line.contains(text) {
                return line;
            }
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first script call of a fresh process carries a deadline too: the
/// clock is read before it, not after it was sent without one.
#[tokio::test(flavor = "multi_thread")]
async fn the_first_script_call_carries_a_deadline() {
    let redis = RedisServer::start();
    let monitor = Monitor::start(&redis);
    let q = Queue::connect(Config {
        dispatch: false,
        ..config(&redis)
    })
    .unwrap();
    q.push(&job("first", "t", 60_000, 30_000)).await.unwrap();
    let line = monitor.next_with("\"FCALL\"");
    // "FCALL" "dq_push_<v>" "1" "{dq}:schedule" "{dq}:" ... "<deadline>" "<events>"
    let args: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
    assert!(args[1].starts_with("dq_push_"), "{line}");
    let deadline: i64 = args[args.len() - 2].parse().unwrap();
    assert!(
        deadline > 0,
        "the first call went without a deadline: {line}"
    );
}

impl Monitor {
    /// Every line up to and including the next one with `text`.
    fn lines_until(&self, text: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("monitor: no line with {text:?}"));
            let found = line.contains(text);
            seen.push(line);
            if found {
                return seen;
            }
        }
    }
}

/// With Redis far away (every reply 150 ms late) the clock still gets its
/// readings: script calls carry a deadline without a TIME before each,
/// schedules list, jobs push, pop and finish, and a pop reply that arrives
/// after its lease ended is not handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_away_redis_still_gives_the_clock_its_readings() {
    let redis = RedisServer::start();
    let proxy = SlowProxy::start(&redis, Duration::from_millis(150)).await;
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(format!("redis://127.0.0.1:{}/", proxy.port)),
        redis_timeout: Duration::from_secs(5),
        ..Config::default()
    })
    .unwrap();
    let mut problems = Vec::new();

    let monitor = Monitor::start(&redis);
    for i in 0..5 {
        q.push(&job(&format!("far{i}"), "far", 0, 60_000))
            .await
            .unwrap();
    }
    let seen = monitor.lines_until("\"far4\"");
    drop(monitor);
    // The first calls (a push, the sweep's first look) may each read the
    // clock; once a script call went out, none needs to.
    let first_call = seen.iter().position(|l| l.contains("\"FCALL\""));
    let times = seen[first_call.unwrap_or(0)..]
        .iter()
        .filter(|l| l.contains("\"TIME\"") && !l.contains(" lua]"))
        .count();
    if times > 0 {
        problems.push(format!("{times} TIME calls between 5 pushes"));
    }
    for line in seen.iter().filter(|l| l.contains("\"dq_push_")) {
        // The deadline is the last argument but one (the events setting).
        let args: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        if args[args.len() - 2].parse::<i64>().unwrap() <= 0 {
            problems.push(format!("a push went without a deadline: {line}"));
        }
    }

    if let Err(e) = q.list_recurring().await {
        problems.push(format!("list_recurring: {e}"));
    }

    let far = topics(&["far"]);
    for _ in 0..5 {
        let d = q
            .pop(&far, Duration::from_secs(10))
            .await
            .unwrap()
            .expect("a ready job");
        q.finish(&d.id, &d.token).await.unwrap();
    }

    // A pop whose reply comes 1.5 s late, for a lease of 300 ms.
    q.push(&job("stale", "far", 0, 300)).await.unwrap();
    eventually(Duration::from_secs(30), "the job to be ready", || async {
        let o = q.topics().await.ok()?;
        (o.topics.get("far")?.ready == 1).then_some(())
    })
    .await;
    proxy.set_delay(Duration::from_millis(1500));
    match q.pop(&far, Duration::ZERO).await {
        Ok(None) => {}
        Ok(Some(d)) => problems.push(format!(
            "a lease that ended {} ms before its reply arrived was handed over",
            redis.time_ms().await - d.lease_until_ms
        )),
        Err(e) => problems.push(format!("the late pop: {e}")),
    }
    proxy.set_delay(Duration::from_millis(150));
    // The job is not lost: a later pop gets it and can finish it.
    let d = eventually(Duration::from_secs(60), "the stale job again", || async {
        q.pop(&far, Duration::from_secs(1)).await.ok().flatten()
    })
    .await;
    assert_eq!(d.id, "stale");
    let _ = q.finish(&d.id, &d.token).await;

    assert!(problems.is_empty(), "{problems:#?}");
    q.close().await;
}

/// `try_pop` keeps the promise `pop` keeps: a reply that arrives after the
/// lease it carries has ended is not handed over (the job goes back, and a
/// later pop gets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_pop_reply_read_after_its_lease_ended_is_not_handed_over() {
    let redis = RedisServer::start();
    let proxy = SlowProxy::start(&redis, Duration::from_millis(0)).await;
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(format!("redis://127.0.0.1:{}/", proxy.port)),
        redis_timeout: Duration::from_secs(5),
        ..Config::default()
    })
    .unwrap();
    let late = topics(&["late"]);
    q.push(&job("late-1", "late", 0, 300)).await.unwrap();
    eventually(Duration::from_secs(30), "the job to be ready", || async {
        let o = q.topics().await.ok()?;
        (o.topics.get("late")?.ready == 1).then_some(())
    })
    .await;
    // The reply comes 1.5 s after the pop: its 300 ms lease has ended.
    proxy.set_delay(Duration::from_millis(1500));
    let got = q.try_pop(&late, 1).await.unwrap();
    proxy.set_delay(Duration::from_millis(0));
    if let Some(d) = got.first() {
        panic!(
            "a lease that ended {} ms before its reply arrived was handed over",
            redis.time_ms().await - d.lease_until_ms
        );
    }
    let d = eventually(Duration::from_secs(60), "the job again", || async {
        q.pop(&late, Duration::from_secs(1)).await.ok().flatten()
    })
    .await;
    assert_eq!(d.id, "late-1");
    q.finish(&d.id, &d.token).await.unwrap();
    q.close().await;
}
