//! Whether expired events reach delayq, found by its canary key rather than
//! read from CONFIG: heard with events on; not heard with them off and
//! CONFIG renamed away (so only the canary can tell), reported in
//! `/readyz` (which stays ready) and `/metrics`; heard again after a
//! reconnect once they are turned on; checked again after a restart of
//! redis-server.

use std::time::Duration;

use delayq::Queue;

use crate::common::{eventually, get_json, queue, RedisServer, TestServer};

/// CONFIG's name on the servers here: delayq cannot guess it.
const CONFIG: &str = "CONFIG_ELSEWHERE_7f3a";
/// Generous: the canary flies within a second of a connect and waits 3 s.
const BOUND: Duration = Duration::from_secs(30);

fn without_config(events: &str) -> RedisServer {
    RedisServer::start_with(&[
        "--notify-keyspace-events",
        events,
        "--rename-command",
        "CONFIG",
        CONFIG,
    ])
}

async fn answer(q: &Queue, want: Option<bool>, what: &str) {
    eventually(BOUND, what, || async {
        (q.expired_events_heard() == want).then_some(())
    })
    .await;
}

async fn metric(base: &str) -> String {
    reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn heard_with_expired_events_on() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    answer(&s.queue, Some(true), "the canary's event heard").await;
    let (status, body) = get_json(&s.base, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["expired_events"], serde_json::json!(true), "{body}");
    assert!(
        metric(&s.base)
            .await
            .contains("\ndelayq_expired_events_heard 1\n"),
        "gauge at 1"
    );
    // No canary left behind.
    eventually(BOUND, "the canary key gone", || async {
        let keys: Vec<String> = redis.cmd(&["KEYS", "*canary*"]).await;
        keys.is_empty().then_some(())
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn not_heard_with_events_off_and_config_renamed_then_heard_once_on() {
    let redis = without_config("");
    let s = TestServer::start(queue(&redis), Default::default()).await;
    // CONFIG refused: the settings cannot say.
    let settings = s.queue.redis_settings().await.unwrap();
    assert_eq!(settings.expired_events, None, "CONFIG is renamed away");

    answer(&s.queue, Some(false), "the canary not heard").await;
    let (status, body) = get_json(&s.base, "/readyz").await;
    assert_eq!(
        status, 200,
        "ready either way (the sweep is the clock): {body}"
    );
    assert_eq!(body["expired_events"], serde_json::json!(false), "{body}");
    assert!(
        metric(&s.base)
            .await
            .contains("\ndelayq_expired_events_heard 0\n"),
        "gauge at 0"
    );
    // Jobs still fire, by the sweep.
    s.queue
        .push(&crate::common::job("c1", "t", 100, 30_000))
        .await
        .unwrap();
    eventually(BOUND, "the job ready", || async {
        s.queue
            .pop(&crate::common::topics(&["t"]), Duration::ZERO)
            .await
            .unwrap()
    })
    .await;

    // Turned on while running: the next reconnect checks again.
    let _: () = redis
        .cmd(&[CONFIG, "SET", "notify-keyspace-events", "Ex"])
        .await;
    let _: i64 = redis.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    answer(&s.queue, Some(true), "heard after the reconnect").await;
    s.stop().await;
}

#[tokio::test]
async fn a_restart_of_redis_is_checked_again() {
    let mut redis = without_config("Ex");
    let q = queue(&redis);
    answer(&q, Some(true), "heard at start").await;
    redis.kill();
    // No events connection: not known.
    answer(&q, None, "not known while redis is away").await;
    redis.restart();
    answer(&q, Some(true), "heard again after the restart").await;
    q.close().await;
}

/// On a cluster the canary flies on every master: one master without
/// events is enough for "not heard".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_master_is_tried() {
    use crate::redis_cluster::{node_config, TestCluster};
    let cluster = TestCluster::start_with(3, 0, &node_config());
    let q = Queue::connect(crate::cluster::cluster_config(&cluster, 6)).unwrap();
    answer(&q, Some(true), "heard from every master").await;
    let last = *cluster.masters().last().unwrap();
    let node = &cluster.nodes[last];
    let _: () = node
        .cmd(&["CONFIG", "SET", "notify-keyspace-events", ""])
        .await;
    let _: i64 = node.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    answer(&q, Some(false), "one master's canary not heard").await;
    q.close().await;
}
