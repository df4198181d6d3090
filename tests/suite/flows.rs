//! Flows (issue 53): a parent waits for its children (a tree, several
//! levels, across partitions), then runs with their outcomes and results;
//! a dead child fails the parent or is ignored; cancelling a waiting
//! parent cancels its children down the tree; a flow is checked whole
//! before its first write. [`flows::http`] over `/v1`.

use std::time::Duration;

use delayq::{
    ChildDead, ChildOutcome, Config, Delivery, Error, FlowState, JobState, NewFlow, NewJob, Queue,
};
use serde_json::json;

use crate::common::*;

mod faults;
mod http;

/// A generous bound for the relay to carry a child's end home.
const RELEASE_WITHIN: Duration = Duration::from_secs(30);

fn split_queue(redis: &RedisServer, partitions: usize) -> Queue {
    Queue::connect(Config {
        partitions,
        ..config(redis)
    })
    .unwrap()
}

pub(super) fn leaf(id: &str, topic: &str) -> NewFlow {
    NewFlow::leaf(NewJob {
        retry: one_attempt(),
        ..job(id, topic, 0, 60_000)
    })
}

pub(super) fn parent(id: &str, topic: &str, children: Vec<NewFlow>) -> NewFlow {
    NewFlow {
        job: job(id, topic, 0, 60_000),
        children,
        on_child_dead: ChildDead::Fail,
    }
}

async fn pop_one(q: &Queue, topic: &str) -> Delivery {
    q.pop(&topics(&[topic]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a job to run")
}

/// The parent's delivery, once its flow released it.
async fn released(q: &Queue, topic: &str) -> Delivery {
    eventually(RELEASE_WITHIN, "the parent released", || async {
        q.pop(&topics(&[topic]), Duration::from_millis(200))
            .await
            .unwrap()
    })
    .await
}

/// Nothing of `topic` is handed out now (a parent not released).
async fn none_ready(q: &Queue, topic: &str) {
    let got = q
        .pop(&topics(&[topic]), Duration::from_millis(300))
        .await
        .unwrap();
    assert!(got.is_none(), "handed out early: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_runs_once_its_children_are_done_with_their_results_down_three_levels() {
    let redis = RedisServer::start();
    let q = split_queue(&redis, 4);
    // An order closes once its two refunds are done and its customer was
    // told (by text and by mail), each a job of its own.
    let mut later = leaf("refund-b", "refund");
    later.job.delay = Duration::from_millis(300);
    let flow = parent(
        "order-1",
        "close",
        vec![
            leaf("refund-a", "refund"),
            later,
            parent(
                "notify-1",
                "notify",
                vec![leaf("sms-1", "send"), leaf("mail-1", "send")],
            ),
        ],
    );
    let pushed = q.push_flow(&flow).await.unwrap();
    assert_eq!(pushed.id, "order-1");
    assert_eq!(
        pushed.jobs,
        ["order-1", "refund-a", "refund-b", "notify-1", "sms-1", "mail-1"]
    );
    // A waiting parent is a flow, not a job yet.
    assert!(q.get("order-1").await.unwrap().is_none());
    let f = q.flow("order-1").await.unwrap().unwrap();
    assert_eq!((f.state, f.children, f.pending), (FlowState::Waiting, 3, 3));
    assert_eq!(f.topic, "close");
    let sub = q.flow("notify-1").await.unwrap().unwrap();
    assert_eq!(sub.parent.as_deref(), Some("order-1"));
    assert_eq!(
        q.get("refund-a").await.unwrap().unwrap().state,
        JobState::Ready
    );

    for _ in 0..2 {
        let d = pop_one(&q, "refund").await;
        let r = json!({ "refund": format!("r-{}", d.id) });
        q.finish_with_result(&d.id, &d.token, &r).await.unwrap();
    }
    let sms = pop_one(&q, "send").await;
    q.finish_with_result(&sms.id, &sms.token, &json!("sent"))
        .await
        .unwrap();
    // One grandchild left: neither parent runs.
    none_ready(&q, "notify").await;
    none_ready(&q, "close").await;
    let mail = pop_one(&q, "send").await;
    q.finish(&mail.id, &mail.token).await.unwrap();

    let notify = released(&q, "notify").await;
    assert_eq!(notify.id, "notify-1");
    let kids = notify.children.clone().expect("the children's outcomes");
    assert_eq!(kids.len(), 2);
    assert_eq!(kids[&sms.id].outcome, ChildOutcome::Finished);
    assert_eq!(kids[&sms.id].result, Some(json!("sent")));
    assert_eq!(kids[&mail.id].result, None);
    none_ready(&q, "close").await;
    q.finish_with_result(&notify.id, &notify.token, &json!({"told": 2}))
        .await
        .unwrap();

    let order = released(&q, "close").await;
    assert_eq!(order.id, "order-1");
    let kids = order.children.expect("the children's outcomes");
    let ids: Vec<&str> = kids.keys().map(String::as_str).collect();
    assert_eq!(ids, ["notify-1", "refund-a", "refund-b"]);
    assert_eq!(
        kids["refund-b"].result,
        Some(json!({"refund": "r-refund-b"}))
    );
    assert_eq!(kids["notify-1"].result, Some(json!({"told": 2})));
    let f = q.flow("order-1").await.unwrap().unwrap();
    assert_eq!(
        (f.state, f.finished, f.pending),
        (FlowState::Released, 3, 0)
    );
    // A job's own read shows them too; the finish keeps no copy.
    let job = q.get("order-1").await.unwrap().unwrap();
    assert_eq!(job.children.unwrap().len(), 3);
    q.finish(&order.id, &order.token).await.unwrap();
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_child_fails_its_parent_at_once_or_is_ignored_as_the_flow_says() {
    let redis = RedisServer::start();
    let q = split_queue(&redis, 3);
    q.push_flow(&parent(
        "settle-1",
        "settle",
        vec![leaf("charge-1", "charge"), leaf("charge-2", "charge")],
    ))
    .await
    .unwrap();
    let mut ignoring = parent(
        "settle-2",
        "settle",
        vec![leaf("charge-3", "charge2"), leaf("charge-4", "charge2")],
    );
    ignoring.on_child_dead = ChildDead::Ignore;
    q.push_flow(&ignoring).await.unwrap();

    // fail: the first death fails the parent, the sibling still pending.
    let d = pop_one(&q, "charge").await;
    q.nack(&d.id, &d.token, None, "card declined")
        .await
        .unwrap();
    let f = eventually(RELEASE_WITHIN, "the parent failed", || async {
        q.flow("settle-1")
            .await
            .unwrap()
            .filter(|f| f.state == FlowState::Failed)
    })
    .await;
    assert_eq!(f.failed_by.as_deref(), Some(d.id.as_str()));
    let dead = q.get("settle-1").await.unwrap().unwrap();
    assert_eq!(dead.state, JobState::Dead);
    assert_eq!(
        dead.last_error.as_deref(),
        Some(format!("child {} died", d.id).as_str())
    );
    let kids = dead.children.unwrap();
    assert_eq!(kids[&d.id].outcome, ChildOutcome::Dead);
    let other = if d.id == "charge-1" {
        "charge-2"
    } else {
        "charge-1"
    };
    assert_eq!(kids[other].outcome, ChildOutcome::Pending);
    // The sibling still runs; its end changes nothing of the parent.
    let s = pop_one(&q, "charge").await;
    q.finish(&s.id, &s.token).await.unwrap();
    none_ready(&q, "settle").await;
    // Requeued, the failed parent runs with its children as they were.
    assert_eq!(
        q.requeue_dead("settle", &["settle-1".to_string()])
            .await
            .unwrap(),
        1
    );
    let p = pop_one(&q, "settle").await;
    assert_eq!(p.id, "settle-1");
    assert_eq!(p.children.unwrap()[other].outcome, ChildOutcome::Pending);
    q.finish(&p.id, &p.token).await.unwrap();

    // ignore: the parent runs once the rest are done.
    let d = pop_one(&q, "charge2").await;
    q.nack(&d.id, &d.token, None, "card declined")
        .await
        .unwrap();
    none_ready(&q, "settle").await;
    let s = pop_one(&q, "charge2").await;
    q.finish(&s.id, &s.token).await.unwrap();
    let p = released(&q, "settle").await;
    assert_eq!(p.id, "settle-2");
    let kids = p.children.unwrap();
    assert_eq!(kids[&d.id].outcome, ChildOutcome::Dead);
    assert_eq!(kids[&s.id].outcome, ChildOutcome::Finished);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_waiting_parent_cancels_its_children_down_the_tree() {
    let redis = RedisServer::start();
    let q = split_queue(&redis, 4);
    q.push_flow(&parent(
        "export-1",
        "export",
        vec![
            leaf("part-1", "parts"),
            leaf("part-2", "parts"),
            parent(
                "merge-1",
                "merge",
                vec![leaf("shard-1", "shards"), leaf("shard-2", "shards")],
            ),
        ],
    ))
    .await
    .unwrap();
    // One child runs when the cancel comes; it finishes after it.
    let running = pop_one(&q, "parts").await;
    let deleted = q.cancel_flow("export-1").await.unwrap();
    assert_eq!(deleted, 3, "part-2, shard-1, shard-2");
    for id in ["part-2", "shard-1", "shard-2"] {
        assert!(q.get(id).await.unwrap().is_none(), "{id} left");
    }
    assert_eq!(
        q.flow("merge-1").await.unwrap().unwrap().state,
        FlowState::Cancelled
    );
    q.finish(&running.id, &running.token).await.unwrap();
    none_ready(&q, "export").await;
    none_ready(&q, "merge").await;
    let f = q.flow("export-1").await.unwrap().unwrap();
    assert_eq!(f.state, FlowState::Cancelled);
    assert!(q.get("export-1").await.unwrap().is_none());
    // Cancelling again changes nothing; an unknown flow is named.
    assert_eq!(q.cancel_flow("export-1").await.unwrap(), 0);
    assert!(matches!(
        q.cancel_flow("nope").await,
        Err(Error::NoFlow(id)) if id == "nope"
    ));

    // A child that is a parent, cancelled alone: its parent counts it
    // deleted and runs when the rest are done.
    q.push_flow(&parent(
        "export-2",
        "export",
        vec![
            leaf("part-3", "parts"),
            parent("merge-2", "merge", vec![leaf("shard-3", "shards")]),
        ],
    ))
    .await
    .unwrap();
    assert_eq!(q.cancel_flow("merge-2").await.unwrap(), 1);
    let d = pop_one(&q, "parts").await;
    q.finish(&d.id, &d.token).await.unwrap();
    let p = released(&q, "export").await;
    let kids = p.children.unwrap();
    assert_eq!(kids["merge-2"].outcome, ChildOutcome::Deleted);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_in_a_paused_group_hold_their_parent_until_the_group_resumes() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.pause_group("mail", "acct-7").await.unwrap();
    let mut kids = Vec::new();
    for i in 0..3 {
        let mut l = leaf(&format!("m{i}"), "mail");
        l.job.group = Some("acct-7".into());
        kids.push(l);
    }
    q.push_flow(&parent("digest-7", "digest", kids))
        .await
        .unwrap();
    none_ready(&q, "mail").await;
    none_ready(&q, "digest").await;
    q.resume_group("mail", "acct-7").await.unwrap();
    for _ in 0..3 {
        let d = pop_one(&q, "mail").await;
        q.finish(&d.id, &d.token).await.unwrap();
    }
    assert_eq!(released(&q, "digest").await.id, "digest-7");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_is_checked_whole_before_its_first_write() {
    let redis = RedisServer::start();
    let q = split_queue(&redis, 2);
    let invalid = |r: Result<delayq::FlowPushed, Error>, says: &str| match r {
        Err(Error::Invalid(m)) => assert!(m.contains(says), "{m:?} lacks {says:?}"),
        other => panic!("{other:?}: not refused for {says:?}"),
    };
    invalid(
        q.push_flow(&leaf("alone", "t")).await,
        "has children; push a job",
    );
    let mut grouped = parent("p", "t", vec![leaf("c", "t")]);
    grouped.job.group = Some("g".into());
    invalid(q.push_flow(&grouped).await, "a parent takes no group");
    invalid(
        q.push_flow(&parent("p", "t", vec![leaf("c", "t"), leaf("c", "t")]))
            .await,
        "given twice",
    );
    invalid(
        q.push_flow(&parent("", "t", vec![leaf("c", "t")])).await,
        "a parent needs an id",
    );
    let mut deep = leaf("bottom", "t");
    for i in 0..delayq::flow::MAX_FLOW_DEPTH {
        deep = parent(&format!("level-{i}"), "t", vec![deep]);
    }
    invalid(q.push_flow(&deep).await, "levels; the limit is");
    let mut bad_leaf = parent("p", "t", vec![leaf("c", "t")]);
    bad_leaf.children[0].job.topic = String::new();
    invalid(q.push_flow(&bad_leaf).await, "flow job \"c\"");
    // Nothing was written: no flow, no job.
    assert!(q.flow("p").await.unwrap().is_none());
    assert!(q.get("c").await.unwrap().is_none());

    // A parent id in use by a job: refused, nothing of the flow stays.
    q.push(&job("busy", "t", 60_000, 60_000)).await.unwrap();
    let r = q
        .push_flow(&parent("busy", "t", vec![leaf("c1", "t")]))
        .await;
    assert!(matches!(r, Err(Error::Conflict(_))), "{r:?}");
    assert!(q.get("c1").await.unwrap().is_none());
    // A leaf id in use: refused, the flow opened for it cancelled and its
    // other leaves gone.
    q.push(&job("taken", "t", 60_000, 60_000)).await.unwrap();
    let r = q
        .push_flow(&parent(
            "p2",
            "t2",
            vec![leaf("fresh", "t2"), leaf("taken", "t2")],
        ))
        .await;
    assert!(
        matches!(&r, Err(Error::Conflict(m)) if m.contains("\"taken\"")),
        "{r:?}"
    );
    assert!(q.get("fresh").await.unwrap().is_none());
    assert_eq!(
        q.flow("p2").await.unwrap().unwrap().state,
        FlowState::Cancelled
    );
    assert_eq!(q.get("taken").await.unwrap().unwrap().topic, "t");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_is_handed_at_most_a_mebibyte_of_results_and_every_outcome() {
    let redis = RedisServer::start();
    let q = split_queue(&redis, 2);
    // 17 results of 64 KiB: the 17th finished is past the 1 MiB a parent
    // is handed, and comes as its outcome alone.
    let n = delayq::flow::MAX_CHILDREN_RESULTS_BYTES / delayq::defaults::MAX_RESULT_BYTES + 1;
    let kids = (0..n)
        .map(|i| leaf(&format!("page-{i:02}"), "render"))
        .collect();
    q.push_flow(&parent("book-1", "bind", kids)).await.unwrap();
    // A JSON string of 64 KiB with its quotes.
    let text = json!("x".repeat(delayq::defaults::MAX_RESULT_BYTES - 2));
    let mut order = Vec::new();
    for _ in 0..n {
        let d = pop_one(&q, "render").await;
        q.finish_with_result(&d.id, &d.token, &text).await.unwrap();
        order.push(d.id);
    }
    let p = released(&q, "bind").await;
    let kids = p.children.unwrap();
    assert_eq!(kids.len(), n);
    assert!(kids.values().all(|k| k.outcome == ChildOutcome::Finished));
    let with: Vec<&String> = kids
        .iter()
        .filter(|(_, k)| k.result.is_some())
        .map(|(id, _)| id)
        .collect();
    assert_eq!(with.len(), n - 1, "results kept: {with:?}");
    assert!(kids[order.last().unwrap()].result.is_none());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_pushed_with_a_waiting_parents_id_keeps_it_and_the_flow_above_goes_on() {
    let redis = RedisServer::start();
    let q = split_queue(&redis, 3);
    q.push_flow(&parent(
        "trip-1",
        "book",
        vec![
            leaf("hotel-1", "reserve"),
            parent("flights-1", "pay", vec![leaf("leg-1", "reserve")]),
        ],
    ))
    .await
    .unwrap();
    // Someone pushes a job of their own with the waiting parent's id.
    q.push(&job("flights-1", "other", 60_000, 60_000))
        .await
        .unwrap();
    for _ in 0..2 {
        let d = pop_one(&q, "reserve").await;
        q.finish(&d.id, &d.token).await.unwrap();
    }
    // The other job stays as it was; the root runs, its child counted
    // deleted (no parent was made for it).
    let root = released(&q, "book").await;
    let kids = root.children.unwrap();
    assert_eq!(kids["flights-1"].outcome, ChildOutcome::Deleted);
    assert_eq!(kids["hotel-1"].outcome, ChildOutcome::Finished);
    let other = q.get("flights-1").await.unwrap().unwrap();
    assert_eq!(
        (other.topic.as_str(), other.state),
        ("other", JobState::Delayed)
    );
    none_ready(&q, "pay").await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_flow_keeps_no_childrens_results() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push_flow(&parent(
        "report-1",
        "report",
        vec![leaf("part-1", "parts"), leaf("part-2", "parts")],
    ))
    .await
    .unwrap();
    let counted = |n: u64| {
        let q = q.clone();
        async move {
            eventually(RELEASE_WITHIN, "the child's end counted", || async {
                q.flow("report-1")
                    .await
                    .unwrap()
                    .filter(|f| f.finished == n)
            })
            .await
        }
    };
    // One child's result reached the flow before the cancel, one after it
    // (a running child ends as its consumer says).
    let early = pop_one(&q, "parts").await;
    let late = pop_one(&q, "parts").await;
    q.finish_with_result(&early.id, &early.token, &json!({"rows": 1}))
        .await
        .unwrap();
    counted(1).await;
    q.cancel_flow("report-1").await.unwrap();
    q.finish_with_result(&late.id, &late.token, &json!({"rows": 2}))
        .await
        .unwrap();
    assert_eq!(counted(2).await.state, FlowState::Cancelled);
    // The parent never runs: its children's results are kept for nobody,
    // and a key kept with no expiry would stay for ever.
    let results = format!("{{dq}}:bk:{}", delayq::flow::flow_batch_id("report-1"));
    let ttl: i64 = redis.cmd(&["PTTL", &results]).await;
    assert_eq!(ttl, -2, "{results:?} kept (PTTL {ttl})");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_is_refused_the_id_of_a_waiting_parent() {
    let redis = RedisServer::start();
    let q = split_queue(&redis, 3);
    q.push_flow(&parent(
        "digest-1",
        "digest",
        vec![leaf("remind-1", "remind")],
    ))
    .await
    .unwrap();
    // Another flow names the waiting parent's id as a leaf: were it
    // pushed, the digest's parent would find its id taken at its release
    // and never be made, its flow saying `released`.
    let e = q
        .push_flow(&parent("other-1", "other", vec![leaf("digest-1", "other")]))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Conflict(m) if m.contains("digest-1")),
        "{e:?}"
    );
    assert!(q.get("digest-1").await.unwrap().is_none());
    let d = pop_one(&q, "remind").await;
    q.finish(&d.id, &d.token).await.unwrap();
    let root = released(&q, "digest").await;
    assert_eq!(root.id, "digest-1");
    assert_eq!(
        root.children.unwrap()["remind-1"].outcome,
        ChildOutcome::Finished
    );
    q.close().await;
}
