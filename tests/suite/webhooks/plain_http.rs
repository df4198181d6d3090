//! A plain http webhook's requests (sent without reqwest's layers): the
//! request as documented, its connections kept for the next requests, its
//! errors without the URL's secrets, and a proxy from the environment
//! still used.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A receiver that answers 200 (with `reply` as its body) and counts the
/// connections it accepted.
async fn counting_receiver(reply: &'static str) -> (Receiver, Arc<AtomicUsize>) {
    use axum::serve::ListenerExt;
    let hits: Arc<Mutex<Vec<Hit>>> = Default::default();
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let app = Router::new().route(
        "/hook",
        routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(Hit {
                    at: Instant::now(),
                    headers,
                    body: body.to_vec(),
                });
                (StatusCode::OK, reply)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook?k=v#part", listener.local_addr().unwrap());
    let counted = connections.clone();
    let listener = listener.tap_io(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (Receiver { url, hits }, connections)
}

/// 200 jobs at concurrency 4 to a plain http URL with a query and a
/// fragment: each request is the documented one (JSON body, the job's
/// headers, a signature that verifies), each job is delivered once, and
/// the requests share a few kept connections rather than one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_webhook_sends_the_documented_request_over_kept_connections() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let (receiver, connections) = counting_receiver("").await;
    let n = 200;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| job(&format!("p{i}"), "plain", 0, 600_000))
        .collect();
    push_all(&q, &jobs).await;
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: 4,
        secret: Some(Secret("s3cret".into())),
        ..Webhook::new("plain", &receiver.url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    eventually(Duration::from_secs(60), "all finished", || async {
        let o = q.topics().await.unwrap();
        let c = o.topics.get("plain").copied().unwrap_or_default();
        (c.ready + c.reserved == 0 && receiver.hits().len() >= n).then_some(())
    })
    .await;
    shutdown.trigger();
    task.await.unwrap();
    let hits = receiver.hits();
    let mut ids = Vec::new();
    for h in &hits {
        let header = |name: &str| h.headers[name].to_str().unwrap().to_owned();
        assert_eq!(header("content-type"), "application/json");
        let body: Value = serde_json::from_slice(&h.body).unwrap();
        let id = header("x-delayq-id");
        assert_eq!(body["id"], id.as_str());
        assert_eq!(body["topic"], "plain");
        assert_eq!(body["attempt"], 1);
        assert_eq!(header("x-delayq-topic"), "plain");
        assert_eq!(header("x-delayq-attempt"), "1");
        let ts: u64 = header("x-delayq-timestamp").parse().unwrap();
        let sig = header("x-delayq-signature");
        assert_eq!(
            webhook::verify_at("s3cret", ts, &h.body, &sig, ts, webhook::REPLAY_TOLERANCE),
            Ok(()),
            "{id}"
        );
        ids.push(id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!((hits.len(), ids.len()), (n, n), "each delivered once");
    // Kept and reused: a connection per request would be 200.
    let opened = connections.load(Ordering::SeqCst);
    assert!(
        opened * 10 <= n,
        "{opened} connections for {n} requests at concurrency 4"
    );
    q.close().await;
}

/// A receiver whose 2xx replies carry a body (which no one reads: the
/// hook takes no result) still gets its connections kept: the body is read
/// off them, not left to close them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_webhook_keeps_its_connections_when_each_2xx_has_a_body() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let (receiver, connections) = counting_receiver("thanks, got it").await;
    let n = 100;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| job(&format!("b{i}"), "bodied", 0, 600_000))
        .collect();
    push_all(&q, &jobs).await;
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: 2,
        ..Webhook::new("bodied", &receiver.url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    eventually(Duration::from_secs(60), "all finished", || async {
        let o = q.topics().await.unwrap();
        let c = o.topics.get("bodied").copied().unwrap_or_default();
        (c.ready + c.reserved == 0 && receiver.hits().len() >= n).then_some(())
    })
    .await;
    shutdown.trigger();
    task.await.unwrap();
    assert_eq!(receiver.hits().len(), n, "each delivered once");
    let opened = connections.load(Ordering::SeqCst);
    assert!(
        opened * 10 <= n,
        "{opened} connections for {n} requests at concurrency 2"
    );
    q.close().await;
}

/// A receiver that closes each connection after its reply, once told to
/// (`close`), without saying so (no `Connection: close`): the connection
/// is by then kept idle for the next job. Notes each request's
/// `x-delayq-id` and `x-delayq-attempt`, and how many connections it
/// closed.
async fn closing_receiver() -> (
    String,
    Arc<Mutex<Vec<(String, String)>>>,
    Arc<tokio::sync::Notify>,
    Arc<AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let seen: Arc<Mutex<Vec<(String, String)>>> = Default::default();
    let closed = Arc::new(AtomicUsize::new(0));
    let close = Arc::new(tokio::sync::Notify::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (noted, count, told) = (seen.clone(), closed.clone(), close.clone());
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            let (noted, count, told) = (noted.clone(), count.clone(), told.clone());
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                // The head, then as many body bytes as it names.
                let (head, body_len) = loop {
                    let n = sock.read(&mut buf).await.unwrap();
                    assert!(n > 0, "the request ended early");
                    got.extend_from_slice(&buf[..n]);
                    if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                        let len: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map(|v| v.trim().parse().unwrap())
                            .unwrap_or(0);
                        break (head, end + 4 + len);
                    }
                };
                while got.len() < body_len {
                    let n = sock.read(&mut buf).await.unwrap();
                    assert!(n > 0, "the body ended early");
                    got.extend_from_slice(&buf[..n]);
                }
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| l.strip_prefix(name))
                        .map(|v| v.trim().to_owned())
                        .unwrap_or_default()
                };
                noted
                    .lock()
                    .unwrap()
                    .push((header("x-delayq-id:"), header("x-delayq-attempt:")));
                sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await
                    .unwrap();
                told.notified().await;
                drop(sock);
                count.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    (url, seen, close, closed)
}

/// The receiver closes each kept connection while it is idle, between two
/// jobs: the next job finds it closed and goes over a new one, delivered
/// on its first attempt, never failed for it.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_the_receiver_closed_while_idle_fails_no_delivery() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let (url, seen, close, closed) = closing_receiver().await;
    let shutdown = Shutdown::new();
    let hook = Webhook {
        concurrency: 1,
        ..Webhook::new("closing", &url)
    };
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    let n = 6;
    for i in 0..n {
        let id = format!("c{i}");
        q.push(&job(&id, "closing", 0, 30_000)).await.unwrap();
        eventually(Duration::from_secs(30), "the job finished", || async {
            q.get(&id).await.unwrap().is_none().then_some(())
        })
        .await;
        // Its connection, kept idle by now, closed by the receiver before
        // the next job.
        close.notify_one();
        eventually(Duration::from_secs(10), "the connection closed", || async {
            (closed.load(Ordering::SeqCst) > i).then_some(())
        })
        .await;
    }
    shutdown.trigger();
    task.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    let expected: Vec<(String, String)> =
        (0..n).map(|i| (format!("c{i}"), "1".to_owned())).collect();
    assert_eq!(seen, expected, "each job once, on its first attempt");
    q.close().await;
}

/// A plain http URL whose query holds a secret, nothing listening: the
/// failed attempt's error names the URL with the secret masked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_connection_error_keeps_the_query_secret_out_of_the_job() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // Nothing listens on port 9 (discard) here: the connection is refused.
    q.push(&job("pe-1", "gone", 0, 30_000)).await.unwrap();
    let shutdown = Shutdown::new();
    let hook = Webhook::new("gone", "http://127.0.0.1:9/in?key=hush-hush");
    let task = tokio::spawn(webhook::run(q.clone(), hook, shutdown.clone()));
    let error = eventually(Duration::from_secs(30), "the job's last error", || async {
        q.get("pe-1").await.unwrap()?.last_error
    })
    .await;
    shutdown.trigger();
    task.await.unwrap();
    assert!(!error.contains("hush-hush"), "a secret shown: {error}");
    assert!(
        error.starts_with("connection error: http://127.0.0.1:9/in?key=***: "),
        "{error}"
    );
    q.close().await;
}

/// With HTTP_PROXY set, a plain http webhook's requests go through that
/// proxy, as they did when every request went through reqwest: the
/// receiver here stands for the proxy, and the URL itself points where
/// nothing listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_webhook_goes_through_the_proxy_the_environment_names() {
    let redis = RedisServer::start();
    let proxy = Receiver::start(|_| Reply::Status(200)).await;
    let proxy_base = proxy.url.trim_end_matches("/hook").to_owned();
    let delayq = DelayqProcess::spawn_from(
        std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["serve", "--listen", "127.0.0.1:0", "--redis", &redis.url()])
            .args(["--webhook", "viaproxy=http://127.0.0.1:9/hook"])
            .env("DELAYQ_LOG", "warn")
            .env("HTTP_PROXY", &proxy_base)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy"),
    );
    let q = queue(&redis);
    q.push(&job("px-1", "viaproxy", 0, 30_000)).await.unwrap();
    eventually(Duration::from_secs(30), "the job finished", || async {
        q.get("px-1").await.unwrap().is_none().then_some(())
    })
    .await;
    let hits = proxy.hits();
    assert_eq!(hits.len(), 1, "one request through the proxy");
    assert_eq!(hits[0].headers["x-delayq-id"], "px-1");
    q.close().await;
    delayq.terminate();
}
