//! The event stream (`--events`): every transition written in the same
//! script as the change, read through the library, `GET /v1/events`
//! (Server-Sent Events over real HTTP) and `delayq events`.

use std::time::Duration;

use delayq::http::ServerConfig;
use delayq::wire::Event;
use delayq::{Config, Queue, RetryPolicy};

use crate::common::{
    config, eventually, get_json, job, push_all, queue, topics, DelayqProcess, RedisServer,
    TestServer,
};

fn events_config(redis: &RedisServer) -> Config {
    Config {
        events: true,
        ..config(redis)
    }
}

fn events_queue(redis: &RedisServer) -> Queue {
    Queue::connect(events_config(redis)).unwrap()
}

/// Every event kept, oldest first (kinds and job ids only where enough).
async fn all_events(q: &Queue) -> Vec<Event> {
    let mut out = Vec::new();
    let mut pos = "0".to_owned();
    loop {
        let read = q.events_after(&pos, &[], 100).await.unwrap();
        assert!(read.gaps.is_empty(), "nothing trimmed yet");
        if read.position == pos && read.events.is_empty() {
            return out;
        }
        out.extend(read.events.into_iter().map(|(_, e)| e));
        pos = read.position;
    }
}

fn kinds_of(events: &[Event], id: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.id == id)
        .map(|e| e.event.clone())
        .collect()
}

/// Pops `topic` until a job comes (the dispatcher moves it when due).
async fn pop_one(q: &Queue, topic: &str) -> delayq::Delivery {
    let t = topics(&[topic]);
    eventually(Duration::from_secs(20), "a job to pop", || async {
        q.pop(&t, Duration::from_millis(200)).await.unwrap()
    })
    .await
}

#[tokio::test]
async fn a_jobs_life_is_pushed_fired_delivered_finished_with_its_fields() {
    let redis = RedisServer::start();
    let q = events_queue(&redis);
    q.push(&job("j1", "mail", 50, 30_000)).await.unwrap();
    let d = pop_one(&q, "mail").await;
    q.finish(&d.id, &d.token).await.unwrap();

    let events = all_events(&q).await;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds, ["pushed", "fired", "delivered", "finished"]);
    let attempts: Vec<u32> = events.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, [0, 0, 1, 1]);
    for e in &events {
        assert_eq!((e.id.as_str(), e.topic.as_str()), ("j1", "mail"));
        assert_eq!(e.error, None);
    }
    let due = d.due_ms;
    let dues: Vec<Option<i64>> = events.iter().map(|e| e.due_ms).collect();
    assert_eq!(dues, [Some(due), Some(due), Some(due), None]);
    // Times are Redis's, in order, and nothing fires before it is due.
    assert!(events.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
    assert!(
        events[1].at_ms >= due,
        "fired at {} before due {due}",
        events[1].at_ms
    );
}

#[tokio::test]
async fn a_nack_is_failed_then_retried_and_the_last_attempt_dead() {
    let redis = RedisServer::start();
    let q = events_queue(&redis);
    let mut j = job("n1", "work", 0, 30_000);
    j.retry = Some(RetryPolicy::parse("", Some(2)).unwrap());
    q.push(&j).await.unwrap();
    let d = pop_one(&q, "work").await;
    q.nack(&d.id, &d.token, None, "boom one").await.unwrap();
    let d = pop_one(&q, "work").await;
    assert_eq!(d.attempts, 2);
    q.nack(&d.id, &d.token, None, "boom two").await.unwrap();

    let events = all_events(&q).await;
    assert_eq!(
        kinds_of(&events, "n1"),
        [
            "pushed",
            "fired",
            "delivered",
            "failed",
            "retried",
            "delivered",
            "failed",
            "dead"
        ]
    );
    let failed: Vec<(u32, Option<&str>)> = events
        .iter()
        .filter(|e| e.event == "failed")
        .map(|e| (e.attempt, e.error.as_deref()))
        .collect();
    assert_eq!(failed, [(1, Some("boom one")), (2, Some("boom two"))]);
    let retried = events.iter().find(|e| e.event == "retried").unwrap();
    assert_eq!(retried.attempt, 1);
    // Ready again at once: due when it failed (rounded up to the ms).
    let due = retried.due_ms.unwrap();
    assert!(
        (retried.at_ms..=retried.at_ms + 1).contains(&due),
        "{retried:?}"
    );
    let dead = events.iter().find(|e| e.event == "dead").unwrap();
    assert_eq!((dead.attempt, dead.due_ms), (2, None));
}

#[tokio::test]
async fn a_lease_that_runs_out_is_failed_then_retried_when_due_again() {
    let redis = RedisServer::start();
    let q = events_queue(&redis);
    let mut j = job("l1", "slow", 0, 100);
    j.retry = Some(RetryPolicy::parse("1s", None).unwrap());
    q.push(&j).await.unwrap();
    pop_one(&q, "slow").await;
    let events = eventually(Duration::from_secs(20), "the lease to run out", || async {
        let events = all_events(&q).await;
        (kinds_of(&events, "l1").len() >= 5).then_some(events)
    })
    .await;
    assert_eq!(
        kinds_of(&events, "l1")[..5],
        ["pushed", "fired", "delivered", "failed", "retried"]
    );
    let failed = &events[3];
    assert!(
        failed.error.as_deref().unwrap().contains("lease expired"),
        "{failed:?}"
    );
    let retried = &events[4];
    assert_eq!(retried.attempt, 1);
    assert!(
        retried.due_ms.unwrap() >= retried.at_ms + 1000,
        "{retried:?}"
    );
}

#[tokio::test]
async fn with_events_off_nothing_is_written_and_the_endpoint_says_how_to_turn_them_on() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("o1", "t", 0, 30_000)).await.unwrap();
    let d = pop_one(&q, "t").await;
    q.finish(&d.id, &d.token).await.unwrap();
    let mut c = redis.conn().await;
    let exists: i64 = redis::cmd("EXISTS")
        .arg("{dq}:events")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(exists, 0, "no stream with events off");

    let server = TestServer::start(q, ServerConfig::default()).await;
    let (status, body) = crate::common::get_json(&server.base, "/v1/events").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "events_off");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("--events"), "{message}");
    server.stop().await;
}

/// One Server-Sent Events connection, read as it comes.
struct Sse {
    resp: reqwest::Response,
    buf: String,
}

/// (id, event name, data) of one message.
type Message = (Option<String>, Option<String>, serde_json::Value);

impl Sse {
    async fn open(base: &str, query: &str, last_id: Option<&str>) -> Sse {
        let mut req = reqwest::Client::new().get(format!("{base}/v1/events{query}"));
        if let Some(id) = last_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let ct = resp.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Sse {
            resp,
            buf: String::new(),
        }
    }

    /// The next message (keep-alive comments skipped), within 20 s.
    async fn next(&mut self) -> Message {
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if let Some(end) = self.buf.find("\n\n") {
                    let block: String = self.buf.drain(..end + 2).collect();
                    let (mut id, mut event, mut data) = (None, None, String::new());
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("id:") {
                            id = Some(v.trim().to_owned());
                        } else if let Some(v) = line.strip_prefix("event:") {
                            event = Some(v.trim().to_owned());
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push_str(v.trim());
                        }
                    }
                    if !data.is_empty() {
                        return (id, event, serde_json::from_str(&data).unwrap());
                    }
                    continue;
                }
                let chunk = self
                    .resp
                    .chunk()
                    .await
                    .unwrap()
                    .expect("the stream goes on");
                self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await
        .expect("a message within 20 s")
    }

    /// Messages until one about job `id` of kind `kind` (included).
    async fn until(&mut self, id: &str, kind: &str) -> Vec<Message> {
        let mut out = Vec::new();
        loop {
            let m = self.next().await;
            let done = m.2["id"] == id && m.2["event"] == kind;
            out.push(m);
            if done {
                return out;
            }
        }
    }
}

fn names(ms: &[Message]) -> Vec<String> {
    ms.iter()
        .map(|(_, _, d)| {
            format!(
                "{} {}",
                d["event"].as_str().unwrap(),
                d["id"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn sse_delivers_the_events_and_a_reconnect_gets_exactly_the_missed_ones() {
    let redis = RedisServer::start();
    let q = events_queue(&redis);
    let server = TestServer::start(q.clone(), ServerConfig::default()).await;
    let mut sse = Sse::open(&server.base, "", None).await;
    q.push(&job("s1", "mail", 0, 30_000)).await.unwrap();
    let d = pop_one(&q, "mail").await;
    q.finish(&d.id, &d.token).await.unwrap();
    let got = sse.until("s1", "finished").await;
    assert_eq!(
        names(&got),
        ["pushed s1", "fired s1", "delivered s1", "finished s1"]
    );
    let first = &got[0].2;
    assert_eq!(first["topic"], "mail");
    assert_eq!(first["attempt"], 0);
    assert!(first["at_ms"].as_i64().unwrap() > 0);
    assert_eq!(first["due_ms"], d.due_ms);
    drop(sse);

    // Back after the second event: the third and fourth, then what came
    // since (a marker), none twice.
    let after = got[1].0.clone().unwrap();
    q.push(&job("marker", "mail", 60_000, 30_000))
        .await
        .unwrap();
    let mut sse = Sse::open(&server.base, "", Some(&after)).await;
    let again = sse.until("marker", "pushed").await;
    assert_eq!(
        names(&again),
        ["delivered s1", "finished s1", "pushed marker"]
    );
    assert_eq!(again[0].0, got[2].0, "the same position for the same event");
    // ?after= does the same as the header.
    drop(sse);
    let mut sse = Sse::open(
        &server.base,
        &format!("?after={}", got[2].0.clone().unwrap()),
        None,
    )
    .await;
    assert_eq!(
        names(&sse.until("marker", "pushed").await),
        ["finished s1", "pushed marker"]
    );
    // A server stopping ends its streams: its graceful stop waits on none.
    tokio::time::timeout(Duration::from_secs(20), server.stop())
        .await
        .expect("the server stops with a stream open");
    let end = async { while let Ok(Some(_)) = sse.resp.chunk().await {} };
    tokio::time::timeout(Duration::from_secs(20), end)
        .await
        .expect("the stream ends");
}

#[tokio::test]
async fn sse_filters_by_topics() {
    let redis = RedisServer::start();
    let q = events_queue(&redis);
    let server = TestServer::start(q.clone(), ServerConfig::default()).await;
    let mut sse = Sse::open(&server.base, "?topics=a,c", None).await;
    for (id, topic) in [("x1", "b"), ("x2", "a"), ("x3", "b"), ("x4", "c")] {
        q.push(&job(id, topic, 60_000, 30_000)).await.unwrap();
    }
    let got = sse.until("x4", "pushed").await;
    assert_eq!(names(&got), ["pushed x2", "pushed x4"]);
    drop(sse);
    server.stop().await;
}

#[tokio::test]
async fn a_position_older_than_what_is_kept_gets_a_gap_then_the_oldest_kept() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        events_kept: 10,
        ..events_config(&redis)
    })
    .unwrap();
    let server = TestServer::start(q.clone(), ServerConfig::default()).await;
    q.push(&job("g0", "t", 60_000, 30_000)).await.unwrap();
    let first = q.events_after("0", &[], 1).await.unwrap();
    let old = first.events[0].0.clone();
    // MAXLEN ~ trims whole stream nodes (100 entries each by default).
    for i in 1..=400 {
        q.push(&job(&format!("g{i}"), "t", 60_000, 30_000))
            .await
            .unwrap();
    }
    let mut c = redis.conn().await;
    let len: i64 = redis::cmd("XLEN")
        .arg("{dq}:events")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(len < 400, "the stream is capped: {len} kept");

    let mut sse = Sse::open(&server.base, "", Some(&old)).await;
    let (id, event, data) = sse.next().await;
    assert_eq!((id, event.as_deref()), (None, Some("gap")));
    assert_eq!(data["partitions"], serde_json::json!([0]));
    assert!(
        data["message"].as_str().unwrap().contains("missed"),
        "{data}"
    );
    // Then the oldest kept, in order, up to the newest.
    let rest = sse.until("g400", "pushed").await;
    assert_eq!(rest.len() as i64, len);
    drop(sse);

    // A position still kept has no gap.
    let kept = q.events_after("0", &[], 1).await.unwrap();
    assert_eq!(kept.gaps, [0], "from the start: some were trimmed");
    let read = q.events_after(&kept.events[0].0, &[], 1000).await.unwrap();
    assert!(read.gaps.is_empty());
    assert_eq!(read.events.len() as i64, len - 1);
    server.stop().await;
}

#[tokio::test]
async fn a_partitioned_queue_has_a_position_per_partition_and_resumes_each() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..events_config(&redis)
    })
    .unwrap();
    let ids: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    for id in &ids {
        q.push(&job(id, "t", 0, 30_000)).await.unwrap();
    }
    let mut popped = 0;
    while popped < ids.len() {
        let d = pop_one(&q, "t").await;
        q.finish(&d.id, &d.token).await.unwrap();
        popped += 1;
    }
    let read = q.events_after("0", &[], 1000).await.unwrap();
    assert!(read.gaps.is_empty());
    assert_eq!(read.position.split(',').count(), 4);
    let events: Vec<Event> = read.events.iter().map(|(_, e)| e.clone()).collect();
    for id in &ids {
        assert_eq!(
            kinds_of(&events, id),
            ["pushed", "fired", "delivered", "finished"],
            "{id}"
        );
    }
    // Resuming after any event gives exactly the ones after it.
    let (mid, _) = &read.events[20];
    let rest = q.events_after(mid, &[], 1000).await.unwrap();
    let tail: Vec<&Event> = read.events[21..].iter().map(|(_, e)| e).collect();
    let mut got: Vec<&Event> = rest.events.iter().map(|(_, e)| e).collect();
    let mut want = tail.clone();
    let key = |e: &&Event| (e.id.clone(), e.event.clone());
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(got, want);
    // A position of another partition count is refused, naming the fault.
    let err = q
        .events_after("0-0", &[], 10)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("4 partition"), "{err}");
}

#[tokio::test]
async fn delayq_events_prints_one_line_per_event() {
    let redis = RedisServer::start();
    let q = events_queue(&redis);
    let server = TestServer::start(q.clone(), ServerConfig::default()).await;
    q.push(&job("c1", "cli", 60_000, 30_000)).await.unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["events", "--after", "0", "--json", "--server", &server.base])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _child = Kill(child);
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        line
    });
    let line = tokio::time::timeout(Duration::from_secs(30), line)
        .await
        .expect("a line within 30 s")
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (v["event"].as_str(), v["id"].as_str()),
        (Some("pushed"), Some("c1"))
    );
    assert!(v["position"].as_str().unwrap().contains('-'), "{v}");
    drop(_child);

    let (ok, _, err) =
        crate::common::delayq_cli(&server.base, &["events", "--after", "nope"]).await;
    assert!(!ok && err.contains("not an event id"), "{err}");
    server.stop().await;
}

#[tokio::test]
async fn serve_with_events_streams_them_and_refuses_an_events_kept_out_of_range() {
    let redis = RedisServer::start();
    let delayq = crate::common::DelayqProcess::start(&redis, &["--events", "--events-kept", "500"]);
    let mut sse = Sse::open(&delayq.base, "?after=0", None).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/jobs", delayq.base))
        .body(r#"{"id": "h1", "topic": "web", "body": "x", "delay_ms": 60000}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let got = sse.until("h1", "pushed").await;
    assert_eq!(names(&got), ["pushed h1"]);
    drop(sse);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--redis", &redis.url(), "--events-kept", "0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("events_kept 0 is out of range"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_redis_cluster_each_jobs_life_is_in_order() {
    let cluster =
        crate::redis_cluster::TestCluster::start_with(3, 0, &crate::redis_cluster::node_config());
    let q = Queue::connect(Config {
        events: true,
        ..crate::cluster::cluster_config(&cluster, 6)
    })
    .unwrap();
    let ids: Vec<String> = (0..12).map(|i| format!("c{i}")).collect();
    for id in &ids {
        q.push(&job(id, "t", 0, 30_000)).await.unwrap();
    }
    for _ in &ids {
        let d = pop_one(&q, "t").await;
        q.finish(&d.id, &d.token).await.unwrap();
    }
    let read = q.events_after("0", &[], 1000).await.unwrap();
    assert!(read.gaps.is_empty());
    assert_eq!(read.position.split(',').count(), 6);
    let events: Vec<Event> = read.events.into_iter().map(|(_, e)| e).collect();
    for id in &ids {
        assert_eq!(
            kinds_of(&events, id),
            ["pushed", "fired", "delivered", "finished"],
            "{id}"
        );
    }
}

/// The memory cost docs/events.md states: XLEN and MEMORY USAGE of the stream after
/// 10,000 events (`-- --nocapture` prints it).
#[tokio::test]
async fn ten_thousand_kept_events_take_under_a_hundred_bytes_each() {
    let redis = RedisServer::start();
    let q = events_queue(&redis);
    for chunk in (0..10_000).collect::<Vec<_>>().chunks(500) {
        let jobs: Vec<delayq::NewJob> = chunk
            .iter()
            .map(|i| job(&format!("order-{i:06}"), "orders", 3_600_000, 30_000))
            .collect();
        push_all(&q, &jobs).await;
    }
    let mut c = redis.conn().await;
    let len: u64 = redis::cmd("XLEN")
        .arg("{dq}:events")
        .query_async(&mut c)
        .await
        .unwrap();
    let bytes: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("{dq}:events")
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut c)
        .await
        .unwrap();
    println!(
        "{len} events kept: {bytes} bytes, {} bytes each",
        bytes / len
    );
    assert_eq!(len, 10_000);
    assert!(bytes / len < 100, "{} bytes per event", bytes / len);
}

#[tokio::test]
async fn every_other_change_writes_its_event_too() {
    let redis = RedisServer::start();
    let q = events_queue(&redis);
    let tagged = |id: &str, tag: &str| delayq::NewJob {
        tags: vec![tag.into()],
        ..job(id, "misc", 3_600_000, 30_000)
    };
    // DELETE and a tag cancel: deleted.
    q.push(&job("del", "misc", 3_600_000, 30_000))
        .await
        .unwrap();
    assert!(q.delete("del").await.unwrap());
    q.push(&tagged("cut", "gone")).await.unwrap();
    assert_eq!(q.cancel_tag_all("gone").await.unwrap().changed, 1);
    // A reschedule and a tag reschedule: rescheduled, with the new due time.
    q.push(&job("mv", "misc", 3_600_000, 30_000)).await.unwrap();
    let due = q
        .reschedule("mv", Duration::from_secs(7200), None, None)
        .await
        .unwrap();
    q.push(&tagged("tmv", "later")).await.unwrap();
    q.reschedule_tag_all("later", delayq::TagMove::Shift(60_000))
        .await
        .unwrap();
    // A dead job requeued, then its delivery released: requeued, released.
    let mut j = job("rq", "work", 0, 30_000);
    j.retry = Some(RetryPolicy::parse("", Some(1)).unwrap());
    q.push(&j).await.unwrap();
    let d = pop_one(&q, "work").await;
    q.nack(&d.id, &d.token, None, "boom").await.unwrap();
    assert_eq!(q.requeue_dead("work", &[]).await.unwrap(), 1);
    let d = pop_one(&q, "work").await;
    q.release(&d.id, &d.token).await.unwrap();
    // A dead job purged: deleted.
    let d = pop_one(&q, "work").await;
    q.nack(&d.id, &d.token, None, "boom again").await.unwrap();
    assert_eq!(q.purge_dead("work").await.unwrap(), 1);

    let events = all_events(&q).await;
    assert_eq!(kinds_of(&events, "del"), ["pushed", "deleted"]);
    assert_eq!(kinds_of(&events, "cut"), ["pushed", "deleted"]);
    assert_eq!(kinds_of(&events, "mv"), ["pushed", "rescheduled"]);
    let moved = events
        .iter()
        .find(|e| e.id == "mv" && e.event == "rescheduled")
        .unwrap();
    assert_eq!(moved.due_ms, Some(due));
    assert_eq!(kinds_of(&events, "tmv"), ["pushed", "rescheduled"]);
    assert_eq!(
        kinds_of(&events, "rq"),
        [
            "pushed",
            "fired",
            "delivered",
            "failed",
            "dead",
            "requeued",
            "delivered",
            "released",
            "delivered",
            "failed",
            "dead",
            "deleted"
        ]
    );
    let attempts: Vec<u32> = events
        .iter()
        .filter(|e| e.id == "rq")
        .map(|e| e.attempt)
        .collect();
    // Requeued from 0; the released delivery uncounted, so the next is 1.
    assert_eq!(attempts, [0, 0, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1]);
}

/// `delayq serve` on `redis` with `extra` flags, which must refuse to
/// start: its stderr. One still running after 60 s fails the test.
fn refused_start(redis: &RedisServer, extra: &[&str]) -> String {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(["serve", "--listen", "127.0.0.1:0", "--redis", &redis.url()])
        .args(extra)
        .env("DELAYQ_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let limit = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("delayq serve {extra:?} started beside an instance of another events setting");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    err
}

/// Waits until `base`'s instance list shows `n` instances.
async fn instances_listed(base: &str, n: usize) {
    eventually(
        Duration::from_secs(20),
        "the instances' heartbeats",
        || async {
            let (_, v) = get_json(base, "/v1/instances").await;
            (v["instances"].as_array().map(Vec::len) == Some(n)).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_of_another_events_setting_is_refused_at_start_naming_the_flag() {
    let redis = RedisServer::start();
    // One with the stream: another without it would dispatch and write no
    // `fired`, leaving holes nobody sees. Refused, naming --events.
    let a = DelayqProcess::start(&redis, &["--events"]);
    instances_listed(&a.base, 1).await;
    let err = refused_start(&redis, &[]);
    assert!(err.contains("--events"), "{err}");
    let (_, v) = get_json(&a.base, "/v1/instances").await;
    assert_eq!(v["instances"][0]["events"], true, "{v}");
    // The same setting is welcome.
    let b = DelayqProcess::start(&redis, &["--events"]);
    instances_listed(&a.base, 2).await;
    b.terminate();
    a.terminate();

    // The other way round, and once every instance is stopped the setting
    // can change.
    let c = DelayqProcess::start(&redis, &[]);
    instances_listed(&c.base, 1).await;
    let err = refused_start(&redis, &["--events"]);
    assert!(err.contains("--events"), "{err}");
    c.terminate();
    let d = DelayqProcess::start(&redis, &["--events"]);
    d.terminate();
}

// FAILING test of a defect: a recurring schedule deleted or paused drops
// its next tick's delayed job (JOB.drop_if_delayed in recur_put.lua, and
// tick.lua's "skip") with no event: the stream says the job was pushed and
// never that it went.
#[tokio::test]
async fn a_recurring_schedules_dropped_tick_job_writes_deleted() {
    let redis = RedisServer::start();
    let q = events_queue(&redis);
    let mut ticks = Vec::new();
    for name in ["gone-by-delete", "gone-by-pause"] {
        q.put_recurring(
            name,
            &delayq::Recurring {
                topic: "beat".into(),
                cron: "@yearly".into(),
                body: "tick".into(),
                ..delayq::Recurring::default()
            },
        )
        .await
        .unwrap();
        let next = q
            .recurring(name)
            .await
            .unwrap()
            .unwrap()
            .next_fire_ms
            .unwrap();
        let tick = delayq::recurring::tick_id(name, next);
        // The next tick's job is pushed ahead, delayed until the tick.
        eventually(Duration::from_secs(30), "the tick's job pushed", || async {
            q.get(&tick).await.unwrap().map(|_| ())
        })
        .await;
        ticks.push(tick);
    }
    assert!(q.delete_recurring("gone-by-delete").await.unwrap());
    assert!(q.pause_recurring("gone-by-pause").await.unwrap());
    for tick in &ticks {
        assert!(q.get(tick).await.unwrap().is_none(), "{tick} still there");
        let events = all_events(&q).await;
        assert_eq!(
            kinds_of(&events, tick),
            ["pushed", "deleted"],
            "{tick} left with no event"
        );
    }
}
