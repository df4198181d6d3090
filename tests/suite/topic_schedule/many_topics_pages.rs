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

/// How many more commands a page over 30,000 topics may make than the
/// same page over 10 (each of them bounded by what it returns, see
/// [`count_reads`]). Reading every topic made it 100x or more.
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
            count_reads(&many_redis).await;
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
        // Printed, not asserted: a busy machine slows any one call.
        println!("{path}: Redis time {time:.1}x, commands {calls:.1}x of 10 topics'");
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

/// Fields one HSCAN of the count hash asks for (the store's `SCAN_COUNT`).
const SCAN_COUNT: usize = 1_000;

/// The reads of the count hash since the slowlog was armed, each checked
/// to be bounded by what it returns: an HSCAN asking for at most
/// [`SCAN_COUNT`] fields that returned at most twice that (made again on
/// the unchanged hash to count them), or an HMGET of named fields. Their
/// number, and the most fields one HSCAN returned.
async fn count_reads(redis: &RedisServer) -> (usize, usize) {
    let reads: Vec<Vec<String>> = (slowlog_entries(redis).await.into_iter())
        .filter(|(_, args)| args.get(1).is_some_and(|k| k == "{dq}:count"))
        .map(|(_, args)| args)
        .filter(|args| args[0] != "hincrby" && args[0] != "hmget")
        .collect();
    let mut c = redis.conn().await;
    let mut most = 0;
    for args in &reads {
        assert!(
            args.len() == 5 && args[0] == "hscan" && args[3] == "count",
            "the counts were read with {args:?}"
        );
        let asked: usize = args[4].parse().unwrap();
        assert!(asked <= SCAN_COUNT, "an HSCAN asked for {asked} fields");
        let (_, fields): (u64, Vec<String>) = redis::cmd("HSCAN")
            .arg("{dq}:count")
            .arg(&args[2])
            .arg("COUNT")
            .arg(asked)
            .query_async(&mut c)
            .await
            .unwrap();
        most = most.max(fields.len() / 2);
    }
    assert!(
        most <= 2 * SCAN_COUNT,
        "one HSCAN of the count hash returned {most} fields"
    );
    (reads.len(), most)
}

/// A `/metrics` scrape reads the counts in calls each bounded by what
/// they return: over 30,000 topics every command it runs on the count
/// hash is an HSCAN asking for [`SCAN_COUNT`] fields, each returns about
/// that many (each call made again, on the unchanged hash, to count what
/// it returned), and the walk takes many calls, not one. One HGETALL of
/// every count held Redis 25-39 ms at 100,000 topics.
///
/// This counts the work, not its time: a busy machine slows every call.
#[tokio::test(flavor = "multi_thread")]
async fn a_metrics_scrape_over_30000_topics_reads_the_counts_in_calls_of_a_bounded_size() {
    let redis = RedisServer::start();
    let s = loaded(&redis, TOPICS).await;
    arm_slowlog(&redis, 200_000).await;
    let reply = reqwest::get(format!("{}/metrics", s.base)).await.unwrap();
    assert!(reply.status().is_success(), "/metrics: {}", reply.status());
    let text = reply.text().await.unwrap();
    // Every topic's job is counted (those beyond the series limit under
    // one label).
    let delayed: u64 = (text.lines())
        .filter(|l| l.starts_with("delayq_jobs{") && l.contains("state=\"delayed\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(delayed, TOPICS as u64, "delayed jobs the scrape counted");
    let (calls, most) = count_reads(&redis).await;
    println!(
        "/metrics over {TOPICS} topics: {calls} HSCAN calls on the count hash, the largest returned {most} fields"
    );
    // The hash holds a field per topic and state counted: 30,000 or more.
    assert!(
        calls >= TOPICS / (2 * SCAN_COUNT),
        "the counts of {TOPICS} topics were read in {calls} calls"
    );
    s.stop().await;
}
