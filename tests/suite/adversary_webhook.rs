//! A webhook's consumer tried as an adversary would: a hanging receiver, a
//! shutdown while a pop is at Redis, replies from Redis that come late.
//! Each test states a promise and tries to break it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use axum::http::{HeaderMap, StatusCode};
use axum::routing;
use axum::Router;
use delayq::webhook::{self, Webhook};
use delayq::{JobState, Queue, Shutdown};

/// (id, attempt) of each request a receiver saw, in order.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A receiver that holds each request until the test adds a permit to
/// `gate`, then answers 200.
async fn gated_receiver(gate: Arc<tokio::sync::Semaphore>) -> (String, Seen) {
    let seen: Seen = Default::default();
    let hits = seen.clone();
    let app = Router::new().route(
        "/hook",
        routing::post(move |headers: HeaderMap| {
            let (hits, gate) = (hits.clone(), gate.clone());
            async move {
                let h = |n: &str| headers[n].to_str().unwrap().to_owned();
                hits.lock()
                    .unwrap()
                    .push((h("x-delayq-id"), h("x-delayq-attempt")));
                gate.acquire().await.unwrap().forget();
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// A receiver that answers each request after `hold` (never, if None):
/// 200, or a timeout for the webhook.
async fn slow_receiver(hold: Option<Duration>) -> (String, Seen) {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (url, seen) = gated_receiver(gate.clone()).await;
    if let Some(hold) = hold {
        // One permit per `hold`: each request waits about that long (a
        // request arriving while another holds waits for the next one).
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(hold).await;
                let waiting = gate.available_permits() == 0;
                if waiting {
                    gate.add_permits(1);
                }
            }
        });
    }
    (url, seen)
}

/// Each job's deliveries carry attempts 1, 2, 3, ... in order: no attempt
/// was counted without a delivery, and none was delivered twice under one
/// lease. Returns what breaks it.
fn attempts_in_step(seen: &[(String, String)]) -> Result<(), String> {
    let mut next: std::collections::HashMap<&str, u32> = Default::default();
    for (id, attempt) in seen {
        let want = next.entry(id).or_insert(1);
        if attempt.parse::<u32>().ok() != Some(*want) {
            return Err(format!(
                "{id} delivered with attempt {attempt}, {want} expected: {seen:?}"
            ));
        }
        *want += 1;
    }
    Ok(())
}

async fn counts(q: &Queue, topic: &str) -> (u64, u64) {
    let o = q.topics().await.unwrap();
    let c = o.topics.get(topic).copied().unwrap_or_default();
    (c.ready, c.reserved)
}

async fn push_ready(q: &Queue, topic: &str, ids: &[&str], ttr_ms: u64) {
    let jobs: Vec<_> = ids.iter().map(|id| job(id, topic, 0, ttr_ms)).collect();
    for r in q.push_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    eventually(Duration::from_secs(30), "all ready", || async {
        let (ready, reserved) = counts(q, topic).await;
        (ready + reserved >= ids.len() as u64).then_some(())
    })
    .await;
}

/// Shutdown while a pop is at Redis (its reply on its way): the jobs it
/// leased were never handled, so they are given back like the jobs
/// waiting for a slot once the reply arrives, not left reserved with their
/// attempt counted until their lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_while_a_pop_is_at_redis_gives_its_jobs_back() {
    let redis = RedisServer::start();
    let direct = queue(&redis);
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let q = queue_at(proxy.url());
    let gate = Arc::new(tokio::sync::Semaphore::new(100));
    let (url, seen) = gated_receiver(gate).await;
    // A first job delivered: the webhook is up, and waits for more.
    push_ready(&direct, "popshut", &["popshut-0"], 600_000).await;
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: 1,
        ..Webhook::new("popshut", &url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    eventually(Duration::from_secs(30), "the first finished", || async {
        (counts(&direct, "popshut").await == (0, 0) && seen.lock().unwrap().len() == 1)
            .then_some(())
    })
    .await;
    // Replies now come 3 s late: the next pop runs at Redis at once, and
    // its reply is on its way when shutdown comes.
    proxy.set_delay(Duration::from_secs(3));
    push_ready(&direct, "popshut", &["popshut-1"], 600_000).await;
    eventually(Duration::from_secs(30), "the pop at Redis", || async {
        (counts(&direct, "popshut").await == (0, 1)).then_some(())
    })
    .await;
    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the webhook stops")
        .unwrap();
    // The pop's task outlives the consumer: the reply, when it comes, is
    // given back (release, attempt uncounted).
    eventually(Duration::from_secs(30), "the job given back", || async {
        let j = direct
            .get("popshut-1")
            .await
            .unwrap()
            .expect("not finished");
        ((j.state, j.attempts) == (JobState::Ready, 0)).then_some(())
    })
    .await;
    assert_eq!(seen.lock().unwrap().len(), 1, "nothing delivered after");
    q.close().await;
    direct.close().await;
}

/// A receiver that never answers, one slot, a timeout (2 s) longer than
/// the jobs' ttr (1.5 s): each request outlives its job's lease unless
/// the lease is extended first. Each attempt counted is an attempt
/// delivered (the attempts each job is sent with go 1, 2, 3, ...).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_at_concurrency_1_counts_no_attempt_without_a_delivery() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let (url, seen) = slow_receiver(None).await;
    let ids = ["hang-a", "hang-b", "hang-c", "hang-d"];
    push_ready(&q, "hang", &ids, 1_500).await;
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: 1,
        timeout: Duration::from_secs(2),
        ..Webhook::new("hang", &url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    eventually(Duration::from_secs(120), "6 deliveries", || async {
        (seen.lock().unwrap().len() >= 6).then_some(())
    })
    .await;
    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the webhook stops")
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    attempts_in_step(&seen).unwrap();
    // Nothing delivered is left reserved by waiting: only the last request
    // (timed out or cut at shutdown) may still hold its lease.
    let (_, reserved) = counts(&q, "hang").await;
    assert!(reserved <= 1, "{reserved} reserved after shutdown");
    q.close().await;
}

/// Runs three jobs of ttr 1.2 s to a webhook whose Redis replies come
/// 700 ms late (one slot, answers after 300 ms) until every one is
/// finished (panics past a minute); returns the deliveries.
async fn through_slow_replies() -> Vec<(String, String)> {
    let redis = RedisServer::start();
    let direct = queue(&redis);
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let q = queue_at(proxy.url());
    let (url, seen) = slow_receiver(Some(Duration::from_millis(300))).await;
    let ids = ["slow-a", "slow-b", "slow-c"];
    push_ready(&direct, "slow", &ids, 1_200).await;
    proxy.set_delay(Duration::from_millis(700));
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: 1,
        ..Webhook::new("slow", &url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut left = Vec::new();
        for id in ids {
            if let Some(j) = direct.get(id).await.unwrap() {
                left.push((id, j.state, j.attempts));
            }
        }
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not finished within a minute: {left:?}; delivered: {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the webhook stops")
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    q.close().await;
    direct.close().await;
    seen
}

/// Replies from Redis 700 ms late (calls reach it at once), ttr 1.2 s: a
/// job's lease counted from the pop's reply would end 700 ms later than
/// Redis's. Every job is delivered, each on attempt 1, 2, ... in step: none
/// counted without a delivery. (A webhook consumer that leased jobs ahead
/// of its slots broke this: two jobs had 21 and 22 attempts counted in a
/// minute, none delivered.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_replies_from_redis_deliver_every_job_and_count_no_attempt_without_a_delivery() {
    let seen = through_slow_replies().await;
    attempts_in_step(&seen).unwrap();
    let mut ids: Vec<&str> = seen.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids, ["slow-a", "slow-b", "slow-c"], "{seen:?}");
}
