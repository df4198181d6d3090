//! Rate limits across instances and under long-polls.

use super::*;
use crate::pacing::{assert_within_limit, pops_while};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_across_two_instances_with_greedy_consumers() {
    let redis = RedisServer::start();
    let a = queue(&redis);
    let b = queue(&redis);
    a.set_rate(
        "sms",
        RateLimit {
            per_second: 5.0,
            burst: 5,
        },
    )
    .await
    .unwrap();
    assert_eq!(b.rates().await.unwrap()["sms"].burst, 5);
    let jobs: Vec<_> = (0..50)
        .map(|i| job(&format!("sms-{i}"), "sms", 0, 60_000))
        .collect();
    push_all(&a, &jobs).await;
    eventually(Duration::from_secs(5), "all 50 ready", || async {
        (a.topics().await.unwrap().topics["sms"].ready == 50).then_some(())
    })
    .await;
    let times: Arc<Mutex<Vec<i64>>> = Arc::default();
    let start = redis.time_ms().await;
    let mut tasks = Vec::new();
    for q in [&a, &b] {
        for _ in 0..4 {
            let (q, times) = (q.clone(), times.clone());
            tasks.push(tokio::spawn(async move {
                let topic = vec!["sms".to_string()];
                while times.lock().unwrap().len() < 25 {
                    for d in q
                        .pop_many(&topic, 10, Duration::from_millis(500))
                        .await
                        .unwrap()
                    {
                        times.lock().unwrap().push(d.popped_at_us / 1000);
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut t = times.lock().unwrap().clone();
    t.sort();
    let taken = t.len();
    // By any moment, at most the burst plus the rate times the time gone.
    for (k, at) in t.iter().enumerate() {
        let allowed = 5.0 + 5.0 * (at - start) as f64 / 1000.0;
        assert!(
            (k + 1) as f64 <= allowed + 0.001,
            "job {} handed over {} ms in: over the limit",
            k + 1,
            at - start
        );
    }
    let took = t[24] - start;
    println!("25 jobs at 5/s, burst 5, 8 greedy consumers on 2 instances: {took} ms");
    // And the limit does not starve them either: 20 after the burst at 5/s.
    assert!(took <= 5_000, "{took} ms");
    let held = a.metrics().rate_held.total() + b.metrics().rate_held.total();
    assert!(held > 0, "held-back jobs are counted");
    assert!(a.clear_rate("sms").await.unwrap());
    let rest = a
        .pop_many(&["sms".to_string()], 25, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        rest.len(),
        50 - taken,
        "without the limit the rest go at once"
    );
    a.close().await;
    b.close().await;
}

/// Pushes `n` jobs of `topic` due now and waits until all are ready.
async fn ready_jobs(q: &Queue, topic: &str, n: usize) {
    let jobs: Vec<_> = (0..n)
        .map(|i| job(&format!("{topic}-{i}"), topic, 0, 60_000))
        .collect();
    push_all(q, &jobs).await;
    eventually(Duration::from_secs(10), "all ready", || async {
        (q.topics().await.unwrap().topics[topic].ready == n as u64).then_some(())
    })
    .await;
}

/// Setting a limit again keeps its bucket's level: set again every 500 ms
/// for 5 s at 1 a second, burst 5, it lets out at most the burst and the
/// rate times the time gone (one job of margin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_set_again_does_not_refill_its_bucket() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let limit = RateLimit {
        per_second: 1.0,
        burst: 5,
    };
    q.set_rate("sms", limit).await.unwrap();
    ready_jobs(&q, "sms", 60).await;
    let start = redis.time_ms().await;
    let times = pops_while(
        &q,
        "sms",
        Duration::from_secs(5),
        Duration::from_millis(500),
        || async { q.set_rate("sms", limit).await.unwrap() },
    )
    .await;
    println!(
        "1/s, burst 5, set again every 500 ms for 5 s: {} jobs",
        times.len()
    );
    assert_within_limit(&times, start, 1.0, 6.0);
    assert!(times.len() >= 5, "the burst still goes: {}", times.len());
    // A lower burst caps the level kept.
    q.set_rate(
        "sms",
        RateLimit {
            per_second: 0.001,
            burst: 1,
        },
    )
    .await
    .unwrap();
    let got = q
        .pop_many(&["sms".to_string()], 10, Duration::from_millis(200))
        .await
        .unwrap();
    assert!(got.len() <= 1, "{} after a burst of 1", got.len());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_under_a_rate_limit_gets_every_job_the_limit_lets_out() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let limit = RateLimit {
        per_second: 10.0,
        burst: 1,
    };
    q.set_rate("sms", limit).await.unwrap();
    ready_jobs(&q, "sms", 100).await;
    let start = redis.time_ms().await;
    let begun = std::time::Instant::now();
    let topic = vec!["sms".to_string()];
    let mut times = Vec::new();
    // One consumer, long-polling for up to 30 s a call, as a worker does.
    while times.len() < 100 && begun.elapsed() < Duration::from_secs(20) {
        for d in q
            .pop_many(&topic, 10, Duration::from_secs(30))
            .await
            .unwrap()
        {
            times.push(d.popped_at_us / 1000);
        }
    }
    let in_10s = times.iter().filter(|&&t| t - start <= 10_000).count();
    println!("100 jobs at 10/s, burst 1, one long-poll: {in_10s} in 10 s");
    // 10/s lets out ~100 in 10 s; well over half arrive however busy the
    // machine is (before, a long-poll slept through every refill: 3).
    assert!(in_10s >= 60, "{in_10s} jobs in 10 s");
    assert_within_limit(&times, start, limit.per_second, limit.burst as f64);
    assert!(
        q.metrics().rate_held.total() > 0,
        "held-back jobs are counted"
    );
    q.close().await;
}
