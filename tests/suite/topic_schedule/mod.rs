//! Each topic's own schedule of delayed jobs (`{p}:s:<topic>`): a topic's
//! listing starts from its earliest jobs whatever other topics hold, the
//! set stays exact through every way a job enters or leaves delayed, and a
//! Redis that an older build filled gets the sets back from the upkeep.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use delayq::{Config, JobState, NewJob, Queue, TagMove};

const LONG: Duration = Duration::from_secs(60);

/// Waits until the upkeep's backfill has ended a pass (from then on a
/// topic's listing reads its own schedule).
async fn indexed(redis: &RedisServer) {
    index_mark(redis, "done", "the topic schedules backfilled").await;
}

/// Waits until the backfill's mark `field` in `{dq}:indexed` reads 1.
async fn index_mark(redis: &RedisServer, field: &str, what: &str) {
    eventually(LONG, what, || async {
        let done: Option<String> = redis.cmd(&["HGET", "{dq}:indexed", field]).await;
        (done.as_deref() == Some("1")).then_some(())
    })
    .await;
}

/// (id, due) of `topic`'s schedule, and of the shared schedule's delayed
/// jobs of `topic`: the two must be equal. In layout 3, where a delayed job
/// may be in its topic schedule only, the second is every delayed job of
/// `topic` (its hash) at the due time either schedule gives (-1: none).
async fn both(redis: &RedisServer, topic: &str) -> (Vec<(String, i64)>, Vec<(String, i64)>) {
    let flag: Option<String> = redis.cmd(&["GET", "{dq}:layout"]).await;
    if flag.is_some_and(|f| f.starts_with('3')) {
        let own: Vec<(String, i64)> = redis
            .cmd(&[
                "ZRANGE",
                &format!("{{dq}}:s:{topic}"),
                "0",
                "-1",
                "WITHSCORES",
            ])
            .await;
        let keys: Vec<String> = redis.cmd(&["KEYS", "{dq}:j:*"]).await;
        let mut want = Vec::new();
        for key in keys {
            let (t, s): (Option<String>, Option<String>) =
                redis.cmd(&["HMGET", &key, "q", "s"]).await;
            if t.as_deref() == Some(topic) && s.is_none() {
                let id = key["{dq}:j:".len()..].to_owned();
                let due = crate::common::scheduled_due(redis, &id).await;
                let due = match own.iter().find(|(o, _)| *o == id) {
                    Some((_, d)) => Some(*d),
                    None => due,
                };
                want.push((id, due.unwrap_or(-1)));
            }
        }
        want.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        return (own, want);
    }
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
    heads_exact(redis, after).await;
}

/// The heads (topic -> due) and every topic schedule's first entry: the
/// two must be equal.
async fn heads_exact(redis: &RedisServer, after: &str) {
    let mut c = redis.conn().await;
    let mut heads: Vec<(String, i64)> = redis::cmd("ZRANGE")
        .arg("{dq}:heads")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut c)
        .await
        .unwrap();
    heads.sort();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("{dq}:s:*")
        .query_async(&mut c)
        .await
        .unwrap();
    let mut want = Vec::new();
    for key in keys {
        let first: Vec<(String, i64)> = redis::cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut c)
            .await
            .unwrap();
        if let Some((_, due)) = first.first() {
            want.push((key["{dq}:s:".len()..].to_string(), *due));
        }
    }
    want.sort();
    assert_eq!(heads, want, "the heads after {after}");
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
            push_all(q, &jobs).await;
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
    push_all(&q, &jobs).await;
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
    // Recurring ticks: each pushed delayed, then fired by the sweep.
    q.put_recurring(
        "every-second",
        &delayq::Recurring {
            topic: "beat".into(),
            cron: "* * * * * *".into(),
            ..delayq::Recurring::default()
        },
    )
    .await
    .unwrap();
    let fired = || async {
        let r = q.recurring("every-second").await.unwrap().unwrap();
        r.last_tick_ms
    };
    let first = eventually(LONG, "a tick fired", &fired).await;
    eventually(LONG, "another tick fired", || async {
        fired().await.filter(|&t| t > first)
    })
    .await;
    exact(&redis, "beat", "recurring ticks").await;
    // Emptied: the topic's head goes with its last job.
    for id in ["j0", "j2", "j5", "other"] {
        assert!(q.delete(id).await.unwrap());
    }
    exact(&redis, "t", "deleting every delayed job").await;
    let mut c = redis.conn().await;
    let head: Option<i64> = redis::cmd("ZSCORE")
        .arg("{dq}:heads")
        .arg("t")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(head, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_without_topic_schedules_gets_them_back_from_the_upkeep() {
    let redis = RedisServer::start();
    // An older build ran: the layout is below 3 (the shared schedule holds
    // every delayed job).
    let _: () = redis.cmd(&["SET", "{dq}:layout", "2 held"]).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_with_topic_schedules_and_no_heads_gets_them_from_the_upkeep() {
    let redis = RedisServer::start();
    let base = now_ms() + 3_600_000;
    {
        let q = queue(&redis);
        fill(&q, &["a", "b", "c"], 300, base).await;
        indexed(&redis).await;
        q.close().await;
    }
    // As a build before the heads left it: a pass ended, no heads; one
    // stale head besides, earlier than its topic's real one.
    let mut c = redis.conn().await;
    let _: () = redis::cmd("DEL")
        .arg("{dq}:heads")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("HDEL")
        .arg("{dq}:indexed")
        .arg("headed")
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg("{dq}:heads")
        .arg(base - 10)
        .arg("c")
        .query_async(&mut c)
        .await
        .unwrap();
    let q = queue(&redis);
    index_mark(&redis, "headed", "the heads built").await;
    heads_exact(&redis, "the upkeep's pass").await;
    let n: usize = redis.cmd(&["ZCARD", "{dq}:heads"]).await;
    assert_eq!(n, 3);
    q.close().await;
}

/// Topic-schedule entries an older build left stale and due (a job gone,
/// a job it rescheduled later, a job in another topic): the sweep, led to
/// them by the heads, puts each right and moves no job early or twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_puts_stale_due_topic_entries_right_and_moves_nothing_early() {
    let redis = RedisServer::start();
    // An older build ran: the layout is below 3.
    let _: () = redis.cmd(&["SET", "{dq}:layout", "2 held"]).await;
    let q = queue(&redis);
    let later = now_ms() + 3_600_000;
    q.push(&NewJob {
        due_at_ms: Some(later),
        ..job("later", "t", 0, 60_000)
    })
    .await
    .unwrap();
    q.push(&NewJob {
        due_at_ms: Some(later),
        ..job("elsewhere", "u", 0, 60_000)
    })
    .await
    .unwrap();
    indexed(&redis).await;
    let _: () = redis
        .cmd(&[
            "ZADD",
            "{dq}:s:t",
            "5",
            "later",
            "1",
            "ghost",
            "2",
            "elsewhere",
        ])
        .await;
    let _: () = redis.cmd(&["ZADD", "{dq}:heads", "1", "t"]).await;
    eventually(LONG, "the stale head put right", || async {
        let head: Option<i64> = redis.cmd(&["ZSCORE", "{dq}:heads", "t"]).await;
        (head == Some(later)).then_some(())
    })
    .await;
    let own: Vec<(String, i64)> = redis
        .cmd(&["ZRANGE", "{dq}:s:t", "0", "-1", "WITHSCORES"])
        .await;
    assert_eq!(own, [("later".to_string(), later)]);
    for id in ["later", "elsewhere"] {
        let j = q.get(id).await.unwrap().unwrap();
        assert_eq!(j.state, JobState::Delayed, "{id}");
    }
    exact(&redis, "t", "the sweep").await;
    exact(&redis, "u", "the sweep").await;
    q.close().await;
}

async fn delayed_ids(q: &Queue, topic: &str) -> Vec<String> {
    let (jobs, next) = q
        .list_jobs(topic, JobState::Delayed, None, 50)
        .await
        .unwrap();
    assert_eq!(next, None);
    jobs.into_iter().map(|j| j.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_named_at_the_limits_each_list_and_head_only_their_own_jobs() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let base = now_ms() + 3_600_000;
    let longest = "x".repeat(128);
    // Prefixes of each other, names like other key kinds, unicode, the
    // longest allowed.
    let names = [
        "a",
        "ab",
        "a:b",
        "a:",
        "s:a",
        "j:a",
        "schedule",
        "count",
        "t",
        "{dq}",
        "日本語 トピック",
        "é",
        longest.as_str(),
    ];
    for (i, t) in names.iter().enumerate() {
        q.push(&NewJob {
            due_at_ms: Some(base + i as i64),
            ..job(&format!("id-{i}"), t, 0, 60_000)
        })
        .await
        .unwrap();
    }
    // Before "a"'s job, one whose hash an operator deleted by hand.
    q.push(&NewJob {
        due_at_ms: Some(base - 1_000),
        ..job("gone", "a", 0, 60_000)
    })
    .await
    .unwrap();
    redis.cmd::<i64>(&["DEL", "{dq}:j:gone"]).await;
    indexed(&redis).await;
    let overview = q.topics().await.unwrap();
    for (i, t) in names.iter().enumerate() {
        assert_eq!(delayed_ids(&q, t).await, [format!("id-{i}")], "{t}");
        let c = overview.topics.get(*t).unwrap_or_else(|| panic!("{t}"));
        assert_eq!(c.next_due_ms, Some(base + i as i64), "{t}'s next due time");
    }
    q.close().await;
}

/// Each partition's key prefix ("{tag}:").
fn part_prefixes(partitions: usize) -> Vec<String> {
    delayq::testing::Keys::partitions("dq", partitions)
        .iter()
        .map(|k| k.log("").trim_end_matches("log:").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_topic_lists_in_due_order_with_a_cursor_while_jobs_move_between_topics() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    let base = now_ms() + 3_600_000;
    // 60 jobs of "p", three to a due time, beside 60 of "other".
    let mut want = Vec::new();
    for i in 0..60 {
        let due = base + (i / 3) as i64 * 1_000;
        for (t, id) in [("p", format!("p{i:02}")), ("other", format!("o{i:02}"))] {
            q.push(&NewJob {
                due_at_ms: Some(due),
                ..job(&id, t, 0, 60_000)
            })
            .await
            .unwrap();
        }
        want.push((due, format!("p{i:02}")));
    }
    let c = redis.conn().await;
    // Every partition's backfill, not only the first one taken, ends soon
    // after its term is taken.
    for p in part_prefixes(4) {
        eventually(
            Duration::from_secs(20),
            "every partition backfilled",
            || {
                let key = format!("{p}indexed");
                let mut c = c.clone();
                async move {
                    let done: Option<String> = redis::cmd("HGET")
                        .arg(&key)
                        .arg("done")
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    (done.as_deref() == Some("1")).then_some(())
                }
            },
        )
        .await;
    }
    let mut got: Vec<(i64, String)> = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let (jobs, next) = q
            .list_jobs("p", JobState::Delayed, cursor.as_deref(), 7)
            .await
            .unwrap();
        pages += 1;
        got.extend(jobs.iter().map(|j| (j.due_ms, j.id.clone())));
        if pages == 2 {
            // One listed already and one not yet move to "other"; one of
            // "other" moves in, due after the cursor.
            for (id, t, due) in [
                ("p01", "other", base),
                ("p50", "other", base),
                ("o30", "p", base + 40_000),
            ] {
                q.push(&NewJob {
                    due_at_ms: Some(due),
                    ..job(id, t, 0, 60_000)
                })
                .await
                .unwrap();
            }
        }
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
        assert!(pages < 30, "the listing ends");
    }
    want.retain(|(_, id)| id != "p50");
    want.push((base + 40_000, "o30".into()));
    want.sort();
    assert_eq!(got, want, "each job once, in due order then id");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_of_2000_topics_reads_every_next_due_time_in_bounded_calls() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let base = now_ms() + 3_600_000;
    let names: Vec<String> = (0..2000).map(|i| format!("topic-{i:04}")).collect();
    for chunk in names.chunks(500) {
        let jobs: Vec<NewJob> = chunk
            .iter()
            .enumerate()
            .map(|(i, t)| NewJob {
                due_at_ms: Some(base + i as i64),
                ..job(t, t, 0, 60_000)
            })
            .collect();
        push_all(&q, &jobs).await;
    }
    indexed(&redis).await;
    arm_slowlog(&redis, 10_000).await;
    let started = std::time::Instant::now();
    let overview = q.topics().await.unwrap();
    let took = started.elapsed();
    for (i, t) in names.iter().enumerate() {
        let c = &overview.topics[t];
        assert_eq!(c.next_due_ms, Some(base + (i % 500) as i64), "{t}");
    }
    // The next due times take 20 calls of 100 topics each, each bounded
    // however many topics there are.
    let mut c = redis.conn().await;
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let heads = redis::Value::BulkString(b"next-dues".to_vec());
    let (mut calls, mut longest) = (0, 0i64);
    for entry in &log {
        if let redis::Value::Array(f) = entry {
            if let (redis::Value::Int(us), redis::Value::Array(args)) = (&f[2], &f[3]) {
                if args.contains(&heads) {
                    calls += 1;
                    longest = longest.max(*us);
                }
            }
        }
    }
    println!("overview of 2,000 topics: {took:?}; {calls} heads calls, the longest {longest} us");
    assert_eq!(calls, 20);
    assert!(longest < 250_000, "a call took {longest} us");
    q.close().await;
}

mod backfill;
mod many_topics;
mod many_topics_pages;
mod split;

/// A sweep moving jobs of several topics in one dispatch call takes them
/// out of each topic's schedule once, with that topic's move: every topic
/// schedule and the heads are exact right after it, each topic's later
/// job its head.
/// (Called here with no instance running, whose next sweep would put a
/// stale head right and hide it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_moving_many_jobs_a_call_leaves_every_topic_schedule_and_head_exact() {
    use delayq::testing::{call, scripts, Keys};
    let redis = RedisServer::start();
    // No sweep of its own: the calls below move all 60 jobs, however
    // long the pushes take.
    let q = Queue::connect(Config {
        dispatch: false,
        ..config(&redis)
    })
    .unwrap();
    // Due after the pushes, on a busy machine too: a push that reached
    // Redis after it would make its jobs ready itself.
    let at = now_ms() + 5_000;
    let names = ["m1", "m2", "m3"];
    let mut jobs = Vec::new();
    for t in names {
        for i in 0..20 {
            jobs.push(NewJob {
                due_at_ms: Some(at),
                ..job(&format!("{t}-{i}"), t, 0, 60_000)
            });
        }
        jobs.push(job(&format!("{t}-later"), t, 3_600_000, 60_000));
    }
    push_all(&q, &jobs).await;
    q.close().await;
    eventually(LONG, "the jobs' due time on Redis's clock", || async {
        (redis.time_ms().await > at).then_some(())
    })
    .await;
    let path = script_path(&redis, scripts::DISPATCH).await;
    let mut args = redis::Cmd::new();
    args.arg(1000).arg(1000).arg(86_400_000).arg(0).arg(0);
    let cmd = call(path, scripts::DISPATCH, &Keys::new("dq"), false, 0, &args);
    // One call moves all 60 on a quiet machine; one that runs out of time
    // (CALL.BUDGET_US) leaves the rest for the next: exact after each.
    let mut moved = 0;
    for calls in 1..=60 {
        let reply: Vec<redis::Value> = cmd.query_async(&mut redis.conn().await).await.unwrap();
        let redis::Value::Int(n) = reply[2] else {
            panic!("dispatch replied {reply:?}")
        };
        moved += n;
        let what = format!("a sweep of 60 jobs, call {calls} moved {n}");
        heads_exact(&redis, &what).await;
        for t in names {
            exact(&redis, t, &what).await;
        }
        if n == 0 {
            break;
        }
    }
    assert_eq!(moved, 60);
    for t in names {
        let ready: u64 = redis.cmd(&["LLEN", &format!("{{dq}}:ready:{t}")]).await;
        assert_eq!(ready, 20, "{t}'s ready list");
    }
}
