//! The library's `Consumer`: bounded concurrency, Ok finishes, Err nacks
//! onto the retry schedule.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use delayq::{Consumer, JobState, NewJob, RetryPolicy, Shutdown};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_run_bounded_ok_finishes_and_err_retries() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let n = 30;
    for i in 0..n {
        q.push(&NewJob {
            id: format!("c{i}"),
            topic: "work".into(),
            retry: Some(RetryPolicy::parse("50ms,50ms", None).unwrap()),
            ..NewJob::default()
        })
        .await
        .unwrap();
    }
    let calls: Arc<Mutex<HashMap<String, u32>>> = Default::default();
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let shutdown = Shutdown::new();
    let consumer = Consumer::new(q.clone(), &["work"]).concurrency(4);
    let task = tokio::spawn({
        let (calls, running, peak) = (calls.clone(), running.clone(), peak.clone());
        consumer.run(
            move |job| {
                let (calls, running, peak) = (calls.clone(), running.clone(), peak.clone());
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    let attempt = {
                        let mut c = calls.lock().unwrap();
                        let e = c.entry(job.id.clone()).or_default();
                        *e += 1;
                        *e
                    };
                    // c0 fails twice then succeeds; c1 always fails.
                    match (job.id.as_str(), attempt) {
                        ("c0", 1 | 2) | ("c1", _) => Err(format!("boom {attempt}")),
                        _ => Ok(()),
                    }
                }
            },
            shutdown.clone(),
        )
    });
    let dead = eventually(Duration::from_secs(20), "all settled", || async {
        let o = q.topics().await.unwrap();
        let c = o.topics.get("work").copied().unwrap_or_default();
        (c.delayed + c.ready + c.reserved == 0).then_some(c.dead)
    })
    .await;
    shutdown.trigger();
    task.await.unwrap();
    assert_eq!(dead, 1);
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls["c0"], 3);
    assert_eq!(calls["c1"], 3, "three attempts, then dead");
    assert!(calls
        .iter()
        .filter(|(id, _)| !["c0", "c1"].contains(&id.as_str()))
        .all(|(_, c)| *c == 1));
    assert_eq!(calls.len(), n);
    let p = peak.load(Ordering::SeqCst);
    assert!((2..=4).contains(&p), "peak concurrency {p}");
    let c1 = q.get("c1").await.unwrap().unwrap();
    assert_eq!(c1.state, JobState::Dead);
    assert_eq!(c1.last_error.as_deref(), Some("boom 3"));
    assert!(q.get("c0").await.unwrap().is_none());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_fills_its_free_slots_with_one_pop() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let n: u64 = 40;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| NewJob {
            id: format!("s{i}"),
            topic: "slots".into(),
            ..NewJob::default()
        })
        .collect();
    for r in q.push_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    eventually(Duration::from_secs(30), "all ready", || async {
        let o = q.topics().await.unwrap();
        (o.topics.get("slots").copied().unwrap_or_default().ready == n).then_some(())
    })
    .await;
    let handled = Arc::new(AtomicUsize::new(0));
    let shutdown = Shutdown::new();
    let consumer = Consumer::new(q.clone(), &["slots"]).concurrency(n as usize);
    let task = tokio::spawn({
        let handled = handled.clone();
        consumer.run(
            move |_job| {
                let handled = handled.clone();
                async move {
                    handled.fetch_add(1, Ordering::SeqCst);
                    Ok::<(), String>(())
                }
            },
            shutdown.clone(),
        )
    });
    eventually(Duration::from_secs(30), "all finished", || async {
        let o = q.topics().await.unwrap();
        let c = o.topics.get("slots").copied().unwrap_or_default();
        (c.ready + c.reserved == 0).then_some(())
    })
    .await;
    shutdown.trigger();
    task.await.unwrap();
    assert_eq!(handled.load(Ordering::SeqCst), n as usize);
    // Redis keeps one entry per pop that took jobs: the 40 ready jobs
    // went out in one pop (a few at most), not one pop each.
    let pops: usize = redis.cmd(&["LLEN", "{dq}:pops"]).await;
    assert!(
        pops <= 4,
        "{pops} pops for {n} ready jobs and {n} free slots"
    );
}
