//! Seeing and steering the queue: job listings by state with cursors, what
//! falls due next, and pausing a topic.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::*;
use delayq::{JobState, Queue};

/// Every job of `topic` in `state`, a page of `limit` at a time.
async fn all_pages(
    q: &Queue,
    topic: &str,
    state: JobState,
    limit: usize,
) -> (Vec<delayq::Job>, usize) {
    let (mut out, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let (jobs, next) = q
            .list_jobs(topic, state, cursor.as_deref(), limit)
            .await
            .unwrap();
        assert!(jobs.len() <= limit);
        out.extend(jobs);
        pages += 1;
        match next {
            Some(c) => cursor = Some(c),
            None => return (out, pages),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_listed_by_state_a_page_at_a_time_in_order() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // 30 delayed on t (due order is not push order), 5 on u.
    for i in 0..30u64 {
        q.push(&job(
            &format!("t{i}"),
            "t",
            3_600_000 + (i * 7919) % 30 * 1000,
            60_000,
        ))
        .await
        .unwrap();
    }
    for i in 0..5u64 {
        q.push(&job(&format!("u{i}"), "u", 3_600_000 + i * 500, 60_000))
            .await
            .unwrap();
    }
    let (delayed, pages) = all_pages(&q, "t", JobState::Delayed, 7).await;
    assert_eq!(delayed.len(), 30);
    assert!(pages >= 5);
    assert!(
        delayed.windows(2).all(|w| w[0].due_ms <= w[1].due_ms),
        "due order"
    );
    let ids: BTreeSet<_> = delayed.iter().map(|j| j.id.clone()).collect();
    assert_eq!(ids.len(), 30, "no job twice");

    // Every topic, due order.
    let (mut upcoming, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let (jobs, next) = q.upcoming(cursor.as_deref(), 10).await.unwrap();
        upcoming.extend(jobs);
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(upcoming.len(), 35);
    assert!(upcoming.windows(2).all(|w| w[0].due_ms <= w[1].due_ms));

    // Ready in hand-out order, reserved, dead.
    for i in 0..12 {
        q.push(&job(&format!("r{i}"), "now", 0, 60_000))
            .await
            .unwrap();
    }
    eventually(Duration::from_secs(20), "12 ready", || async {
        (q.topics().await.unwrap().topics["now"].ready == 12).then_some(())
    })
    .await;
    let (ready, _) = all_pages(&q, "now", JobState::Ready, 5).await;
    assert_eq!(ready.len(), 12);
    let first = q.try_pop(&["now".to_string()], 3).await.unwrap();
    assert_eq!(
        first.iter().map(|d| d.id.clone()).collect::<Vec<_>>(),
        ready[..3].iter().map(|j| j.id.clone()).collect::<Vec<_>>(),
        "ready jobs are listed in the order they are handed out"
    );
    let (reserved, _) = all_pages(&q, "now", JobState::Reserved, 2).await;
    assert_eq!(reserved.len(), 3);
    for d in &first {
        q.nack(&d.id, &d.token, None, "boom").await.unwrap();
    }
    // Bad input names the problem.
    let err = q
        .list_jobs("t", JobState::Delayed, Some("nonsense"), 5)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cursor"), "{err}");
    let err = q
        .list_jobs("t", JobState::Delayed, None, 0)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("limit"), "{err}");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_topic_keeps_its_jobs_ready_and_resume_hands_them_out_at_once() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let other = queue(&redis);
    q.pause("sms").await.unwrap();
    for i in 0..3 {
        q.push(&job(&format!("s{i}"), "sms", 0, 60_000))
            .await
            .unwrap();
    }
    eventually(
        Duration::from_secs(5),
        "jobs fall due while paused",
        || async {
            let c = other.topics().await.unwrap().topics["sms"];
            (c.ready == 3 && c.paused).then_some(())
        },
    )
    .await;
    let sms = vec!["sms".to_string()];
    assert!(
        other.try_pop(&sms, 10).await.unwrap().is_empty(),
        "nothing while paused"
    );
    // A long-poll on another instance waits through the pause...
    let waiting = {
        let other = other.clone();
        let sms = sms.clone();
        tokio::spawn(async move {
            let got = other.pop(&sms, Duration::from_secs(20)).await.unwrap();
            (got, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished());
    let text = q.metrics().render(&q.gauges().await);
    assert!(
        text.contains("delayq_topic_paused{topic=\"sms\"} 1"),
        "{text}"
    );
    // ...and gets a job as soon as the topic resumes.
    let resumed = Instant::now();
    q.resume("sms").await.unwrap();
    let (got, at) = waiting.await.unwrap();
    assert!(got.is_some());
    // Woken by the resume, not by the backstop (minutes away) nor the
    // pop's own end (20 s).
    assert!(
        at.duration_since(resumed) < Duration::from_secs(10),
        "{:?}",
        at.duration_since(resumed)
    );
    assert!(!q.topics().await.unwrap().topics["sms"].paused);
    q.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_cursor_is_refused_as_bad_input_before_it_reaches_redis() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), delayq::http::ServerConfig::default()).await;
    q.push(&job("a", "t", 3_600_000, 60_000)).await.unwrap();
    let forged = [
        "s\nNaN\nx",
        "s\ninf\nx",
        "s\n-5\nx",
        "s\n1e400\nx",
        "s\n99999999999999999999999\nx",
        "s\n\nx",
        "s\n5\n",
        "r\n\n0\nx",
        "r\n0\n\nx",
        "r\n0\n0\n",
        "r\n-1\n0\nx",
        "r\n7\n0\nx",
        "r\n0\n18446744073709551615\nx",
        "r\n99999999999999999999\n0\nx",
    ];
    let http = reqwest::Client::new();
    for text in forged {
        let cursor = hex::encode(text);
        let state = if text.starts_with('r') {
            JobState::Ready
        } else {
            JobState::Delayed
        };
        match q.list_jobs("t", state, Some(&cursor), 10).await {
            Err(delayq::Error::Invalid(why)) => assert!(why.contains("cursor"), "{text:?}: {why}"),
            other => panic!("{text:?}: {other:?}"),
        }
        let name = if text.starts_with('r') {
            "ready"
        } else {
            "delayed"
        };
        let r = http
            .get(format!(
                "{}/v1/topics/t/jobs?state={name}&cursor={cursor}",
                s.base
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 422, "{text:?}: {}", r.text().await.unwrap());
        if text.starts_with('s') {
            let r = http
                .get(format!("{}/v1/schedule?cursor={cursor}", s.base))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 422, "{text:?}");
        }
    }
    // Nothing changed.
    assert!(q.get("a").await.unwrap().is_some());
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_that_stay_ready_are_listed_once_while_others_are_popped_and_pushed() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let topic = vec!["now".to_string()];
    let push_ready = |from: usize, to: usize| {
        let q = q.clone();
        async move {
            let jobs: Vec<_> = (from..to)
                .map(|i| job(&format!("r{i:03}"), "now", 0, 60_000))
                .collect();
            push_all(&q, &jobs).await;
            eventually(Duration::from_secs(5), "ready", || async {
                let t = q.topics().await.unwrap();
                let ready = t.topics.get("now").map_or(0, |c| c.ready);
                let delayed = t.topics.get("now").map_or(0, |c| c.delayed);
                (delayed == 0 && ready > 0).then_some(())
            })
            .await;
        }
    };
    push_ready(0, 30).await;
    let mut listed = Vec::new();
    let mut popped = BTreeSet::new();
    let (jobs, mut cursor) = q.list_jobs("now", JobState::Ready, None, 5).await.unwrap();
    listed.extend(jobs.into_iter().map(|j| j.id));
    // Between pages, pops take from the front (what was listed and more),
    // and new jobs join the back.
    let mut round = 0;
    while let Some(c) = cursor {
        for d in q.try_pop(&topic, 3).await.unwrap() {
            popped.insert(d.id.clone());
            q.finish(&d.id, &d.token).await.unwrap();
        }
        if round < 3 {
            push_ready(100 + round * 4, 104 + round * 4).await;
        }
        round += 1;
        let (jobs, next) = q
            .list_jobs("now", JobState::Ready, Some(&c), 5)
            .await
            .unwrap();
        listed.extend(jobs.into_iter().map(|j| j.id));
        cursor = next;
    }
    let first_30: Vec<String> = (0..30).map(|i| format!("r{i:03}")).collect();
    for id in &first_30 {
        if !popped.contains(id) {
            let n = listed.iter().filter(|l| *l == id).count();
            assert_eq!(
                n, 1,
                "{id} stayed ready throughout and was listed {n} times: {listed:?}"
            );
        }
    }
    let unique: BTreeSet<_> = listed.iter().collect();
    assert_eq!(unique.len(), listed.len(), "no job twice: {listed:?}");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_costs_redis_the_page_even_with_200k_jobs_due_at_one_time() {
    const N: usize = 200_000;
    let redis = RedisServer::start();
    // Pushing 200k jobs on a busy machine may take its time.
    let q = Queue::connect(delayq::Config {
        redis_timeout: Duration::from_secs(20),
        ..config(&redis)
    })
    .unwrap();
    let due = redis.time_ms().await + 3_600_000;
    let id = |i: usize| format!("j{i:06}");
    let begun = Instant::now();
    for chunk in (0..N).collect::<Vec<_>>().chunks(2_000) {
        let batches = chunk.chunks(1_000).map(|part| {
            let jobs: Vec<_> = part
                .iter()
                .map(|&i| delayq::NewJob {
                    due_at_ms: Some(due),
                    ..job(&id(i), "t", 0, 60_000)
                })
                .collect();
            let q = q.clone();
            async move {
                push_all(&q, &jobs).await;
            }
        });
        futures::future::join_all(batches).await;
    }
    println!("{N} jobs pushed in {:?}", begun.elapsed());
    // Every call that blocks Redis for over 250 ms is logged (the old
    // listing took seconds at this depth).
    let _: String = redis
        .cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "250000"])
        .await;
    let _: String = redis.cmd(&["SLOWLOG", "RESET"]).await;
    let cursor_after = |id: &str| hex::encode(format!("s\n{due}\n{id}"));
    let expect = |from: usize, n: usize| (from..from + n).map(id).collect::<Vec<_>>();
    let ids = |jobs: Vec<delayq::Job>| jobs.into_iter().map(|j| j.id).collect::<Vec<_>>();

    // The first pages, every topic and one topic: in order, each once.
    let mut cursor = None::<String>;
    let mut listed = Vec::new();
    for _ in 0..3 {
        let (jobs, next) = q.upcoming(cursor.as_deref(), 1000).await.unwrap();
        listed.extend(ids(jobs));
        cursor = next;
    }
    assert_eq!(listed, expect(0, 3000));
    let (jobs, _) = q
        .list_jobs("t", JobState::Delayed, cursor.as_deref(), 1000)
        .await
        .unwrap();
    assert_eq!(ids(jobs), expect(3000, 1000));

    // Deep cursors: the server's own (the job is there), a forged one
    // between two ids, and one before the due time.
    for (cursor, from) in [
        (cursor_after(&id(99_999)), 100_000),
        (cursor_after("j099999x"), 100_000),
        (hex::encode(format!("s\n{}\nzzz", due - 1)), 0),
        (cursor_after(&id(N - 500)), N - 499),
    ] {
        let mut listed = Vec::new();
        let mut cursor = Some(cursor);
        for _ in 0..2 {
            let Some(c) = cursor else { break };
            let (jobs, next) = q
                .list_jobs("t", JobState::Delayed, Some(&c), 1000)
                .await
                .unwrap();
            listed.extend(ids(jobs));
            cursor = next;
        }
        let n = 2000.min(N - from);
        assert_eq!(listed.len(), n, "from {from}");
        assert_eq!(listed, expect(from, n), "from {from}");
    }
    let slow: Vec<redis::Value> = redis.cmd(&["SLOWLOG", "GET", "10"]).await;
    assert!(slow.is_empty(), "calls that blocked Redis: {slow:?}");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_carry_bodies_up_to_a_bound_and_say_what_they_left_out() {
    use delayq::http::ServerConfig;
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    // Large bodies (each over a listing's 64 KiB) and mid-sized ones whose
    // sum passes the page's 4 MiB; one small job.
    let big = "b".repeat(900 * 1024);
    let mid = "m".repeat(60 * 1024);
    let with = |id: String, body: &str| delayq::NewJob {
        body: body.to_owned(),
        tags: vec!["bulk".into()],
        ..job(&id, "orders", 3_600_000, 60_000)
    };
    for i in 0..20 {
        q.push(&with(format!("big{i:02}"), &big)).await.unwrap();
    }
    for i in 0..80 {
        q.push(&with(format!("mid{i:02}"), &mid)).await.unwrap();
    }
    q.push(&with("small".into(), "hello")).await.unwrap();

    for path in [
        "/v1/tags/bulk/jobs?limit=500",
        "/v1/topics/orders/jobs?state=delayed&limit=500",
    ] {
        let raw = reqwest::get(format!("{}{path}", s.base))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(
            raw.len() < 5 * 1024 * 1024,
            "{path}: a reply of {} bytes",
            raw.len()
        );
        let v: serde_json::Value = serde_json::from_slice(&raw).unwrap();
        let jobs = v["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 101, "{path}: every job listed");
        let mut carried = 0;
        for j in jobs {
            let id = j["id"].as_str().unwrap();
            let body = j["body"].as_str().unwrap();
            let left_out = j.get("body_left_out").and_then(|b| b.as_u64());
            if id.starts_with("big") {
                assert_eq!((body, left_out), ("", Some(900 * 1024)), "{id}");
            } else if id == "small" {
                assert_eq!((body, left_out), ("hello", None));
            } else if left_out.is_none() {
                assert_eq!(body.len(), 60 * 1024, "{id}");
                carried += 1;
            } else {
                assert_eq!((body, left_out), ("", Some(60 * 1024)), "{id}");
            }
        }
        // 4 MiB of 60 KiB bodies: 68 of the 80 carried (less the small one's 5 bytes).
        assert_eq!(carried, 68, "{path}");
    }
    // A job read alone has its whole body.
    let (code, j) = get_json(&s.base, "/v1/jobs/big00").await;
    assert_eq!(code, 200);
    assert_eq!(j["body"].as_str().unwrap().len(), 900 * 1024);
    assert!(j.get("body_left_out").is_none());
    s.stop().await;
}
