//! Cancelling a job, above all one that runs: its holder hears so and
//! changes nothing, and it is never handed out again.

use std::time::Duration;

use delayq::{Error, JobState};

use crate::common::{eventually, job, queue, topics};
use crate::redis_server::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_cancelled_is_never_handed_out_again_and_its_holder_hears_so() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("run", "t", 0, 2_000)).await.unwrap();
    let d = q
        .pop(&topics(&["t"]), Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(q.cancel("run").await.unwrap(), Some(JobState::Reserved));
    let cancelled = |r: Result<_, Error>| matches!(r, Err(Error::Cancelled(id)) if id == "run");
    assert!(cancelled(q.touch("run", &d.token, None).await.map(|_| ())));
    assert!(cancelled(
        q.nack("run", &d.token, None, "it failed").await.map(|_| ())
    ));
    assert!(cancelled(q.finish("run", &d.token).await));
    assert!(cancelled(
        q.finish_many(&[("run", d.token.as_str())])
            .await
            .unwrap()
            .remove(0)
    ));
    // Another token is not the holder: it hears what it always heard.
    assert!(matches!(
        q.finish("run", "other").await,
        Err(Error::NotFound(_))
    ));
    let left = q.get("run").await.unwrap().expect("what is left of it");
    assert!(left.cancelled_at_ms.is_some(), "{left:?}");
    let counts = q.topics().await.unwrap().topics;
    assert!(
        counts.values().all(|c| c.reserved == 0 && c.ready == 0),
        "{counts:?}"
    );
    // Its lease would have ended 2 s after the pop: no retry comes of it.
    let again = q
        .pop(&topics(&["t"]), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(again.is_none(), "handed out again: {again:?}");
    // A push of the same id is a new job.
    q.push(&job("run", "t", 0, 2_000)).await.unwrap();
    let d2 = q
        .pop(&topics(&["t"]), Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    q.finish("run", &d2.token).await.unwrap();
    assert_eq!(q.cancel("run").await.unwrap(), None);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_a_finish_has_one_winner() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let (mut finished, mut cancelled) = (0, 0);
    for i in 0..40 {
        let id = format!("race-{i}");
        q.push(&job(&id, "t", 0, 60_000)).await.unwrap();
        let d = q
            .pop(&topics(&["t"]), Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        let (fin, can) = tokio::join!(q.finish(&id, &d.token), q.cancel(&id));
        match (fin, can.unwrap()) {
            (Ok(()), None) => finished += 1,
            (Err(Error::Cancelled(_)), Some(JobState::Reserved)) => cancelled += 1,
            other => panic!("{id}: finish and cancel both or neither took it: {other:?}"),
        }
        assert!(q
            .get(&id)
            .await
            .unwrap()
            .is_none_or(|j| j.cancelled_at_ms.is_some()));
    }
    println!("40 races: {finished} finished first, {cancelled} cancelled first");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_job_that_waits_removes_it_and_writes_a_cancelled_event() {
    let redis = RedisServer::start();
    let q = delayq::Queue::connect(delayq::Config {
        events: true,
        ..crate::common::config(&redis)
    })
    .unwrap();
    q.push(&job("later", "t", 3_600_000, 60_000)).await.unwrap();
    q.push(&job("now", "t", 0, 60_000)).await.unwrap();
    eventually(Duration::from_secs(10), "now is ready", || async {
        let j = q.get("now").await.unwrap()?;
        (j.state == JobState::Ready).then_some(())
    })
    .await;
    assert_eq!(q.cancel("later").await.unwrap(), Some(JobState::Delayed));
    assert_eq!(q.cancel("now").await.unwrap(), Some(JobState::Ready));
    assert!(q.get("later").await.unwrap().is_none());
    assert!(q.get("now").await.unwrap().is_none());
    assert!(q
        .pop(&topics(&["t"]), Duration::from_millis(500))
        .await
        .unwrap()
        .is_none());
    let read = q.events_after("0", &[], 100).await.unwrap();
    let mut cancelled: Vec<&str> = read
        .events
        .iter()
        .filter(|(_, e)| e.event == "cancelled")
        .map(|(_, e)| e.id.as_str())
        .collect();
    cancelled.sort();
    assert_eq!(cancelled, ["later", "now"], "{:?}", read.events);
    assert_eq!(q.cancel("nothing").await.unwrap(), None);
    assert!(matches!(q.cancel("").await, Err(Error::Invalid(_))));
    q.close().await;
}

/// A webhook's delivery in flight when its job is cancelled: the answer
/// that comes back (a failure) is not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_delivery_cancelled_in_flight_is_not_retried() {
    use std::sync::{Arc, Mutex};

    use axum::http::{HeaderMap, StatusCode};
    use delayq::webhook::{self, Webhook};

    let redis = RedisServer::start();
    let q = queue(&redis);
    // The receiver holds its first request until told, then fails it.
    let hits: Arc<Mutex<Vec<String>>> = Default::default();
    let release = Arc::new(tokio::sync::Notify::new());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let (hits, release) = (hits.clone(), release.clone());
            move |headers: HeaderMap| {
                let (hits, release) = (hits.clone(), release.clone());
                async move {
                    let id = headers["x-delayq-id"].to_str().unwrap().to_owned();
                    let first = {
                        let mut h = hits.lock().unwrap();
                        h.push(id);
                        h.len() == 1
                    };
                    if first {
                        release.notified().await;
                        return StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let stop = delayq::Shutdown::new();
    let hook = Webhook {
        timeout: Duration::from_secs(30),
        concurrency: 1,
        ..Webhook::new("hook", &url)
    };
    tokio::spawn(webhook::run(q.clone(), hook, stop.clone()));
    // Retried at once if its failure counted.
    let retry_now = delayq::RetryPolicy {
        intervals: vec![Duration::ZERO],
        max_attempts: Some(5),
    };
    q.push(&delayq::NewJob {
        retry: Some(retry_now.clone()),
        ..job("w1", "hook", 0, 60_000)
    })
    .await
    .unwrap();
    eventually(Duration::from_secs(30), "w1 in flight", || async {
        (!hits.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    assert_eq!(q.cancel("w1").await.unwrap(), Some(JobState::Reserved));
    release.notify_one();
    eventually(
        Duration::from_secs(30),
        "w1's failed answer settled",
        || async {
            (q.metrics().webhook_deliveries.get(["hook", "http_error"]) == 1).then_some(())
        },
    )
    .await;
    // Had w1 been retried, it would be ready before w2, and sent first.
    q.push(&delayq::NewJob {
        retry: Some(retry_now),
        ..job("w2", "hook", 0, 60_000)
    })
    .await
    .unwrap();
    eventually(Duration::from_secs(30), "w2 delivered", || async {
        (hits.lock().unwrap().len() >= 2).then_some(())
    })
    .await;
    assert_eq!(*hits.lock().unwrap(), ["w1", "w2"]);
    stop.trigger();
    server.abort();
    q.close().await;
}
