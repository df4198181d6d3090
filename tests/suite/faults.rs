//! Faults caused for real: the subscriber's connection killed, redis-server
//! killed with SIGKILL and restarted on its AOF, delayq killed with SIGKILL.
//! Every job still fires, none early. A full Redis and an evicting one.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::common::*;
use delayq::http::ServerConfig;
use delayq::{Config, Error};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_fire_while_the_subscriber_connection_keeps_being_killed() {
    let redis = RedisServer::start_with(&["--appendfsync", "everysec"]);
    let q = queue(&redis);
    eventually(Duration::from_secs(5), "subscriber up", || async {
        q.subscriber_connected().then_some(())
    })
    .await;
    let n = 300usize;
    for i in 0..n {
        // Due over 0.2 s .. 3.2 s.
        q.push(&job(
            &format!("k{i}"),
            "kill",
            200 + (i as u64 * 10),
            60_000,
        ))
        .await
        .unwrap();
    }
    // Kill every pub/sub connection every 100 ms while the jobs fall due.
    let killer = {
        let mut c = redis.conn().await;
        tokio::spawn(async move {
            let mut kills = 0u32;
            for _ in 0..40 {
                let killed: i64 = redis::cmd("CLIENT")
                    .arg(&["KILL", "TYPE", "pubsub"])
                    .query_async(&mut c)
                    .await
                    .unwrap();
                kills += killed as u32;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            kills
        })
    };
    let mut seen = HashSet::new();
    let mut worst = 0;
    while seen.len() < n {
        // Every job is due within 3.2 s: a minute without one is a loss.
        let d = q
            .pop(&topics(&["kill"]), Duration::from_secs(60))
            .await
            .unwrap()
            .expect("a job was lost while the subscriber was down");
        assert!(d.popped_at_us >= d.due_ms * 1000, "early");
        worst = worst.max(d.popped_at_us / 1000 - d.due_ms);
        q.finish(&d.id, &d.token).await.unwrap();
        assert!(seen.insert(d.id), "delivered twice");
    }
    let kills = killer.await.unwrap();
    assert!(
        kills >= 5,
        "only {kills} subscriber connections were killed"
    );
    assert!(q.metrics().subscriber_connects.get([]) >= 5);
    // The sweep does not depend on the subscriber: every dispatch comes
    // within a second of its due time (Redis clock). The hand-over adds this
    // one consumer's pace, which a busy machine slows.
    let (within, count) = fire_lateness_within(&q, "1");
    assert!(
        count > 0 && within == count,
        "{} of {count} dispatches came over a second late (the latest hand-over {worst} ms)",
        count - within
    );
    q.close().await;
}

/// A compatible call (`/push`, `/finish`), tried again while Redis does not
/// answer in time (on a busy machine, within a short redis timeout): a call
/// given up on changed nothing. Panics on any other refusal, or after 20
/// tries.
async fn acknowledged(base: &str, path: &str, body: &str) {
    for _ in 0..20 {
        let v = post(base, path, body).await;
        if v["code"] == 0 {
            return;
        }
        assert!(v["message"].as_str().unwrap().contains("redis"), "{v}");
    }
    panic!("{path} {body} was not acknowledged in 20 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_crash_and_restart_loses_nothing_and_the_server_recovers() {
    let mut redis = RedisServer::start();
    let q = delayq::Queue::connect(Config {
        redis_timeout: Duration::from_millis(500),
        ..config(&redis)
    })
    .unwrap();
    let s = TestServer::start(
        q,
        ServerConfig {
            pop_timeout: Duration::from_millis(500),
            ..ServerConfig::default()
        },
    )
    .await;
    let b = s.base.clone();
    let n = 60usize;
    // Due 1..3 s from now: many fall due while Redis is down.
    for i in 0..n {
        let body =
            json!({"topic":"crash","id":format!("c{i}"),"delay":1 + i % 3,"ttr":60}).to_string();
        acknowledged(&b, "/push", &body).await;
    }
    let pushed_at = redis.time_ms().await;
    redis.kill();
    // During the outage: clear errors, no hang.
    let v = post(
        &b,
        "/push",
        r#"{"topic":"crash","id":"late","delay":1,"ttr":60}"#,
    )
    .await;
    assert_eq!(v["code"], 1);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("push failed: redis"),
        "{v}"
    );
    let v = post(&b, "/pop", r#"{"topic":"crash"}"#).await;
    assert_eq!(v["code"], 1, "{v}");
    assert!(v["message"].as_str().unwrap().contains("redis"), "{v}");
    let v = post(&b, "/get", r#"{"id":"c1"}"#).await;
    assert_eq!(v["code"], 1, "{v}");
    // Stay down past every due time, then come back on the same AOF.
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.restart();
    let mut seen = HashSet::new();
    // Every job is due by now: a loss shows as a minute without one (a busy
    // machine is slow, and its calls may time out, but it keeps going).
    let mut last_seen = std::time::Instant::now();
    while seen.len() < n {
        assert!(
            last_seen.elapsed() < Duration::from_secs(60),
            "only {} of {n} fired after the restart (none for 60 s)",
            seen.len()
        );
        let v = post(&b, "/pop", r#"{"topic":"crash"}"#).await;
        if let Some(id) = v["data"]["id"].as_str() {
            if seen.insert(id.to_owned()) {
                last_seen = std::time::Instant::now();
            }
            acknowledged(&b, "/finish", &json!({"id": id}).to_string()).await;
        }
    }
    // Nothing fired before its time: all were due >= 1 s after the pushes.
    assert!(redis.time_ms().await >= pushed_at + 1000);
    // And the server takes new work again, without a restart of delayq.
    acknowledged(
        &b,
        "/push",
        r#"{"topic":"crash","id":"after","delay":1,"ttr":60}"#,
    )
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_delayq_leaves_nothing_behind_for_the_next_one() {
    let redis = RedisServer::start_with(&["--appendfsync", "everysec"]);
    let first = DelayqProcess::start(&redis, &["--pop-timeout", "1s"]);
    let n = 20usize;
    for i in 0..n {
        let body = json!({"topic":"k9","id":format!("p{i}"),"delay":1,"ttr":2}).to_string();
        assert_eq!(post(&first.base, "/push", &body).await["code"], 0);
    }
    // Reserve five; the other fifteen stay ready. Each lease began after
    // the Redis time read before its pop.
    let mut reserved = HashMap::new();
    while reserved.len() < 5 {
        let before = redis.time_ms().await;
        let v = post(&first.base, "/pop", r#"{"topic":"k9"}"#).await;
        if let Some(id) = v["data"]["id"].as_str() {
            reserved.insert(id.to_owned(), before);
        }
    }
    first.kill9();

    let second = DelayqProcess::start(&redis, &["--pop-timeout", "1s"]);
    let mut seen = HashSet::new();
    // A loss shows as a minute without a job (all are due by then).
    let mut last_seen = std::time::Instant::now();
    while seen.len() < n {
        assert!(
            last_seen.elapsed() < Duration::from_secs(60),
            "only {} of {n} came back (none for 60 s)",
            seen.len()
        );
        let v = post(&second.base, "/pop", r#"{"topic":"k9"}"#).await;
        let Some(id) = v["data"]["id"].as_str() else {
            continue;
        };
        let now = redis.time_ms().await;
        if let Some(leased_at) = reserved.get(id) {
            // Not before its lease (ttr 2 s) ran out.
            assert!(
                now - leased_at >= 2000 - 5,
                "{id} re-delivered {} ms into its lease",
                now - leased_at
            );
        }
        assert!(
            seen.insert(id.to_owned()),
            "{id} delivered twice by the second delayq"
        );
        last_seen = std::time::Instant::now();
        post(&second.base, "/finish", &json!({"id": id}).to_string()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_redis_is_away_errors_and_readyz_name_the_cause() {
    let mut redis = RedisServer::start();
    let q = delayq::Queue::connect(delayq::Config {
        redis_timeout: Duration::from_millis(500),
        ..config(&redis)
    })
    .unwrap();
    let s = TestServer::start(q.clone(), Default::default()).await;
    eventually(Duration::from_secs(5), "subscribed", || async {
        q.subscriber_connected().then_some(())
    })
    .await;
    redis.kill();
    let http = reqwest::Client::new();
    let message = eventually(Duration::from_secs(10), "a 503 with the cause", || async {
        let r = http
            .post(format!("{}/v1/jobs", s.base))
            .body(r#"{"topic":"t"}"#)
            .send()
            .await
            .ok()?;
        let v: serde_json::Value = r.json().await.ok()?;
        let m = v["error"]["message"].as_str()?.to_owned();
        m.contains("last connection error").then_some(m)
    })
    .await;
    assert!(
        message.contains("No such file") || message.contains("refused"),
        "{message}"
    );
    let r = http.get(format!("{}/readyz", s.base)).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let v: serde_json::Value = r.json().await.unwrap();
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    redis.restart();
    s.stop().await;
}

/// A queue reaching Redis at `url` (a proxy) with the jobs `ids` of
/// `topic` ready, their ttr 10 minutes (back within a test's bounds only if
/// given back), and its scripts loaded: a pop of nothing came first, since
/// by EVALSHA (Redis 6.2) each script loads at its first call, and a
/// withheld NOSCRIPT would be the lost reply instead of the pop's.
async fn ready_behind(url: String, topic: &str, ids: &[&str]) -> delayq::Queue {
    let q = queue_at(url);
    for id in ids {
        let j = job(id, topic, 0, 600_000);
        retried("a push", || q.push(&j)).await;
    }
    for id in ids {
        eventually(Duration::from_secs(30), "the jobs ready", || async {
            let j = q.get(id).await.ok().flatten()?;
            (j.state == delayq::JobState::Ready).then_some(())
        })
        .await;
    }
    let none = topics(&["none"]);
    assert!(retried("a first pop", || q.try_pop(&none, 1))
        .await
        .is_empty());
    q
}

/// A pop that ran in Redis but whose reply was lost (the connection broke
/// between the two, as when a master dies and its replica takes over with
/// the lease) gives its job back as soon as Redis answers again, the
/// attempt uncounted: not after the job's ttr, as a failed attempt that no
/// consumer had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_whose_reply_was_lost_gives_its_job_back_uncounted() {
    let redis = RedisServer::start();
    let proxy = CutProxy::start(&redis).await;
    let q = ready_behind(proxy.url(), "lost", &["lost1"]).await;
    proxy.swallow_replies(true);
    let popping = {
        let q = q.clone();
        tokio::spawn(async move { q.try_pop(&topics(&["lost"]), 1).await })
    };
    // The pop ran: Redis holds the lease (read beside the proxy).
    let direct = redis.conn().await;
    eventually(Duration::from_secs(30), "the pop to run in redis", || {
        let mut c = direct.clone();
        async move {
            let state: Option<String> = redis::cmd("HGET")
                .arg("{dq}:j:lost1")
                .arg("s")
                .query_async(&mut c)
                .await
                .unwrap();
            (state.as_deref() == Some("reserved")).then_some(())
        }
    })
    .await;
    proxy.cut();
    let reply = popping.await.unwrap();
    assert!(
        !reply.as_ref().is_ok_and(|got| !got.is_empty()),
        "the pop's reply was swallowed, yet it handed over {reply:?}"
    );
    // Its ttr is 10 minutes: back within 30 s is back because the pop was
    // undone.
    let again = eventually(Duration::from_secs(30), "the job back to ready", || {
        let q = q.clone();
        async move { q.try_pop(&topics(&["lost"]), 1).await.ok()?.pop() }
    })
    .await;
    assert_eq!(
        (again.id.as_str(), again.attempts),
        ("lost1", 1),
        "the lost pop's attempt was counted"
    );
}

/// A pop's reply that comes after its caller stopped waiting hands its jobs
/// to nobody: delayq gives them back. When Redis stalls just then (here a
/// CLIENT PAUSE longer than a release's timeout), the releases fail and
/// are tried again until done, not left to the jobs' ttr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_pops_job_is_given_back_even_when_redis_stalls_as_it_goes_back() {
    let redis = RedisServer::start();
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let ids = ["late1", "late2", "late3"];
    let q = ready_behind(proxy.url(), "late", &ids).await;
    // Replies now held until the pop's caller has stopped waiting (2 s),
    // well before the pop itself gives up (30 s later).
    proxy.hold(true);
    let popping = {
        let q = q.clone();
        tokio::spawn(async move { q.try_pop(&topics(&["late"]), 3).await })
    };
    let direct = redis.conn().await;
    // Each job's state, read beside the proxy.
    let states = || {
        let mut c = direct.clone();
        async move {
            let mut all = Vec::new();
            for id in ids {
                let s: Option<String> = redis::cmd("HGET")
                    .arg(format!("{{dq}}:j:{id}"))
                    .arg("s")
                    .query_async(&mut c)
                    .await
                    .unwrap();
                all.push(s.unwrap_or_default());
            }
            all
        }
    };
    eventually(
        Duration::from_secs(30),
        "the pop to run in redis",
        || async { (states().await == ["reserved"; 3]).then_some(()) },
    )
    .await;
    // Redis stalls for longer than a release's timeout: the releases,
    // sent when the reply comes, reach Redis past their deadline.
    let _: () = redis::cmd("CLIENT")
        .arg(&["PAUSE", "8000", "ALL"])
        .query_async(&mut direct.clone())
        .await
        .unwrap();
    let reply = popping.await.unwrap();
    assert!(
        !reply.as_ref().is_ok_and(|got| !got.is_empty()),
        "the caller had gone, yet it got {reply:?}"
    );
    proxy.hold(false);
    // Their ttr is 10 minutes: ready within 40 s is ready because the
    // releases were tried again once Redis answered.
    eventually(Duration::from_secs(40), "the jobs given back", || async {
        (states().await == ["ready"; 3]).then_some(())
    })
    .await;
    let mut again: Vec<(String, u32)> = (q.try_pop(&topics(&["late"]), 3).await.unwrap())
        .into_iter()
        .map(|d| (d.id, d.attempts))
        .collect();
    again.sort();
    assert_eq!(
        again,
        ids.map(|id| (id.to_owned(), 1)),
        "the late pop's attempts were counted"
    );
}

/// A pop whose caller goes away once its reply has come, before taking
/// it (an HTTP long-poll whose client left just then): the jobs in the
/// reply reached nobody and go back at once, not after their ttr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_dropped_with_its_reply_come_but_not_taken_gives_its_job_back() {
    use std::future::Future;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Records that the pop's future was woken.
    struct Woken(AtomicBool);
    impl futures::task::ArcWake for Woken {
        fn wake_by_ref(me: &Arc<Self>) {
            me.0.store(true, Ordering::SeqCst);
        }
    }

    let redis = RedisServer::start();
    let proxy = SlowProxy::start(&redis, Duration::ZERO).await;
    let q = ready_behind(proxy.url(), "drop", &["taken-not"]).await;
    let direct = queue(&redis);
    let state = || async { direct.get("taken-not").await.unwrap().unwrap().state };
    // The pop is polled by hand until it ran in Redis; its reply is held
    // meanwhile, so no poll can take it.
    proxy.hold(true);
    let woken = Arc::new(Woken(AtomicBool::new(false)));
    let waker = futures::task::waker(woken.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    let wanted = topics(&["drop"]);
    let mut pop = Box::pin(q.pop(&wanted, Duration::from_secs(60)));
    eventually(Duration::from_secs(30), "the pop to run in redis", || {
        assert!(pop.as_mut().poll(&mut cx).is_pending());
        async { (state().await == delayq::JobState::Reserved).then_some(()) }
    })
    .await;
    // The reply is let through; the pop's future is woken when it is
    // there to take, and dropped instead.
    woken.0.store(false, Ordering::SeqCst);
    proxy.hold(false);
    eventually(
        Duration::from_secs(30),
        "the reply there to take",
        || async { woken.0.load(Ordering::SeqCst).then_some(()) },
    )
    .await;
    drop(pop);
    eventually(Duration::from_secs(30), "the job given back", || async {
        (state().await == delayq::JobState::Ready).then_some(())
    })
    .await;
    let again = q.try_pop(&topics(&["drop"]), 1).await.unwrap();
    assert_eq!(
        again
            .iter()
            .map(|d| (d.id.as_str(), d.attempts))
            .collect::<Vec<_>>(),
        [("taken-not", 1)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_while_redis_is_down_fails_within_its_timeout() {
    let mut redis = RedisServer::start();
    let q = delayq::Queue::connect(Config {
        redis_timeout: Duration::from_secs(1),
        ..config(&redis)
    })
    .unwrap();
    // A push that works: the eviction policy has been read once. Its
    // first call also connects, reads the clock and loads the scripts,
    // which a busy machine may not do within the second.
    let up = job("up", "down", 60_000, 60_000);
    retried("the first push", || q.push(&up)).await;
    redis.kill();
    // Each push waits at most its own second, not the policy's read too
    // (the reading goes stale after a second, so later pushes would read
    // it again).
    for i in 0..4 {
        let started = std::time::Instant::now();
        let e = q
            .push(&job(&format!("p{i}"), "down", 60_000, 60_000))
            .await
            .unwrap_err();
        let took = started.elapsed();
        // Never sent (no connection): known to have changed nothing.
        assert!(
            matches!(
                e,
                delayq::Error::Timeout { .. } | delayq::Error::Redis { .. }
            ),
            "{e}"
        );
        assert!(
            took < Duration::from_millis(1800),
            "push {i} failed after {took:?}: {e}"
        );
    }
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_still_pops_finishes_deletes_and_fires_and_refuses_pushes_clearly() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    for i in 0..3 {
        q.push(&job(&format!("now{i}"), "full", 0, 60_000))
            .await
            .unwrap();
    }
    q.push(&job("later", "full", 1500, 60_000)).await.unwrap();
    eventually(Duration::from_secs(5), "ready", || async {
        let o = q.topics().await.ok()?;
        (o.topics.get("full")?.ready == 3).then_some(())
    })
    .await;

    // Below what is in use: with noeviction every write is refused.
    let half = (redis.info("memory", "used_memory") / 2.0) as u64;
    let _: String = redis
        .cmd(&["CONFIG", "SET", "maxmemory", &half.to_string()])
        .await;
    let e = q.push(&job("refused", "full", 0, 1000)).await.unwrap_err();
    assert!(matches!(e, Error::Full), "{e}");
    assert!(e.to_string().contains("out of memory"), "{e}");
    assert!(q.get("refused").await.unwrap().is_none());
    let (st, v) = request_json(reqwest::Method::GET, format!("{}/readyz", s.base), None).await;
    assert_eq!((st, &v["memory"]), (503, &json!("full")), "{v}");

    let d = q.try_pop(&topics(&["full"]), 1).await.unwrap().remove(0);
    q.finish(&d.id, &d.token).await.unwrap();
    assert!(q.delete("now1").await.unwrap());
    let d = q.try_pop(&topics(&["full"]), 1).await.unwrap().remove(0);
    q.nack(&d.id, &d.token, Some(Duration::from_secs(60)), "later")
        .await
        .unwrap();
    // The sweep still hands over what falls due.
    let d = q
        .pop(&topics(&["full"]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a job that fell due while redis was full");
    assert_eq!(d.id, "later");
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_redis_gets_no_jobs_and_is_named_as_the_problem() {
    // Over TCP, as most deployments reach Redis.
    let redis = RedisServer::start_tcp(&["--maxmemory-policy", "allkeys-lru"]);
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let e = q.push(&job("a", "ev", 0, 1000)).await.unwrap_err();
    assert!(
        matches!(e, Error::Evicting(ref p) if p == "allkeys-lru"),
        "{e}"
    );
    assert!(e.to_string().contains("noeviction"), "{e}");
    let (st, v) = request_json(
        reqwest::Method::POST,
        format!("{}/v1/jobs", s.base),
        Some(json!({"topic": "ev"})),
    )
    .await;
    assert_eq!(
        (st, &v["error"]["code"]),
        (503, &json!("redis_evicts")),
        "{v}"
    );
    let (st, v) = request_json(reqwest::Method::GET, format!("{}/readyz", s.base), None).await;
    assert_eq!((st, &v["memory"]), (503, &json!("evicting")), "{v}");
    let keys: Vec<String> = redis.cmd(&["KEYS", "{dq}:j:*"]).await;
    assert!(keys.is_empty(), "{keys:?}");

    // Fixed at runtime: pushes go through again.
    let _: String = redis
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .await;
    eventually(Duration::from_secs(5), "pushes accepted", || async {
        q.push(&job("a", "ev", 0, 1000)).await.ok()
    })
    .await;
    s.stop().await;
    q.close().await;
}
