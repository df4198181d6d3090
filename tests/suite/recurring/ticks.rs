//! Ticks: each fires once and never early, across instances, kills,
//! outages and thousands of schedules.

use super::*;

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
    // The first tick is the one the put names: a tick between the TIME
    // read above and the put's own reading of the clock is not the
    // schedule's.
    let first = created["next_fire_ms"].as_i64().unwrap();
    assert!(first > created_ms && first % 2_000 == 0, "{first}");

    // One instance is killed and restarted halfway.
    tokio::time::sleep(Duration::from_secs(5)).await;
    a.kill9_in_place();
    tokio::time::sleep(Duration::from_secs(1)).await;
    a = DelayqProcess::start(&redis, &[]);
    let window_end = first + 8_000;
    eventually(Duration::from_secs(30), "the sixth tick", || async {
        let s = seen.lock().unwrap();
        s.iter()
            .any(|(id, _)| tick_of(id) > window_end)
            .then_some(())
    })
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
        .filter(|t| *t >= first && *t <= window_end)
        .collect();
    in_window.sort();
    println!("the first five ticks of the schedule: {in_window:?}");
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

/// Puts `n` schedules named `{prefix}-{i}`, a few at a time. A put whose
/// reply did not come in time, or that reached Redis too late to run (a
/// busy machine: the ticks of the schedules already put run beside), is put
/// again: putting a schedule is idempotent.
async fn put_many(q: &Queue, prefix: &str, n: usize, def: &delayq::Recurring) {
    use futures::StreamExt;
    futures::stream::iter(0..n)
        .map(|i| {
            let (q, def) = (q.clone(), def.clone());
            let name = format!("{prefix}-{i}");
            async move { retried(&format!("schedule {name}"), || q.put_recurring(&name, &def)).await }
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
    let conn = patient_conn(&redis).await;
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

/// Whether every schedule `s-0`..`s-{n-1}` has a last tick after `t`.
async fn all_ticked_after(q: &Queue, n: usize, t: i64) -> Option<()> {
    for i in 0..n {
        let s = q.recurring(&format!("s-{i}")).await.ok().flatten()?;
        if s.last_tick_ms.is_none_or(|l| l <= t) {
            return None;
        }
    }
    Some(())
}

/// Every-second schedules `s-0`..`s-{n-1}` that skip missed ticks;
/// returns Redis time once each has ticked after the put.
async fn put_skipping(q: &Queue, redis: &RedisServer, n: usize) -> i64 {
    let def = delayq::Recurring {
        topic: "beat".into(),
        cron: "* * * * * *".into(),
        missed: delayq::Missed::Skip,
        ..delayq::Recurring::default()
    };
    // The first calls on a new Redis load the scripts, each concurrent one
    // on its own: on a busy machine over the default 2 s, and these puts
    // are not what is tested.
    let patient = Queue::connect(Config {
        dispatch: false,
        redis_timeout: Duration::from_secs(30),
        ..config(redis)
    })
    .unwrap();
    put_many(&patient, "s", n, &def).await;
    patient.close().await;
    let from = redis.time_ms().await;
    eventually(Duration::from_secs(30), "ticks pushed", || {
        all_ticked_after(q, n, from + 1000)
    })
    .await;
    from
}

/// A connection whose calls wait however long Redis holds them.
async fn patient_conn(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis
        .client()
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .unwrap()
}

/// Waits until Redis takes writes again (a write returns once a pause is
/// over), then until every schedule of `put_skipping` has ticked 3 s past
/// that, and asserts that delayq logged no missed tick and that every tick
/// from just after `from` to then has its job (pushed late, not dropped).
async fn assert_no_tick_dropped(
    redis: &RedisServer,
    q: &Queue,
    n: usize,
    from: i64,
    logs: std::sync::mpsc::Receiver<String>,
    a: DelayqProcess,
) {
    let mut conn = patient_conn(redis).await;
    let _: () = redis::cmd("SET")
        .arg("probe")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
    let up_at = redis.time_ms().await;
    eventually(Duration::from_secs(60), "ticks after the pause", || {
        all_ticked_after(q, n, up_at + 3000)
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
    let keys = delayq::testing::Keys::new(&delayq::Config::default().prefix);
    let mut pipe = redis::pipe();
    let ticks: Vec<(String, i64)> = (0..n)
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
    let from = put_skipping(&q, &redis, N).await;
    // Redis takes no write for 7 s: whatever the loop is doing then (a
    // pass, or waiting for the next), its pass lasts past the window.
    let _: () = redis.cmd(&["CLIENT", "PAUSE", "7000", "WRITE"]).await;
    assert_no_tick_dropped(&redis, &q, N, from, logs, a).await;
    q.close().await;
}

/// Watches Redis's MONITOR feed for the loop's note that follows a tick
/// call (a look noting itself after its batch) and pauses writes for
/// `pause` right then; returns once it has.
async fn pause_after_a_batch_note(redis: &RedisServer, pause: Duration) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut pauser = redis.conn().await;
    let mut stream = tokio::net::UnixStream::connect(redis.socket())
        .await
        .unwrap();
    stream.write_all(b"MONITOR\r\n").await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    let mut ticked = false;
    let watch = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let call = line.contains("\"EVALSHA\"") || line.contains("\"FCALL\"");
            if call && line.contains("\"s-") {
                ticked = true;
            } else if ticked && line.contains("\"SET\"") && line.contains("recurring_seen") {
                let _: () = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(pause.as_millis() as u64)
                    .arg("WRITE")
                    .query_async(&mut pauser)
                    .await
                    .unwrap();
                return;
            }
        }
        panic!("the MONITOR feed ended");
    };
    tokio::time::timeout(Duration::from_secs(30), watch)
        .await
        .expect("no note after a tick call in 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_of_the_look_held_up_by_redis_is_not_taken_for_an_outage() {
    const N: usize = 5;
    let redis = RedisServer::start();
    let q = consumer_queue(&redis);
    // Replies come 500 ms late: the look's closing note is sent that long
    // after the note that follows its batch of ticks, so a pause started
    // at that note holds the closing one up.
    let proxy = SlowProxy::start(&redis, Duration::from_millis(500)).await;
    let (a, logs) =
        DelayqProcess::spawn_logged(&["--redis", &proxy.url(), "--redis-timeout", "30s"]);
    let from = put_skipping(&q, &redis, N).await;
    // Held up 7 s, the closing note lands late: the loop ran all along.
    pause_after_a_batch_note(&redis, Duration::from_secs(7)).await;
    assert_no_tick_dropped(&redis, &q, N, from, logs, a).await;
    drop(proxy);
    q.close().await;
}

/// The ticks an instance logged as pushed (its recurring loop's debug
/// lines) since last read.
fn ticks_pushed(logs: &std::sync::mpsc::Receiver<String>) -> Vec<i64> {
    logs.try_iter()
        .filter(|l| l.contains("recurring tick pushed"))
        .filter_map(|l| {
            let at = l.split("tick=").nth(1)?.split_whitespace().next()?;
            at.parse().ok()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_lost_a_tick_race_takes_over_when_the_ticker_stops() {
    // Two instances, each behind a link that holds every reply 150 ms:
    // looking at the same moment, the later one reads the schedule as due
    // and sends its tick after the other's landed (a race lost nearly
    // every second, not once in a while).
    let redis = RedisServer::start();
    let pa = SlowProxy::start(&redis, Duration::from_millis(150)).await;
    let pb = SlowProxy::start(&redis, Duration::from_millis(150)).await;
    const LOG: &str = "warn,delayq::loops::recurring=debug";
    let (a, a_logs) = DelayqProcess::spawn_logged_at(&["--redis", &pa.url()], LOG);
    let (b, b_logs) = DelayqProcess::spawn_logged_at(&["--redis", &pb.url()], LOG);
    let q = consumer_queue(&redis);
    let stop = Arc::new(AtomicBool::new(false));
    let (task, seen) = consume(q.clone(), "beat", stop.clone());
    put(
        &a.base,
        "beat",
        json!({"topic": "beat", "cron": "* * * * * *"}),
    )
    .await;
    eventually(Duration::from_secs(30), "five ticks", || async {
        (seen.lock().unwrap().len() >= 5).then_some(())
    })
    .await;

    // The instance that pushed the latest tick stops, as in a rolling
    // upgrade; the other goes on ticking.
    let (a_last, b_last) = (
        ticks_pushed(&a_logs).into_iter().max(),
        ticks_pushed(&b_logs).into_iter().max(),
    );
    let (ticker, other) = if a_last >= b_last { (a, b) } else { (b, a) };
    let what = format!("latest ticks pushed: a {a_last:?}, b {b_last:?}");
    ticks_go_on_past(&redis, ticker, &seen, &what).await;
    stop.store(true, Ordering::Relaxed);
    task.await.unwrap();
    drop(other);
    q.close().await;
}

/// Stops `ticker` (SIGTERM, as a rolling upgrade does) and waits for a
/// tick 8 s later; the schedule's ticks (`seen`) paused no more than 5 s.
async fn ticks_go_on_past(redis: &RedisServer, ticker: DelayqProcess, seen: &Seen, what: &str) {
    let stopped_at = redis.time_ms().await;
    ticker.terminate();
    // Bounded past the loop's longest sleep (a minute), so that a pause
    // is measured rather than cut short.
    eventually(
        Duration::from_secs(90),
        "a tick 8 s after the ticker stopped",
        || async {
            let s = seen.lock().unwrap();
            s.iter()
                .any(|(id, _)| tick_of(id) > stopped_at + 8_000)
                .then_some(())
        },
    )
    .await;
    let mut ticks: Vec<i64> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(id, _)| tick_of(id))
        .collect();
    ticks.sort();
    let longest = ticks.windows(2).max_by_key(|w| w[1] - w[0]).unwrap();
    assert!(
        longest[1] - longest[0] <= 5_000,
        "the schedule paused {} ms between ticks {} and {} (the ticker stopped at \
         {stopped_at}; {what})",
        longest[1] - longest[0],
        longest[0],
        longest[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_build_instance_asleep_after_a_lost_tick_race_takes_over_when_this_build_stops() {
    // Built (the first time: minutes) before anything runs.
    crate::old_build::old_binary();
    // As above: each instance behind a link holding replies 150 ms, so
    // that they race for each tick. The old build sleeps up to a minute
    // after losing one (nothing left pending for it).
    let redis = RedisServer::start();
    let po = SlowProxy::start(&redis, Duration::from_millis(150)).await;
    let pn = SlowProxy::start(&redis, Duration::from_millis(150)).await;
    const LOG: &str = "warn,delayq::loops::recurring=debug";
    let (old, old_logs) = crate::old_build::start_logged(true, &po.url(), LOG);
    let (new, new_logs) = crate::old_build::start_logged(false, &pn.url(), LOG);
    let q = consumer_queue(&redis);
    let stop = Arc::new(AtomicBool::new(false));
    let (task, seen) = consume(q.clone(), "beat", stop.clone());
    put(
        &new.base,
        "beat",
        json!({"topic": "beat", "cron": "* * * * * *"}),
    )
    .await;
    // The old instance lost a race and sleeps: this build alone pushed
    // the last three ticks.
    let (mut old_last, mut new_ticks) = (None, Vec::new());
    eventually(
        Duration::from_secs(60),
        "this build alone ticking for 3 s",
        || {
            old_last = old_last.max(ticks_pushed(&old_logs).into_iter().max());
            new_ticks.extend(ticks_pushed(&new_logs));
            let alone = new_ticks.iter().filter(|&&t| Some(t) > old_last).count();
            async move { (alone >= 3).then_some(()) }
        },
    )
    .await;
    let what = format!("the old build's latest tick pushed: {old_last:?}");
    ticks_go_on_past(&redis, new, &seen, &what).await;
    stop.store(true, Ordering::Relaxed);
    task.await.unwrap();
    drop(old);
    q.close().await;
}
