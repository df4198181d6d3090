//! Layout 3 (the split): delayed jobs in their topic schedules only, the
//! passes out of the shared schedule and back into it.

use super::*;

/// Layout 3 (the split), held by hand: delayed
/// jobs are kept in their topic schedules only, the shared schedule keeps
/// leases' ends, and every read and move takes a job's time from its
/// topic schedule; a job an earlier layout left in both moves once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_layout_3_delayed_jobs_live_in_their_topic_schedules_only() {
    let redis = RedisServer::start();
    // Held from the start: the upkeep leaves a held flag alone.
    let _: () = redis.cmd(&["SET", "{dq}:layout", "1 held"]).await;
    let q = queue(&redis);
    // Written in layout 1: in both schedules.
    let old_due = redis.time_ms().await + 1_500;
    q.push(&NewJob {
        due_at_ms: Some(old_due),
        ..job("old", "t", 0, 60_000)
    })
    .await
    .unwrap();
    let _: () = redis.cmd(&["SET", "{dq}:layout", "3 held"]).await;
    let later = now_ms() + 3_600_000;
    let at = |id: &str, topic: &str, due: i64| NewJob {
        due_at_ms: Some(due),
        ..job(id, topic, 0, 60_000)
    };
    q.push(&at("far", "t", later)).await.unwrap();
    q.push(&at("other", "u", later + 5)).await.unwrap();
    let soon_due = redis.time_ms().await + 2_000;
    q.push(&at("soon", "t", soon_due)).await.unwrap();
    let redis = &redis;
    let in_shared = |id: &'static str| async move {
        let s: Option<i64> = redis.cmd(&["ZSCORE", "{dq}:schedule", id]).await;
        s
    };
    for id in ["far", "other", "soon"] {
        assert_eq!(in_shared(id).await, None, "{id} in the shared schedule");
    }
    // "old" stays in the shared schedule until the leader's pass for
    // layout 3 takes it out: either way it moves once.
    heads_exact(redis, "pushes in layout 3").await;
    assert_eq!(q.get("far").await.unwrap().unwrap().due_ms, later);
    let (jobs, _) = q.list_jobs("t", JobState::Delayed, None, 10).await.unwrap();
    let listed: Vec<(&str, i64)> = jobs.iter().map(|j| (j.id.as_str(), j.due_ms)).collect();
    assert_eq!(
        listed,
        [("old", old_due), ("soon", soon_due), ("far", later)]
    );
    q.reschedule("far", Duration::ZERO, Some(later + 100), None)
        .await
        .unwrap();
    assert_eq!(in_shared("far").await, None);
    assert_eq!(q.get("far").await.unwrap().unwrap().due_ms, later + 100);
    // Both fire once each, never early; the lease's end is shared.
    let mut got = Vec::new();
    for _ in 0..2 {
        let d = q
            .pop(&topics(&["t"]), Duration::from_secs(30))
            .await
            .unwrap()
            .expect("a job fired");
        let now = redis.time_ms().await;
        let due = if d.id == "old" { old_due } else { soon_due };
        assert!(now >= due, "{} handed over {} ms early", d.id, due - now);
        assert!(in_shared(if d.id == "old" { "old" } else { "soon" })
            .await
            .is_some());
        got.push(d);
    }
    let mut ids: Vec<&str> = got.iter().map(|d| d.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["old", "soon"]);
    assert!(q
        .pop(&topics(&["t"]), Duration::from_millis(1500))
        .await
        .unwrap()
        .is_none());
    // A retry delay: delayed again, in its topic schedule only.
    let d = got.iter().find(|d| d.id == "soon").unwrap();
    q.nack("soon", &d.token, Some(Duration::from_secs(3600)), "again")
        .await
        .unwrap();
    assert_eq!(in_shared("soon").await, None);
    let due = q.get("soon").await.unwrap().unwrap().due_ms;
    let own: Option<i64> = redis.cmd(&["ZSCORE", "{dq}:s:t", "soon"]).await;
    assert_eq!(own, Some(due));
    assert!(q.delete("far").await.unwrap());
    heads_exact(redis, "a nack and a delete in layout 3").await;
    let counts = q.topics().await.unwrap().topics["t"];
    assert_eq!((counts.delayed, counts.next_due_ms), (1, Some(due)));
    q.close().await;
}

/// Layout 3 reached with delayed jobs an earlier layout left in the shared
/// schedule: the leader's pass takes them out (a lease's end stays), and
/// holding layout 2 puts every one back before an older build may start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_3_takes_delayed_jobs_out_of_the_shared_schedule_and_holding_2_puts_them_back() {
    let redis = RedisServer::start();
    let _: () = redis.cmd(&["SET", "{dq}:layout", "1 held"]).await;
    let base = now_ms() + 3_600_000;
    {
        let q = queue(&redis);
        fill(&q, &["a", "b", "c"], 700, base).await;
        q.push(&job("leased", "a", 0, 3_600_000)).await.unwrap();
        q.pop(&topics(&["a"]), Duration::from_secs(30))
            .await
            .unwrap()
            .expect("leased fired");
        indexed(&redis).await;
        q.close().await;
    }
    let _: () = redis.cmd(&["SET", "{dq}:layout", "3 held"]).await;
    // A new leader begins the pass at once.
    let q = queue(&redis);
    eventually(LONG, "the split pass ended", || async {
        let s: Option<String> = redis.cmd(&["HGET", "{dq}:indexed", "split"]).await;
        (s.as_deref() == Some("1")).then_some(())
    })
    .await;
    let shared: Vec<String> = redis.cmd(&["ZRANGE", "{dq}:schedule", "0", "-1"]).await;
    assert_eq!(shared, ["leased"]);
    heads_exact(&redis, "the split pass").await;
    let n: usize = redis.cmd(&["ZCARD", "{dq}:s:b"]).await;
    assert_eq!(n, 700);
    assert_eq!(q.get("b-5").await.unwrap().unwrap().due_ms, base + 5);
    // The queue's earliest: a delayed job's (in the heads), not the lease's.
    assert_eq!(q.topics().await.unwrap().next_due_ms, Some(base));
    q.hold_layout(2).await.unwrap();
    let s: Option<String> = redis.cmd(&["HGET", "{dq}:indexed", "split"]).await;
    assert_eq!(s, None);
    for t in ["a", "b", "c"] {
        exact(&redis, t, "holding layout 2").await;
        let (own, _) = both(&redis, t).await;
        assert_eq!(own.len(), 700, "{t}");
    }
    let n: usize = redis.cmd(&["ZCARD", "{dq}:schedule"]).await;
    assert_eq!(n, 2101);
    q.close().await;
}

/// The flag below 3 again before the way back reached a delayed job (in
/// its topic schedule only, the shared schedule lacks it): neither the
/// backfill's pass nor the sweep takes its entry for a stale one; the job
/// fires once, on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_job_not_yet_put_back_from_layout_3_still_fires_on_time() {
    let redis = RedisServer::start();
    let _: () = redis.cmd(&["SET", "{dq}:layout", "3 held"]).await;
    let q = queue(&redis);
    indexed(&redis).await;
    let due = redis.time_ms().await + 4_000;
    q.push(&NewJob {
        due_at_ms: Some(due),
        ..job("only", "t", 0, 60_000)
    })
    .await
    .unwrap();
    let shared: Option<i64> = redis.cmd(&["ZSCORE", "{dq}:schedule", "only"]).await;
    assert_eq!(shared, None);
    // Lowered, the way back not begun (its marks gone): the leader's next
    // look sees the flag cross 3 and runs a pass.
    let _: () = redis.cmd(&["HDEL", "{dq}:indexed", "split", "out"]).await;
    let _: () = redis.cmd(&["SET", "{dq}:layout", "2 held"]).await;
    let d = q
        .pop(&topics(&["t"]), Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the job fired");
    assert_eq!(d.id, "only");
    assert!(d.popped_at_us >= due * 1000, "handed over early");
    let late = d.popped_at_us / 1000 - due;
    assert!(late <= 2_000, "handed over {late} ms late");
    assert!(q
        .pop(&topics(&["t"]), Duration::from_millis(1_500))
        .await
        .unwrap()
        .is_none());
    q.close().await;
}

/// Every topic's delayed jobs listed page by page in layout 3 (a merge of
/// the topic schedules led by the heads, each topic read only up to the
/// full page's end): 40 topics whose jobs interleave and share due times,
/// small pages, every job once, in (due, id) order, whatever the page size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_all_topics_listing_merges_the_topic_schedules_in_order_page_by_page() {
    let redis = RedisServer::start();
    let _: () = redis.cmd(&["SET", "{dq}:layout", "3 held"]).await;
    let q = queue(&redis);
    indexed(&redis).await;
    let base = redis.time_ms().await + 3_600_000;
    let mut expect: Vec<(i64, String)> = Vec::new();
    let mut jobs = Vec::new();
    for i in 0..600u64 {
        // 40 topics, 23 due times: many ties within and across topics,
        // and topics whose heads all come before a page's end.
        let (id, due) = (
            format!("j{:03}", (i * 379) % 600),
            base + ((i * 7) % 23) as i64 * 1000,
        );
        jobs.push(NewJob {
            due_at_ms: Some(due),
            ..job(&id, &format!("topic-{}", i % 40), 0, 60_000)
        });
        expect.push((due, id));
    }
    push_all(&q, &jobs).await;
    expect.sort();
    let expect: Vec<String> = expect.into_iter().map(|(_, id)| id).collect();
    for limit in [1, 7, 50, 1000] {
        let (mut listed, mut cursor) = (Vec::new(), None::<String>);
        loop {
            let (page, next) = q.upcoming(cursor.as_deref(), limit).await.unwrap();
            assert!(page.len() <= limit);
            listed.extend(page.into_iter().map(|j| j.id));
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
            assert!(
                listed.len() <= expect.len(),
                "limit {limit}: more pages than jobs"
            );
        }
        assert_eq!(listed, expect, "limit {limit}");
    }
    q.close().await;
}

/// A delayed job's due time is in its topic schedule only, read in a
/// second round trip after its fields: a job that falls due between the
/// two (here: pushed again, due now) is read again, never listed delayed
/// with no due time. The fields' reply is held until the job has moved,
/// however slow the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_moves_between_a_listings_two_reads_is_read_again() {
    let redis = RedisServer::start();
    let _: () = redis.cmd(&["SET", "{dq}:layout", "3 held"]).await;
    let q = queue(&redis);
    indexed(&redis).await;
    let far = redis.time_ms().await + 3_600_000;
    let at = |id: &str, due: i64| NewJob {
        due_at_ms: Some(due),
        ..job(id, "t", 0, 60_000)
    };
    q.push(&at("a", far)).await.unwrap();
    q.push(&at("b", far + 1)).await.unwrap();
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let slow = Queue::connect(Config {
        redis: delayq::Redis::Url(proxy.url()),
        redis_timeout: Duration::from_secs(60),
        dispatch: false,
        ..Config::default()
    })
    .unwrap();
    retried("the slow queue's first call", || slow.check_connection()).await;
    crate::slowlog::arm_slowlog(&redis, 10_000).await;
    // Each reply 5 s on its way: the fields' reply is still in the proxy
    // when the slow log shows their read.
    proxy.set_delay(Duration::from_secs(5));
    let listing = {
        let slow = slow.clone();
        tokio::spawn(async move { slow.list_jobs("t", JobState::Delayed, None, 10).await })
    };
    // The fields read (the slow log shows the commands a script runs too:
    // the listing's own read is the one that takes the body's length):
    // hold the replies, move "a", let them go.
    eventually(LONG, "the listing's fields read", || async {
        let entries = crate::slowlog::slowlog_entries(&redis).await;
        let read = entries
            .iter()
            .any(|(_, args)| args[0] == "hstrlen" && args[1].ends_with(":a"));
        read.then_some(())
    })
    .await;
    proxy.hold(true);
    q.push(&job("a", "t", 0, 60_000)).await.unwrap();
    proxy.hold(false);
    let (jobs, _) = listing.await.unwrap().unwrap();
    let seen: Vec<_> = jobs
        .iter()
        .map(|j| (j.id.as_str(), j.state, j.due_ms))
        .collect();
    let a = jobs.iter().find(|j| j.id == "a").expect("a listed");
    assert_eq!(a.state, JobState::Ready, "{seen:?}");
    assert!(a.due_ms > 0, "{seen:?}");
    let b = jobs.iter().find(|j| j.id == "b").expect("b listed");
    assert_eq!(
        (b.state, b.due_ms),
        (JobState::Delayed, far + 1),
        "{seen:?}"
    );
    slow.close().await;
    q.close().await;
}
