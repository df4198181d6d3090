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
    eventually(LIMIT * 3, "layout 2 or more", || async {
        let v: Option<String> = redis.cmd(&["GET", "{dq}:layout"]).await;
        matches!(v.as_deref(), Some("2" | "3")).then_some(())
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
    // A ready listing still reaches the groups.
    let (page, _) = q
        .list_jobs("t", delayq::JobState::Ready, None, 10)
        .await
        .unwrap();
    assert_eq!(
        page.len(),
        6,
        "listed: {:?}",
        page.iter().map(|j| &j.id).collect::<Vec<_>>()
    );

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

/// Pushes a plain job and a grouped one of `topic` in one call: the plain
/// one's result, and the grouped one's error if it was refused.
async fn push_pair(q: &Queue, topic: &str, n: usize) -> Option<String> {
    let pair = [
        job(&format!("plain{n}"), topic, 0, 60_000),
        grouped(&format!("grouped{n}"), topic, "g"),
    ];
    let mut out = q.push_many(&pair).await.unwrap().into_iter();
    out.next().unwrap().expect("the plain job is taken");
    match out.next().unwrap() {
        Ok(_) => None,
        Err(Error::Invalid(why)) => Some(why),
        Err(e) => panic!("not a refusal: {e}"),
    }
}

const WHY: &str = "groups need every instance of this queue to run this version";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grouped_push_is_refused_while_an_older_build_runs() {
    old_binary();
    let redis = RedisServer::start();
    // The older build first: it leads, and no layout is ever set.
    let old = start_old(&redis, &[]);
    let q = queue(&redis);
    eventually(LIMIT, "the older build's heartbeat", || async {
        let n: u64 = redis.cmd(&["ZCARD", "{dq}:instances"]).await;
        (n > 0).then_some(())
    })
    .await;
    let why = push_pair(&q, "t", 0).await.expect("refused");
    assert!(why.contains(WHY), "{why}");
    let stored: u64 = redis.cmd(&["EXISTS", "{dq}:j:grouped0"]).await;
    assert_eq!(stored, 0, "a refused job changes nothing");

    // The older build gone, grouped jobs are taken again.
    old.terminate();
    eventually(LIMIT * 3, "a grouped push taken", || async {
        push_pair(&q, "t", 1).await.is_none().then_some(())
    })
    .await;

    // Held back at layout 1 (on the way back to an older build): waiting
    // grouped jobs still deliver, new ones are refused.
    let (ok, _, err) = crate::layout::layout_cli(&redis, &["--hold", "1"]);
    assert!(ok, "{err}");
    let why = push_pair(&q, "t", 2).await.expect("refused");
    assert!(why.contains(WHY), "{why}");
    let mut ids = BTreeSet::new();
    while let Some(d) = pop1(&q, "t").await {
        ids.insert(d.id);
    }
    let want: BTreeSet<String> = ["plain0", "plain1", "plain2", "grouped1"]
        .map(String::from)
        .into();
    assert_eq!(ids, want);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_any_leader_sets_the_layout_the_heartbeats_decide() {
    let redis = RedisServer::start();
    // No leader: a queue that dispatches nothing and never leads.
    let q = Queue::connect(Config {
        dispatch: false,
        ..config(&redis)
    })
    .unwrap();
    assert_eq!(push_pair(&q, "t", 0).await, None, "no instance runs");
    crate::layout::older_heartbeat(&mut redis.conn().await, "old").await;
    let why = push_pair(&q, "t", 1).await.expect("refused");
    assert!(why.contains(WHY), "{why}");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grouped_job_an_older_build_made_ready_is_delivered() {
    old_binary();
    let redis = RedisServer::start();
    let q = queue(&redis);
    let mut late = grouped("late", "t", "g");
    late.delay = Duration::from_millis(1500);
    push_all(&q, &[late]).await;
    // Gone back first, as docs/upgrading.md says (layout 3 keeps a delayed job
    // out of the shared schedule the older build fires from).
    q.hold_layout(1).await.unwrap();
    q.close().await;

    // Only the older build runs when it falls due: it puts it in the
    // topic's plain ready list, knowing no groups.
    let old = start_old(&redis, &[]);
    eventually(LIMIT, "in the plain ready list", || async {
        let n: u64 = redis.cmd(&["LLEN", "{dq}:ready:t"]).await;
        (n == 1).then_some(())
    })
    .await;
    old.terminate();

    let q = queue(&redis);
    q.release_layout().await.unwrap();
    let d = eventually(LIMIT, "the grouped job popped", || pop1(&q, "t")).await;
    assert_eq!(d.id, "late");
    assert!(pop1(&q, "t").await.is_none(), "delivered once");
    // Its slot is held and given back as any grouped job's.
    let used: Option<String> = redis.cmd(&["HGET", "{dq}:grp:t\ng", "r"]).await;
    assert_eq!(used.as_deref(), Some("1"));
    q.finish(&d.id, &d.token).await.unwrap();
    let left: u64 = redis.cmd(&["EXISTS", "{dq}:grp:t\ng"]).await;
    assert_eq!(left, 0, "the group leaves no key");
    q.close().await;
}
