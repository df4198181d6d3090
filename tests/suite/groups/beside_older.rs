//! Groups beside an older build (a rolling upgrade): the older build's pop
//! drops the groups' level from the topic's levels index, and this build's
//! pops still reach the grouped jobs; grouped pushes are refused, naming
//! why, while an instance of an older build runs.

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::json;

use super::*;
use crate::old_build::{old_binary, start_old};

/// One pop of `topic` through the older build at `base`, waiting for
/// nothing: the jobs it got.
async fn old_pop(base: &str, topic: &str) -> usize {
    let ask = json!({"topics": [topic], "max": 1, "wait_ms": 0});
    let (status, reply) = request_json(Method::POST, format!("{base}/v1/pop"), Some(ask)).await;
    assert_eq!(status, 200, "pop: {reply}");
    reply["jobs"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_older_builds_pop_leaves_grouped_jobs_reachable() {
    // Built (the first time: minutes) before anything runs.
    old_binary();
    let redis = RedisServer::start();
    let q = queue(&redis);
    // The layout raised: every instance (this one) knows groups.
    eventually(LIMIT * 3, "layout 2", || async {
        let v: Option<String> = redis.cmd(&["GET", "{dq}:layout"]).await;
        (v.as_deref() == Some("2")).then_some(())
    })
    .await;
    let jobs: Vec<NewJob> = (0..6)
        .map(|i| grouped(&format!("g{i}"), "t", &format!("grp{}", i % 3)))
        .collect();
    push_all(&q, &jobs).await;
    ready(&q, "t", 6).await;

    // The older build pops the topic: it finds the groups' level's list
    // (as it knows levels) empty and drops the level.
    let old = start_old(&redis, &[]);
    assert_eq!(old_pop(&old.base, "t").await, 0);
    let level: Option<String> = redis.cmd(&["ZSCORE", "{dq}:levels:t", "10"]).await;
    assert_eq!(level, None, "the older build dropped the groups' level");

    // This build still hands out every grouped job, once each.
    let got = std::sync::Mutex::new(BTreeSet::new());
    eventually(LIMIT, "every grouped job popped", || async {
        while let Some(d) = pop1(&q, "t").await {
            assert!(got.lock().unwrap().insert(d.id.clone()), "{} twice", d.id);
        }
        (got.lock().unwrap().len() == 6).then_some(())
    })
    .await;
    old.terminate();
    q.close().await;
}
