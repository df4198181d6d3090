//! Tags: jobs carry tags, and a tag's jobs are listed, cancelled and
//! rescheduled a page at a time (a cursor resumes, over every partition);
//! jobs handed out are reported, not changed; a job that ends leaves its
//! tags' indexes; bad tags are refused with nothing written.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use delayq::http::ServerConfig;
use delayq::{Config, JobState, NewJob, Queue, TagMove};
use serde_json::{json, Value};

fn tagged(id: &str, delay_ms: u64, tags: &[&str]) -> NewJob {
    NewJob {
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ..job(id, "remind", delay_ms, 60_000)
    }
}

/// Members of a tag's index in the (one) partition of a plain queue.
async fn index(redis: &RedisServer, tag: &str) -> Vec<String> {
    let mut c = redis.conn().await;
    redis::cmd("ZRANGE")
        .arg(format!("{{dq}}:tag:{tag}"))
        .arg(0)
        .arg(-1)
        .query_async(&mut c)
        .await
        .unwrap()
}

/// Every page of a tag's listing: the ids in order, and the page count.
async fn list_all(q: &Queue, tag: &str, limit: usize) -> (Vec<String>, usize) {
    let (mut ids, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let (jobs, next) = q.tag_jobs(tag, cursor.as_deref(), limit).await.unwrap();
        pages += 1;
        assert!(jobs.len() <= limit, "a page holds at most its limit");
        ids.extend(jobs.into_iter().map(|j| {
            assert!(j.tags.iter().any(|t| t == tag), "{} lacks {tag}", j.id);
            j.id
        }));
        match next {
            Some(c) => cursor = Some(c),
            None => return (ids, pages),
        }
    }
}

async fn send(method: reqwest::Method, base: &str, path: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn tagged_jobs_are_listed_in_pages_and_leave_the_index_when_they_end() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    for i in 0..7 {
        // A repeated tag counts once.
        q.push(&tagged(&format!("r{i}"), 0, &["member:77", "all", "all"]))
            .await
            .unwrap();
    }
    q.push(&tagged("other", 0, &["member:78"])).await.unwrap();
    let j = q.get("r0").await.unwrap().unwrap();
    assert_eq!(j.tags, ["member:77", "all"]);

    let (ids, pages) = list_all(&q, "member:77", 3).await;
    assert_eq!(ids, (0..7).map(|i| format!("r{i}")).collect::<Vec<_>>());
    assert!(pages >= 3, "7 jobs, 3 a page: {pages} pages");

    // Finished, deleted, replaced with other tags, dead and purged: each
    // leaves every index of its tags.
    let d = q
        .pop(&topics(&["remind"]), Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    q.finish(&d.id, &d.token).await.unwrap();
    q.delete("r1").await.unwrap();
    q.push(&tagged("r2", 0, &["member:99"])).await.unwrap();
    let gone = [d.id.as_str(), "r1", "r2"];
    let left: Vec<String> = index(&redis, "member:77").await;
    assert_eq!(left.len(), 4, "{left:?}");
    for id in gone {
        assert!(
            !left.iter().any(|l| l == id),
            "{id} still indexed: {left:?}"
        );
        assert!(!index(&redis, "all").await.iter().any(|l| l == id));
    }
    assert_eq!(index(&redis, "member:99").await, ["r2"]);
    // An untagged push over a tagged id drops it from the index too.
    q.push(&job("r3", "remind", 0, 60_000)).await.unwrap();
    assert!(!index(&redis, "member:77").await.contains(&"r3".to_owned()));
    assert!(q.get("r3").await.unwrap().unwrap().tags.is_empty());
}

#[tokio::test]
async fn cancel_and_reschedule_leave_reserved_jobs_alone_and_report_them() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let b = &s.base;
    let push = |id: &str, delay: u64| json!({"id": id, "topic": "remind", "delay_ms": delay, "tags": ["member:77"]});
    let (st, _) = send(reqwest::Method::POST, b, "/v1/jobs", push("held", 0)).await;
    assert_eq!(st, 201);
    let d = q
        .pop(&topics(&["remind"]), Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.id, "held");
    for id in ["a", "b"] {
        send(reqwest::Method::POST, b, "/v1/jobs", push(id, 60_000)).await;
    }
    let before = q.get("a").await.unwrap().unwrap().due_ms;

    let (st, moved) = send(
        reqwest::Method::POST,
        b,
        "/v1/tags/member:77/reschedule",
        json!({"shift_ms": 3_600_000}),
    )
    .await;
    assert_eq!(st, 200, "{moved}");
    assert_eq!(moved["changed"], 2);
    assert_eq!(
        moved["skipped"],
        json!([{"id": "held", "state": "reserved"}])
    );
    assert_eq!(moved["cursor"], Value::Null);
    assert_eq!(
        q.get("a").await.unwrap().unwrap().due_ms,
        before + 3_600_000
    );
    let held = q.get("held").await.unwrap().unwrap();
    assert_eq!(
        held.state,
        JobState::Reserved,
        "a reserved job is not moved"
    );

    let (st, page) = get_json(b, "/v1/tags/member:77/jobs?limit=2").await;
    assert_eq!(st, 200);
    assert_eq!(page["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(page["jobs"][0]["tags"], json!(["member:77"]));
    let cursor = page["cursor"].as_str().unwrap().to_owned();
    let (_, rest) = get_json(
        b,
        &format!("/v1/tags/member:77/jobs?limit=2&cursor={cursor}"),
    )
    .await;
    assert_eq!(rest["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(rest["cursor"], Value::Null);

    let (st, cancelled) = send(
        reqwest::Method::POST,
        b,
        "/v1/tags/member:77/cancel",
        json!({}),
    )
    .await;
    assert_eq!(st, 200, "{cancelled}");
    assert_eq!(cancelled["changed"], 2);
    assert_eq!(
        cancelled["skipped"],
        json!([{"id": "held", "state": "reserved"}])
    );
    assert!(q.get("a").await.unwrap().is_none() && q.get("b").await.unwrap().is_none());
    assert!(q.get("held").await.unwrap().is_some());
    assert_eq!(
        q.topics().await.unwrap().topics["remind"].delayed,
        0,
        "counts follow"
    );
    q.finish(&d.id, &d.token).await.unwrap();
    assert!(index(&redis, "member:77").await.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn a_reschedule_by_tag_never_makes_a_job_early() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&tagged("x", 3_600_000, &["t"])).await.unwrap();
    q.push(&tagged("y", 60_000, &["t"])).await.unwrap();
    let now = redis.time_ms().await;
    let c = q
        .reschedule_tag("t", TagMove::Shift(-86_400_000), None, 10)
        .await
        .unwrap();
    assert_eq!(c.changed, 2);
    for id in ["x", "y"] {
        let due = q.get(id).await.unwrap().unwrap().due_ms;
        assert!(due >= now, "{id} due {due}, before now {now}");
    }
    // Both fell due now: they fire.
    for _ in 0..2 {
        let d = q
            .pop(&topics(&["remind"]), Duration::from_secs(10))
            .await
            .unwrap();
        assert!(d.is_some(), "a job moved to now fires");
    }
    q.push(&tagged("z", 60_000, &["t"])).await.unwrap();
    let now = redis.time_ms().await;
    q.reschedule_tag("t", TagMove::At(1_000), None, 10)
        .await
        .unwrap();
    let due = q.get("z").await.unwrap().unwrap().due_ms;
    assert!(
        due >= now,
        "a due time in the past means now: {due} < {now}"
    );
    let far = q
        .reschedule_tag("t", TagMove::At(delayq::job::MAX_DUE_AT_MS + 1), None, 10)
        .await;
    assert!(matches!(far, Err(delayq::Error::Invalid(_))), "{far:?}");
}

#[tokio::test]
async fn bad_tags_are_refused_naming_tags_and_nothing_is_written() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let nine: Vec<String> = (0..9).map(|i| format!("t{i}")).collect();
    let long = "x".repeat(129);
    let bad = [
        json!(nine),
        json!([""]),
        json!([long]),
        json!(["a\nb"]),
        json!("solo"),
    ];
    for tags in &bad {
        let spec = json!({"id": "j", "topic": "remind", "tags": tags});
        let (st, reply) = send(reqwest::Method::POST, &s.base, "/v1/jobs", spec.clone()).await;
        assert!(st == 422 || st == 400, "{tags}: {st} {reply}");
        let msg = reply["error"]["message"].as_str().unwrap();
        assert!(msg.contains("tags"), "{tags}: {msg}");
        let (st, reply) = send(
            reqwest::Method::POST,
            &s.base,
            "/v1/jobs/batch",
            json!({"jobs": [spec]}),
        )
        .await;
        assert_eq!((st, reply["rejected"].clone()), (200, json!(1)), "{reply}");
    }
    // Eight distinct tags, one repeated: accepted.
    let mut eight: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
    eight.push("t0".into());
    let err = q
        .push(&NewJob {
            tags: nine,
            ..tagged("j", 0, &[])
        })
        .await;
    assert!(matches!(err, Err(delayq::Error::Invalid(ref m)) if m.contains("tags")));
    let mut c = redis.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("{dq}:*")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(
        keys.iter()
            .all(|k| !k.contains(":j:") && !k.contains(":tag:")),
        "nothing written: {keys:?}"
    );
    q.push(&NewJob {
        tags: eight,
        ..tagged("j", 0, &[])
    })
    .await
    .unwrap();
    assert_eq!(q.get("j").await.unwrap().unwrap().tags.len(), 8);
    // A bad tag or cursor in a tag call is refused too.
    let (st, _) = get_json(&s.base, "/v1/tags/a%0Ab/jobs").await;
    assert!(st == 422 || st == 400);
    let (st, _) = get_json(&s.base, "/v1/tags/t0/jobs?cursor=9:x").await;
    assert!(st == 422 || st == 400);
    let (st, _) = get_json(&s.base, "/v1/tags/t0/jobs?limit=1001").await;
    assert!(st == 422 || st == 400);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_tagged_jobs_are_processed_in_pages_over_partitions() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    let n = 2500;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| tagged(&format!("m{i:04}"), 3_600_000, &["member:77"]))
        .collect();
    crate::common::push_all(&q, &jobs).await;
    let (ids, pages) = list_all(&q, "member:77", 1000).await;
    let set: BTreeSet<_> = ids.iter().cloned().collect();
    assert_eq!((ids.len(), set.len()), (n, n), "each job listed once");
    assert!(pages >= 3, "{pages} pages of 1000");

    // Reschedule page by page with the cursor, every job once.
    let before = q.get("m0001").await.unwrap().unwrap().due_ms;
    let (mut moved, mut cursor, mut calls) = (0, None::<String>, 0);
    loop {
        let c = q
            .reschedule_tag("member:77", TagMove::Shift(60_000), cursor.as_deref(), 700)
            .await
            .unwrap();
        calls += 1;
        moved += c.changed;
        match c.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(moved, n as u64);
    assert!(calls >= 4, "{calls} calls of 700");
    assert_eq!(
        q.get("m0001").await.unwrap().unwrap().due_ms,
        before + 60_000
    );

    let all = q.cancel_tag_all("member:77").await.unwrap();
    assert_eq!(
        (all.changed, all.skipped.len(), all.cursor),
        (n as u64, 0, None)
    );
    let (ids, _) = list_all(&q, "member:77", 1000).await;
    assert!(ids.is_empty());
    let counts = q.topics().await.unwrap();
    assert!(counts.topics.get("remind").is_none_or(|c| c.is_empty()));
}

/// Memory one tag entry costs, 10k jobs with one tag: the index's MEMORY
/// USAGE (all of it, SAMPLES 0) per job, plus what the field adds to a job's
/// hash; and Redis CPU per push (FCALL, or EVALSHA, usec in INFO commandstats) against
/// 10k jobs without tags. Printed (docs/tags.md quotes them).
#[tokio::test]
async fn a_tag_entry_costs_little_memory() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let mut c = redis.conn().await;
    let fcall_usec = |redis: &RedisServer| {
        let mut c = redis.client().get_connection().unwrap();
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut c)
            .unwrap();
        // cmdstat_fcall:calls=..,usec=..,... (cmdstat_evalsha without
        // FUNCTION: Redis 6.2)
        info.lines()
            .filter_map(|l| {
                l.strip_prefix("cmdstat_fcall:")
                    .or_else(|| l.strip_prefix("cmdstat_evalsha:"))
            })
            .filter_map(|l| l.split(',').find_map(|kv| kv.strip_prefix("usec=")))
            .map(|v| v.parse::<i64>().unwrap())
            .sum::<i64>()
    };
    let n = 10_000;
    let push = |prefix: &str, tags: &[&str]| -> Vec<NewJob> {
        (0..n)
            .map(|i| NewJob {
                body: String::new(),
                ..tagged(&format!("{prefix}{i:05}"), 3_600_000, tags)
            })
            .collect()
    };
    let mut cpu = Vec::new();
    for (prefix, tags) in [("plain", &[][..]), ("tagged", &["member:77"][..])] {
        let before = fcall_usec(&redis);
        for chunk in push(prefix, tags).chunks(1000) {
            push_all(&q, chunk).await;
        }
        cpu.push((fcall_usec(&redis) - before) as f64 / n as f64);
    }
    let usage = |key: &str| {
        let mut cmd = redis::cmd("MEMORY");
        cmd.arg("USAGE").arg(key.to_owned()).arg("SAMPLES").arg(0);
        cmd
    };
    let index: i64 = usage("{dq}:tag:member:77")
        .query_async(&mut c)
        .await
        .unwrap();
    let with: i64 = usage("{dq}:j:tagged00001")
        .query_async(&mut c)
        .await
        .unwrap();
    let without: i64 = usage("{dq}:j:plain00001")
        .query_async(&mut c)
        .await
        .unwrap();
    let per_tag = index as f64 / n as f64 + (with - without) as f64;
    println!(
        "10k jobs with one tag: index {index} bytes, a job's hash {without} -> {with} bytes: \
         {per_tag:.0} bytes per tag entry; push script CPU {:.1} us per plain job, {:.1} us \
         per tagged job",
        cpu[0], cpu[1]
    );
    assert!(per_tag < 200.0, "{per_tag} bytes per tag entry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_pushes_tags_and_works_through_every_page_of_a_tag() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let (ok, _, err) = delayq_cli(
        &s.base,
        &[
            "push", "--topic", "remind", "--id", "p0", "--delay", "1h", "--tag", "m:7",
        ],
    )
    .await;
    assert!(ok, "{err}");
    for i in 1..5 {
        q.push(&tagged(&format!("p{i}"), 3_600_000, &["m:7"]))
            .await
            .unwrap();
    }
    let (ok, out, err) = delayq_cli(&s.base, &["tags", "list", "m:7", "--limit", "2"]).await;
    assert!(ok, "{err}");
    assert!((0..5).all(|i| out.contains(&format!("p{i}"))), "{out}");
    let before = q.get("p3").await.unwrap().unwrap().due_ms;
    let (ok, out, err) = delayq_cli(
        &s.base,
        &[
            "tags",
            "reschedule",
            "m:7",
            "--shift",
            "-30m",
            "--limit",
            "2",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.contains("changed: 5"), "{out}");
    assert_eq!(
        q.get("p3").await.unwrap().unwrap().due_ms,
        before - 1_800_000
    );
    let (ok, out, err) = delayq_cli(&s.base, &["tags", "cancel", "m:7", "--limit", "2"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("changed: 5"), "{out}");
    assert!(q.get("p0").await.unwrap().is_none());
    // A tag no job carries says so, not a bare 0.
    for args in [
        &["tags", "reschedule", "m:7", "--shift", "1h"][..],
        &["tags", "cancel", "m:7"],
        &["tags", "list", "m:7"],
    ] {
        let (ok, out, err) = delayq_cli(&s.base, args).await;
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "no job carries tag m:7", "{args:?}");
    }
    s.stop().await;
}

#[tokio::test]
async fn dead_jobs_trimmed_or_purged_leave_the_index() {
    let redis = RedisServer::start();
    let mut c = config(&redis);
    c.topic_retry.insert(
        "remind".into(),
        delayq::RetryPolicy {
            intervals: vec![],
            max_attempts: Some(1),
        },
    );
    c.dead_max_per_topic = 2;
    let q = Queue::connect(c).unwrap();
    for i in 0..4 {
        q.push(&tagged(&format!("d{i}"), 0, &["gone"]))
            .await
            .unwrap();
    }
    for _ in 0..4 {
        let d = q
            .pop(&topics(&["remind"]), Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        q.nack(&d.id, &d.token, None, "no").await.unwrap();
    }
    // Two dead jobs beyond the cap were trimmed: their entries went too.
    assert_eq!(index(&redis, "gone").await.len(), 2);
    // A reschedule by tag leaves dead jobs alone and says so.
    let c = q
        .reschedule_tag("gone", TagMove::Shift(0), None, 10)
        .await
        .unwrap();
    assert_eq!(c.changed, 0);
    assert!(c.skipped.iter().all(|(_, s)| *s == JobState::Dead) && c.skipped.len() == 2);
    assert_eq!(q.purge_dead("remind").await.unwrap(), 2);
    assert!(index(&redis, "gone").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_cluster_a_tag_is_listed_moved_and_cancelled_across_partitions() {
    let cluster = crate::redis_cluster::TestCluster::start(3);
    let q = Queue::connect(crate::cluster::cluster_config(&cluster, 6)).unwrap();
    q.check_connection().await.unwrap();
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| tagged(&format!("c{i}"), 3_600_000, &["member:77"]))
        .collect();
    push_all(&q, &jobs).await;
    let (ids, pages) = list_all(&q, "member:77", 7).await;
    assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 60);
    assert_eq!(ids.len(), 60, "each job once");
    assert!(pages >= 9, "{pages}");
    let before = q.get("c5").await.unwrap().unwrap().due_ms;
    let moved = q
        .reschedule_tag_all("member:77", TagMove::Shift(1000))
        .await
        .unwrap();
    assert_eq!(moved.changed, 60);
    assert_eq!(q.get("c5").await.unwrap().unwrap().due_ms, before + 1000);
    assert_eq!(q.cancel_tag_all("member:77").await.unwrap().changed, 60);
    assert!(list_all(&q, "member:77", 100).await.0.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_that_cannot_be_done_in_one_partition_changes_no_partition() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    for i in 0..40 {
        q.push(&tagged(&format!("r{i:02}"), 3_600_000, &["renew"]))
            .await
            .unwrap();
    }
    // One job ten days before the latest due time allowed, in the last
    // partition, so that the partitions before it are reached first.
    let latest = delayq::job::MAX_DUE_AT_MS;
    let mut late = None;
    for i in 0..200 {
        let id = format!("late{i}");
        q.push(&NewJob {
            due_at_ms: Some(latest - 10 * 86_400_000),
            ..tagged(&id, 0, &["renew"])
        })
        .await
        .unwrap();
        let keys: Vec<String> = redis.cmd(&["KEYS", &format!("*:j:{id}")]).await;
        if keys[0].starts_with("{dq:3:") {
            late = Some(id);
            break;
        }
        assert!(q.delete(&id).await.unwrap());
    }
    let late = late.expect("an id in partition 3");
    let dues = |q: Queue| async move {
        let mut out = Vec::new();
        for i in 0..40 {
            out.push(q.get(&format!("r{i:02}")).await.unwrap().unwrap().due_ms);
        }
        out
    };
    let before = dues(q.clone()).await;

    for all in [false, true] {
        let shift = TagMove::Shift(40 * 86_400_000);
        let err = if all {
            q.reschedule_tag_all("renew", shift).await.unwrap_err()
        } else {
            q.reschedule_tag("renew", shift, None, 1000)
                .await
                .unwrap_err()
        };
        assert_eq!(dues(q.clone()).await, before, "nothing moved");
        let text = err.to_string();
        assert!(
            text.contains(&late) && text.contains(&latest.to_string()),
            "names the job and the latest time in ms: {text}"
        );
        assert!(!text.contains("e+"), "{text}");
    }
    // The most negative shift is beyond the limit too (its magnitude does
    // not fit an i64).
    let err = q
        .reschedule_tag_all("renew", TagMove::Shift(i64::MIN))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("shift_ms"), "{err}");
    assert_eq!(dues(q.clone()).await, before, "nothing moved");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_tags_are_refused_at_push_as_path_segments_urls_drop() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    for dot in [".", ".."] {
        let err = q.push(&tagged("d", 0, &["ok", dot])).await;
        assert!(
            matches!(err, Err(delayq::Error::Invalid(ref m)) if m.contains("tag") && m.contains("path segment")),
            "{dot}: {err:?}"
        );
        let spec = json!({"id": "d", "topic": "remind", "tags": [dot]});
        let (st, reply) = send(reqwest::Method::POST, &s.base, "/v1/jobs", spec).await;
        assert!(st == 422 || st == 400, "{dot}: {st} {reply}");
        let (ok, _, err) = delayq_cli(&s.base, &["push", "--topic", "t", "--tag", dot]).await;
        assert!(!ok && err.contains("path segment"), "{dot}: {err}");
        // The tag commands say so too, rather than reaching another route.
        let (ok, _, err) = delayq_cli(&s.base, &["tags", "cancel", dot]).await;
        assert!(!ok && err.contains("path segment"), "{dot}: {err}");
    }
    assert!(q.get("d").await.unwrap().is_none());
    // Dots inside a tag are fine.
    q.push(&tagged("d", 0, &["v1.2", "..."])).await.unwrap();
    s.stop().await;
}

/// The book's figures for what a tag costs (docs/tags.md), against a measurement:
/// 10,000 jobs (ids of 36 bytes, as UUIDs, delayed 10 minutes) pushed without tags, then the
/// same again under another topic with one tag each, a tag of its own per
/// job (`member:<n>`, the renewal case) and then one tag they all share.
/// The difference in `used_memory` (less the clients' buffers) per job is
/// the tag's cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_costs_what_the_docs_say() {
    const N: usize = 10_000;
    let redis = RedisServer::start();
    let q = queue(&redis);
    // Due within the trigger horizon, so every job has its trigger key at
    // push, and pushed after the sweep's first arming (which rewrites the
    // keys of the jobs already there): the runs differ by their tags only.
    q.push(&tagged("warm-up", 600_000, &["warm"]))
        .await
        .unwrap();
    crate::common::eventually(Duration::from_secs(30), "the trigger watermark", || async {
        redis.cmd::<Option<String>>(&["GET", "{dq}:armed"]).await
    })
    .await;
    // And after the upkeep's first pass, whose writes are not the tags'.
    crate::common::upkeep_pass_done(&redis).await;
    // In one layout throughout, the one a queue of this build settles in:
    // a leader raising it between the runs would change what a job costs.
    q.hold_layout(3).await.unwrap();
    let push = |run: char, tag: fn(usize) -> Option<String>| {
        let q = q.clone();
        async move {
            let jobs: Vec<NewJob> = (0..N)
                .map(|i| NewJob {
                    tags: tag(i).into_iter().collect(),
                    ..job(
                        &format!("{run}-{i:034}"),
                        &format!("mem-{run}"),
                        600_000,
                        60_000,
                    )
                })
                .collect();
            crate::common::push_all(&q, &jobs).await;
        }
    };
    let mut used = vec![crate::common::memory_at_rest(&redis).await];
    push('a', |_| None).await;
    used.push(crate::common::memory_at_rest(&redis).await);
    push('b', |i| Some(format!("member:{i:06}"))).await;
    used.push(crate::common::memory_at_rest(&redis).await);
    push('c', |_| Some("plan:gold".into())).await;
    used.push(crate::common::memory_at_rest(&redis).await);
    let plain = (used[1] - used[0]) / N as f64;
    let own = (used[2] - used[1]) / N as f64 - plain;
    let shared = (used[3] - used[2]) / N as f64 - plain;
    println!(
        "a job without tags: {plain:.0} B; a tag of its own per job: {own:.0} B more; \
         one tag shared by {N} jobs: {shared:.0} B more per job"
    );
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/tags.md"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let figure = |after: &str| -> f64 {
        let at = readme
            .find(after)
            .unwrap_or_else(|| panic!("docs/tags.md lacks {after:?}"));
        let digits: String = readme[at + after.len()..]
            .chars()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits.parse().unwrap()
    };
    // The page gives Redis 6.2's figures and Valkey's apart (Valkey
    // names itself 7.2).
    let mut c = redis.client().get_connection().unwrap();
    let server: String = redis::cmd("INFO").arg("server").query(&mut c).unwrap();
    let keys = if server.contains("redis_version:6.") {
        [
            "on Redis 6.2 a tag of its own costs about",
            "a shared one about",
        ]
    } else if server.contains("server_name:valkey") {
        [
            "Valkey 9 a tag of its own costs about",
            "and a shared tag about",
        ]
    } else {
        ["Memory: about", "a tag shared by many jobs about"]
    };
    // Read at rest, Redis 7.0's figures repeat within a few bytes; Redis
    // 6.2's (libc's allocator) and Valkey's moved by up to 6% beside CPU
    // hogs.
    let margin = if server.contains("server_name:valkey") || server.contains("redis_version:6.") {
        0.15
    } else {
        0.1
    };
    for (key, got) in keys.into_iter().zip([own, shared]) {
        let said = figure(key);
        assert!(
            (said - got).abs() <= got * margin,
            "docs/tags.md says {said} bytes per job and tag, measured {got:.0}"
        );
    }
    q.close().await;
}
