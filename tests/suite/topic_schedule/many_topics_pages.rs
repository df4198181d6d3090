//! `GET /v1/topics` over 30,000 topics with one job each: a page holds
//! about its limit, and the Redis work of a page does not grow with the
//! number of topics (the counts are read by HSCAN, the page's topics
//! each by name). The whole reply with every topic, an HGETALL of every
//! count and a due time read for every delayed topic, grew with them.

use std::collections::BTreeSet;

use super::*;
use delayq::http::ServerConfig;
use serde_json::Value;

const TOPICS: usize = 30_000;
const FEW: usize = 10;

/// How much more Redis time (and how many more commands) a page over
/// 30,000 topics may take than the same page over 10: wide, so that a
/// busy machine cannot reach it. Reading every topic made it 100x or more.
const MOST_RATIO: f64 = 20.0;

/// A queue of `n` topics ("t-<i>") with one job each, due in 10 minutes,
/// and an HTTP server on it that runs nothing of its own.
async fn loaded(redis: &RedisServer, n: usize) -> TestServer {
    let connect = || {
        Queue::connect(Config {
            dispatch: false,
            ..config(redis)
        })
        .unwrap()
    };
    let q = connect();
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| {
            let name = format!("t-{i:05}");
            job(&name, &name, 600_000, 60_000)
        })
        .collect();
    push_all(&q, &jobs).await;
    q.flush_stats().await;
    q.close().await;
    TestServer::start(connect(), ServerConfig::default()).await
}

/// The reply to a GET of `path`, and the commands Redis ran for it that
/// read (each command's name and Redis time in us; a script's own
/// commands are logged by Redis 7 too).
async fn page(redis: &RedisServer, s: &TestServer, path: &str) -> (Value, Vec<(String, i64)>) {
    arm_slowlog(redis, 200_000).await;
    let (status, v) = get_json(&s.base, path).await;
    assert_eq!(status, 200, "{v}");
    let reads = (slowlog_entries(redis).await.into_iter())
        .filter_map(|(us, args)| {
            let name = args.into_iter().next()?;
            // Writes are the stats flush's and heartbeats', not the page's.
            const WRITES: [&str; 9] = [
                "hincrby", "expire", "set", "zadd", "publish", "pexpire", "del", "slowlog",
                "config",
            ];
            (!WRITES.contains(&name.as_str())).then_some((name, us))
        })
        .collect();
    (v, reads)
}

fn ratio(many: f64, few: f64) -> f64 {
    many / few.max(1.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_topics_page_over_30000_topics_holds_its_limit_and_costs_its_page() {
    let (few_redis, many_redis) = (RedisServer::start(), RedisServer::start());
    let few = loaded(&few_redis, FEW).await;
    let many = loaded(&many_redis, TOPICS).await;

    // The first page and a page from a cursor, as the dashboard asks.
    let (v, _) = page(&many_redis, &many, "/v1/topics?limit=50").await;
    let n = v["topics"].as_object().unwrap().len();
    assert!((1..=100).contains(&n), "a page of 50 held {n} topics");
    let cursor = v["next_cursor"].as_str().expect("a next page").to_owned();
    let later = format!("/v1/topics?limit=50&cursor={cursor}");
    for path in ["/v1/topics?limit=50", later.as_str()] {
        // The median of 5 pages, each side: a few held up move it little.
        let (mut few_us, mut many_us, mut few_n, mut many_n) = (vec![], vec![], vec![], vec![]);
        for _ in 0..5 {
            let (_, f) = page(&few_redis, &few, path).await;
            let (_, m) = page(&many_redis, &many, path).await;
            few_us.push(f.iter().map(|c| c.1).sum::<i64>());
            many_us.push(m.iter().map(|c| c.1).sum::<i64>());
            few_n.push(f.len() as i64);
            many_n.push(m.len() as i64);
        }
        let mid = |v: &mut Vec<i64>| {
            v.sort_unstable();
            v[v.len() / 2] as f64
        };
        let time = ratio(mid(&mut many_us), mid(&mut few_us));
        let calls = ratio(mid(&mut many_n), mid(&mut few_n));
        println!("{path}: Redis time {time:.1}x, commands {calls:.1}x of 10 topics'");
        assert!(
            time < MOST_RATIO,
            "{path}: a page over {TOPICS} topics took {time:.1}x the Redis time of one over {FEW}"
        );
        assert!(
            calls < MOST_RATIO,
            "{path}: a page over {TOPICS} topics made {calls:.1}x the commands of one over {FEW}"
        );
    }
    few.stop().await;
    many.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_topics_pages_list_every_one_of_30000_topics_once() {
    let redis = RedisServer::start();
    let s = loaded(&redis, TOPICS).await;
    let mut seen = BTreeSet::new();
    let mut pages = 0;
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/topics?cursor={c}"),
            None => "/v1/topics".to_owned(),
        };
        let (status, v) = get_json(&s.base, &path).await;
        assert_eq!(status, 200, "{v}");
        let topics = v["topics"].as_object().unwrap();
        assert!(
            topics.len() <= 2_000,
            "a page of 1000 held {}",
            topics.len()
        );
        for (t, c) in topics {
            assert_eq!(c["delayed"], 1, "{t}: {c}");
            assert!(seen.insert(t.clone()), "{t} listed twice");
        }
        pages += 1;
        assert!(pages <= 200, "the pages never end");
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen.len(), TOPICS, "topics listed");
    assert!(pages >= TOPICS / 2_000, "{pages} pages");

    // One topic by name, with its jobs or none; a cursor of nothing.
    let (_, v) = get_json(&s.base, "/v1/topics?topic=t-00007").await;
    assert_eq!(v["topics"]["t-00007"]["delayed"], 1, "{v}");
    let (_, v) = get_json(&s.base, "/v1/topics?topic=nobody").await;
    assert_eq!(v["topics"]["nobody"]["delayed"], 0, "{v}");
    let (status, v) = get_json(&s.base, "/v1/topics?cursor=banana").await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (422, Some("invalid")),
        "{v}"
    );
    assert!(v.to_string().contains("next_cursor"), "{v}");
    s.stop().await;
}

/// The longest read of the count hash (us) Redis ran for one GET of
/// `path` (of one command, each taken alone: a machine this busy may hold
/// up any one of the many small ones a scrape makes).
async fn longest(redis: &RedisServer, s: &TestServer, path: &str) -> i64 {
    arm_slowlog(redis, 200_000).await;
    let reply = reqwest::get(format!("{}{path}", s.base)).await.unwrap();
    assert!(reply.status().is_success(), "{path}: {}", reply.status());
    let _ = reply.text().await.unwrap();
    let log: Vec<redis::Value> = redis.cmd(&["SLOWLOG", "GET", "-1"]).await;
    (log.iter())
        .filter_map(|e| match e {
            redis::Value::Array(f) => match (f.get(2), f.get(3)) {
                (Some(redis::Value::Int(us)), Some(redis::Value::Array(a)))
                    if matches!(a.get(1), Some(redis::Value::BulkString(k)) if k == b"{dq}:count") =>
                {
                    let words: Vec<String> = (a.iter().take(3))
                        .map(|w| match w {
                            redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                            _ => String::new(),
                        })
                        .collect();
                    Some((*us, words.join(" ")))
                }
                _ => None,
            },
            _ => None,
        })
        .max()
        .map(|(us, what)| {
            println!("{path}: longest {us} us: {what}");
            us
        })
        .unwrap_or(0)
}

/// A `/metrics` scrape reads the counts in calls of a bounded size: its
/// longest read of them over 30,000 topics takes about what it takes over
/// 3,000. One HGETALL of every count made it about 10x.
#[tokio::test(flavor = "multi_thread")]
async fn a_metrics_scrape_over_30000_topics_makes_no_longer_call_than_over_3000() {
    let (few_redis, many_redis) = (RedisServer::start(), RedisServer::start());
    let few = loaded(&few_redis, TOPICS / 10).await;
    let many = loaded(&many_redis, TOPICS).await;
    let (mut f, mut m) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        f.push(longest(&few_redis, &few, "/metrics").await);
        m.push(longest(&many_redis, &many, "/metrics").await);
    }
    f.sort_unstable();
    m.sort_unstable();
    let r = ratio(m[2] as f64, f[2] as f64);
    println!(
        "/metrics: longest command {} us over {TOPICS} topics, {} us over {}: {r:.1}x",
        m[2],
        f[2],
        TOPICS / 10
    );
    assert!(
        r < 5.0,
        "the longest count read of a scrape over {TOPICS} topics took {r:.1}x that over {}",
        TOPICS / 10
    );
    few.stop().await;
    many.stop().await;
}
