//! Jobs leased ahead of a webhook's slots wait in the process; one call
//! checks their leases right before they are sent. Each test holds a
//! promise that waiting could break, with Redis near and far.

use super::receivers::{attempts_in_step, push_ready};
use super::*;

/// (id, attempt, when) of each request a receiver saw, in order.
type Timed = Arc<Mutex<Vec<(String, String, Instant)>>>;

/// A receiver that holds each request until the test adds a permit to
/// `gate`, then answers 200; requests are recorded as they arrive.
async fn gated_receiver(gate: Arc<tokio::sync::Semaphore>) -> (String, Timed) {
    let seen: Timed = Default::default();
    let hits = seen.clone();
    let app = Router::new().route(
        "/hook",
        routing::post(move |headers: HeaderMap| {
            let (hits, gate) = (hits.clone(), gate.clone());
            async move {
                let h = |n: &str| headers[n].to_str().unwrap().to_owned();
                hits.lock().unwrap().push((
                    h("x-delayq-id"),
                    h("x-delayq-attempt"),
                    Instant::now(),
                ));
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

fn untimed(seen: &Timed) -> Vec<(String, String)> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|(id, a, _)| (id.clone(), a.clone()))
        .collect()
}

/// The jobs of `ids` that are reserved and not among those `seen`: leased
/// ahead, waiting for a slot.
async fn waiting(q: &Queue, ids: &[&str], seen: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for id in ids {
        let reserved = q
            .get(id)
            .await
            .unwrap()
            .is_some_and(|j| j.state == JobState::Reserved);
        if reserved && !seen.iter().any(|(s, _)| s == id) {
            out.push(id.to_string());
        }
    }
    out
}

/// `slots` slots, their requests held by the receiver, so jobs leased
/// ahead wait: one is deleted and one rescheduled 3 s on while they wait.
/// Neither is sent from the process: the deleted one never, the
/// rescheduled one only once due again, on attempt 1 (the attempt its
/// first lease counted is uncounted, since it was never sent); every other
/// job once, attempts in step. Through `proxy_delay` of lateness on every
/// Redis reply.
async fn changed_while_waiting(proxy_delay: Duration, slots: usize) {
    let redis = RedisServer::start();
    let direct = queue(&redis);
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let q = queue_at(proxy.url());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (url, seen) = gated_receiver(gate.clone()).await;
    // More than are leased at first (held and waiting): jobs are popped
    // while those that waited are checked and sent.
    let names: Vec<String> = (0..4 * slots + 2).map(|i| format!("ah-{i}")).collect();
    let ids: Vec<&str> = names.iter().map(String::as_str).collect();
    push_ready(&direct, "ahead", &ids, 600_000).await;
    proxy.set_delay(proxy_delay);
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: slots,
        ..Webhook::new("ahead", &url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    // A request held per slot, two jobs a slot leased ahead.
    let ahead = eventually(Duration::from_secs(60), "jobs leased ahead", || async {
        let s = untimed(&seen);
        let w = waiting(&direct, &ids, &s).await;
        (s.len() == slots && w.len() == 2 * slots).then_some(w)
    })
    .await;
    let (deleted, moved) = (ahead[0].clone(), ahead[1].clone());
    assert!(direct.delete(&deleted).await.unwrap());
    let moved_at = Instant::now();
    direct
        .reschedule(&moved, Duration::from_secs(3), None, None)
        .await
        .unwrap();
    gate.add_permits(1000);
    eventually(Duration::from_secs(60), "every job finished", || async {
        for id in &ids {
            if direct.get(id).await.unwrap().is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;
    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the webhook stops")
        .unwrap();
    let timed = seen.lock().unwrap().clone();
    let seen = untimed(&seen);
    assert!(
        !seen.iter().any(|(id, _)| *id == deleted),
        "{deleted} sent after it was deleted: {seen:?}"
    );
    let sent: Vec<_> = seen.iter().filter(|(id, _)| *id == moved).collect();
    assert_eq!(
        sent,
        [&(moved.clone(), "1".to_owned())],
        "the rescheduled job sent once, on attempt 1: {seen:?}"
    );
    attempts_in_step(&seen).unwrap();
    assert_eq!(seen.len(), ids.len() - 1, "{seen:?}");
    // Not early: sent after its new due time, 3 s after the reschedule
    // was asked for (this host's clock is Redis's; Redis counts whole
    // milliseconds, so its due time may be up to one before this clock's).
    let (_, _, at) = timed.iter().find(|(id, _, _)| *id == moved).unwrap();
    let after = at.duration_since(moved_at);
    assert!(
        after >= Duration::from_millis(2_999),
        "sent {after:?} after the reschedule"
    );
    q.close().await;
    direct.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_deleted_or_rescheduled_while_leased_ahead_is_not_sent_from_the_process() {
    changed_while_waiting(Duration::ZERO, 1).await;
}

/// As above with two slots (two requests held, four jobs waiting, more
/// popped once the slots come free): no job that waited is sent on its
/// pop's finding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_deleted_or_rescheduled_while_leased_ahead_of_two_slots_is_not_sent() {
    changed_while_waiting(Duration::ZERO, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_deleted_or_rescheduled_while_leased_ahead_is_not_sent_with_redis_replies_late() {
    changed_while_waiting(Duration::from_millis(300), 1).await;
}

/// One slot, its request held by the receiver past the ttr (2 s) of the
/// jobs leased ahead behind it: a job that cannot wait for a slot until a
/// second before its lease ends is given back, its attempt uncounted, not
/// left to run out its lease (a failed attempt with no delivery). Once the
/// slot is free every job is delivered once, on attempt 1. Through
/// `proxy_delay` of lateness on every Redis reply: the lease is counted
/// from when the pop was sent, not from its reply.
async fn short_leases_waiting(proxy_delay: Duration) {
    let redis = RedisServer::start();
    let direct = queue(&redis);
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let q = queue_at(proxy.url());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (url, seen) = gated_receiver(gate.clone()).await;
    let ids = ["sh-0", "sh-1", "sh-2", "sh-3"];
    push_ready(&direct, "short", &ids, 2_000).await;
    proxy.set_delay(proxy_delay);
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: 1,
        timeout: Duration::from_secs(30),
        ..Webhook::new("short", &url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    let ahead = eventually(Duration::from_secs(60), "jobs leased ahead", || async {
        let s = untimed(&seen);
        let w = waiting(&direct, &ids, &s).await;
        (s.len() == 1 && !w.is_empty()).then_some(w)
    })
    .await;
    // They leave their lease, given back or run out (the request still
    // held): either way no longer reserved.
    for id in &ahead {
        let j = eventually(
            Duration::from_secs(60),
            "the job out of its lease",
            || async {
                direct
                    .get(id)
                    .await
                    .unwrap()
                    .filter(|j| j.state != JobState::Reserved)
            },
        )
        .await;
        assert_eq!(
            (j.attempts, j.state),
            (0, JobState::Ready),
            "{id} given back uncounted"
        );
    }
    assert_eq!(untimed(&seen).len(), 1, "the first request still held");
    gate.add_permits(1000);
    eventually(Duration::from_secs(60), "every job finished", || async {
        for id in ids {
            if direct.get(id).await.unwrap().is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;
    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the webhook stops")
        .unwrap();
    let mut seen = untimed(&seen);
    seen.sort();
    let want: Vec<(String, String)> = ids.iter().map(|id| (id.to_string(), "1".into())).collect();
    assert_eq!(seen, want, "each job delivered once, on attempt 1");
    q.close().await;
    direct.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_leased_ahead_that_cannot_wait_for_a_slot_goes_back_uncounted() {
    short_leases_waiting(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_leased_ahead_that_cannot_wait_goes_back_uncounted_with_redis_replies_late() {
    short_leases_waiting(Duration::from_millis(400)).await;
}

/// The state and attempts of `id` (None: gone).
async fn state_of(q: &Queue, id: &str) -> Option<(JobState, u32)> {
    q.get(id).await.unwrap().map(|j| (j.state, j.attempts))
}

/// One slot, its request held: of the two jobs leased ahead, one is
/// cancelled while it waits and is never sent; the topic is then paused
/// and the other, still waiting, is given back uncounted rather than sent
/// to a paused topic's receiver. Resumed, it is delivered on attempt 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_leased_ahead_is_not_sent_once_cancelled_or_its_topic_paused() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (url, seen) = gated_receiver(gate.clone()).await;
    let ids = ["cp-0", "cp-1", "cp-2"];
    push_ready(&q, "held", &ids, 600_000).await;
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: 1,
        ..Webhook::new("held", &url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    let ahead = eventually(Duration::from_secs(60), "jobs leased ahead", || async {
        let s = untimed(&seen);
        let w = waiting(&q, &ids, &s).await;
        (s.len() == 1 && w.len() == 2).then_some(w)
    })
    .await;
    let first = untimed(&seen)[0].0.clone();
    let (cancelled, paused) = (&ahead[0], &ahead[1]);
    assert_eq!(q.cancel(cancelled).await.unwrap(), Some(JobState::Reserved));
    q.pause("held").await.unwrap();
    // The request in flight is answered; the slot comes free.
    gate.add_permits(1);
    eventually(Duration::from_secs(30), "the first finished", || async {
        state_of(&q, &first).await.is_none().then_some(())
    })
    .await;
    let back = eventually(
        Duration::from_secs(30),
        "the paused job given back",
        || async {
            let sent = untimed(&seen);
            assert_eq!(sent.len(), 1, "sent while paused or cancelled: {sent:?}");
            state_of(&q, paused)
                .await
                .filter(|(s, _)| *s != JobState::Reserved)
        },
    )
    .await;
    assert_eq!(back, (JobState::Ready, 0), "{paused} given back uncounted");
    q.resume("held").await.unwrap();
    gate.add_permits(1000);
    eventually(
        Duration::from_secs(30),
        "the paused job delivered",
        || async { state_of(&q, paused).await.is_none().then_some(()) },
    )
    .await;
    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the webhook stops")
        .unwrap();
    let seen = untimed(&seen);
    assert_eq!(
        seen,
        [(first, "1".to_owned()), (paused.clone(), "1".to_owned())],
        "{cancelled} never sent"
    );
    q.close().await;
}

/// A receiver that accepts and never answers, one slot, two jobs leased
/// ahead: at shutdown those two are given back at once, uncounted, not
/// left to their (10 minute) lease nor kept until the hung request's
/// timeout; the shutdown ends with that timeout, the hung job's attempt
/// failed and retried later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_jobs_leased_ahead_back_while_a_request_hangs() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let hang = Receiver::start(|_| Reply::Hang).await;
    let ids = ["hg-0", "hg-1", "hg-2"];
    push_ready(&q, "hung", &ids, 600_000).await;
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: 1,
        timeout: Duration::from_secs(8),
        ..Webhook::new("hung", &hang.url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    let ahead = eventually(Duration::from_secs(60), "jobs leased ahead", || async {
        let hits = hang.hits();
        let s: Vec<(String, String)> = hits
            .iter()
            .map(|h| {
                (
                    h.headers["x-delayq-id"].to_str().unwrap().to_owned(),
                    String::new(),
                )
            })
            .collect();
        let w = waiting(&q, &ids, &s).await;
        (s.len() == 1 && w.len() == 2).then(|| (s[0].0.clone(), w))
    })
    .await;
    let (hung, ahead) = ahead;
    let stopped = Instant::now();
    shutdown.trigger();
    for id in &ahead {
        let got = eventually(Duration::from_secs(30), "given back", || async {
            state_of(&q, id)
                .await
                .filter(|(s, _)| *s != JobState::Reserved)
        })
        .await;
        assert_eq!(got, (JobState::Ready, 0), "{id} given back uncounted");
    }
    let took = stopped.elapsed();
    assert!(
        took < Duration::from_secs(6),
        "given back {took:?} after the shutdown, not at once"
    );
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .expect("the webhook stops after its request's timeout")
        .unwrap();
    assert_eq!(hang.hits().len(), 1, "nothing sent after the shutdown");
    let (state, attempts) = state_of(&q, &hung).await.expect("the hung job kept");
    assert_eq!(attempts, 1, "{hung}");
    assert_ne!(state, JobState::Reserved, "{hung} left to its lease");
    q.close().await;
}
