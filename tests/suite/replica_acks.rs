//! Replica acks under process faults: with `--replica-acks 1`, nothing is
//! acknowledged or handed out that the replica has not confirmed. The
//! replica is stopped (SIGSTOP: a replica cut off, its link still open),
//! or killed and noticed (a degraded shard); the master is killed and
//! Sentinel promotes the replica. What a client was told must hold on the
//! promoted replica: a finished job is never handed out again, a cancelled
//! one never delivered, and a pop's lease is on the replica before its job
//! is handed out.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::*;
use crate::sentinel::{master_and_replica, port_of, SentinelServer};

/// Pushes job `id` on topic `t`, due now, with a lease of `ttr_ms`.
async fn push(base: &str, id: &str, ttr_ms: u64) {
    let (status, body) = request_json(
        Method::POST,
        format!("{base}/v1/jobs"),
        Some(json!({"id": id, "topic": "t", "body": id, "ttr_ms": ttr_ms})),
    )
    .await;
    assert_eq!(status, 201, "push {id}: {body}");
}

/// One pop of topic `t` that does not wait: its status and jobs.
async fn pop(base: &str) -> (u16, Vec<Value>) {
    let (status, body) = request_json(
        Method::POST,
        format!("{base}/v1/pop"),
        Some(json!({"topics": ["t"], "max": 10, "wait_ms": 0})),
    )
    .await;
    let jobs = body["jobs"].as_array().cloned().unwrap_or_default();
    (status, jobs)
}

/// Pops until job `id` comes (at most `limit`): the job.
async fn popped(base: &str, id: &str, limit: Duration) -> Value {
    eventually(limit, &format!("job {id} handed out"), || async {
        pop(base).await.1.into_iter().find(|j| j["id"] == id)
    })
    .await
}

/// POST `path` with `body`: the status, the reply's text, and how long it
/// took.
async fn post_timed(base: &str, path: &str, body: Value) -> (u16, String, Duration) {
    let started = Instant::now();
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap(), started.elapsed())
}

async fn finish(base: &str, job: &Value) -> (u16, String, Duration) {
    let (id, token) = (job["id"].as_str().unwrap(), &job["token"]);
    post_timed(
        base,
        &format!("/v1/jobs/{id}/finish"),
        json!({ "token": token }),
    )
    .await
}

/// A master, its replica and delayq with `--replica-acks 1` on the master.
fn setup() -> (RedisServer, RedisServer, DelayqProcess) {
    let (master, replica) = master_and_replica();
    let delayq = DelayqProcess::start(&master, &["--replica-acks", "1"]);
    (master, replica, delayq)
}

/// A finish sent while the only replica is cut off is not acknowledged
/// (it answered 204 after the WAIT came back short); after the master is
/// killed and Sentinel promotes the replica, the job comes again (its
/// lease ends there), and that is no broken promise because its finish was
/// never acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finish_the_replica_did_not_confirm_is_not_acknowledged_and_a_failover_repeats_no_acknowledged_finish(
) {
    let (mut master, replica) = master_and_replica();
    let (master_port, replica_port) = (port_of(&master), port_of(&replica));
    let sentinel = SentinelServer::start_with(master_port, 1);
    wait_until(Duration::from_secs(30), "the sentinel sees both", || {
        sentinel.view() == Some((master_port, 1))
    });
    let url = sentinel.url();
    let delayq = DelayqProcess::spawn(&[
        "--redis-sentinel",
        url.as_str(),
        "--sentinel-master",
        "m",
        "--replica-acks",
        "1",
    ]);
    let base = delayq.base.clone();
    push(&base, "f1", 3_000).await;
    let job = popped(&base, "f1", Duration::from_secs(30)).await;
    // The replica cut off: stopped, and its link closed on the master's
    // side, so that nothing written from now on reaches it (a stopped
    // replica alone still gets what the kernel buffered for it).
    let stopped = Stopped::new(replica.pid());
    let _: i64 = master.cmd(&["CLIENT", "KILL", "TYPE", "replica"]).await;
    let (status, text, took) = finish(&base, &job).await;
    println!("finish with the replica stopped: {status} in {took:?}: {text}");
    master.kill();
    drop(stopped);
    eventually(
        Duration::from_secs(60),
        "the sentinel's failover",
        || async { (sentinel.view().map(|v| v.0) == Some(replica_port)).then_some(()) },
    )
    .await;
    // delayq on the new master first: the old one restarts from its AOF
    // as a master until Sentinel turns it, and still has the finish.
    let promoted = format!("127.0.0.1:{replica_port}");
    eventually(Duration::from_secs(30), "delayq to follow", || async {
        let (_, ready) = get_json(&base, "/readyz").await;
        (ready["shards"][0]["node"] == promoted.as_str()).then_some(())
    })
    .await;
    // The old master back, as the new master's replica (Sentinel turns
    // it): the shard is whole again and hands out.
    master.restart();
    // The job comes again (its lease ended on the promoted replica), or,
    // if the finish reached the replica after all, it is gone: never both
    // an acknowledged finish and a repeat, and never lost.
    let again = eventually(
        Duration::from_secs(90),
        "the job handed out again, or gone",
        || async {
            if let Some(j) = pop(&base).await.1.into_iter().find(|j| j["id"] == "f1") {
                return Some(Some(j));
            }
            (get_json(&base, "/v1/jobs/f1").await.0 == 404).then_some(None)
        },
    )
    .await;
    if let Some(again) = &again {
        assert!(
            !(200..300).contains(&status),
            "a finish acknowledged ({status} in {took:?}) although the replica never had it; the job was handed out again after the failover: {again}"
        );
    }
    // Written and not confirmed (504), or refused before it was written
    // if the health watch saw the replica gone first (503).
    assert!(
        (status == 504 && text.contains("not confirmed by 1 replica"))
            || (status == 503 && text.contains("degraded")),
        "{status}: {text}"
    );
    let Some(again) = again else {
        println!("the unconfirmed finish had reached the replica: the job is gone");
        return;
    };
    // The repeat's finish is acknowledged, and final.
    let (status, text, _) = finish(&base, &again).await;
    assert_eq!(status, 204, "{text}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(pop(&base).await.1.is_empty(), "a finished job came again");
}

/// A cancel of a running job with the replica stopped is not
/// acknowledged: it answered 200 within milliseconds, without waiting for
/// the replica at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_the_replica_did_not_confirm_is_not_acknowledged() {
    let (_master, replica, delayq) = setup();
    let base = delayq.base.clone();
    push(&base, "c1", 60_000).await;
    popped(&base, "c1", Duration::from_secs(30)).await;
    let (status, text, took) = {
        let _stopped = Stopped::new(replica.pid());
        post_timed(&base, "/v1/jobs/c1/cancel", json!({})).await
    };
    assert_eq!(
        status, 504,
        "a cancel with the replica stopped answered {status} in {took:?}: {text}"
    );
    assert!(text.contains("not confirmed by 1 replica"), "{text}");
    // With the replica back, a cancel is acknowledged.
    push(&base, "c2", 60_000).await;
    let (status, text, _) = post_timed(&base, "/v1/jobs/c2/cancel", json!({})).await;
    assert_eq!(status, 200, "{text}");
}

/// A pop with the replica stopped hands nothing out (its lease is on the
/// master only); its job is given back at once, uncounted, and handed out
/// once the replica is back: nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_the_replica_did_not_confirm_hands_nothing_out_and_loses_nothing() {
    let (_master, replica, delayq) = setup();
    let base = delayq.base.clone();
    push(&base, "p1", 600_000).await;
    let mut answers = Vec::new();
    {
        let _stopped = Stopped::new(replica.pid());
        // Pops for a few WAITs' worth (each waits 1 s for the replica).
        for _ in 0..3 {
            let (status, jobs) = pop(&base).await;
            assert!(
                jobs.is_empty(),
                "a pop handed out {jobs:?} ({status}) while the replica was stopped"
            );
            answers.push(status);
        }
    }
    println!("pops with the replica stopped answered {answers:?}");
    // Back at once (the lease is 10 minutes): given back, not expired.
    let job = popped(&base, "p1", Duration::from_secs(60)).await;
    assert_eq!(
        job["attempts"], 1,
        "the pops nobody received counted: {job}"
    );
    let (status, text, _) = finish(&base, &job).await;
    assert_eq!(status, 204, "{text}");
}

/// A shard whose only replica died (and the health watch noticed) is
/// degraded: it neither hands jobs out nor acknowledges finishes or
/// cancels (503 naming the shard), until a replica is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_shard_neither_hands_out_nor_acknowledges_finishes() {
    let (_master, mut replica, delayq) = setup();
    let base = delayq.base.clone();
    push(&base, "d1", 600_000).await;
    let running = popped(&base, "d1", Duration::from_secs(30)).await;
    push(&base, "d2", 600_000).await;
    push(&base, "d3", 600_000).await;
    replica.kill();
    eventually(
        Duration::from_secs(60),
        "the shard seen degraded",
        || async {
            let (_, ready) = get_json(&base, "/readyz").await;
            ready.to_string().contains("degraded").then_some(())
        },
    )
    .await;
    let (status, jobs) = pop(&base).await;
    assert!(
        jobs.is_empty(),
        "a degraded shard handed out {jobs:?} ({status})"
    );
    let (status, text, _) = finish(&base, &running).await;
    assert_eq!(status, 503, "a finish on a degraded shard: {text}");
    assert!(
        text.contains("degraded") && text.contains("replica"),
        "{text}"
    );
    let (status, text, _) = post_timed(&base, "/v1/jobs/d3/cancel", json!({})).await;
    assert_eq!(status, 503, "a cancel on a degraded shard: {text}");
    // The replica back: everything goes on, nothing was lost.
    replica.restart();
    let job = popped(&base, "d2", Duration::from_secs(90)).await;
    let (status, text, _) = finish(&base, &job).await;
    assert_eq!(status, 204, "{text}");
    let (status, text, _) = finish(&base, &running).await;
    assert_eq!(status, 204, "the first lease still holds: {text}");
}
