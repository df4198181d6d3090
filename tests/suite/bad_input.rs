//! Bad input, generated: random bytes, invalid UTF-8, and valid requests
//! broken one field at a time, against both APIs. Each gets a clear refusal
//! (a 4xx, or the compatible API's code 1), never a 5xx or a panic, and
//! Redis is left exactly as it was. And by hand: times past year 9999,
//! names with surrounding spaces, empty lease tokens.

use std::sync::OnceLock;
use std::time::Duration;

use crate::common::*;
use delayq::http::ServerConfig;
use delayq::testing::{fcall, scripts, Keys};
use delayq::{Error, JobState, NewJob};
use proptest::prelude::*;
use serde_json::{json, Value};

/// One server for all cases (proptest runs hundreds).
struct World {
    rt: tokio::runtime::Runtime,
    redis: RedisServer,
    base: String,
}

/// The shared world's redis-server: a static is never dropped, so it is
/// killed when the test process exits.
static WORLD_REDIS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn stop_world_redis() {
    let pid = WORLD_REDIS.load(std::sync::atomic::Ordering::Relaxed);
    if pid != 0 {
        // SAFETY: kill(2) of the redis-server this process started.
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let redis = RedisServer::start();
        WORLD_REDIS.store(redis.pid(), std::sync::atomic::Ordering::Relaxed);
        // SAFETY: registers a plain function to run at exit.
        unsafe {
            libc::atexit(stop_world_redis);
        }
        let base = rt.block_on(async {
            let s = TestServer::start(queue(&redis), Default::default()).await;
            let base = s.base.clone();
            std::mem::forget(s); // serves until the process ends
            base
        });
        World { rt, redis, base }
    })
}

const COMPAT: &[&str] = &["/push", "/pop", "/get", "/finish", "/delete"];
const NATIVE: &[&str] = &[
    "/v1/jobs",
    "/v1/jobs/batch",
    "/v1/pop",
    "/v1/jobs/x/nack",
    "/v1/jobs/x/finish",
    "/v1/jobs/x/touch",
    "/v1/jobs/x/reschedule",
];

/// Sends `body` and checks the refusal; returns the status.
fn refused(path: &str, body: Vec<u8>) {
    let w = world();
    let (status, text, keys) = w.rt.block_on(async {
        let resp = reqwest::Client::new()
            .post(format!("{}{path}", w.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let keys: i64 = w.redis.data_keys().await;
        (status, text, keys)
    });
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("{path}: not JSON ({status}): {text}"));
    if path.starts_with("/v1") {
        assert!(
            (400..500).contains(&status),
            "{path}: status {status}: {text}"
        );
        assert!(
            !v["error"]["message"].as_str().unwrap_or("").is_empty(),
            "{text}"
        );
    } else {
        assert_eq!(status, 200, "{path}: {text}");
        // /pop with an unparsable topic list is refused too; /finish and
        // /delete of unknown ids succeed by contract, so only pushes and
        // malformed bodies are generated for them.
        assert_eq!(v["code"], 1, "{path}: {text}");
        assert!(!v["message"].as_str().unwrap_or("").is_empty());
    }
    assert_eq!(keys, 0, "{path}: a refused request changed Redis");
}

/// Whether a string passes delayq's name rules. Ids may hold commas; topics
/// may not (pops list topics with them).
fn fine(s: &str, max: usize, comma_ok: bool) -> bool {
    !s.trim().is_empty()
        && s.len() <= max
        && !s.chars().any(|c| c.is_control() || (c == ',' && !comma_ok))
}

/// A way to break one field of a valid request.
fn bad_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(null)),
        Just(json!("")),
        Just(json!("   ")),
        any::<f64>()
            .prop_filter("not whole", |f| f.fract() != 0.0)
            .prop_map(|f| json!(f)),
        (i64::MIN..0i64).prop_map(|n| json!(n)),
        (1i64 << 31..i64::MAX).prop_map(|n| json!(n)),
        Just(json!({"nested": true})),
        Just(json!([1, 2])),
        "[\\x00-\\x1f,]{1,4}".prop_map(|s| json!(format!("a{s}b"))),
        (257usize..3000).prop_map(|n| json!("x".repeat(n))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, .. ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_refused_everywhere(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        i in 0usize..12,
    ) {
        // Random bytes are not a valid request (and an empty object is
        // not a valid push, pop, nack...).
        let path = if i < COMPAT.len() { COMPAT[i] } else { NATIVE[i - COMPAT.len()] };
        if (path == "/finish" || path == "/delete" || path == "/get") && serde_json::from_slice::<Value>(&bytes).is_ok() {
            return Ok(());
        }
        refused(path, bytes);
    }

    #[test]
    fn invalid_utf8_inside_strings_is_refused(prefix in "[a-z]{0,8}", lead in 0x80u8..0xc0, junk in proptest::collection::vec(0x80u8..0xff, 0..8), i in 0usize..2) {
        // A continuation byte with no lead byte before it is never UTF-8.
        let mut body = format!(r#"{{"topic":"t","id":"{prefix}"#).into_bytes();
        body.push(lead);
        body.extend(&junk);
        body.extend(br#"","delay":1,"ttr":1}"#);
        refused(["/push", "/v1/jobs"][i], body);
    }

    #[test]
    fn a_compatible_push_with_one_broken_field_is_refused(field in 0usize..5, bad in bad_value()) {
        let mut push = json!({"topic":"t","id":"job-1","delay":5,"ttr":10,"body":"b"});
        let name = ["topic", "id", "delay", "ttr", "body"][field];
        // A string or null body, and a whole-number delay or ttr in range,
        // are valid: skip those.
        let valid = match name {
            "topic" => bad.as_str().is_some_and(|s| fine(s.trim(), 128, false)),
            "id" => bad.as_str().is_some_and(|s| fine(s.trim(), 256, true)),
            "body" => bad.is_string() || bad.is_null(),
            "delay" => bad.as_i64().is_some_and(|n| (1..1 << 31).contains(&n)),
            "ttr" => bad.as_i64().is_some_and(|n| (1..=86400).contains(&n)),
            _ => false,
        };
        prop_assume!(!valid);
        push[name] = bad;
        refused("/push", push.to_string().into_bytes());
    }

    #[test]
    fn a_native_push_with_one_broken_field_is_refused(field in 0usize..6, bad in bad_value()) {
        let mut job = json!({"topic":"t","id":"job-1","delay_ms":5,"ttr_ms":10,"body":"b","retry":{"intervals":["1s"]}});
        let name = ["topic", "id", "delay_ms", "ttr_ms", "body", "retry"][field];
        let valid = match name {
            "topic" => bad.as_str().is_some_and(|s| fine(s, 128, false)),
            "id" => bad.is_null() || bad.as_str().is_some_and(|s| fine(s, 256, true)),
            "delay_ms" => bad.is_null() || bad.as_u64().is_some_and(|n| n <= ((1 << 31) - 1) * 1000),
            "ttr_ms" => bad.is_null() || bad.as_u64().is_some_and(|n| (1..=7 * 86_400_000).contains(&n)),
            "body" => bad.is_string(),
            _ => bad.is_null(),
        };
        prop_assume!(!valid);
        job[name] = bad;
        refused("/v1/jobs", job.to_string().into_bytes());
    }

    #[test]
    fn a_due_time_in_seconds_or_without_a_zone_is_refused_never_fired_now(
        n in i64::MIN..100_000_000_000i64,
        (y, mo, d, h, mi, sec) in (1970u32..9999, 1u32..=12, 1u32..=28, 0u32..24, 0u32..60, 0u32..60),
        sep in prop_oneof![Just("T"), Just(" ")],
        i in 0usize..4,
    ) {
        // Unix seconds (or anything below 1973 in ms) and a local time
        // with no zone would each be a guess; a guess fires at the wrong time.
        let text = format!("{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}:{sec:02}");
        let due = if i % 2 == 0 { json!(n) } else { json!(text) };
        let (path, body) = if i < 2 {
            ("/v1/jobs", json!({"topic": "t", "due_at": due}))
        } else {
            ("/v1/jobs/x/reschedule", json!({ "due_at": due }))
        };
        refused(path, body.to_string().into_bytes());
    }

    #[test]
    fn a_native_pop_or_nack_with_broken_fields_is_refused(bad in bad_value(), i in 0usize..3) {
        let body = match i {
            0 => json!({"topics": [bad], "wait_ms": 0}),
            1 => json!({"topics": ["t"], "max": bad}),
            _ => json!({"token": bad}),
        };
        prop_assume!(!(i == 1 && bad.is_null()));
        refused(["/v1/pop", "/v1/pop", "/v1/jobs/x/nack"][i], body.to_string().into_bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, .. ProptestConfig::default() })]

    /// Odd headers change nothing about how a request is judged: a valid
    /// native get of a missing job is a 404 whatever they say, a bad
    /// Authorization on a server without auth is ignored, and nothing is
    /// written.
    #[test]
    fn odd_headers_do_not_matter(
        name in "[a-zA-Z][a-zA-Z0-9-]{0,30}",
        value in "[ -~]{0,200}",
        ctype in prop_oneof![Just("application/json"), Just("text/plain"), Just("application/x-www-form-urlencoded"), Just("nonsense/%%")],
    ) {
        let w = world();
        let lower = name.to_ascii_lowercase();
        prop_assume!(!["content-length", "transfer-encoding", "host", "connection", "expect", "upgrade", "te", "trailer"].contains(&lower.as_str()));
        let (status, keys) = w.rt.block_on(async {
            let resp = reqwest::Client::new()
                .get(format!("{}/v1/jobs/none", w.base))
                .header(name.as_str(), value.as_str())
                .header("content-type", ctype)
                .send()
                .await
                .unwrap();
            let keys: i64 = w.redis.data_keys().await;
            (resp.status().as_u16(), keys)
        });
        prop_assert_eq!(status, 404);
        prop_assert_eq!(keys, 0);
    }
}

/// `.` and `..` as ids would be path segments URLs drop (`/v1/jobs/..`
/// is `/v1/`): no client could reach such a job, so no push creates one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_and_dot_dot_ids_are_refused_by_every_push() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let http = reqwest::Client::new();
    for id in [".", ".."] {
        let e = s.queue.push(&job(id, "t", 0, 1000)).await.unwrap_err();
        assert!(e.to_string().contains("path segment"), "{e}");
        let many = s.queue.push_many(&[job(id, "t", 0, 1000)]).await;
        assert!(many.is_err() || many.unwrap()[0].is_err());
        for (path, body) in [
            ("/v1/jobs", json!({"topic": "t", "id": id})),
            (
                "/v1/jobs/batch",
                json!({"jobs": [{"topic": "t", "id": id}]}),
            ),
            (
                "/push",
                json!({"topic": "t", "id": id, "delay": 1, "ttr": 5}),
            ),
        ] {
            let resp = http
                .post(format!("{}{path}", s.base))
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap();
            let v: Value = serde_json::from_str(&text).unwrap();
            let refused = match path {
                "/push" => v["code"] == 1,
                "/v1/jobs" => status == 422,
                // A batch answers per job.
                _ => status == 422 || v["results"][0]["error"].is_object(),
            };
            assert!(
                refused && text.contains("path segment"),
                "{path} {id:?}: {status} {text}"
            );
        }
    }
    let keys: Vec<String> = redis.cmd(&["KEYS", "*:j:*"]).await;
    assert!(keys.is_empty(), "{keys:?}");
    s.stop().await;
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
    let cmd = fcall(scripts::PUSH, &Keys::new("dq"), false, 0, &args);
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
async fn names_with_surrounding_spaces_are_refused_everywhere() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    for spec in [
        json!({"topic": " order "}),
        json!({"topic": "order", "id": " 7"}),
    ] {
        let (st, v) = request_json(
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
    let (st, v) = request_json(
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
            let (st, v) = request_json(
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
    // (No finished jobs' records kept: window 0, no topic windows; a
    // result retention; no result.)
    let mut args = redis::Cmd::new();
    args.arg(0)
        .arg(0)
        .arg(60_000)
        .arg("waiting")
        .arg("lease")
        .arg("")
        .arg("");
    let cmd = fcall(scripts::REMOVE, &Keys::new("dq"), false, 0, &args);
    let reply: (i64, i64, String, String) = cmd.query_async(&mut redis.conn().await).await.unwrap();
    assert_eq!(reply.1, delayq::testing::Status::Stale as i64);
    let j = q.get("leased").await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Reserved);
    assert!(q.get("waiting").await.unwrap().is_some());
    q.finish(&d.id, &d.token).await.unwrap();
    s.stop().await;
    q.close().await;
}
