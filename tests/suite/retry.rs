//! Retry schedules, leases as attempts, stale tokens, dead letters, requeue,
//! reschedule and per-topic counts, through the library on real Redis.

use std::time::Duration;

use crate::common::*;
use delayq::{
    Config, Error, IfExists, JobState, NewJob, PushOutcome, Queue, RetryPolicy, TopicCounts,
};

fn queue_with(redis: &RedisServer, f: impl FnOnce(&mut Config)) -> Queue {
    let mut c = config(redis);
    f(&mut c);
    Queue::connect(c).unwrap()
}

async fn pop1(q: &Queue, topic: &str, wait: Duration) -> Option<delayq::Delivery> {
    q.pop(&topics(&[topic]), wait).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payment_notification_schedule_runs_scaled_then_dies_and_requeues() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // The Alipay pattern, scaled: notify now; retry after 200ms, 400ms, 400ms,
    // 600ms; then give up (5 attempts).
    let schedule = RetryPolicy::parse("200ms,400ms,400ms,600ms", None).unwrap();
    q.push(&NewJob {
        id: "pay-1".into(),
        topic: "notify".into(),
        body: "merchant 42".into(),
        retry: Some(schedule.clone()),
        ttr: Duration::from_secs(30),
        ..NewJob::default()
    })
    .await
    .unwrap();
    let mut failed_at_ms = None;
    for attempt in 1..=5u32 {
        let d = pop1(&q, "notify", Duration::from_secs(5))
            .await
            .expect("an attempt");
        assert_eq!(d.attempts, attempt);
        if let Some((at, interval)) = failed_at_ms {
            // Redis time: not before the interval after the failure.
            assert!(
                d.popped_at_us >= (at + interval) * 1000,
                "attempt {attempt} came {} ms after the failure, interval {interval} ms",
                d.popped_at_us / 1000 - at
            );
        }
        let nacked = q
            .nack(
                &d.id,
                &d.token,
                None,
                &format!("merchant said 500 (try {attempt})"),
            )
            .await
            .unwrap();
        if attempt < 5 {
            let interval = schedule.intervals[attempt as usize - 1].as_millis() as i64;
            assert_eq!(nacked.state, JobState::Delayed);
            failed_at_ms = Some((nacked.due_ms - interval, interval));
        } else {
            assert_eq!(nacked.state, JobState::Dead);
        }
    }
    // Dead: kept with its history, not delivered.
    assert!(pop1(&q, "notify", Duration::from_millis(800))
        .await
        .is_none());
    let job = q.get("pay-1").await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Dead);
    assert_eq!(job.attempts, 5);
    assert_eq!(job.last_error.as_deref(), Some("merchant said 500 (try 5)"));
    assert_eq!(job.history.len(), 5);
    assert_eq!(job.history[0].attempt, 1);
    assert_eq!(job.retry, schedule);
    let dead = q.dead("notify", 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, "pay-1");
    let counts = q.topics().await.unwrap().topics["notify"];
    assert_eq!(
        counts,
        TopicCounts {
            dead: 1,
            ..Default::default()
        }
    );

    // Requeue: fresh attempts, delivered again.
    assert_eq!(q.requeue_dead("notify", &[]).await.unwrap(), 1);
    let d = pop1(&q, "notify", Duration::from_secs(5)).await.unwrap();
    assert_eq!((d.id.as_str(), d.attempts), ("pay-1", 1));
    q.finish(&d.id, &d.token).await.unwrap();
    assert!(q.topics().await.unwrap().topics.is_empty());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_a_failed_attempt_and_stale_tokens_change_nothing() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&NewJob {
        id: "L".into(),
        topic: "lease".into(),
        // Long enough for the stale calls below to be made well within
        // the second lease, however busy the machine.
        ttr: Duration::from_secs(2),
        retry: Some(RetryPolicy {
            intervals: vec![],
            max_attempts: Some(2),
        }),
        ..NewJob::default()
    })
    .await
    .unwrap();
    let first = pop1(&q, "lease", Duration::from_secs(5)).await.unwrap();
    // Not finished: the lease runs out, which is attempt 1 failing.
    let second = pop1(&q, "lease", Duration::from_secs(15)).await.unwrap();
    assert_eq!(second.attempts, 2);
    assert!(second.popped_at_us >= first.popped_at_us + 2_000_000);
    let job = q.get("L").await.unwrap().unwrap();
    assert!(job.last_error.unwrap().starts_with("lease expired"));

    // The first consumer's token is stale for every lease operation.
    let before = q.get("L").await.unwrap().unwrap();
    assert!(matches!(
        q.finish("L", &first.token).await,
        Err(Error::StaleLease(_))
    ));
    assert!(matches!(
        q.nack("L", &first.token, None, "late").await,
        Err(Error::StaleLease(_))
    ));
    assert!(matches!(
        q.touch("L", &first.token, None).await,
        Err(Error::StaleLease(_))
    ));
    assert_eq!(
        q.get("L").await.unwrap().unwrap(),
        before,
        "a stale token changed the job"
    );
    assert!(matches!(
        q.finish("nope", "1").await,
        Err(Error::NotFound(_))
    ));

    // The second lease runs out too: attempts used up, dead.
    let job = eventually(Duration::from_secs(20), "L to die", || async {
        let j = q.get("L").await.unwrap()?;
        (j.state == JobState::Dead).then_some(j)
    })
    .await;
    assert_eq!(job.history.len(), 2);
    assert!(pop1(&q, "lease", Duration::from_millis(500))
        .await
        .is_none());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touch_extends_a_lease_and_nack_can_override_the_delay() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("T", "touch", 0, 2_000)).await.unwrap();
    let d = pop1(&q, "touch", Duration::from_secs(5)).await.unwrap();
    let until = q
        .touch("T", &d.token, Some(Duration::from_secs(20)))
        .await
        .unwrap();
    assert!(until * 1000 >= d.popped_at_us + 20_000_000);
    // Not re-delivered past its ttr: the lease was extended.
    assert!(pop1(&q, "touch", Duration::from_millis(3_000))
        .await
        .is_none());
    assert_eq!(
        q.get("T").await.unwrap().unwrap().lease_until_ms,
        Some(until)
    );
    // A nack with its own delay.
    let n = q
        .nack("T", &d.token, Some(Duration::from_millis(300)), "busy")
        .await
        .unwrap();
    assert_eq!(n.state, JobState::Delayed);
    let again = pop1(&q, "touch", Duration::from_secs(5)).await.unwrap();
    assert!(again.popped_at_us >= n.due_ms * 1000);
    assert_eq!(again.attempts, 2);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_defaults_keep_mode_reschedule_and_dead_letter_retention() {
    let redis = RedisServer::start();
    let q = queue_with(&redis, |c| {
        c.topic_retry.insert(
            "once".into(),
            RetryPolicy {
                intervals: vec![],
                max_attempts: Some(1),
            },
        );
        c.dead_max_per_topic = 3;
    });
    // Five jobs that die at the first failure (the topic's default policy).
    for i in 0..5 {
        q.push(&job(&format!("d{i}"), "once", 0, 60_000))
            .await
            .unwrap();
    }
    for _ in 0..5 {
        let d = pop1(&q, "once", Duration::from_secs(5)).await.unwrap();
        assert_eq!(
            q.nack(&d.id, &d.token, None, "no").await.unwrap().state,
            JobState::Dead
        );
    }
    // Only the newest three are kept.
    let dead = q.dead("once", 0, 10).await.unwrap();
    assert_eq!(dead.len(), 3);
    assert_eq!(q.topics().await.unwrap().topics["once"].dead, 3);
    let survivors: Vec<_> = dead.iter().map(|j| j.id.clone()).collect();
    for id in &survivors {
        assert!(q.get(id).await.unwrap().is_some());
    }
    assert_eq!(
        redis
            .cmd::<i64>(&["EXISTS", "{dq}:j:d0", "{dq}:j:d1"])
            .await
            + survivors.len() as i64,
        3,
        "trimmed dead jobs must be deleted"
    );

    // Reschedule a dead job: delayed again, attempts afresh, new body.
    let due = q
        .reschedule(
            &survivors[0],
            Duration::from_millis(200),
            None,
            Some("again"),
        )
        .await
        .unwrap();
    let j = q.get(&survivors[0]).await.unwrap().unwrap();
    assert_eq!(
        (j.state, j.attempts, j.due_ms, j.body.as_str()),
        (JobState::Delayed, 0, due, "again")
    );
    assert!(matches!(
        q.reschedule("missing", Duration::ZERO, None, None).await,
        Err(Error::NotFound(_))
    ));

    // Keep mode leaves an existing job alone.
    let kept = q
        .push(&NewJob {
            id: survivors[0].clone(),
            topic: "once".into(),
            body: "other".into(),
            delay: Duration::from_secs(3600),
            if_exists: IfExists::Keep,
            ..NewJob::default()
        })
        .await
        .unwrap();
    assert_eq!((kept.outcome, kept.due_ms), (PushOutcome::Kept, due));
    assert_eq!(q.get(&survivors[0]).await.unwrap().unwrap().body, "again");

    // Purge the rest of the dead.
    assert_eq!(q.purge_dead("once").await.unwrap(), 2);
    let counts = q.topics().await.unwrap().topics["once"];
    assert_eq!(
        counts,
        TopicCounts {
            delayed: 1,
            next_due_ms: Some(due),
            ..Default::default()
        }
    );
    q.close().await;
}

/// The earliest due time among jobs `ids`: a topic's next due time.
async fn earliest(q: &Queue, ids: &[&str]) -> Option<i64> {
    let mut dues = Vec::new();
    for id in ids {
        dues.push(q.get(id).await.unwrap().unwrap().due_ms);
    }
    dues.into_iter().min()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_follow_every_transition() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    for i in 0..4 {
        q.push(&job(
            &format!("c{i}"),
            "cnt",
            if i < 2 { 0 } else { 3_600_000 },
            60_000,
        ))
        .await
        .unwrap();
    }
    let counts = eventually(Duration::from_secs(30), "two ready", || async {
        let c = q.topics().await.unwrap().topics["cnt"];
        (c.ready == 2).then_some(c)
    })
    .await;
    assert_eq!(
        counts,
        TopicCounts {
            delayed: 2,
            ready: 2,
            next_due_ms: earliest(&q, &["c2", "c3"]).await,
            ..Default::default()
        }
    );
    let d = pop1(&q, "cnt", Duration::from_secs(1)).await.unwrap();
    let c = q.topics().await.unwrap().topics["cnt"];
    assert_eq!(
        c,
        TopicCounts {
            delayed: 2,
            ready: 1,
            reserved: 1,
            next_due_ms: earliest(&q, &["c2", "c3"]).await,
            ..Default::default()
        }
    );
    q.finish(&d.id, &d.token).await.unwrap();
    q.delete("c2").await.unwrap();
    // Replacing a ready job with a delayed one moves its count.
    let ready_id = if d.id == "c0" { "c1" } else { "c0" };
    q.push(&job(ready_id, "cnt", 3_600_000, 60_000))
        .await
        .unwrap();
    let o = q.topics().await.unwrap();
    assert_eq!(
        o.topics["cnt"],
        TopicCounts {
            delayed: 2,
            next_due_ms: earliest(&q, &["c3", ready_id]).await,
            ..Default::default()
        }
    );
    assert!(o.next_due_ms.is_some());
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nack_without_a_delay_backs_off_a_job_without_a_policy_and_keeps_an_explicit_one() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // No policy: the built-in backoff (1s, then 5s, ...), not at once.
    q.push(&job("plain", "sms", 0, 60_000)).await.unwrap();
    let d = pop1(&q, "sms", Duration::from_secs(5)).await.unwrap();
    let n = q.nack(&d.id, &d.token, None, "gateway down").await.unwrap();
    assert_eq!(n.state, JobState::Delayed, "{n:?}");
    let first_wait = n.due_ms - d.popped_at_us / 1000;
    assert!((1000..=3000).contains(&first_wait), "{first_wait}");
    let d = pop1(&q, "sms", Duration::from_secs(10)).await.unwrap();
    let n = q.nack(&d.id, &d.token, None, "still down").await.unwrap();
    assert_eq!(n.state, JobState::Delayed);
    let second_wait = n.due_ms - d.popped_at_us / 1000;
    assert!((5000..=7000).contains(&second_wait), "{second_wait}");
    // Unbounded attempts, as before: the job is not dead.
    assert_eq!(
        q.get("plain").await.unwrap().unwrap().retry,
        RetryPolicy::default()
    );
    // A nack that gives a delay of zero still asks for at once.
    q.push(&job("now", "sms-now", 0, 60_000)).await.unwrap();
    let d = pop1(&q, "sms-now", Duration::from_secs(5)).await.unwrap();
    let n = q
        .nack(&d.id, &d.token, Some(Duration::ZERO), "again")
        .await
        .unwrap();
    assert_eq!(n.state, JobState::Ready);

    // An explicit policy is kept exactly: attempts bounded, at once...
    q.push(&NewJob {
        retry: Some(RetryPolicy::parse("", Some(3)).unwrap()),
        ..job("bounded", "bounded", 0, 60_000)
    })
    .await
    .unwrap();
    let d = pop1(&q, "bounded", Duration::from_secs(5)).await.unwrap();
    let n = q.nack(&d.id, &d.token, None, "no").await.unwrap();
    assert_eq!(n.state, JobState::Ready);
    // ...or its own intervals.
    q.push(&NewJob {
        retry: Some(RetryPolicy::parse("50ms", Some(3)).unwrap()),
        ..job("own", "mail", 0, 60_000)
    })
    .await
    .unwrap();
    let d = pop1(&q, "mail", Duration::from_secs(5)).await.unwrap();
    let n = q.nack(&d.id, &d.token, None, "busy").await.unwrap();
    assert_eq!(n.state, JobState::Delayed);
    assert!(n.due_ms - d.popped_at_us / 1000 <= 500, "{n:?}");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_age_out_on_a_quiet_topic() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        dead_max_age: Duration::from_secs(1),
        ..config(&redis)
    })
    .unwrap();
    q.push(&NewJob {
        retry: one_attempt(),
        ..job("old", "quiet", 0, 60_000)
    })
    .await
    .unwrap();
    let d = q
        .pop(&topics(&["quiet"]), Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let n = q.nack(&d.id, &d.token, None, "fails").await.unwrap();
    assert_eq!(n.state, JobState::Dead);
    // Nothing else dies on this topic; the dead letter still goes.
    eventually(
        Duration::from_secs(10),
        "the old dead letter dropped",
        || async { q.get("old").await.unwrap().is_none().then_some(()) },
    )
    .await;
    let o = q.topics().await.unwrap();
    assert!(!o.topics.contains_key("quiet"), "{:?}", o.topics);
    q.close().await;
}
