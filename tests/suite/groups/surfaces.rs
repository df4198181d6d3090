//! Groups over HTTP, the CLI and /metrics, and a group's rate limit.

use std::time::Duration;

use super::*;
use crate::pacing::{assert_within_limit, pops_while};

/// A group's rate limit: its jobs go out no faster than it, a waiting pop
/// gets the next one when its token comes, and other groups go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_rate_limit_holds_its_jobs_alone() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let mut jobs: Vec<NewJob> = (0..4)
        .map(|i| grouped(&format!("s{i}"), "sms", "slow"))
        .collect();
    jobs.extend((0..4).map(|i| grouped(&format!("f{i}"), "sms", "free")));
    push_all(&q, &jobs).await;
    // One token a second: the drain below ends long before the next
    // token, on a busy machine too (at 4 a second, a drain slower than
    // 250 ms took a third slow job).
    let rate = delayq::RateLimit {
        per_second: 1.0,
        burst: 2,
    };
    let g = q
        .set_group(
            "sms",
            "slow",
            GroupSettings {
                rate: Some(rate),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(g.rate, Some(rate));
    ready(&q, "sms", 8).await;
    let mut got = Vec::new();
    while let Some(d) = pop1(&q, "sms").await {
        q.finish(&d.id, &d.token).await.unwrap();
        got.push(d.id);
    }
    let slow: Vec<&String> = got.iter().filter(|id| id.starts_with('s')).collect();
    assert_eq!(slow, ["s0", "s1"], "the burst, then held: {got:?}");
    assert_eq!(got.len(), 6, "every free job went: {got:?}");
    let g = q.group("sms", "slow").await.unwrap();
    assert_eq!((g.ready, g.held), (2, 2));
    // A waiting pop gets the next when its token is due: a second apart.
    let start = std::time::Instant::now();
    let d = q
        .pop(&topics(&["sms"]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the next token");
    assert_eq!(d.id, "s2");
    q.finish(&d.id, &d.token).await.unwrap();
    let d = q
        .pop(&topics(&["sms"]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the next token");
    assert_eq!(d.id, "s3");
    assert!(
        start.elapsed() >= Duration::from_millis(960),
        "{:?}",
        start.elapsed()
    );
    // Bad rates are refused, naming it.
    let e = q
        .set_group(
            "sms",
            "slow",
            GroupSettings {
                rate: Some(delayq::RateLimit {
                    per_second: 0.0,
                    burst: 1,
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Invalid(m) if m.starts_with("rate")),
        "{e:?}"
    );
}

/// A group's PUT changes the settings it names and keeps the others
/// (`null` removes one); its rate PUT again keeps the bucket's level: every
/// 500 ms for 5 s at 1 a second, burst 5, at most the burst and the rate
/// times the time gone (one job of margin) go out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_put_changes_what_it_names_and_refills_no_bucket() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), delayq::http::ServerConfig::default()).await;
    let url = format!("{}/v1/topics/sms/groups/slow", s.base);
    let put = |body: serde_json::Value| {
        let url = url.clone();
        async move {
            let (st, g) = request_json(reqwest::Method::PUT, url, Some(body)).await;
            assert_eq!(st, 200, "{g}");
            g
        }
    };
    let rate = serde_json::json!({"per_second": 1, "burst": 5});
    let g = put(serde_json::json!({"concurrency": 30, "rate": rate})).await;
    assert_eq!(
        (g["concurrency"].as_u64(), &g["rate"]["burst"]),
        (Some(30), &serde_json::json!(5))
    );
    let g = put(serde_json::json!({"concurrency": 40})).await;
    assert_eq!(g["concurrency"].as_u64(), Some(40), "{g}");
    assert_eq!(g["rate"]["burst"].as_u64(), Some(5), "the rate stays: {g}");
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| grouped(&format!("s{i}"), "sms", "slow"))
        .collect();
    push_all(&q, &jobs).await;
    ready(&q, "sms", 60).await;
    let start = redis.time_ms().await;
    let times = pops_while(
        &q,
        "sms",
        Duration::from_secs(5),
        Duration::from_millis(500),
        || async {
            put(serde_json::json!({"rate": rate})).await;
        },
    )
    .await;
    println!(
        "group at 1/s, burst 5, PUT again every 500 ms for 5 s: {} jobs",
        times.len()
    );
    assert_within_limit(&times, start, 1.0, 6.0);
    assert!(times.len() >= 5, "the burst still goes: {}", times.len());
    let g = put(serde_json::json!({"paused": true})).await;
    assert_eq!(
        (
            g["paused"].as_bool(),
            g["concurrency"].as_u64(),
            g["rate"]["burst"].as_u64()
        ),
        (Some(true), Some(40), Some(5)),
        "{g}"
    );
    let g = put(serde_json::json!({"rate": null, "concurrency": null})).await;
    assert_eq!(
        (g["paused"].as_bool(), &g["concurrency"], &g["rate"]),
        (
            Some(true),
            &serde_json::Value::Null,
            &serde_json::Value::Null
        ),
        "{g}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_over_http_and_the_cli() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), delayq::http::ServerConfig::default()).await;
    let b = &s.base;
    let post = |body: serde_json::Value| {
        request_json(reqwest::Method::POST, format!("{b}/v1/jobs"), Some(body))
    };
    let (st, _) =
        post(serde_json::json!({"id": "h1", "topic": "t", "body": "x", "group": "acct:1"})).await;
    assert_eq!(st, 201);
    let (st, reply) =
        post(serde_json::json!({"id": "h2", "topic": "t", "body": "x", "group": "a\nb"})).await;
    assert_eq!(st, 422, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("group"),
        "{reply}"
    );
    let (st, job) = get_json(b, "/v1/jobs/h1").await;
    assert_eq!((st, job["group"].as_str()), (200, Some("acct:1")));
    // The CLI pushes into a group too.
    let (ok, _, err) = delayq_cli(
        b,
        &["push", "--topic", "t", "--id", "c1", "--group", "acct:1"],
    )
    .await;
    assert!(ok, "{err}");
    ready(&q, "t", 2).await;
    // A topic whose ready jobs are all grouped reads as any other.
    let (st, topics) = get_json(b, "/v1/topics").await;
    assert_eq!(
        (st, topics["topics"]["t"]["ready"].as_u64()),
        (200, Some(2)),
        "{topics}"
    );
    let path = "/v1/topics/t/groups/acct%3A1";
    let (st, g) = request_json(
        reqwest::Method::PUT,
        format!("{b}{path}"),
        Some(serde_json::json!({"concurrency": 1})),
    )
    .await;
    assert_eq!(st, 200, "{g}");
    assert_eq!(
        (
            g["group"].as_str(),
            g["concurrency"].as_u64(),
            g["ready"].as_u64()
        ),
        (Some("acct:1"), Some(1), Some(2))
    );
    let (st, bad) = request_json(
        reqwest::Method::PUT,
        format!("{b}{path}"),
        Some(serde_json::json!({"concurrency": 0})),
    )
    .await;
    assert_eq!(st, 422, "{bad}");
    let (st, _) = request_json(reqwest::Method::POST, format!("{b}{path}/pause"), None).await;
    assert_eq!(st, 200);
    assert!(pop1(&q, "t").await.is_none(), "paused over HTTP");
    let (ok, out, err) = delayq_cli(b, &["group", "resume", "t", "acct:1"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("acct:1: 2 ready (0 held), 0 reserved; limit 1"),
        "{out}"
    );
    let d = pop1(&q, "t").await.expect("resumed");
    let (ok, out, err) = delayq_cli(b, &["group", "get", "t", "acct:1"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("1 ready (1 held), 1 reserved; limit 1"),
        "{out}"
    );
    let (ok, out, err) = delayq_cli(
        b,
        &[
            "group",
            "set",
            "t",
            "acct:1",
            "--concurrency",
            "2",
            "--paused",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.contains("limit 2, paused"), "{out}");
    let (ok, out, err) = delayq_cli(b, &["group", "list", "t"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("acct:1: 1 ready (1 held), 1 reserved; limit 2, paused"),
        "{out}"
    );
    let (st, page) = get_json(b, "/v1/topics/t/groups?limit=10").await;
    assert_eq!(st, 200);
    assert_eq!(page["groups"][0]["reserved"].as_u64(), Some(1), "{page}");
    let (st, _) = get_json(b, "/v1/topics/t/groups?limit=1001").await;
    assert_eq!(st, 422);
    // /metrics: three series a topic, none a group.
    let metrics = reqwest::get(format!("{b}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "delayq_topic_groups{topic=\"t\",state=\"known\"} 1",
        "delayq_topic_groups{topic=\"t\",state=\"in_turn\"} 0",
        "delayq_topic_groups{topic=\"t\",state=\"waiting_token\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    assert!(!metrics.contains("acct:1"), "no series names a group");
    q.finish(&d.id, &d.token).await.unwrap();
    s.stop().await;
}
