//! Batches (issue 53): jobs pushed into a batch, one callback job pushed
//! once every job has its outcome, never before the last; across
//! partitions, with running jobs adding to their batch, with two instances
//! finishing the last jobs at once; cancel; the limits. [`batches::http`]
//! over `/v1`.

use std::time::Duration;

use delayq::{
    Batch, BatchCallback, BatchOn, BatchState, Config, Delivery, Error, NewBatch, NewJob, Queue,
};
use serde_json::Value;

use crate::common::*;

mod faults;
mod http;

/// A generous bound for the relay to carry the last note home.
const FIRE_WITHIN: Duration = Duration::from_secs(30);

fn new_batch(id: &str, on: BatchOn) -> NewBatch {
    NewBatch {
        id: id.into(),
        on,
        callback: BatchCallback {
            topic: "settle".into(),
            body: format!("report for {id}"),
            ttr: Duration::from_secs(30),
            retry: None,
        },
    }
}

fn member(id: &str, batch: &str) -> NewJob {
    NewJob {
        batch: Some(batch.into()),
        retry: one_attempt(),
        ..job(id, "close", 0, 60_000)
    }
}

fn split_queue(redis: &RedisServer, partitions: usize) -> Queue {
    Queue::connect(Config {
        partitions,
        ..config(redis)
    })
    .unwrap()
}

async fn pop_one(q: &Queue, topic: &str) -> Delivery {
    q.pop(&topics(&[topic]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a job to run")
}

async fn read(q: &Queue, id: &str) -> Batch {
    q.batch(id).await.unwrap().expect("the batch")
}

async fn fired(q: &Queue, id: &str) -> Batch {
    eventually(FIRE_WITHIN, "the batch fired", || async {
        q.batch(id)
            .await
            .unwrap()
            .filter(|b| b.state == BatchState::Fired)
    })
    .await
}

/// The callback job's report, read once it is delivered.
async fn report(q: &Queue, b: &Batch) -> Value {
    let d = pop_one(q, &b.callback_topic).await;
    assert_eq!(d.id, b.callback_id);
    q.finish(&d.id, &d.token).await.unwrap();
    serde_json::from_str(&d.body).unwrap()
}

/// How many jobs the callback topic holds, in any state.
async fn callbacks(q: &Queue) -> u64 {
    let t = q.topics().await.unwrap();
    t.topics
        .get("settle")
        .map_or(0, |c| c.delayed + c.ready + c.reserved + c.dead)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callback_is_pushed_once_when_the_last_job_has_its_outcome() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let b = q
        .create_batch(&new_batch("sale-7", BatchOn::Settled))
        .await
        .unwrap();
    assert_eq!(b.state, BatchState::Open);
    let jobs: Vec<NewJob> = (0..12)
        .map(|i| member(&format!("o{i}"), "sale-7"))
        .collect();
    push_all(&q, &jobs).await;
    assert_eq!(read(&q, "sale-7").await.jobs, 12);
    let member = q.get("o0").await.unwrap().unwrap();
    assert_eq!(member.batch.as_deref(), Some("sale-7"));
    assert_eq!(q.close_batch("sale-7").await.unwrap(), BatchState::Closed);
    // Ten finish, one dies, one is deleted; the callback waits for each.
    for i in 0..12 {
        let d = pop_one(&q, "close").await;
        match i {
            3 => {
                q.nack(&d.id, &d.token, None, "card declined")
                    .await
                    .unwrap();
            }
            7 => assert!(q.delete(&d.id).await.unwrap()),
            _ => q.finish(&d.id, &d.token).await.unwrap(),
        }
        if i == 5 {
            // A note seen again (a relay that died before it dropped it)
            // counts nothing.
            let _: String = redis
                .cmd(&[
                    "XADD",
                    "{dq}:notes",
                    "*",
                    "b",
                    "sale-7",
                    "i",
                    &d.id,
                    "o",
                    "f",
                ])
                .await;
            eventually(FIRE_WITHIN, "the copy relayed", || async {
                (redis.cmd::<i64>(&["XLEN", "{dq}:notes"]).await == 0).then_some(())
            })
            .await;
            assert_eq!(read(&q, "sale-7").await.finished, 5);
        }
        if i < 11 {
            // Not before the last outcome: give the relay time to be wrong.
            tokio::time::sleep(Duration::from_millis(30)).await;
            let now = read(&q, "sale-7").await;
            assert_ne!(now.state, BatchState::Fired, "fired after {} of 12", i + 1);
            assert!(q.get(&b.callback_id).await.unwrap().is_none());
        }
    }
    let b = fired(&q, "sale-7").await;
    assert_eq!(
        (b.jobs, b.finished, b.dead, b.deleted, b.pending),
        (12, 10, 1, 1, 0)
    );
    let r = report(&q, &b).await;
    assert_eq!(r["batch"], "sale-7");
    assert_eq!(r["jobs"], 12);
    assert_eq!(r["finished"], 10);
    assert_eq!(r["dead"], 1);
    assert_eq!(r["deleted"], 1);
    assert_eq!(r["body"], "report for sale-7");
    // Once: a second close (a retry after a lost reply) says so and
    // changes nothing; a cancel of a fired batch is refused.
    assert_eq!(q.close_batch("sale-7").await.unwrap(), BatchState::Fired);
    let cancel = q.cancel_batch("sale-7").await;
    assert!(matches!(cancel, Err(Error::Conflict(_))), "{cancel:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(callbacks(&q).await, 0, "one callback, handled above");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_on_eight_partitions_are_counted_at_their_batchs_home() {
    let redis = RedisServer::start();
    let q = split_queue(&redis, 8);
    q.create_batch(&new_batch("reminders-0900", BatchOn::Settled))
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..200)
        .map(|i| member(&format!("member-{i}"), "reminders-0900"))
        .collect();
    push_all(&q, &jobs).await;
    q.close_batch("reminders-0900").await.unwrap();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let d = pop_one(&q, "close").await;
        seen.insert(d.id.clone());
        q.finish(&d.id, &d.token).await.unwrap();
    }
    assert_eq!(seen.len(), 200);
    let b = fired(&q, "reminders-0900").await;
    assert_eq!((b.jobs, b.finished, b.pending), (200, 200, 0));
    assert_eq!(report(&q, &b).await["finished"], 200);
    assert_eq!(callbacks(&q).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_adding_to_its_closed_batch_holds_the_callback_back() {
    let redis = RedisServer::start();
    let q = split_queue(&redis, 4);
    q.create_batch(&new_batch("settlement", BatchOn::Settled))
        .await
        .unwrap();
    q.push(&member("root", "settlement")).await.unwrap();
    q.close_batch("settlement").await.unwrap();
    // The running job adds more jobs to its batch, then finishes: the
    // batch waits for them (the defect other clones document: it fired here).
    let root = pop_one(&q, "close").await;
    let more: Vec<NewJob> = (0..6)
        .map(|i| member(&format!("child-{i}"), "settlement"))
        .collect();
    for r in q.push_many(&more).await.unwrap() {
        r.unwrap();
    }
    q.finish(&root.id, &root.token).await.unwrap();
    eventually(FIRE_WITHIN, "root's outcome counted", || async {
        (read(&q, "settlement").await.finished == 1).then_some(())
    })
    .await;
    let b = read(&q, "settlement").await;
    assert_eq!((b.state, b.jobs, b.pending), (BatchState::Closed, 7, 6));
    for i in 0..6 {
        let d = pop_one(&q, "close").await;
        // The last one adds one more before it finishes.
        if i == 5 {
            q.push(&member("grandchild", "settlement")).await.unwrap();
        }
        q.finish(&d.id, &d.token).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_ne!(read(&q, "settlement").await.state, BatchState::Fired);
    let d = pop_one(&q, "close").await;
    assert_eq!(d.id, "grandchild");
    q.finish(&d.id, &d.token).await.unwrap();
    let b = fired(&q, "settlement").await;
    assert_eq!((b.jobs, b.finished), (8, 8));
    // A fired batch takes no more jobs.
    let late = q.push(&member("too-late", "settlement")).await;
    assert!(matches!(late, Err(Error::Conflict(_))), "{late:?}");
    assert!(q.get("too-late").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_finishing_the_last_jobs_at_once_push_one_callback_each() {
    let redis = RedisServer::start();
    let a = split_queue(&redis, 4);
    let b = split_queue(&redis, 4);
    let batches = 40;
    for n in 0..batches {
        let id = format!("pair-{n}");
        a.create_batch(&new_batch(&id, BatchOn::Settled))
            .await
            .unwrap();
        push_all(
            &a,
            &[
                member(&format!("{id}-x"), &id),
                member(&format!("{id}-y"), &id),
            ],
        )
        .await;
        a.close_batch(&id).await.unwrap();
    }
    // Both jobs of each pair leased, then finished at the same moment by
    // the two instances.
    let mut leases = std::collections::HashMap::new();
    for _ in 0..batches * 2 {
        let d = pop_one(&a, "close").await;
        leases.insert(d.id.clone(), d.token.clone());
    }
    let mut tasks = Vec::new();
    for n in 0..batches {
        for (side, q) in [("x", a.clone()), ("y", b.clone())] {
            let id = format!("pair-{n}-{side}");
            let token = leases[&id].clone();
            tasks.push(tokio::spawn(async move { q.finish(&id, &token).await }));
        }
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    for n in 0..batches {
        let b = fired(&a, &format!("pair-{n}")).await;
        assert_eq!((b.jobs, b.finished), (2, 2));
    }
    let mut ids = std::collections::HashSet::new();
    for _ in 0..batches {
        let d = pop_one(&b, "settle").await;
        assert!(ids.insert(d.id.clone()), "callback {} twice", d.id);
        b.finish(&d.id, &d.token).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(callbacks(&a).await, 0, "one callback per batch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_finished_a_dead_job_holds_the_batch_until_it_is_requeued_and_finishes() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.create_batch(&new_batch("refunds", BatchOn::Finished))
        .await
        .unwrap();
    push_all(&q, &[member("r1", "refunds"), member("r2", "refunds")]).await;
    q.close_batch("refunds").await.unwrap();
    let d = pop_one(&q, "close").await;
    q.finish(&d.id, &d.token).await.unwrap();
    let d = pop_one(&q, "close").await;
    let dead_id = d.id.clone();
    q.nack(&d.id, &d.token, None, "gateway down").await.unwrap();
    eventually(FIRE_WITHIN, "the death counted", || async {
        (read(&q, "refunds").await.dead == 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(read(&q, "refunds").await.state, BatchState::Closed);
    assert_eq!(q.requeue_dead("close", &[dead_id]).await.unwrap(), 1);
    let d = pop_one(&q, "close").await;
    q.finish(&d.id, &d.token).await.unwrap();
    let b = fired(&q, "refunds").await;
    assert_eq!((b.finished, b.dead), (2, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_batch_deletes_its_jobs_not_handed_out_and_never_fires() {
    let redis = RedisServer::start();
    let q = split_queue(&redis, 4);
    q.create_batch(&new_batch("end-of-sale", BatchOn::Settled))
        .await
        .unwrap();
    let mut jobs: Vec<NewJob> = (0..30)
        .map(|i| member(&format!("c{i}"), "end-of-sale"))
        .collect();
    // Some wait an hour (delayed), the rest are ready.
    for j in jobs.iter_mut().take(10) {
        j.delay = Duration::from_secs(3600);
    }
    push_all(&q, &jobs).await;
    q.close_batch("end-of-sale").await.unwrap();
    let running = pop_one(&q, "close").await;
    let deleted = q.cancel_batch("end-of-sale").await.unwrap();
    assert_eq!(deleted, 29, "all but the running one");
    assert_eq!(
        q.pop(&topics(&["close"]), Duration::ZERO)
            .await
            .unwrap()
            .map(|d| d.id),
        None
    );
    // The running job ends as its consumer says; nothing fires.
    q.finish(&running.id, &running.token).await.unwrap();
    eventually(FIRE_WITHIN, "every outcome counted", || async {
        let b = read(&q, "end-of-sale").await;
        (b.pending == 0).then_some(b)
    })
    .await;
    let b = read(&q, "end-of-sale").await;
    assert_eq!(
        (b.state, b.finished, b.deleted),
        (BatchState::Cancelled, 1, 29)
    );
    assert_eq!(callbacks(&q).await, 0);
    let more = q.push(&member("after", "end-of-sale")).await;
    assert!(matches!(more, Err(Error::Conflict(_))), "{more:?}");
    let close = q.close_batch("end-of-sale").await;
    assert!(matches!(close, Err(Error::Conflict(_))), "{close:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_runs_out_mid_batch_is_retried_and_counted_once() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.create_batch(&new_batch("kill", BatchOn::Settled))
        .await
        .unwrap();
    let j = NewJob {
        batch: Some("kill".into()),
        retry: Some(delayq::RetryPolicy {
            intervals: vec![],
            max_attempts: Some(3),
        }),
        ..job("held", "close", 0, 1_000)
    };
    q.push(&j).await.unwrap();
    q.close_batch("kill").await.unwrap();
    // Its holder dies with the lease (never finishes): the lease runs out.
    let first = pop_one(&q, "close").await;
    let again = q
        .pop(&topics(&["close"]), Duration::from_secs(30))
        .await
        .unwrap()
        .expect("delivered again after the lease ran out");
    assert_eq!((again.id.as_str(), again.attempts), ("held", 2));
    assert_ne!(again.token, first.token);
    assert_ne!(read(&q, "kill").await.state, BatchState::Fired);
    q.finish(&again.id, &again.token).await.unwrap();
    let b = fired(&q, "kill").await;
    assert_eq!((b.jobs, b.finished, b.dead), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_to_a_paused_topic_waits_there_until_it_resumes() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.pause("settle").await.unwrap();
    q.create_batch(&new_batch("paused", BatchOn::Settled))
        .await
        .unwrap();
    q.push(&member("p1", "paused")).await.unwrap();
    q.close_batch("paused").await.unwrap();
    let d = pop_one(&q, "close").await;
    q.finish(&d.id, &d.token).await.unwrap();
    let b = fired(&q, "paused").await;
    assert_eq!(
        q.pop(&topics(&["settle"]), Duration::ZERO)
            .await
            .unwrap()
            .map(|d| d.id),
        None
    );
    assert_eq!(callbacks(&q).await, 1);
    q.resume("settle").await.unwrap();
    assert_eq!(report(&q, &b).await["finished"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pusher_that_died_before_its_push_leaves_a_reservation_the_relay_drops() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.create_batch(&new_batch("ghost", BatchOn::Settled))
        .await
        .unwrap();
    q.push(&member("real", "ghost")).await.unwrap();
    // What a pusher killed between the home's taking the id in and the
    // push leaves: a member pending, reserved two minutes ago, no job.
    let now_ms: i64 = redis.cmd::<Vec<String>>(&["TIME"]).await[0]
        .parse::<i64>()
        .unwrap()
        * 1000;
    let _: i64 = redis
        .cmd(&["HSET", "{dq}:bm:ghost", "never-pushed", "p"])
        .await;
    let _: i64 = redis.cmd(&["HINCRBY", "{dq}:b:ghost", "n", "1"]).await;
    let _: i64 = redis
        .cmd(&[
            "ZADD",
            "{dq}:breserved",
            &(now_ms - 120_000).to_string(),
            "ghost\nnever-pushed",
        ])
        .await;
    q.close_batch("ghost").await.unwrap();
    let d = pop_one(&q, "close").await;
    q.finish(&d.id, &d.token).await.unwrap();
    // The relay looks at old reservations every 15 s: the ghost leaves.
    let b = eventually(
        Duration::from_secs(90),
        "the ghost dropped, the batch fired",
        || async {
            q.batch("ghost")
                .await
                .unwrap()
                .filter(|b| b.state == BatchState::Fired)
        },
    )
    .await;
    assert_eq!((b.jobs, b.finished), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_batches_and_pushes_into_them_are_refused_and_change_nothing() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // No such batch: nothing pushed.
    let none = q.push(&member("orphan", "nope")).await;
    assert!(
        matches!(none, Err(Error::NoBatch(ref b)) if b == "nope"),
        "{none:?}"
    );
    assert!(q.get("orphan").await.unwrap().is_none());
    // Ids: too long, control characters; and ids no URL could name.
    let long = "b".repeat(delayq::batch::MAX_BATCH_ID_BYTES + 1);
    for bad in [long.as_str(), "a\nb", " "] {
        let e = q.create_batch(&new_batch(bad, BatchOn::Settled)).await;
        assert!(matches!(e, Err(Error::Invalid(_))), "{bad:?}: {e:?}");
        let e = q.push(&member("x", bad)).await;
        assert!(matches!(e, Err(Error::Invalid(_))), "{bad:?}: {e:?}");
    }
    for bad in [".", "..", " padded", "padded "] {
        let e = q.create_batch(&new_batch(bad, BatchOn::Settled)).await;
        assert!(matches!(e, Err(Error::Invalid(_))), "{bad:?}: {e:?}");
        assert!(q.batch(bad).await.unwrap().is_none());
    }
    // A callback body past a result's limit (the report escapes it).
    let mut big = new_batch("big-body", BatchOn::Settled);
    big.callback.body = "\"".repeat(delayq::defaults::MAX_RESULT_BYTES + 1);
    let e = q.create_batch(&big).await;
    assert!(
        matches!(e, Err(Error::Invalid(ref m)) if m.contains("callback body")),
        "{e:?}"
    );
    // A callback that breaks a job's limits.
    let mut b = new_batch("cb", BatchOn::Settled);
    b.callback.topic = String::new();
    let e = q.create_batch(&b).await;
    assert!(
        matches!(e, Err(Error::Invalid(ref m)) if m.contains("callback")),
        "{e:?}"
    );
    assert!(q.batch("cb").await.unwrap().is_none());
    // Created twice: refused, the first kept.
    q.create_batch(&new_batch("twice", BatchOn::Settled))
        .await
        .unwrap();
    let e = q.create_batch(&new_batch("twice", BatchOn::Finished)).await;
    assert!(matches!(e, Err(Error::Conflict(_))), "{e:?}");
    assert_eq!(read(&q, "twice").await.on, BatchOn::Settled);
    // An id in use: refused, the job left as it was, the batch not counting it.
    q.push(&job("taken", "close", 3_600_000, 60_000))
        .await
        .unwrap();
    let e = q.push(&member("taken", "twice")).await;
    assert!(matches!(e, Err(Error::Conflict(_))), "{e:?}");
    let kept = q.get("taken").await.unwrap().unwrap();
    assert_eq!(kept.body, "body-taken");
    assert_eq!(read(&q, "twice").await.jobs, 0);
    // The same job pushed again (a retry after a lost reply): one member.
    q.push(&member("m1", "twice")).await.unwrap();
    q.push(&member("m1", "twice")).await.unwrap();
    assert_eq!(read(&q, "twice").await.jobs, 1);
    // With a dedup key.
    let mut d = member("dd", "twice");
    d.dedup = Some(delayq::Dedup {
        key: "k".into(),
        mode: delayq::DedupMode::Simple,
        window: None,
        max_wait: None,
    });
    let e = q.push(&d).await;
    assert!(
        matches!(e, Err(Error::Invalid(ref m)) if m.contains("dedup")),
        "{e:?}"
    );
    assert_eq!(read(&q, "twice").await.jobs, 1);
    // A plain push over a member deletes it from the batch's view.
    q.push(&job("m1", "close", 0, 60_000)).await.unwrap();
    eventually(
        FIRE_WITHIN,
        "the replaced member counted deleted",
        || async { (read(&q, "twice").await.deleted == 1).then_some(()) },
    )
    .await;
    // An id that had its outcome in the batch is not taken again: the
    // batch would count the new job done before it ran.
    let again = q.push(&member("m1", "twice")).await;
    assert!(
        matches!(again, Err(Error::Conflict(ref m)) if m.contains("once")),
        "{again:?}"
    );
    let plain = q.get("m1").await.unwrap().unwrap();
    assert_eq!(plain.batch, None, "the plain job left as it was");
    let b = read(&q, "twice").await;
    assert_eq!((b.jobs, b.deleted, b.pending), (1, 1, 0));
    // A note for an id the batch never took in (a job of an earlier batch
    // of the same id, its retention run out) counts nothing.
    let _: String = redis
        .cmd(&[
            "XADD",
            "{dq}:notes",
            "*",
            "b",
            "twice",
            "i",
            "stranger",
            "o",
            "d",
        ])
        .await;
    eventually(FIRE_WITHIN, "the stranger's note relayed", || async {
        (redis.cmd::<i64>(&["XLEN", "{dq}:notes"]).await == 0).then_some(())
    })
    .await;
    let b = read(&q, "twice").await;
    assert_eq!((b.jobs, b.dead), (1, 0));
    assert!(q.batch("never-made").await.unwrap().is_none());
    let e = q.close_batch("never-made").await;
    assert!(matches!(e, Err(Error::NoBatch(_))), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_close_fire_and_cancel_are_events_with_its_report() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        events: true,
        ..config(&redis)
    })
    .unwrap();
    q.create_batch(&new_batch("evented", BatchOn::Settled))
        .await
        .unwrap();
    q.push(&member("e1", "evented")).await.unwrap();
    q.close_batch("evented").await.unwrap();
    let d = pop_one(&q, "close").await;
    q.finish(&d.id, &d.token).await.unwrap();
    let b = fired(&q, "evented").await;
    q.create_batch(&new_batch("dropped", BatchOn::Settled))
        .await
        .unwrap();
    q.cancel_batch("dropped").await.unwrap();
    let read = q.events_after("0", &[], 1000).await.unwrap();
    let of = |id: &str| -> Vec<(String, Option<Value>)> {
        read.events
            .iter()
            .filter(|(_, e)| e.id == id)
            .map(|(_, e)| (e.event.clone(), e.result.clone()))
            .collect()
    };
    let evented = of("evented");
    assert_eq!(evented.len(), 2, "{evented:?}");
    assert_eq!(evented[0].0, "batch_closed");
    assert_eq!(evented[1].0, "batch_fired");
    let report = evented[1].1.as_ref().expect("the report");
    assert_eq!(
        (report["jobs"].as_u64(), report["finished"].as_u64()),
        (Some(1), Some(1))
    );
    let callback: Vec<String> = of(&b.callback_id).into_iter().map(|e| e.0).collect();
    assert_eq!(&callback[..2], ["pushed", "fired"]);
    let dropped: Vec<String> = of("dropped").into_iter().map(|e| e.0).collect();
    assert_eq!(dropped, ["batch_cancelled"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_batch_is_made_while_an_instance_of_an_older_build_runs() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // An older build's heartbeat says nothing of batches: its finishes
    // would leave a batch waiting for ever.
    let mut old = delayq::instances::this_process("old-host", "127.0.0.1:1", Vec::new(), false);
    old.batches = None;
    q.heartbeat(&mut old, Duration::from_secs(60))
        .await
        .unwrap();
    let e = q.create_batch(&new_batch("early", BatchOn::Settled)).await;
    match e {
        Err(Error::Conflict(m)) => assert!(m.contains(&old.id), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(q.batch("early").await.unwrap().is_none());
    // Gone (stopped), batches are made again; this build's own heartbeat
    // says it knows them.
    q.forget_instance(&old.id).await.unwrap();
    let mut now = delayq::instances::this_process("new-host", "127.0.0.1:2", Vec::new(), false);
    q.heartbeat(&mut now, Duration::from_secs(60))
        .await
        .unwrap();
    q.create_batch(&new_batch("early", BatchOn::Settled))
        .await
        .unwrap();
}
