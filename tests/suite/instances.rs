//! Instances: each `delayq serve` lists itself through a heartbeat in
//! Redis; `GET /v1/instances` shows the same from every instance.

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

async fn instances(base: &str) -> Vec<Value> {
    let v: Value = reqwest::get(format!("{base}/v1/instances"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["instances"].as_array().unwrap().clone()
}

fn pids(list: &[Value]) -> Vec<u64> {
    list.iter().map(|i| i["pid"].as_u64().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_running_instance_is_listed_and_a_killed_one_drops_out_within_three_periods() {
    let redis = RedisServer::start();
    let a = DelayqProcess::start(&redis, &[]);
    let b = DelayqProcess::start(
        &redis,
        &[
            "--webhook",
            "close=https://bot:hunter2@hooks.example:8443/close?token=s3cret&x=1",
        ],
    );
    // Both listed, and one of them dispatching the queue's one partition
    // (it holds the partition leader's term; the other stands by).
    let list = eventually(Duration::from_secs(20), "both instances listed", || async {
        let l = instances(&a.base).await;
        let mut duty: Vec<String> = l.iter().map(|i| i["dispatching"].to_string()).collect();
        duty.sort();
        (l.len() == 2 && duty == ["[0]", "[]"]).then_some(l)
    })
    .await;
    // Sorted by id, and the same from either instance.
    let ids: Vec<&str> = list.iter().map(|i| i["id"].as_str().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    let from_b = instances(&b.base).await;
    let ids_b: Vec<&str> = from_b.iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ids_b);

    let of = |pid: u32| {
        list.iter()
            .find(|i| i["pid"].as_u64() == Some(pid as u64))
            .unwrap_or_else(|| panic!("pid {pid} not in {list:?}"))
            .clone()
    };
    let (ia, ib) = (of(a.pid()), of(b.pid()));
    for (i, p) in [(&ia, &a), (&ib, &b)] {
        let host = i["host"].as_str().unwrap();
        assert!(!host.is_empty(), "{i}");
        assert!(
            i["id"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{host}-{}-", p.pid())),
            "{i}"
        );
        assert_eq!(format!("http://{}", i["listen"].as_str().unwrap()), p.base);
        assert_eq!(i["version"], env!("CARGO_PKG_VERSION"));
        let started = i["started_at_ms"].as_i64().unwrap();
        assert!(
            started > 0 && started <= i["last_seen_ms"].as_i64().unwrap(),
            "{i}"
        );
    }
    assert_eq!(ia["webhook_consumers"], serde_json::json!([]));
    let hooks = ib["webhook_consumers"].as_array().unwrap();
    assert_eq!(hooks.len(), 1, "{ib}");
    assert_eq!(hooks[0]["topic"], "close");
    assert_eq!(hooks[0]["concurrency"], 8);
    let url = hooks[0]["url"].as_str().unwrap();
    assert!(!url.contains("hunter2") && !url.contains("s3cret"), "{url}");
    assert!(url.contains("hooks.example:8443/close"), "{url}");

    // A client's pop waiting on b is counted there (webhook pops are not).
    let pop = {
        let base = b.base.clone();
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{base}/v1/pop"))
                .json(&serde_json::json!({"topics": ["nothing"], "wait_ms": 60000}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    eventually(Duration::from_secs(20), "b's waiting pop seen", || async {
        let l = instances(&a.base).await;
        l.iter()
            .any(|i| i["pid"].as_u64() == Some(b.pid() as u64) && i["waiting_pops"] == 1)
            .then_some(())
    })
    .await;

    // SIGKILL: b leaves no goodbye, its heartbeat expires (3 periods).
    let b_pid = b.pid() as u64;
    b.kill9();
    let killed = Instant::now();
    pop.abort();
    eventually(
        delayq::instances::TTL + Duration::from_secs(15),
        "the killed instance gone",
        || async {
            let l = instances(&a.base).await;
            (!pids(&l).contains(&b_pid)).then_some(())
        },
    )
    .await;
    println!("killed instance gone after {:?}", killed.elapsed());

    // A clean stop takes it out at once.
    let c = DelayqProcess::start(&redis, &[]);
    eventually(Duration::from_secs(20), "c listed", || async {
        (instances(&a.base).await.len() == 2).then_some(())
    })
    .await;
    let a_pid = a.pid() as u64;
    a.terminate();
    let left = instances(&c.base).await;
    assert_eq!(pids(&left), vec![c.pid() as u64], "{left:?}");
    assert!(!pids(&left).contains(&a_pid));
    drop(c);
}
