//! Throughput, backlog age and lateness kept in Redis by every instance
//! (issue 24): `/v1/stats/throughput` and the figures of `/v1/topics`;
//! `/metrics` bounded however many topics come and go.

use std::time::Duration;

use delayq::http::ServerConfig;
use delayq::{Config, NewJob, Queue, RateLimit, Resolution, RetryPolicy};
use serde_json::Value;

use crate::common::{
    arm_slowlog, config, eventually, get_json, job, push_all, queue, slowlog_entries, topics,
    RedisServer, TestServer,
};

const LIMIT: Duration = Duration::from_secs(20);

/// Sums of each kind over a throughput read.
async fn sums(q: &Queue, topic: Option<&str>, r: Resolution) -> [u64; 5] {
    let t = q.throughput(topic, r).await.unwrap();
    let s = &t.series;
    [&s.pushed, &s.delivered, &s.finished, &s.failed, &s.dead].map(|v| v.iter().sum())
}

/// Pops `topic` until a job comes (the sweep makes it ready).
async fn pop(q: &Queue, topic: &str) -> delayq::Delivery {
    eventually(LIMIT, "a job to pop", || async {
        q.pop(&topics(&[topic]), Duration::from_millis(200))
            .await
            .unwrap()
    })
    .await
}

#[tokio::test]
async fn two_instances_both_count_into_throughput_per_kind() {
    let redis = RedisServer::start();
    let (a, b) = (queue(&redis), queue(&redis));
    a.push(&job("j1", "tp", 0, 60_000)).await.unwrap();
    let d = pop(&b, "tp").await;
    b.finish(&d.id, &d.token).await.unwrap();
    let mut j2 = job("j2", "tp", 0, 60_000);
    j2.retry = Some(RetryPolicy::parse("0", Some(2)).unwrap());
    b.push(&j2).await.unwrap();
    b.push(&job("k1", "other", 3_600_000, 60_000))
        .await
        .unwrap();
    let d = pop(&a, "tp").await;
    a.nack(&d.id, &d.token, None, "first").await.unwrap();
    let d = pop(&b, "tp").await;
    b.nack(&d.id, &d.token, None, "last").await.unwrap();

    // [pushed, delivered, finished, failed, dead]
    for r in [Resolution::Minute, Resolution::Second] {
        eventually(LIMIT, "both instances' counts in Redis", || async {
            (sums(&a, Some("tp"), r).await == [2, 3, 1, 1, 1]).then_some(())
        })
        .await;
        eventually(LIMIT, "the all-topics field", || async {
            (sums(&b, None, r).await == [3, 3, 1, 1, 1]).then_some(())
        })
        .await;
        assert_eq!(sums(&a, Some("other"), r).await, [1, 0, 0, 0, 0]);
    }

    let s = TestServer::start(a.clone(), ServerConfig::default()).await;
    let (status, v) = get_json(&s.base, "/v1/stats/throughput?topic=tp").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["resolution_s"], 60);
    let pushed = v["series"]["pushed"].as_array().unwrap();
    assert_eq!(pushed.len(), 60);
    let total: u64 = pushed.iter().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(total, 2);
    let span = v["to_ms"].as_i64().unwrap() - v["from_ms"].as_i64().unwrap();
    assert_eq!(span, 3_600_000);
    let (_, v) = get_json(&s.base, "/v1/stats/throughput?resolution=second").await;
    assert_eq!(v["resolution_s"], 1);
    for k in ["pushed", "delivered", "finished", "failed", "dead"] {
        assert_eq!(v["series"][k].as_array().unwrap().len(), 300, "{k}");
    }
    s.stop().await;
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn a_restart_loses_no_count_it_flushed() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    for i in 0..3 {
        q.push(&job(&format!("r{i}"), "keep", 3_600_000, 60_000))
            .await
            .unwrap();
    }
    // Closing flushes what was counted since the last second's flush.
    q.close().await;
    drop(q);
    let q = queue(&redis);
    assert_eq!(
        sums(&q, Some("keep"), Resolution::Minute).await,
        [3, 0, 0, 0, 0]
    );
    assert_eq!(sums(&q, None, Resolution::Second).await, [3, 0, 0, 0, 0]);
    q.close().await;
}

#[tokio::test]
async fn backlog_ages_appear_and_held_says_paused_or_rate() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.pause("held-p").await.unwrap();
    q.set_rate(
        "held-r",
        RateLimit {
            per_second: 0.01,
            burst: 1,
        },
    )
    .await
    .unwrap();
    for (id, t) in [
        ("p1", "held-p"),
        ("r1", "held-r"),
        ("r2", "held-r"),
        ("w1", "waits"),
    ] {
        q.push(&job(id, t, 0, 60_000)).await.unwrap();
    }
    eventually(LIMIT, "every job ready", || async {
        let o = q.topics().await.unwrap();
        let ready: u64 = o.topics.values().map(|c| c.ready).sum();
        (ready == 4).then_some(())
    })
    .await;
    // The one token goes: the other job waits for the next, 100 s away.
    pop(&q, "held-r").await;
    // Let the ready jobs age (the figure says how long they waited).
    tokio::time::sleep(Duration::from_millis(300)).await;

    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let (status, v) = get_json(&s.base, "/v1/topics").await;
    assert_eq!(status, 200, "{v}");
    let t = &v["topics"];
    assert_eq!(t["held-p"]["held"], "paused", "{v}");
    assert_eq!(t["held-r"]["held"], "rate", "{v}");
    assert_eq!(t["waits"]["held"], Value::Null, "{v}");
    for topic in ["held-p", "held-r", "waits"] {
        let age = t[topic]["oldest_ready_ms"].as_u64();
        assert!(age.is_some_and(|a| a >= 250), "{topic}: {v}");
        assert_eq!(t[topic]["oldest_overdue_ms"], Value::Null, "{topic}: {v}");
    }

    let metrics = reqwest::get(format!("{}/metrics", s.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("delayq_topic_oldest_ready_seconds{topic=\"waits\"} "),
        "{metrics}"
    );
    s.stop().await;
    q.close().await;
}

#[tokio::test]
async fn overdue_delayed_jobs_show_how_long_they_are_overdue() {
    let redis = RedisServer::start();
    // No instance dispatches: due jobs stay delayed, overdue. (A delay of
    // 1 ms: a push with none is ready at once.)
    let q = Queue::connect(Config {
        dispatch: false,
        ..config(&redis)
    })
    .unwrap();
    q.push(&job("o1", "late", 1, 60_000)).await.unwrap();
    q.push(&job("o2", "later", 3_600_000, 60_000))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let (_, v) = get_json(&s.base, "/v1/topics").await;
    let age = v["topics"]["late"]["oldest_overdue_ms"].as_u64();
    assert!(age.is_some_and(|a| a >= 250), "{v}");
    assert_eq!(v["topics"]["late"]["oldest_ready_ms"], Value::Null);
    assert_eq!(v["topics"]["later"]["oldest_overdue_ms"], Value::Null);
    let metrics = reqwest::get(format!("{}/metrics", s.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("delayq_topic_oldest_overdue_seconds{topic=\"late\"} "),
        "{metrics}"
    );
    s.stop().await;
    q.close().await;
}

#[tokio::test]
async fn lateness_percentiles_come_from_every_instance_s_buckets() {
    let redis = RedisServer::start();
    let (a, b) = (queue(&redis), queue(&redis));
    a.push(&job("x", "lt", 3_600_000, 60_000)).await.unwrap();
    // Known latencies: 99 within 5 ms (from two instances), 1 within 500 ms.
    for _ in 0..50 {
        a.metrics().stats.lateness("lt", 0.003);
    }
    for _ in 0..49 {
        b.metrics().stats.lateness("lt", 0.004);
    }
    b.metrics().stats.lateness("lt", 0.3);
    a.flush_stats().await;
    b.flush_stats().await;
    let s = TestServer::start(a.clone(), ServerConfig::default()).await;
    let (_, v) = get_json(&s.base, "/v1/topics").await;
    let l = &v["topics"]["lt"]["lateness_ms"];
    assert_eq!(l["samples"], 100, "{v}");
    assert_eq!(
        (l["p50"].as_f64(), l["p99"].as_f64()),
        (Some(5.0), Some(5.0))
    );
    assert_eq!(l["p999"].as_f64(), Some(500.0));
    assert_eq!(l["window_s"], 3600);
    assert_eq!(v["lateness_ms"]["samples"], 100, "{v}");

    // A real hand-over counts too, by topic. (A delay of 1 ms: a push
    // with none is ready at once, no hand-over.)
    a.push(&job("now", "lt2", 1, 60_000)).await.unwrap();
    eventually(LIMIT, "the hand-over's lateness in Redis", || async {
        let (_, v) = get_json(&s.base, "/v1/topics").await;
        (v["topics"]["lt2"]["lateness_ms"]["samples"] == 1 && v["lateness_ms"]["samples"] == 101)
            .then_some(())
    })
    .await;
    s.stop().await;
    a.close().await;
    b.close().await;
}

#[tokio::test]
async fn bad_throughput_queries_are_refused_naming_the_problem() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), ServerConfig::default()).await;
    let (status, v) = get_json(&s.base, "/v1/stats/throughput?resolution=hour").await;
    assert_eq!(status, 400, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("resolution") && msg.contains("hour"), "{msg}");
    let long = "t".repeat(1000);
    let (status, v) = get_json(&s.base, &format!("/v1/stats/throughput?topic={long}")).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("topic"),
        "{v}"
    );
    let (status, v) = get_json(&s.base, "/v1/stats/throughput?window=1").await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("window"),
        "{v}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_partition_counts_and_shows_its_backlog() {
    use crate::cluster::cluster_config;
    use crate::redis_cluster::{node_config, TestCluster};
    let cluster = TestCluster::start_with(3, 0, &node_config());
    let q = Queue::connect(cluster_config(&cluster, 6)).unwrap();
    q.check_connection().await.unwrap();
    // A delay of 1 ms: each job handed over from the schedule (a push with
    // none is ready at once, no hand-over to measure).
    let jobs: Vec<_> = (0..30)
        .map(|i| job(&format!("c-{i}"), "cl", 1, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    eventually(LIMIT, "30 ready", || async {
        (q.topics().await.unwrap().topics["cl"].ready == 30).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut o = q.topics().await.unwrap();
    q.topic_stats(&mut o, &Default::default()).await.unwrap();
    let c = &o.topics["cl"];
    assert!(c.oldest_ready_ms.is_some_and(|a| a >= 250), "{c:?}");
    assert_eq!((c.oldest_overdue_ms, c.held), (None, None), "{c:?}");
    q.close().await;
    let q = Queue::connect(cluster_config(&cluster, 6)).unwrap();
    assert_eq!(
        sums(&q, Some("cl"), Resolution::Minute).await,
        [30, 0, 0, 0, 0]
    );
    let mut o = q.topics().await.unwrap();
    let later = q.topic_stats(&mut o, &Default::default()).await.unwrap();
    assert_eq!(later.samples, 30, "every hand-over's lateness");
    q.close().await;
}

/// `/metrics?redis=false` (the dashboard overview's) asks Redis nothing:
/// no depth series, no read of the counts, where the full scrape has both;
/// a bad value or an unknown parameter is a 400 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_scrape_without_redis_reads_nothing_of_the_queue() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let jobs: Vec<NewJob> = (0..3)
        .map(|i| job(&format!("j{i}"), &format!("topic-{i}"), 60_000, 1000))
        .collect();
    push_all(&q, &jobs).await;
    let scrape = |query: &'static str| {
        let url = format!("{}/metrics{query}", s.base);
        async move {
            let r = reqwest::get(url).await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // The scrape's reads of the counts (HSCAN: the loops' scripts read the
    // count hash too, and Redis logs a script's commands).
    let counts_read = || async {
        (slowlog_entries(&redis).await.into_iter())
            .filter(|(_, a)| a[0] == "hscan" && a.get(1).is_some_and(|k| k == "{dq}:count"))
            .map(|(_, a)| a)
            .collect::<Vec<_>>()
    };
    arm_slowlog(&redis, 10_000).await;
    let (status, text) = scrape("?redis=false").await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("delayq_build_info{"), "{text}");
    assert!(!text.contains("delayq_jobs{"), "{text}");
    let read = counts_read().await;
    assert!(read.is_empty(), "the counts were read: {read:?}");
    let (_, full) = scrape("").await;
    assert!(
        full.contains("delayq_jobs{topic=\"topic-1\",state=\"delayed\"} 1"),
        "{full}"
    );
    assert!(
        !counts_read().await.is_empty(),
        "the full scrape read no counts"
    );
    for (query, names) in [("?redis=maybe", "redis"), ("?depth=0", "depth")] {
        let (status, body) = scrape(query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(names), "{query}: {body}");
    }
    s.stop().await;
    q.close().await;
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
        push_all(&q, chunk).await;
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
