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
    push_all(&q, &jobs).await;
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

/// Pushes `n` jobs `{prefix}{i}` to `topic` (ttr `ttr_ms`) and waits until
/// all are ready.
async fn ready_burst(q: &delayq::Queue, topic: &str, prefix: &str, n: u64, ttr_ms: u64) {
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| job(&format!("{prefix}{i}"), topic, 0, ttr_ms))
        .collect();
    push_all(q, &jobs).await;
    eventually(Duration::from_secs(30), "all ready", || async {
        let o = q.topics().await.unwrap();
        (o.topics.get(topic).copied().unwrap_or_default().ready == n).then_some(())
    })
    .await;
}

/// The connection cut while a batch of finishes is on its way (the calls
/// never reached Redis): the consumer finishes those jobs again once
/// Redis is back, each under its own lease, instead of leaving them leased
/// until their ttr (ten minutes here). Nothing is lost, no job is handed
/// out twice, and no handler of a job runs while another does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finishes_cut_off_on_their_way_are_sent_again_and_nothing_runs_twice() {
    let redis = RedisServer::start();
    let proxy = CutProxy::start(&redis).await;
    let q = queue_at(proxy.url());
    let n = 200;
    ready_burst(&q, "cut", "k", n, 600_000).await;
    let proxy = Arc::new(proxy);
    let calls: Arc<Mutex<HashMap<String, u32>>> = Default::default();
    let running: Arc<Mutex<HashMap<String, u32>>> = Default::default();
    let overlapped = Arc::new(AtomicUsize::new(0));
    let shutdown = Shutdown::new();
    let task = tokio::spawn({
        let (calls, running, overlapped, proxy) = (
            calls.clone(),
            running.clone(),
            overlapped.clone(),
            proxy.clone(),
        );
        Consumer::new(q.clone(), &["cut"]).concurrency(16).run(
            move |job| {
                let (calls, running, overlapped, proxy) = (
                    calls.clone(),
                    running.clone(),
                    overlapped.clone(),
                    proxy.clone(),
                );
                async move {
                    {
                        let mut r = running.lock().unwrap();
                        let e = r.entry(job.id.clone()).or_default();
                        *e += 1;
                        if *e > 1 {
                            overlapped.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    *calls.lock().unwrap().entry(job.id.clone()).or_default() += 1;
                    // From the hundredth job on, what the consumer sends is
                    // lost on the way: its finishes among it.
                    if calls.lock().unwrap().len() == 100 {
                        proxy.drop_calls(true);
                    }
                    tokio::task::yield_now().await;
                    *running.lock().unwrap().get_mut(&job.id).unwrap() -= 1;
                    Ok::<(), String>(())
                }
            },
            shutdown.clone(),
        )
    });
    eventually(Duration::from_secs(30), "calls dropped", || async {
        (proxy.dropped() > 0).then_some(())
    })
    .await;
    // What was sent meanwhile is gone; then the connections die.
    let cut_after = calls.lock().unwrap().len();
    proxy.cut();
    // Read beside the proxy. A pop already at Redis when the cut came may
    // have lost its reply: its jobs stay leased, never handed to the
    // handler, until their ttr (the promise: back after the ttr, not lost).
    // Every job the handler ran must be gone: its finish was sent again.
    let direct = redis.conn().await;
    let left = || {
        let mut c = direct.clone();
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("{dq}:j:k*")
                .query_async(&mut c)
                .await
                .unwrap();
            let mut left = Vec::new();
            for key in keys {
                let state: Option<String> = redis::cmd("HGET")
                    .arg(&key)
                    .arg("s")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                left.push((key.trim_start_matches("{dq}:j:").to_string(), state));
            }
            left
        }
    };
    eventually(
        Duration::from_secs(60),
        "every job finished or leased unseen",
        || {
            let (left, calls) = (left(), calls.clone());
            async move {
                let left = left.await;
                let calls = calls.lock().unwrap();
                left.iter()
                    .all(|(id, state)| {
                        !calls.contains_key(id) && state.as_deref() == Some("reserved")
                    })
                    .then_some(())
            }
        },
    )
    .await;
    shutdown.trigger();
    task.await.unwrap();
    let left = left().await;
    let calls = calls.lock().unwrap().clone();
    assert!(cut_after >= 100, "cut after {cut_after} deliveries");
    let unfinished: Vec<_> = left
        .iter()
        .filter(|(id, _)| calls.contains_key(id))
        .collect();
    assert!(
        unfinished.is_empty(),
        "handled but not finished: {unfinished:?}"
    );
    assert_eq!(
        calls.len() + left.len(),
        n as usize,
        "every job delivered or leased"
    );
    assert!(
        left.len() <= 16,
        "more leased unseen than one pop takes: {left:?}"
    );
    let twice: Vec<_> = calls.iter().filter(|(_, c)| **c > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(overlapped.load(Ordering::SeqCst), 0);
    q.close().await;
}

/// A burst ready at once, drained by a consumer whose handler returns at
/// once: the finishes of the jobs handled while a call is at Redis go
/// together in one remove call, and the slots they free are filled by one
/// pop. Before, a handler's slot stayed taken until its own finish had come
/// back, and the slots came free one by one: about half the pops and
/// finishes were of a single job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_finished_many_jobs_a_remove_call() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let n = 640;
    ready_burst(&q, "many", "m", n, 600_000).await;
    arm_slowlog(&redis, 100_000).await;
    let handled = Arc::new(AtomicUsize::new(0));
    let shutdown = Shutdown::new();
    let task = tokio::spawn({
        let handled = handled.clone();
        Consumer::new(q.clone(), &["many"]).concurrency(32).run(
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
    eventually(Duration::from_secs(60), "all finished", || async {
        let o = q.topics().await.unwrap();
        let c = o.topics.get("many").copied().unwrap_or_default();
        (c.ready + c.reserved == 0).then_some(())
    })
    .await;
    shutdown.trigger();
    task.await.unwrap();
    assert_eq!(handled.load(Ordering::SeqCst), n as usize);
    let removes = script_calls(&redis, "dq_remove").await;
    let pops = script_calls(&redis, "dq_pop").await;
    println!("{removes} remove calls and {pops} pops for {n} jobs");
    // 32 slots: 20 of each at best. Measured: 59-60 pops and 66-67
    // remove calls before, 27-39 of each after.
    assert!(
        removes <= 48 && pops <= 48,
        "{removes} remove calls and {pops} pops for {n} jobs at concurrency 32"
    );
    q.close().await;
}

/// A handler run by `run_with_results` finishes its job with the result
/// it returns: kept and read back (the job gone, its record kept for the
/// result retention), none when it returns `None`, and none, the job
/// still finished, when the result is past its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_result_is_kept_with_its_finished_job() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    for id in ["with", "without", "huge"] {
        q.push(&job(id, "close", 0, 60_000)).await.unwrap();
    }
    let shutdown = Shutdown::new();
    let task = tokio::spawn(Consumer::new(q.clone(), &["close"]).run_with_results(
        |job| async move {
            match job.id.as_str() {
                "with" => Ok::<_, String>(Some(serde_json::json!({"refunded": "r-991"}))),
                "huge" => Ok(Some(serde_json::json!(
                    "x".repeat(delayq::defaults::MAX_RESULT_BYTES)
                ))),
                _ => Ok(None),
            }
        },
        shutdown.clone(),
    ));
    eventually(Duration::from_secs(60), "all finished", || async {
        let o = q.topics().await.ok()?;
        let c = o.topics.get("close").copied().unwrap_or_default();
        (c.delayed + c.ready + c.reserved == 0).then_some(())
    })
    .await;
    shutdown.trigger();
    task.await.unwrap();
    let with = q
        .get("with")
        .await
        .unwrap()
        .expect("its record, for the result");
    assert_eq!(with.state, JobState::Finished);
    assert_eq!(with.result, Some(serde_json::json!({"refunded": "r-991"})));
    // Finished without a result: nothing kept (no finished records here).
    assert!(q.get("without").await.unwrap().is_none());
    assert!(q.get("huge").await.unwrap().is_none());
    q.close().await;
}
