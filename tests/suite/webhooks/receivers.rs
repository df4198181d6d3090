//! Receivers that hang, redirect, answer 1xx, or send huge, cut-off or
//! trickled error bodies; shutdowns and late Redis replies mid-delivery.
//! Each test states a promise and tries to break it.

use super::*;

/// (id, attempt) of each request a receiver saw, in order.
pub(super) type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// A receiver that holds each request until the test adds a permit to
/// `gate`, then answers 200.
pub(super) async fn gated_receiver(gate: Arc<tokio::sync::Semaphore>) -> (String, Seen) {
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
pub(super) fn attempts_in_step(seen: &[(String, String)]) -> Result<(), String> {
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

pub(super) async fn counts(q: &Queue, topic: &str) -> (u64, u64) {
    let o = retried("topics", || q.topics()).await;
    let c = o.topics.get(topic).copied().unwrap_or_default();
    (c.ready, c.reserved)
}

pub(super) async fn push_ready(q: &Queue, topic: &str, ids: &[&str], ttr_ms: u64) {
    let jobs: Vec<_> = ids.iter().map(|id| job(id, topic, 0, ttr_ms)).collect();
    push_all(q, &jobs).await;
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
///
/// The pop is made to happen while replies are held: a webhook parked in a
/// waiting pop would hear of the new job only through its subscriber,
/// whose messages the proxy holds too, so instead the first delivery is
/// kept open until the job is ready, and its end sets off a pop ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_while_a_pop_is_at_redis_gives_its_jobs_back() {
    let redis = RedisServer::start();
    let direct = queue(&redis);
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let q = queue_at(proxy.url());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (url, seen) = gated_receiver(gate.clone()).await;
    push_ready(&direct, "popshut", &["popshut-0"], 600_000).await;
    arm_slowlog(&redis, 10_000).await;
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: 1,
        timeout: Duration::from_secs(120),
        ..Webhook::new("popshut", &url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    // The first delivery under way, its one slot taken: the webhook pops
    // again only once it ends.
    eventually(Duration::from_secs(30), "the first delivery", || async {
        (seen.lock().unwrap().len() == 1).then_some(())
    })
    .await;
    // The pop ahead that follows the first one's reply (and finds nothing)
    // has run at Redis: the proxy holds replies, not requests, so a pop
    // still on its way would take the second job before the hold shows.
    eventually(Duration::from_secs(30), "the pop ahead run", || async {
        (script_calls(&redis, "dq_pop").await >= 2).then_some(())
    })
    .await;
    proxy.hold(true);
    push_ready(&direct, "popshut", &["popshut-1"], 600_000).await;
    eventually(Duration::from_secs(30), "the second job ready", || async {
        (counts(&direct, "popshut").await == (1, 1)).then_some(())
    })
    .await;
    // The first delivery's end sets off a pop ahead (or, if a pop sent
    // before the hold still waits for its reply, the pop after its
    // timeout): either runs at Redis while its reply is held.
    gate.add_permits(1);
    eventually(Duration::from_secs(60), "the pop at Redis", || async {
        (counts(&direct, "popshut").await == (0, 1)).then_some(())
    })
    .await;
    // Its stop waits out the finisher's tries of the first job's finish,
    // whose replies are held too (about 20 s). (A pop reply held past its
    // patience, 32 s, is given back all the same: as a lost pop.)
    shutdown.trigger();
    tokio::time::timeout(Duration::from_secs(90), task)
        .await
        .expect("the webhook stops")
        .unwrap();
    proxy.hold(false);
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

/// Runs three jobs of ttr 2 s to a webhook whose Redis replies come
/// 700 ms late (one slot, answers after 300 ms) until every one is
/// finished (panics past a minute); returns the deliveries.
async fn through_slow_replies() -> Vec<(String, String)> {
    let redis = RedisServer::start();
    let direct = queue(&redis);
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let q = queue_at(proxy.url());
    let (url, seen) = slow_receiver(Some(Duration::from_millis(300))).await;
    let ids = ["slow-a", "slow-b", "slow-c"];
    // A job's lease has 1.3 s left when its pop's reply comes: time for
    // the check or the give-back to reach Redis on a busy machine.
    push_ready(&direct, "slow", &ids, 2_000).await;
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

/// Replies from Redis 700 ms late (calls reach it at once), ttr 2 s: a
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

/// Pushes `id` due now to `topic`, retried after an hour: a failed attempt
/// leaves it delayed, with its error.
async fn push_once(q: &Queue, id: &str, topic: &str) {
    q.push(&delayq::NewJob {
        retry: Some(delayq::RetryPolicy::parse("1h", None).unwrap()),
        ..job(id, topic, 0, 30_000)
    })
    .await
    .unwrap();
}

/// Waits until `id`'s first attempt is settled: None when it was finished,
/// else the job (delayed after a failed attempt).
async fn first_attempt(q: &Queue, id: &str) -> Option<delayq::Job> {
    eventually(
        Duration::from_secs(60),
        "the first attempt settled",
        || async {
            match q.get(id).await.unwrap() {
                None => Some(None),
                Some(j) if j.state == JobState::Delayed && j.attempts > 0 => Some(Some(j)),
                Some(_) => None,
            }
        },
    )
    .await
}

/// A receiver that answers every POST to `/hook` with `status` and
/// `Location: /hook/`, and 200 to anything sent there (GET or POST);
/// returns its URL and the count of requests that reached `/hook/`.
async fn redirecting_receiver(status: u16) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let followed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = followed.clone();
    let app = Router::new()
        .route(
            "/hook",
            routing::post(move || async move {
                (
                    StatusCode::from_u16(status).unwrap(),
                    [("location", "/hook/")],
                    "moved",
                )
            }),
        )
        .route(
            "/hook/",
            routing::any(move || {
                count.fetch_add(1, Ordering::SeqCst);
                async { StatusCode::OK }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, followed)
}

/// Only a 2xx to the POST finishes a job: a redirect (any 3xx) is not
/// followed, whether the client would follow it with a GET without body
/// (302, 303) or with the POST again (307, 308). The attempt fails with an
/// error naming the status and the Location, and nothing reaches the
/// Location.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_failed_attempt_and_is_not_followed() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let shutdown = Shutdown::new();
    let mut receivers = Vec::new();
    for status in [301, 302, 303, 307, 308] {
        let topic = format!("redirect-{status}");
        let (url, followed) = redirecting_receiver(status).await;
        tokio::spawn(webhook::run(
            q.clone(),
            Webhook::new(&topic, &url),
            shutdown.clone(),
        ));
        push_once(&q, &format!("r-{status}"), &topic).await;
        receivers.push((status, followed));
    }
    for (status, followed) in receivers {
        let job = first_attempt(&q, &format!("r-{status}"))
            .await
            .unwrap_or_else(|| panic!("a {status} finished the job"));
        let error = job.last_error.unwrap();
        assert!(
            error.starts_with(&format!("HTTP {status}")) && error.contains("/hook/"),
            "{error}"
        );
        assert_eq!(job.attempts, 1);
        assert_eq!(followed.load(std::sync::atomic::Ordering::SeqCst), 0);
    }
    shutdown.trigger();
    q.close().await;
}

/// How a raw receiver writes its body after the head.
struct Body {
    /// The bytes to write; None: 'x's without end (up to `cap`).
    bytes: Option<&'static [u8]>,
    /// Bytes a write, and the pause after each.
    piece: usize,
    pause: Duration,
    cap: usize,
    /// Close the connection once the bytes are written (else hold it open,
    /// silent, until the client goes).
    close: bool,
}

/// A receiver on a raw socket: to every request it answers `head` and then
/// writes its body as `body` says. Returns its URL and the body bytes it
/// wrote to the first request before it was done or the client went.
async fn raw_receiver(head: &'static str, body: Body) -> (String, Arc<Mutex<Option<usize>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let written: Arc<Mutex<Option<usize>>> = Default::default();
    let first = written.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let first = first.clone();
            tokio::spawn(async move {
                // The request: headers and its short JSON body.
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                if conn.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'x'; body.piece];
                let mut sent = 0;
                let gone = loop {
                    let piece = match body.bytes {
                        Some(b) if sent >= b.len() => break false,
                        Some(b) => &b[sent..(sent + body.piece).min(b.len())],
                        None if sent >= body.cap => break false,
                        None => &chunk[..],
                    };
                    if conn.write_all(piece).await.is_err() {
                        break true;
                    }
                    sent += piece.len();
                    if !body.pause.is_zero() {
                        tokio::time::sleep(body.pause).await;
                    }
                };
                if !gone && !body.close {
                    // Silent, the connection open, until the client goes.
                    let _ = conn.read(&mut buf).await;
                }
                first.lock().unwrap().get_or_insert(sent);
            });
        }
    });
    (url, written)
}

/// A receiver's error reply with a huge body (Content-Length 4 GiB, 'x's as
/// fast as the socket takes them): delayq reads a few KB of it, drops the
/// connection and fails the attempt at once with a short error. Reading
/// the whole body took its memory from 17 to 276 MB for one delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_error_body_is_read_a_few_kb_and_the_connection_dropped() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // At most 256 MiB are written; then the receiver holds on, silent.
    let (url, written) = raw_receiver(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4294967296\r\n\r\n",
        Body {
            bytes: None,
            piece: 64 * 1024,
            pause: Duration::ZERO,
            cap: 256 << 20,
            close: false,
        },
    )
    .await;
    let shutdown = Shutdown::new();
    let hook = Webhook {
        timeout: Duration::from_secs(120),
        ..Webhook::new("huge", &url)
    };
    tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    let started = std::time::Instant::now();
    push_once(&q, "huge-1", "huge").await;
    let job = first_attempt(&q, "huge-1")
        .await
        .expect("a 500 is a failure");
    let error = job.last_error.unwrap();
    assert!(error.starts_with("HTTP 500: xxxx"), "{error}");
    assert!(error.len() < 1000, "{} bytes of error", error.len());
    // Well before the timeout: nothing waited for the rest of the body.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    // The receiver could write little more than the sockets' buffers hold
    // before the connection was gone.
    let sent = eventually(Duration::from_secs(30), "the receiver cut off", || async {
        *written.lock().unwrap()
    })
    .await;
    assert!(sent < 32 << 20, "the receiver wrote {sent} bytes");
    shutdown.trigger();
    q.close().await;
}

/// Error bodies that end early or come slowly: a body cut off by the
/// receiver closing fails the attempt with what came; a body trickled a
/// few bytes at a time is not waited for past the delivery's timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_body_cut_off_or_trickled_fails_the_attempt_within_the_timeout() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let shutdown = Shutdown::new();
    // Promises 1000 bytes, sends 9 and closes.
    let (cut, _) = raw_receiver(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 1000\r\n\r\n",
        Body {
            bytes: Some(b"overload!"),
            piece: 64,
            pause: Duration::ZERO,
            cap: 0,
            close: true,
        },
    )
    .await;
    // One byte every 100 ms of a body of 4 GiB.
    let (slow, _) = raw_receiver(
        "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 4294967296\r\n\r\n",
        Body {
            bytes: None,
            piece: 1,
            pause: Duration::from_millis(100),
            cap: usize::MAX,
            close: false,
        },
    )
    .await;
    let timeout = Duration::from_secs(3);
    for (topic, url) in [("cut", &cut), ("trickle", &slow)] {
        let hook = Webhook {
            timeout,
            ..Webhook::new(topic, url)
        };
        tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    }
    let started = std::time::Instant::now();
    push_once(&q, "cut-1", "cut").await;
    push_once(&q, "trickle-1", "trickle").await;
    let job = first_attempt(&q, "cut-1")
        .await
        .expect("a 503 is a failure");
    let error = job.last_error.unwrap();
    assert!(error.starts_with("HTTP 503: overload!"), "{error}");
    let job = first_attempt(&q, "trickle-1")
        .await
        .expect("a 500 is a failure");
    // The attempt ended at the timeout, with what had come by then.
    let error = job.last_error.unwrap();
    assert!(
        error.starts_with("HTTP 500: xx") && error.contains("timed out"),
        "{error}"
    );
    assert!(
        started.elapsed() < timeout + Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    shutdown.trigger();
    q.close().await;
}

/// Odd replies: informational (1xx) answers before a 200 finish the job
/// (the 200 is the reply); a 1xx with no final reply, or a 101 nobody asked
/// for, is a failed attempt, counted once, never a delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informational_replies_finish_nothing_on_their_own() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let shutdown = Shutdown::new();
    let silent = |bytes: &'static [u8]| Body {
        bytes: Some(bytes),
        piece: 64,
        pause: Duration::ZERO,
        cap: 0,
        close: false,
    };
    let cases = [
        (
            "early",
            "HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n\
             HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
        ),
        ("processing", "HTTP/1.1 102 Processing\r\n\r\n"),
        ("switching", "HTTP/1.1 101 Switching Protocols\r\n\r\n"),
    ];
    for (topic, head) in cases {
        let (url, _) = raw_receiver(head, silent(b"")).await;
        let hook = Webhook {
            timeout: Duration::from_secs(2),
            ..Webhook::new(topic, &url)
        };
        tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
        push_once(&q, &format!("{topic}-1"), topic).await;
    }
    assert!(
        first_attempt(&q, "early-1").await.is_none(),
        "the 200 finished it"
    );
    for id in ["processing-1", "switching-1"] {
        let job = first_attempt(&q, id).await.expect("a failed attempt");
        assert_eq!(job.attempts, 1, "{id}: {:?}", job.last_error);
    }
    shutdown.trigger();
    q.close().await;
}
