//! Recurring schedules and rate limits, across delayq instances that are
//! killed and restarted for real.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use delayq::{Config, Queue, RateLimit};
use serde_json::{json, Value};

/// The tick time (Unix ms) in a recurring job's id.
fn tick_of(id: &str) -> i64 {
    let at = id.rsplit('/').next().unwrap();
    chrono::DateTime::parse_from_rfc3339(at)
        .unwrap()
        .timestamp_millis()
}

async fn put(base: &str, name: &str, body: Value) -> Value {
    let r = reqwest::Client::new()
        .put(format!("{base}/v1/recurring/{name}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// What a consumer saw: (id, handed over at Redis ms).
type Seen = Arc<Mutex<Vec<(String, i64)>>>;

/// A consumer that takes every job of `topic`, noting (id, handed over at
/// Redis ms), until stopped.
fn consume(q: Queue, topic: &str, stop: Arc<AtomicBool>) -> (tokio::task::JoinHandle<()>, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let topic = vec![topic.to_string()];
    let log = seen.clone();
    let task = tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            if let Ok(Some(d)) = q.pop(&topic, Duration::from_millis(200)).await {
                log.lock()
                    .unwrap()
                    .push((d.id.clone(), d.popped_at_us / 1000));
                q.finish(&d.id, &d.token).await.unwrap();
            }
        }
    });
    (task, seen)
}

fn consumer_queue(redis: &RedisServer) -> Queue {
    Queue::connect(Config {
        dispatch: false,
        ..config(redis)
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_fires_once_and_never_early_across_two_instances_and_a_kill() {
    let redis = RedisServer::start();
    let mut a = DelayqProcess::start(&redis, &[]);
    let b = DelayqProcess::start(&redis, &[]);
    let q = consumer_queue(&redis);
    let stop = Arc::new(AtomicBool::new(false));
    let (task, seen) = consume(q.clone(), "beat", stop.clone());

    let created_ms = redis.time_ms().await;
    let created = put(
        &a.base,
        "beat",
        json!({"topic": "beat", "cron": "*/2 * * * * *", "body": "tick"}),
    )
    .await;
    assert!(created["next_fire_ms"].as_i64().unwrap() > created_ms);

    // One instance is killed and restarted halfway.
    tokio::time::sleep(Duration::from_secs(5)).await;
    a.kill9_in_place();
    tokio::time::sleep(Duration::from_secs(1)).await;
    a = DelayqProcess::start(&redis, &[]);
    let window_end = created_ms + 10_000;
    eventually(
        Duration::from_secs(15),
        "the tenth second's tick",
        || async {
            let s = seen.lock().unwrap();
            s.iter()
                .any(|(id, _)| tick_of(id) > window_end)
                .then_some(())
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    task.await.unwrap();

    let seen = seen.lock().unwrap().clone();
    let mut per_tick: HashMap<i64, usize> = HashMap::new();
    for (id, at) in &seen {
        let tick = tick_of(id);
        assert!(*at >= tick, "{id} handed over at {at}, before its tick");
        *per_tick.entry(tick).or_default() += 1;
    }
    let mut in_window: Vec<i64> = per_tick
        .keys()
        .copied()
        .filter(|t| *t > created_ms && *t <= window_end)
        .collect();
    in_window.sort();
    println!("ticks in the 10 s after the schedule was put: {in_window:?}");
    assert_eq!(in_window.len(), 5, "one job per tick: {per_tick:?}");
    assert!(in_window.windows(2).all(|w| w[1] - w[0] == 2000));
    assert!(
        per_tick.values().all(|&n| n == 1),
        "a tick fired twice: {per_tick:?}"
    );
    drop((a, b));
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_missed_while_everything_was_down_fires_once_or_is_skipped() {
    let redis = RedisServer::start();
    let a = DelayqProcess::start(&redis, &[]);
    let q = consumer_queue(&redis);
    let stop = Arc::new(AtomicBool::new(false));
    let (fire_task, fired) = consume(q.clone(), "fire", stop.clone());
    let (skip_task, skipped) = consume(q.clone(), "skip", stop.clone());
    put(
        &a.base,
        "fire",
        json!({"topic": "fire", "cron": "*/2 * * * * *"}),
    )
    .await;
    put(
        &a.base,
        "skip",
        json!({"topic": "skip", "cron": "*/2 * * * * *", "missed": "skip"}),
    )
    .await;
    eventually(Duration::from_secs(10), "a first tick of each", || async {
        (!fired.lock().unwrap().is_empty() && !skipped.lock().unwrap().is_empty()).then_some(())
    })
    .await;

    // The next tick of each is pushed (still ahead) when everything goes
    // down: on a busy machine the loop may not have pushed it yet.
    eventually(
        Duration::from_secs(10),
        "a tick pushed ahead of each",
        || async {
            let now = redis.time_ms().await;
            // Its next tick ahead, with that tick's job pushed.
            let ahead = |name: &'static str| {
                let q = q.clone();
                async move {
                    let Some(next) = q
                        .recurring(name)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|s| s.next_fire_ms)
                        .filter(|&n| n > now)
                    else {
                        return false;
                    };
                    let id = delayq::recurring::tick_id(name, next);
                    q.get(&id).await.ok().flatten().is_some()
                }
            };
            (ahead("fire").await && ahead("skip").await).then_some(())
        },
    )
    .await;
    // Every delayq instance down for 9 s: four or five ticks go by.
    let down_at = redis.time_ms().await;
    a.kill9();
    tokio::time::sleep(Duration::from_secs(9)).await;
    let up_at = redis.time_ms().await;
    let a = DelayqProcess::start(&redis, &[]);
    eventually(
        Duration::from_secs(10),
        "ticks after the restart",
        || async {
            let after = |v: &Mutex<Vec<(String, i64)>>| {
                v.lock()
                    .unwrap()
                    .iter()
                    .any(|(id, _)| tick_of(id) > up_at + 2000)
            };
            (after(&fired) && after(&skipped)).then_some(())
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    fire_task.await.unwrap();
    skip_task.await.unwrap();

    let during = |v: &Mutex<Vec<(String, i64)>>| {
        v.lock()
            .unwrap()
            .iter()
            .filter(|(id, _)| (down_at..up_at).contains(&tick_of(id)))
            .count()
    };
    let (f, s) = (during(&fired), during(&skipped));
    println!("ticks of the outage delivered: fire {f}, skip {s}");
    assert_eq!(
        f,
        1,
        "fire: the missed tick fires once: {:?}",
        fired.lock().unwrap()
    );
    assert_eq!(
        s,
        0,
        "skip: no missed tick fires: {:?}",
        skipped.lock().unwrap()
    );
    for v in [&fired, &skipped] {
        let v = v.lock().unwrap();
        let mut ticks: Vec<i64> = v.iter().map(|(id, _)| tick_of(id)).collect();
        let n = ticks.len();
        ticks.dedup();
        assert_eq!(ticks.len(), n, "a tick fired twice");
    }
    drop(a);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_across_two_instances_with_greedy_consumers() {
    let redis = RedisServer::start();
    let a = queue(&redis);
    let b = queue(&redis);
    a.set_rate(
        "sms",
        RateLimit {
            per_second: 5.0,
            burst: 5,
        },
    )
    .await
    .unwrap();
    assert_eq!(b.rates().await.unwrap()["sms"].burst, 5);
    let jobs: Vec<_> = (0..50)
        .map(|i| job(&format!("sms-{i}"), "sms", 0, 60_000))
        .collect();
    for r in a.push_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    eventually(Duration::from_secs(5), "all 50 ready", || async {
        (a.topics().await.unwrap().topics["sms"].ready == 50).then_some(())
    })
    .await;
    let times: Arc<Mutex<Vec<i64>>> = Arc::default();
    let start = redis.time_ms().await;
    let mut tasks = Vec::new();
    for q in [&a, &b] {
        for _ in 0..4 {
            let (q, times) = (q.clone(), times.clone());
            tasks.push(tokio::spawn(async move {
                let topic = vec!["sms".to_string()];
                while times.lock().unwrap().len() < 25 {
                    for d in q
                        .pop_many(&topic, 10, Duration::from_millis(500))
                        .await
                        .unwrap()
                    {
                        times.lock().unwrap().push(d.popped_at_us / 1000);
                    }
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut t = times.lock().unwrap().clone();
    t.sort();
    let taken = t.len();
    // By any moment, at most the burst plus the rate times the time gone.
    for (k, at) in t.iter().enumerate() {
        let allowed = 5.0 + 5.0 * (at - start) as f64 / 1000.0;
        assert!(
            (k + 1) as f64 <= allowed + 0.001,
            "job {} handed over {} ms in: over the limit",
            k + 1,
            at - start
        );
    }
    let took = t[24] - start;
    println!("25 jobs at 5/s, burst 5, 8 greedy consumers on 2 instances: {took} ms");
    // And the limit does not starve them either: 20 after the burst at 5/s.
    assert!(took <= 5_000, "{took} ms");
    let held = a.metrics().rate_held.total() + b.metrics().rate_held.total();
    assert!(held > 0, "held-back jobs are counted");
    assert!(a.clear_rate("sms").await.unwrap());
    let rest = a
        .pop_many(&["sms".to_string()], 25, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        rest.len(),
        50 - taken,
        "without the limit the rest go at once"
    );
    a.close().await;
    b.close().await;
}

/// Pushes `n` jobs of `topic` due now and waits until all are ready.
async fn ready_jobs(q: &Queue, topic: &str, n: usize) {
    let jobs: Vec<_> = (0..n)
        .map(|i| job(&format!("{topic}-{i}"), topic, 0, 60_000))
        .collect();
    for r in q.push_many(&jobs).await.unwrap() {
        r.unwrap();
    }
    eventually(Duration::from_secs(10), "all ready", || async {
        (q.topics().await.unwrap().topics[topic].ready == n as u64).then_some(())
    })
    .await;
}

/// Asserts that hand-over times (Redis ms, any order) never run ahead of
/// `burst` plus `per_second` times the time gone since `start`.
fn assert_within_limit(times: &[i64], start: i64, per_second: f64, burst: f64) {
    let mut t = times.to_vec();
    t.sort();
    for (k, at) in t.iter().enumerate() {
        let allowed = burst + per_second * (at - start) as f64 / 1000.0;
        assert!(
            (k + 1) as f64 <= allowed + 0.001,
            "job {} handed over {} ms in: over the limit",
            k + 1,
            at - start
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_under_a_rate_limit_gets_every_job_the_limit_lets_out() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let limit = RateLimit {
        per_second: 10.0,
        burst: 1,
    };
    q.set_rate("sms", limit).await.unwrap();
    ready_jobs(&q, "sms", 100).await;
    let start = redis.time_ms().await;
    let begun = std::time::Instant::now();
    let topic = vec!["sms".to_string()];
    let mut times = Vec::new();
    // One consumer, long-polling for up to 30 s a call, as a worker does.
    while times.len() < 100 && begun.elapsed() < Duration::from_secs(20) {
        for d in q
            .pop_many(&topic, 10, Duration::from_secs(30))
            .await
            .unwrap()
        {
            times.push(d.popped_at_us / 1000);
        }
    }
    let in_10s = times.iter().filter(|&&t| t - start <= 10_000).count();
    println!("100 jobs at 10/s, burst 1, one long-poll: {in_10s} in 10 s");
    // 10/s lets out ~100 in 10 s; well over half arrive however busy the
    // machine is (before, a long-poll slept through every refill: 3).
    assert!(in_10s >= 60, "{in_10s} jobs in 10 s");
    assert_within_limit(&times, start, limit.per_second, limit.burst as f64);
    assert!(
        q.metrics().rate_held.total() > 0,
        "held-back jobs are counted"
    );
    q.close().await;
}

fn cli(base: &str, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(args)
        .args(["--server", base])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_and_limits_come_from_the_config_file_the_cli_and_survive_restarts() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("topics.toml");
    std::fs::write(
        &conf,
        r#"
[topics.sms]
rate = { per_second = 50, burst = 100 }

[recurring.expiry-reminders]
topic = "member-expiry"
cron = "0 0 9 * * *"
timezone = "Asia/Shanghai"
body = "within 7 days"
"#,
    )
    .unwrap();
    let conf = conf.to_str().unwrap();
    let a = DelayqProcess::start(&redis, &["--config", conf]);
    let (ok, out, err) = cli(&a.base, &["recurring", "list"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("expiry-reminders")
            && out.contains("0 0 9 * * *")
            && out.contains("Asia/Shanghai"),
        "{out}"
    );
    let (ok, out, _) = cli(&a.base, &["rate", "get", "sms"]);
    assert!(
        ok && out.contains("at most 50 jobs a second, bursts of 100"),
        "{out}"
    );
    let (_, json_out, _) = cli(&a.base, &["recurring", "get", "expiry-reminders", "--json"]);
    let before: Value = serde_json::from_str(&json_out).unwrap();
    // 09:00 in Shanghai is 01:00 UTC.
    let next = before["next_fire_ms"].as_i64().unwrap();
    assert_eq!(next % 86_400_000, 3_600_000, "{before}");

    // A restart with the same file keeps the schedule's ticks as they are.
    a.terminate();
    let a = DelayqProcess::start(&redis, &["--config", conf]);
    let (_, json_out, _) = cli(&a.base, &["recurring", "get", "expiry-reminders", "--json"]);
    let after: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(after["last_tick_ms"], before["last_tick_ms"]);

    // The CLI puts, lists and deletes; bad input is refused with the reason.
    let (ok, _, err) = cli(
        &a.base,
        &[
            "recurring",
            "put",
            "bad",
            "--topic",
            "t",
            "--cron",
            "0 9 * *",
        ],
    );
    assert!(!ok && err.contains("4 fields"), "{err}");
    let (ok, _, err) = cli(
        &a.base,
        &[
            "recurring",
            "put",
            "bad",
            "--topic",
            "t",
            "--cron",
            "0 9 * * *",
            "--timezone",
            "Asia/Nowhere",
        ],
    );
    assert!(!ok && err.contains("unknown"), "{err}");
    let (ok, _, err) = cli(
        &a.base,
        &[
            "recurring",
            "put",
            "hourly",
            "--topic",
            "t",
            "--cron",
            "0 0 * * * *",
            "--missed",
            "skip",
        ],
    );
    assert!(ok, "{err}");
    let (_, out, _) = cli(&a.base, &["recurring", "list"]);
    assert!(out.contains("hourly"), "{out}");
    let (ok, _, _) = cli(&a.base, &["recurring", "delete", "hourly"]);
    assert!(ok);
    let (ok, _, err) = cli(&a.base, &["recurring", "get", "hourly"]);
    assert!(!ok && err.contains("404"), "{err}");
    let (ok, _, _) = cli(&a.base, &["rate", "clear", "sms"]);
    assert!(ok);
    let (ok, _, err) = cli(&a.base, &["rate", "set", "sms", "0"]);
    assert!(!ok && err.contains("per_second"), "{err}");
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_push_cannot_take_a_tick_id_through_the_library_or_either_api() {
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), delayq::http::ServerConfig::default()).await;
    let q = server.queue.clone();
    q.put_recurring(
        "minutely",
        &delayq::Recurring {
            topic: "beat".into(),
            cron: "0 * * * * *".into(),
            body: "from the schedule".into(),
            ..delayq::Recurring::default()
        },
    )
    .await
    .unwrap();
    let next = q
        .recurring("minutely")
        .await
        .unwrap()
        .unwrap()
        .next_fire_ms
        .unwrap();
    let tick = delayq::recurring::tick_id("minutely", next);
    let later = delayq::recurring::tick_id("minutely", next + 60_000);
    let reserved = |msg: &str| msg.contains("reserved") && msg.contains("recurring/{");

    for id in [&tick, &later] {
        let user = job(id, "beat", 0, 60_000);
        match q.push(&user).await {
            Err(delayq::Error::Invalid(m)) => assert!(reserved(&m), "{m}"),
            other => panic!("library push of {id} was not refused: {other:?}"),
        }
        let r = q.push_many(std::slice::from_ref(&user)).await.unwrap();
        assert!(
            matches!(&r[0], Err(delayq::Error::Invalid(m)) if reserved(m)),
            "{r:?}"
        );
        let native = reqwest::Client::new()
            .post(format!("{}/v1/jobs", server.base))
            .json(&json!({"id": id, "topic": "beat", "body": "mine"}))
            .send()
            .await
            .unwrap();
        let status = native.status().as_u16();
        let text = native.text().await.unwrap();
        assert!(
            (400..500).contains(&status) && reserved(&text),
            "{status} {text}"
        );
        let compat = post(
            &server.base,
            "/push",
            &json!({"id": id, "topic": "beat", "body": "mine", "delay": 1, "ttr": 10}).to_string(),
        )
        .await;
        assert!(
            compat["code"] == 1 && reserved(compat["message"].as_str().unwrap()),
            "{compat}"
        );
    }
    // Ids that only look alike are the user's.
    q.push(&job("recurring/minutely/x", "beat", 60_000, 60_000))
        .await
        .unwrap();
    // The tick is still the schedule's, and fires as such.
    eventually(Duration::from_secs(5), "the tick's job", || async {
        q.get(&tick).await.unwrap()
    })
    .await;
    let j = q.get(&tick).await.unwrap().unwrap();
    assert_eq!(j.body, "from the schedule");
    server.stop().await;
    q.close().await;
}

/// Puts `n` schedules named `{prefix}-{i}`, a few at a time.
async fn put_many(q: &Queue, prefix: &str, n: usize, def: &delayq::Recurring) {
    use futures::StreamExt;
    futures::stream::iter(0..n)
        .map(|i| {
            let (q, def) = (q.clone(), def.clone());
            let name = format!("{prefix}-{i}");
            async move { q.put_recurring(&name, &def).await.unwrap() }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_every_second_schedules_push_every_tick_once_without_missed_logs() {
    const N: usize = 4000;
    let redis = RedisServer::start();
    let q = consumer_queue(&redis);
    let def = delayq::Recurring {
        topic: "beat".into(),
        cron: "* * * * * *".into(),
        ..delayq::Recurring::default()
    };
    let (a, logs) = DelayqProcess::spawn_logged(&["--redis", &redis.url()]);
    put_many(&q, "s", N, &def).await;
    // Ticks well after the process started, over 6 s.
    let first = (redis.time_ms().await / 1000 + 4) * 1000;
    let last = first + 5000;
    // No response timeout: the check is one big pipeline on a busy Redis.
    let conn = redis
        .client()
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .unwrap();
    let keys = delayq::testing::Keys::new(&delayq::Config::default().prefix);
    let mut pipe = redis::pipe();
    for i in 0..N {
        for t in (first..=last).step_by(1000) {
            pipe.exists(keys.job(&delayq::recurring::tick_id(&format!("s-{i}"), t)));
        }
    }
    // Redis runs on this machine: its clock is ours.
    let wait = last + 3000 - chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64)).await;
    // On a busy machine the loop may fall behind, and then catches up
    // (late, but every tick once): wait while the count still moves.
    let mut found = 0;
    let mut moved_at = std::time::Instant::now();
    while found < N * 6 && moved_at.elapsed() < Duration::from_secs(60) {
        let there: Vec<bool> = pipe.query_async(&mut conn.clone()).await.unwrap();
        let n = there.iter().filter(|&&b| b).count();
        println!("ticks pushed: {n} of {}", there.len());
        if n != found {
            (found, moved_at) = (n, std::time::Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(a);
    let missed: Vec<String> = logs.try_iter().filter(|l| l.contains("missed")).collect();
    assert!(
        missed.is_empty(),
        "{} lines said ticks were missed while delayq ran, e.g. {:?}",
        missed.len(),
        missed.first()
    );
    assert_eq!(found, N * 6, "ticks pushed (none for 60 s)");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_reads_only_what_is_due_not_every_schedule_every_second() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let big = delayq::Recurring {
        topic: "daily".into(),
        cron: "0 0 9 * * *".into(),
        body: "x".repeat(1024 * 1024),
        ..delayq::Recurring::default()
    };
    put_many(&q, "big", 20, &big).await;
    let small = delayq::Recurring {
        body: "small".into(),
        ..big.clone()
    };
    put_many(&q, "small", 1000, &small).await;
    // Each schedule's first tick is pushed: the loop has seen them all.
    eventually(
        Duration::from_secs(30),
        "every first tick pushed",
        || async {
            let n = q.topics().await.unwrap().topics.get("daily")?.delayed;
            (n == 1020).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let bytes = || redis.info("stats", "total_net_output_bytes");
    let commands = || redis.info("stats", "total_commands_processed");
    let (b0, c0, t0) = (bytes(), commands(), std::time::Instant::now());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (b1, c1, secs) = (bytes(), commands(), t0.elapsed().as_secs_f64());
    let (out, calls) = ((b1 - b0) / secs, (c1 - c0) / secs);
    println!("idle with 20 daily 1 MiB schedules and 1000 small ones: {out:.0} bytes/s, {calls:.0} commands/s");
    assert!(out < 100_000.0, "{out:.0} bytes/s of Redis output");
    assert!(calls < 100.0, "{calls:.0} commands/s");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_stored_before_the_due_index_still_ticks() {
    let redis = RedisServer::start();
    let q = consumer_queue(&redis);
    q.put_recurring(
        "old",
        &delayq::Recurring {
            topic: "old".into(),
            cron: "* * * * * *".into(),
            ..delayq::Recurring::default()
        },
    )
    .await
    .unwrap();
    // As an older delayq left it: the hash and the index of names only.
    let keys = delayq::testing::Keys::new(&delayq::Config::default().prefix);
    let removed: i64 = redis.cmd(&["ZREM", &keys.recur_due(), "old"]).await;
    assert_eq!(removed, 1);
    let a = DelayqProcess::start(&redis, &[]);
    let from = redis.time_ms().await;
    eventually(
        Duration::from_secs(15),
        "a tick of the old schedule",
        || async {
            let ids: Vec<String> = redis.cmd(&["KEYS", "*recurring/{old}/*"]).await;
            ids.iter().any(|k| tick_of(k) > from + 1000).then_some(())
        },
    )
    .await;
    drop(a);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_put_with_the_files_ttr_name_is_refused_naming_ttr_ms() {
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), delayq::http::ServerConfig::default()).await;
    let r = reqwest::Client::new()
        .put(format!("{}/v1/recurring/daily", server.base))
        .json(&json!({"topic": "t", "cron": "0 0 9 * * *", "ttr": "10m"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    let v: Value = r.json().await.unwrap();
    let msg = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(msg.contains("ttr_ms") && msg.contains("600000"), "{v}");
    assert!(server.queue.recurring("daily").await.unwrap().is_none());
    let ok = put(
        &server.base,
        "daily",
        json!({"topic": "t", "cron": "0 0 9 * * *", "ttr_ms": 600_000}),
    )
    .await;
    assert_eq!(ok["ttr_ms"], 600_000);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_longer_than_the_outage_window_drops_no_tick_as_missed() {
    const N: usize = 50;
    let redis = RedisServer::start();
    let q = consumer_queue(&redis);
    // Calls wait out the pause below instead of failing: the loop keeps
    // running, its pass just takes longer than the 5 s outage window.
    let (a, logs) =
        DelayqProcess::spawn_logged(&["--redis", &redis.url(), "--redis-timeout", "30s"]);
    let def = delayq::Recurring {
        topic: "beat".into(),
        cron: "* * * * * *".into(),
        missed: delayq::Missed::Skip,
        ..delayq::Recurring::default()
    };
    put_many(&q, "s", N, &def).await;
    let from = redis.time_ms().await;
    let pushed_after = |t: i64| {
        let q = q.clone();
        async move {
            for i in 0..N {
                let s = q.recurring(&format!("s-{i}")).await.ok().flatten()?;
                if s.last_tick_ms.is_none_or(|l| l <= t) {
                    return None;
                }
            }
            Some(())
        }
    };
    eventually(Duration::from_secs(30), "ticks pushed", || {
        pushed_after(from + 1000)
    })
    .await;
    // Redis takes no write for 7 s: whatever the loop is doing then (a
    // pass, or waiting for the next), its pass lasts past the window.
    let _: () = redis.cmd(&["CLIENT", "PAUSE", "7000", "WRITE"]).await;
    // A write returns once the pause is over.
    let mut conn = redis
        .client()
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("probe")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
    let up_at = redis.time_ms().await;
    eventually(Duration::from_secs(60), "ticks after the pause", || {
        pushed_after(up_at + 3000)
    })
    .await;
    drop(a);
    let missed: Vec<String> = logs.try_iter().filter(|l| l.contains("missed")).collect();
    assert!(
        missed.is_empty(),
        "{} lines said ticks were missed while delayq ran, e.g. {:?}",
        missed.len(),
        missed.first()
    );
    // Every tick from before the pause to after it was pushed (late, not
    // dropped).
    let keys = delayq::testing::Keys::new(&delayq::Config::default().prefix);
    let mut pipe = redis::pipe();
    let ticks: Vec<(String, i64)> = (0..N)
        .flat_map(|i| {
            ((from / 1000 + 2)..=(up_at / 1000 + 3)).map(move |s| (format!("s-{i}"), s * 1000))
        })
        .collect();
    for (name, t) in &ticks {
        pipe.exists(keys.job(&delayq::recurring::tick_id(name, *t)));
    }
    let there: Vec<bool> = pipe.query_async(&mut conn).await.unwrap();
    let dropped: Vec<_> = ticks
        .iter()
        .zip(there)
        .filter(|(_, b)| !b)
        .map(|(t, _)| t)
        .collect();
    assert!(
        dropped.is_empty(),
        "{} of {} ticks dropped, e.g. {:?}",
        dropped.len(),
        ticks.len(),
        dropped.first()
    );
    q.close().await;
}

async fn post_status(base: &str, path: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get_schedule(base: &str, name: &str) -> Value {
    let r = reqwest::get(format!("{base}/v1/recurring/{name}"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn ms_list(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_schedule_makes_no_ticks_and_resumes_from_now_without_a_burst() {
    let redis = RedisServer::start();
    let a = DelayqProcess::start(&redis, &[]);
    let q = consumer_queue(&redis);
    let stop = Arc::new(AtomicBool::new(false));
    let (task, seen) = consume(q.clone(), "pulse", stop.clone());
    let put_reply = put(
        &a.base,
        "pulse",
        json!({"topic": "pulse", "cron": "* * * * * *"}),
    )
    .await;
    assert_eq!(put_reply["paused"], false);
    let runs = ms_list(&put_reply["next_runs_ms"]);
    assert_eq!(runs.len(), 5, "{put_reply}");
    assert_eq!(Some(runs[0]), put_reply["next_fire_ms"].as_i64());
    assert!(runs.windows(2).all(|w| w[1] - w[0] == 1000), "{runs:?}");
    eventually(Duration::from_secs(15), "a first tick", || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;

    let (status, paused) = post_status(&a.base, "/v1/recurring/pulse/pause").await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["next_fire_ms"], Value::Null);
    assert_eq!(paused["next_runs_ms"], json!([]));
    let paused_at = paused["paused_at_ms"].as_i64().unwrap();
    // Pausing twice changes nothing.
    let (_, again) = post_status(&a.base, "/v1/recurring/pulse/pause").await;
    assert_eq!(again["paused_at_ms"].as_i64(), Some(paused_at));
    // Three of its seconds go by: no tick of them is pushed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let listed: Value = reqwest::get(format!("{}/v1/recurring", a.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["schedules"][0]["paused"], true, "{listed}");

    let (status, resumed) = post_status(&a.base, "/v1/recurring/pulse/resume").await;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["paused"], false);
    assert_eq!(resumed["paused_at_ms"], Value::Null);
    // Its ticks count from the resume: the first is after the pause's
    // three seconds.
    let resumed_next = resumed["next_fire_ms"].as_i64().unwrap();
    assert!(resumed_next > paused_at + 3000, "{resumed}");
    // The last whole second at or before the resume.
    let before_resume = resumed_next - 1000;
    assert_eq!(ms_list(&resumed["next_runs_ms"]).len(), 5);
    // Resuming a running schedule leaves its ticks alone.
    let (_, again) = post_status(&a.base, "/v1/recurring/pulse/resume").await;
    assert!(again["next_fire_ms"].as_i64().unwrap() >= resumed_next);
    eventually(
        Duration::from_secs(15),
        "a tick after the resume",
        || async {
            let s = seen.lock().unwrap();
            s.iter()
                .any(|(id, _)| tick_of(id) > before_resume)
                .then_some(())
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    task.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    let during: Vec<&String> = seen
        .iter()
        .map(|(id, _)| id)
        .filter(|id| tick_of(id) > paused_at && tick_of(id) <= before_resume)
        .collect();
    assert!(
        during.is_empty(),
        "ticks of the paused time fired: {during:?}"
    );
    drop(a);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_schedule_of_the_config_file_stays_paused_across_restarts_and_redefinitions() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("topics.toml");
    let write_conf = |body: &str| {
        std::fs::write(
            &conf,
            format!(
                "[recurring.nightly]\ntopic = \"reports\"\ncron = \"0 0 3 * * *\"\nbody = \"{body}\"\n"
            ),
        )
        .unwrap();
    };
    write_conf("v1");
    let conf_path = conf.to_str().unwrap().to_owned();
    let a = DelayqProcess::start(&redis, &["--config", &conf_path]);
    let (ok, out, err) = cli(&a.base, &["recurring", "pause", "nightly"]);
    assert!(ok && out.contains("paused"), "{out}{err}");

    // Same file: still paused.
    a.terminate();
    let a = DelayqProcess::start(&redis, &["--config", &conf_path]);
    let s = get_schedule(&a.base, "nightly").await;
    assert_eq!(s["paused"], true, "{s}");
    assert_eq!(s["next_runs_ms"], json!([]));

    // A changed definition is put again, and the pause stays.
    a.terminate();
    write_conf("v2");
    let a = DelayqProcess::start(&redis, &["--config", &conf_path]);
    let s = get_schedule(&a.base, "nightly").await;
    assert_eq!(
        (s["body"].as_str(), s["paused"].as_bool()),
        (Some("v2"), Some(true)),
        "{s}"
    );

    let (ok, _, err) = cli(&a.base, &["recurring", "resume", "nightly"]);
    assert!(ok, "{err}");
    let s = get_schedule(&a.base, "nightly").await;
    assert_eq!(s["paused"], false, "{s}");
    assert_eq!(ms_list(&s["next_runs_ms"]).len(), 5, "{s}");
    // 03:00 UTC each day.
    assert!(ms_list(&s["next_runs_ms"])
        .windows(2)
        .all(|w| w[1] - w[0] == 86_400_000));
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_pushes_one_job_like_a_tick_and_leaves_the_schedules_ticks() {
    let redis = RedisServer::start();
    let a = DelayqProcess::start(&redis, &[]);
    let q = consumer_queue(&redis);
    let created = put(
        &a.base,
        "yearly",
        json!({"topic": "annual", "cron": "0 0 9 1 1 *", "body": "happy new year", "ttr_ms": 5000}),
    )
    .await;
    // Once its first tick's job is pushed (due next New Year).
    let first = created["next_fire_ms"].as_i64().unwrap();
    let before = eventually(Duration::from_secs(15), "the first tick pushed", || async {
        let pushed = q
            .get(&delayq::recurring::tick_id("yearly", first))
            .await
            .unwrap()
            .is_some();
        match pushed {
            true => Some(get_schedule(&a.base, "yearly").await),
            false => None,
        }
    })
    .await;
    assert_eq!(before["last_tick_ms"], Value::Null, "{before}");

    let (status, run) = post_status(&a.base, "/v1/recurring/yearly/run").await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("recurring/{yearly}/run-"), "{run}");
    assert_eq!(run["topic"], "annual");
    let d = q
        .pop(&topics(&["annual"]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the job run now is ready");
    assert_eq!(
        (d.id.as_str(), d.body.as_str()),
        (id.as_str(), "happy new year")
    );
    let lease = d.lease_until_ms - d.popped_at_us / 1000;
    assert!(
        (1000..=5001).contains(&lease),
        "the schedule's ttr: {lease}"
    );
    q.finish(&d.id, &d.token).await.unwrap();

    let after = get_schedule(&a.base, "yearly").await;
    for f in ["last_tick_ms", "next_fire_ms", "next_runs_ms"] {
        assert_eq!(after[f], before[f], "{f}");
    }
    // A paused schedule runs on demand too, and stays paused.
    post_status(&a.base, "/v1/recurring/yearly/pause").await;
    let (ok, out, err) = cli(&a.base, &["recurring", "run", "yearly"]);
    assert!(
        ok && out.contains("pushed recurring/{yearly}/run-"),
        "{out}{err}"
    );
    assert_eq!(get_schedule(&a.base, "yearly").await["paused"], true);

    // Unknown and malformed names: refused, naming them; nothing made.
    for action in ["run", "pause", "resume"] {
        let (status, e) = post_status(&a.base, &format!("/v1/recurring/nope/{action}")).await;
        assert_eq!(status, 404, "{action}: {e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains("\"nope\""),
            "{e}"
        );
        let (status, e) = post_status(&a.base, &format!("/v1/recurring/a%7Bb/{action}")).await;
        assert_eq!(status, 422, "{action}: {e}");
        let (ok, _, err) = cli(&a.base, &["recurring", action, "nope"]);
        assert!(!ok && err.contains("404") && err.contains("nope"), "{err}");
    }
    let listed: Value = reqwest::get(format!("{}/v1/recurring", a.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 1, "{listed}");
    drop(a);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_tick_is_the_last_one_that_fired_none_before_and_the_next_apart() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = &s.base;
    // A yearly schedule has fired nothing yet: no last tick (not its
    // creation time), and its next tick ahead.
    let yearly = put(b, "yearly", json!({"topic": "y", "cron": "0 0 0 1 1 *"})).await;
    assert_eq!(yearly["last_tick_ms"], Value::Null, "{yearly}");
    assert!(yearly["next_fire_ms"].as_i64().is_some(), "{yearly}");
    let listed = get_schedule(b, "yearly").await;
    assert_eq!(listed["last_tick_ms"], Value::Null, "{listed}");
    let state = s.queue.recurring("yearly").await.unwrap().unwrap();
    assert_eq!(state.last_tick_ms, None);

    // Every second: once a tick fired, the last tick is it, and the next
    // tick lies after it.
    put(b, "pulse", json!({"topic": "p", "cron": "* * * * * *"})).await;
    let v = eventually(Duration::from_secs(20), "a tick that fired", || async {
        let v = get_schedule(b, "pulse").await;
        v["last_tick_ms"].as_i64().is_some().then_some(v)
    })
    .await;
    let (last, next) = (
        v["last_tick_ms"].as_i64().unwrap(),
        v["next_fire_ms"].as_i64().unwrap(),
    );
    assert!(last < next, "{v}");
    assert_eq!(last % 1000, 0, "{v}");
    // It is a tick whose job was pushed.
    let id = delayq::recurring::tick_id("pulse", last);
    let j = s.queue.get(&id).await.unwrap().unwrap();
    assert_eq!(j.due_ms, last);
    s.stop().await;
}
