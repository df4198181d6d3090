//! Delivery semantics through the library: never early, leases and
//! re-delivery, replacement, exactly one hand-over per due time across
//! instances, long-polls that leave, pops bounded in bytes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use delayq::{Delivery, Error, JobState, NewJob, PushOutcome, Queue};
use futures::stream::{self, StreamExt};

/// Pops from `topic` with `consumers` concurrent long-polls until `total`
/// deliveries have come, then returns them.
async fn collect(queues: &[Queue], topic: &str, consumers: usize, total: usize) -> Vec<Delivery> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..consumers {
        let q = queues[i % queues.len()].clone();
        let got = got.clone();
        let topic = topic.to_owned();
        tasks.push(tokio::spawn(async move {
            loop {
                if got.lock().unwrap().len() >= total {
                    return;
                }
                // A call Redis did not answer in time (a busy machine)
                // changed nothing: look, or finish, again.
                let d = match q
                    .pop(std::slice::from_ref(&topic), Duration::from_millis(200))
                    .await
                {
                    Ok(Some(d)) => d,
                    Ok(None) => continue,
                    Err(e) if e.is_unavailable() => continue,
                    Err(e) => panic!("pop: {e}"),
                };
                loop {
                    match q.finish(&d.id, &d.token).await {
                        Ok(_) => break,
                        Err(e) if e.is_unavailable() => {}
                        Err(e) => panic!("finish {}: {e}", d.id),
                    }
                }
                got.lock().unwrap().push(d);
            }
        }));
    }
    // However slowly a busy machine hands them over: only a stall fails.
    until_value(
        total as u64,
        Duration::from_secs(60),
        "every job delivered",
        || async { Some(got.lock().unwrap().len() as u64) },
    )
    .await;
    for t in tasks {
        t.await.unwrap();
    }
    let v = got.lock().unwrap().clone();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_job_is_handed_out_before_its_due_time() {
    let redis = RedisServer::start_with(&["--appendfsync", "everysec"]);
    let q = queue(&redis);
    let n = 2000usize;
    // Sub-second and multi-second delays, interleaved.
    let delay_of = |i: usize| ((i * 7919) % 3000) as u64;
    let start_ms = redis.time_ms().await;
    let pushed: HashMap<String, i64> = stream::iter(0..n)
        .map(|i| {
            let q = q.clone();
            async move {
                let p = q
                    .push(&job(&format!("j{i}"), "t", delay_of(i), 30_000))
                    .await
                    .unwrap();
                (format!("j{i}"), p.due_ms)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    for i in 0..n {
        // The due time is at least the delay after the push began (Redis clock).
        assert!(pushed[&format!("j{i}")] >= start_ms + delay_of(i) as i64);
    }
    let got = collect(std::slice::from_ref(&q), "t", 8, n).await;
    assert_eq!(got.len(), n);
    let mut late: Vec<i64> = Vec::new();
    for d in &got {
        assert_eq!(d.due_ms, pushed[&d.id], "{}", d.id);
        assert!(
            d.popped_at_us >= d.due_ms * 1000,
            "{} handed out {} ms early",
            d.id,
            d.due_ms * 1000 - d.popped_at_us
        );
        late.push(d.popped_at_us / 1000 - d.due_ms);
    }
    late.sort();
    // A loose correctness bound (not a benchmark): with only expired events
    // at Redis's defaults dispatch would be seconds late. The sweep keeps it
    // small. Measured at dispatch: the hand-over adds the consumers' own
    // pace, which a busy machine slows.
    let (within, count) = fire_lateness_within(&q, "0.5");
    assert!(
        count > 0 && within * 100 >= count * 99,
        "{within} of {count} dispatched within 500 ms of their due time: the sweep is not firing on time (hand-over p99 {} ms)",
        late[late.len() * 99 / 100]
    );
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_job_comes_back_after_its_ttr_and_a_finished_one_never() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let t = topics(&["lease"]);
    q.push(&job("L", "lease", 0, 2_000)).await.unwrap();
    let first = q
        .pop(&t, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("first delivery");
    assert_eq!(first.attempts, 1);
    assert_eq!(q.get("L").await.unwrap().unwrap().state, JobState::Reserved);
    // Not finished: delivered again, after the ttr and not before.
    let second = q
        .pop(&t, Duration::from_secs(15))
        .await
        .unwrap()
        .expect("re-delivery");
    assert_eq!(second.id, "L");
    assert_eq!(second.attempts, 2);
    assert!(
        second.popped_at_us >= first.popped_at_us + 2_000_000,
        "re-delivered {} ms after the first, ttr is 2000",
        (second.popped_at_us - first.popped_at_us) / 1000
    );
    assert_ne!(first.token, second.token);
    // The first consumer's lease is stale now.
    assert!(matches!(
        q.finish("L", &first.token).await,
        Err(Error::StaleLease(_))
    ));
    assert_eq!(q.get("L").await.unwrap().unwrap().state, JobState::Reserved);
    q.finish("L", &second.token).await.unwrap();
    // Finished: never again, not even after another ttr.
    assert!(q
        .pop(&t, Duration::from_millis(2500))
        .await
        .unwrap()
        .is_none());
    assert!(q.get("L").await.unwrap().is_none());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushing_an_existing_id_replaces_the_job_in_every_state() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let t = topics(&["r"]);

    // Delayed: the new body and due time win; one delivery.
    q.push(&job("D", "r", 200, 5000)).await.unwrap();
    let mut replacement = job("D", "r", 600, 5000);
    replacement.body = "new".into();
    let p = q.push(&replacement).await.unwrap();
    assert_eq!(p.outcome, PushOutcome::Replaced);
    let d = q.pop(&t, Duration::from_secs(5)).await.unwrap().unwrap();
    assert_eq!(
        (d.id.as_str(), d.body.as_str(), d.due_ms),
        ("D", "new", p.due_ms)
    );
    assert!(d.popped_at_us >= p.due_ms * 1000);
    q.finish("D", &d.token).await.unwrap();

    // Ready: out of ready (its list entry stays, skipped by the pop that
    // reaches it while the job is not ready), due again later, one delivery.
    q.push(&job("R", "r", 0, 5000)).await.unwrap();
    eventually(Duration::from_secs(20), "R ready", || async {
        (q.get("R").await.unwrap()?.state == JobState::Ready).then_some(())
    })
    .await;
    // Due in 2 s: still delayed when read, however busy the machine.
    let p = q.push(&job("R", "r", 2_000, 5000)).await.unwrap();
    assert_eq!(p.outcome, PushOutcome::Replaced);
    assert_eq!(q.get("R").await.unwrap().unwrap().state, JobState::Delayed);
    let d = q.pop(&t, Duration::from_secs(15)).await.unwrap().unwrap();
    assert_eq!(d.id, "R");
    assert!(d.popped_at_us >= p.due_ms * 1000);

    // Reserved: the old lease is void.
    let p = q.push(&job("R", "r", 100, 5000)).await.unwrap();
    assert_eq!(p.outcome, PushOutcome::Replaced);
    assert!(matches!(
        q.finish("R", &d.token).await,
        Err(Error::StaleLease(_))
    ));
    let again = q.pop(&t, Duration::from_secs(5)).await.unwrap().unwrap();
    assert_eq!((again.id.as_str(), again.attempts), ("R", 1));
    q.finish("R", &again.token).await.unwrap();

    // And nothing else is left to deliver.
    assert!(q
        .pop(&t, Duration::from_millis(800))
        .await
        .unwrap()
        .is_none());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_hand_each_job_over_exactly_once() {
    let redis = RedisServer::start_with(&["--appendfsync", "everysec"]);
    let a = queue(&redis);
    let b = queue(&redis);
    let n = 5000usize;
    // All due at the same moment: both sweeps and both subscribers race.
    let ids: Vec<String> = (0..n).map(|i| format!("x{i}")).collect();
    stream::iter(ids.iter())
        .map(|id| {
            let q = if id.len() % 2 == 0 {
                a.clone()
            } else {
                b.clone()
            };
            async move { q.push(&job(id, "once", 1000, 60_000)).await.unwrap() }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    let got = collect(&[a.clone(), b.clone()], "once", 8, n).await;
    let mut seen = HashMap::new();
    for d in &got {
        *seen.entry(d.id.clone()).or_insert(0) += 1;
        assert!(d.popped_at_us >= d.due_ms * 1000);
    }
    let dups: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).collect();
    assert!(dups.is_empty(), "handed out more than once: {dups:?}");
    assert_eq!(seen.len(), n);
    // Nothing more to come from either engine.
    for q in [&a, &b] {
        assert!(q
            .pop(&topics(&["once"]), Duration::from_millis(300))
            .await
            .unwrap()
            .is_none());
    }
    let dispatched: u64 = [&a, &b]
        .iter()
        .map(|q| q.metrics().dispatched.total())
        .sum();
    assert_eq!(dispatched, n as u64, "dispatch moved a job more than once");
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_whose_client_left_takes_no_job() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let q = s.queue.clone();
    // A client that gives up (its connection dropped) while its /pop is
    // held.
    let client = reqwest::Client::new();
    let leaving = tokio::spawn({
        let url = format!("{}/pop", s.base);
        async move { client.post(url).body(r#"{"topic":"gone"}"#).send().await }
    });
    eventually(Duration::from_secs(20), "the pop to wait", || async {
        (q.waiting_pops() == 1).then_some(())
    })
    .await;
    leaving.abort();
    assert!(
        leaving.await.unwrap_err().is_cancelled(),
        "the pop answered while it should have been held"
    );
    eventually(Duration::from_secs(20), "the server to notice", || async {
        (q.waiting_pops() == 0).then_some(())
    })
    .await;
    // Now a job falls due: nobody is waiting, so it must stay ready.
    q.push(&job("G", "gone", 100, 60_000)).await.unwrap();
    let state = eventually(Duration::from_secs(5), "G to be dispatched", || async {
        let j = q.get("G").await.unwrap()?;
        (j.state != JobState::Delayed).then_some(j.state)
    })
    .await;
    assert_eq!(state, JobState::Ready, "a departed client took the job");
    let d = q
        .pop(&topics(&["gone"]), Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((d.id.as_str(), d.attempts), ("G", 1));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_many_sends_valid_jobs_in_one_go_even_after_a_function_flush() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("warm", "pm", 3_600_000, 1000)).await.unwrap();
    // As on a fresh server: delayq's functions are not loaded.
    flush_scripts(&redis).await;
    let jobs = vec![
        job("a", "pm", 3_600_000, 1000),
        job("", "pm", 0, 1000),
        job("b", "bad,topic", 0, 1000),
        job("warm", "pm", 3_600_000, 1000),
    ];
    let results = q.push_many(&jobs).await.unwrap();
    assert_eq!(results.len(), 4);
    assert_eq!(results[0].as_ref().unwrap().outcome, PushOutcome::Created);
    assert!(matches!(results[1], Err(Error::Invalid(_))));
    assert!(matches!(results[2], Err(Error::Invalid(_))));
    assert_eq!(results[3].as_ref().unwrap().outcome, PushOutcome::Replaced);
    let mut keys: Vec<String> = redis.cmd(&["KEYS", "{dq}:j:*"]).await;
    keys.sort();
    assert_eq!(keys, ["{dq}:j:a", "{dq}:j:warm"]);
    // And single calls load them too.
    flush_scripts(&redis).await;
    assert!(q.get("a").await.unwrap().is_some());
    assert!(q.delete("a").await.unwrap());
    q.close().await;
}

/// Subscribers on delayq's ready channel, as Redis counts them.
async fn ready_listeners(redis: &RedisServer) -> i64 {
    let (_, n): (String, i64) = redis
        .cmd::<Vec<(String, i64)>>(&["PUBSUB", "NUMSUB", "{dq}:ready"])
        .await
        .remove(0);
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_shutdown_stops_the_queue_and_answers_waiting_pops() {
    let redis = RedisServer::start();
    let stop = delayq::Shutdown::new();
    let q = Queue::connect(delayq::Config {
        shutdown: stop.clone(),
        ..config(&redis)
    })
    .unwrap();
    eventually(Duration::from_secs(5), "subscribed", || async {
        (ready_listeners(&redis).await == 1).then_some(())
    })
    .await;
    let waiting = {
        let q = q.clone();
        tokio::spawn(async move { q.pop(&topics(&["t"]), Duration::from_secs(60)).await })
    };
    eventually(Duration::from_secs(5), "the pop waits", || async {
        (q.waiting_pops() == 1).then_some(())
    })
    .await;
    stop.trigger();
    let got = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting pop answered")
        .unwrap()
        .unwrap();
    assert!(got.is_none());
    eventually(Duration::from_secs(5), "the subscriber gone", || async {
        (ready_listeners(&redis).await == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_queue_stops_its_background_work() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let clone = q.clone();
    eventually(Duration::from_secs(5), "subscribed", || async {
        (ready_listeners(&redis).await == 1).then_some(())
    })
    .await;
    drop(q);
    // One clone left: still running.
    assert!(clone.topics().await.is_ok());
    assert_eq!(ready_listeners(&redis).await, 1);
    drop(clone);
    eventually(Duration::from_secs(5), "the subscriber gone", || async {
        (ready_listeners(&redis).await == 0).then_some(())
    })
    .await;
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
        push_all(&q, chunk).await;
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

/// A push with no delay (or an absolute time now or past) is ready when
/// its reply returns (issue 49): a pop without waiting, sent right after,
/// gets it every time. The queue itself does not dispatch, so nothing but the push can have
/// made it ready. (Its due time was rounded up to the next millisecond,
/// and a pop right after found nothing 12-124 times in 200.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_with_no_delay_is_ready_when_its_reply_returns() {
    let redis = RedisServer::start();
    let q = Queue::connect(delayq::Config {
        dispatch: false,
        ..config(&redis)
    })
    .unwrap();
    let t = topics(&["now"]);
    let mut missed = 0;
    for i in 0..200 {
        let now = redis.time_ms().await;
        let j = match i % 4 {
            // An absolute time just past, or long past.
            1 => NewJob {
                due_at_ms: Some(now),
                ..job(&format!("n{i}"), "now", 0, 60_000)
            },
            2 => NewJob {
                due_at_ms: Some(now - 60_000),
                ..job(&format!("n{i}"), "now", 0, 60_000)
            },
            _ => job(&format!("n{i}"), "now", 0, 60_000),
        };
        let pushed = q.push(&j).await.unwrap();
        assert!(pushed.due_ms <= redis.time_ms().await, "{pushed:?}");
        let got = q.try_pop(&t, 1).await.unwrap();
        match got.first() {
            Some(d) => {
                assert_eq!(d.id, j.id);
                q.finish(&d.id, &d.token).await.unwrap();
            }
            None => missed += 1,
        }
    }
    assert_eq!(
        missed, 0,
        "pops right after a push with no delay found nothing"
    );

    // The compatible API keeps the original's range, delay 1 s and more:
    // delay 0 is refused, naming it, and stores nothing.
    let s = TestServer::start(q.clone(), delayq::http::ServerConfig::default()).await;
    let v = post(
        &s.base,
        "/push",
        r#"{"topic":"now","id":"c0","delay":0,"ttr":60}"#,
    )
    .await;
    assert_eq!(v["code"], 1, "{v}");
    assert!(v["message"].as_str().unwrap().contains("delay"), "{v}");
    assert!(q.get("c0").await.unwrap().is_none());
    s.stop().await;
    // A delay of a millisecond waits for its time: never early.
    q.push(&job("later", "now", 1, 60_000)).await.unwrap();
    assert_eq!(
        q.get("later").await.unwrap().unwrap().state,
        JobState::Delayed
    );
    q.close().await;
}
