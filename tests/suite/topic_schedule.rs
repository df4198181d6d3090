//! Each topic's own schedule of delayed jobs (`{p}:s:<topic>`): a topic's
//! listing starts from its earliest jobs whatever other topics hold, the
//! set stays exact through every way a job enters or leaves delayed, and a
//! Redis that an older build filled gets the sets back from the upkeep.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use delayq::{JobState, NewJob, Queue, TagMove};

const LONG: Duration = Duration::from_secs(60);

/// Waits until the upkeep's backfill has ended a pass (from then on a
/// topic's listing reads its own schedule).
async fn indexed(redis: &RedisServer) {
    eventually(LONG, "the topic schedules backfilled", || async {
        let mut c = redis.conn().await;
        let done: Option<String> = redis::cmd("HGET")
            .arg("{dq}:indexed")
            .arg("done")
            .query_async(&mut c)
            .await
            .unwrap();
        (done.as_deref() == Some("1")).then_some(())
    })
    .await;
}

/// (id, due) of `topic`'s schedule, and of the shared schedule's delayed
/// jobs of `topic`: the two must be equal.
async fn both(redis: &RedisServer, topic: &str) -> (Vec<(String, i64)>, Vec<(String, i64)>) {
    let mut c = redis.conn().await;
    let own: Vec<(String, i64)> = redis::cmd("ZRANGE")
        .arg(format!("{{dq}}:s:{topic}"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut c)
        .await
        .unwrap();
    let all: Vec<(String, i64)> = redis::cmd("ZRANGE")
        .arg("{dq}:schedule")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut c)
        .await
        .unwrap();
    let mut want = Vec::new();
    for (id, due) in all {
        let (t, s): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(format!("{{dq}}:j:{id}"))
            .arg("q")
            .arg("s")
            .query_async(&mut c)
            .await
            .unwrap();
        if t.as_deref() == Some(topic) && s.is_none() {
            want.push((id, due));
        }
    }
    (own, want)
}

async fn exact(redis: &RedisServer, topic: &str, after: &str) {
    let (own, want) = both(redis, topic).await;
    assert_eq!(own, want, "{topic}'s schedule after {after}");
}

/// Pushes `n` jobs of each of `topics`, due from `base_ms` on, 500 a call.
async fn fill(q: &Queue, topics: &[&str], n: usize, base_ms: i64) {
    for t in topics {
        for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
            let jobs: Vec<NewJob> = chunk
                .iter()
                .map(|&i| NewJob {
                    due_at_ms: Some(base_ms + i as i64),
                    ..job(&format!("{t}-{i}"), t, 0, 60_000)
                })
                .collect();
            for r in q.push_many(&jobs).await.unwrap() {
                r.unwrap();
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_first_page_holds_its_job_whatever_other_topics_hold() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let base = now_ms() + 3_600_000;
    // 4 x 1,000 jobs of other topics due sooner: twice what the walk of
    // the shared schedule looked at in one call.
    fill(&q, &["a", "b", "c", "d"], 1000, base).await;
    let late = base + 3_600_000;
    q.push(&NewJob {
        due_at_ms: Some(late),
        ..job("lone", "one", 0, 60_000)
    })
    .await
    .unwrap();
    indexed(&redis).await;
    let (jobs, next) = q
        .list_jobs("one", JobState::Delayed, None, 10)
        .await
        .unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["lone"], "the first page (next page {next:?})");
    assert_eq!(next, None);

    let server = TestServer::start(q.clone(), Default::default()).await;
    let (status, page) = get_json(&server.base, "/v1/topics/one/jobs?state=delayed&limit=10").await;
    assert_eq!(status, 200, "{page}");
    let ids: Vec<&str> = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["lone"], "{page}");
    // Its next due time, in the topics' counts.
    let (_, topics) = get_json(&server.base, "/v1/topics").await;
    assert_eq!(topics["topics"]["one"]["next_due_ms"], late, "{topics}");
    assert_eq!(topics["topics"]["a"]["next_due_ms"], base, "{topics}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_sharing_a_due_time_are_listed_by_id_and_resume_after_the_cursor() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let at = now_ms() + 3_600_000;
    let mut jobs = Vec::new();
    for i in 0..120 {
        // Ids out of byte order; another topic's jobs at the same time.
        jobs.push(NewJob {
            due_at_ms: Some(at),
            ..job(&format!("t{}", (i * 37) % 120), "t", 0, 60_000)
        });
        jobs.push(NewJob {
            due_at_ms: Some(at),
            ..job(&format!("u{i}"), "u", 0, 60_000)
        });
    }
    for r in q.push_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    indexed(&redis).await;
    let (mut got, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let (page, next) = q
            .list_jobs("t", JobState::Delayed, cursor.as_deref(), 7)
            .await
            .unwrap();
        assert!(page.len() <= 7);
        got.extend(page.into_iter().map(|j| j.id));
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let mut want: Vec<String> = (0..120).map(|i| format!("t{i}")).collect();
    want.sort();
    assert_eq!(got, want, "every job once, by id within the due time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topic_schedule_stays_exact_through_every_change() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let far = now_ms() + 3_600_000;
    let push = |id: &str, due: i64, tags: &[&str]| NewJob {
        due_at_ms: Some(due),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ..job(id, "t", 0, 60_000)
    };
    for i in 0..6 {
        q.push(&push(&format!("j{i}"), far + i, &[])).await.unwrap();
    }
    q.push(&push("tagged1", far + 10, &["promo"]))
        .await
        .unwrap();
    q.push(&push("tagged2", far + 11, &["promo"]))
        .await
        .unwrap();
    q.push(&push("other", far, &[])).await.unwrap();
    exact(&redis, "t", "pushes").await;
    // Replaced: another due time, then another topic.
    q.push(&push("j0", far + 100, &[])).await.unwrap();
    exact(&redis, "t", "a replace").await;
    q.push(&job("j1", "elsewhere", 3_600_000, 60_000))
        .await
        .unwrap();
    exact(&redis, "t", "a replace into another topic").await;
    exact(&redis, "elsewhere", "a replace into another topic").await;
    q.reschedule("j2", Duration::ZERO, Some(far + 200), None)
        .await
        .unwrap();
    exact(&redis, "t", "a reschedule").await;
    assert!(q.delete("j3").await.unwrap());
    exact(&redis, "t", "a delete").await;
    q.cancel("j4").await.unwrap();
    exact(&redis, "t", "a cancel").await;
    q.reschedule_tag_all("promo", TagMove::Shift(500))
        .await
        .unwrap();
    exact(&redis, "t", "a tag reschedule").await;
    q.cancel_tag_all("promo").await.unwrap();
    exact(&redis, "t", "a tag cancel").await;
    // Fired by the sweep; then nacked back to delayed; then dead,
    // requeued and purged.
    q.reschedule("j5", Duration::ZERO, Some(0), None)
        .await
        .unwrap();
    let d = q
        .pop(&topics(&["t"]), Duration::from_secs(30))
        .await
        .unwrap()
        .expect("j5 fired");
    assert_eq!(d.id, "j5");
    exact(&redis, "t", "a fire and a pop").await;
    q.nack("j5", &d.token, Some(Duration::from_secs(3600)), "again")
        .await
        .unwrap();
    exact(&redis, "t", "a nack to delayed").await;
    let (own, _) = both(&redis, "t").await;
    assert!(own.iter().any(|(id, _)| id == "j5"), "{own:?}");
    q.push(&NewJob {
        retry: one_attempt(),
        ..job("doomed", "t", 0, 60_000)
    })
    .await
    .unwrap();
    let d = q
        .pop(&topics(&["t"]), Duration::from_secs(30))
        .await
        .unwrap()
        .expect("doomed fired");
    q.nack(&d.id, &d.token, None, "no").await.unwrap();
    assert_eq!(
        q.get("doomed").await.unwrap().unwrap().state,
        JobState::Dead
    );
    assert_eq!(q.requeue_dead("t", &[]).await.unwrap(), 1);
    exact(&redis, "t", "a requeue").await;
    let d = q
        .pop(&topics(&["t"]), Duration::from_secs(30))
        .await
        .unwrap()
        .expect("doomed again");
    q.nack(&d.id, &d.token, None, "no").await.unwrap();
    assert_eq!(q.purge_dead("t").await.unwrap(), 1);
    exact(&redis, "t", "a purge").await;
    let (own, _) = both(&redis, "t").await;
    let ids: BTreeSet<&str> = own.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, BTreeSet::from(["j0", "j2", "j5", "other"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_without_topic_schedules_gets_them_back_from_the_upkeep() {
    let redis = RedisServer::start();
    let base = now_ms() + 3_600_000;
    {
        let q = queue(&redis);
        fill(&q, &["a", "b"], 1500, base).await;
        q.push(&job("ready-one", "a", 0, 60_000)).await.unwrap();
        indexed(&redis).await;
        q.close().await;
    }
    // As an older build left it: no topic schedules, no backfill; a stale
    // entry besides (a job gone).
    let mut c = redis.conn().await;
    let _: () = redis::cmd("DEL")
        .arg("{dq}:s:a")
        .arg("{dq}:s:b")
        .arg("{dq}:indexed")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg("{dq}:s:a")
        .arg(base)
        .arg("ghost")
        .query_async(&mut c)
        .await
        .unwrap();
    let q = queue(&redis);
    // Until the backfill ends a pass, the listing walks the schedule.
    indexed(&redis).await;
    exact(&redis, "a", "the backfill").await;
    exact(&redis, "b", "the backfill").await;
    let (own, _) = both(&redis, "b").await;
    assert_eq!(own.len(), 1500);
    let (jobs, _) = q.list_jobs("b", JobState::Delayed, None, 3).await.unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["b-0", "b-1", "b-2"]);
    // A stale entry written after the pass is never listed.
    let _: () = redis::cmd("ZADD")
        .arg("{dq}:s:b")
        .arg(0)
        .arg("a-7")
        .query_async(&mut c)
        .await
        .unwrap();
    let (jobs, _) = q.list_jobs("b", JobState::Delayed, None, 2).await.unwrap();
    let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["b-0", "b-1"]);
    q.close().await;
}
