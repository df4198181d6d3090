//! Calls and replies that come late: a call that reaches Redis after its
//! timeout changes nothing, a pop reply read after its lease ended is
//! not handed over, and the Redis clock gets its readings however far
//! away Redis is.

use std::time::Duration;

use crate::common::*;
use delayq::{Config, JobState, NewJob, Queue};

/// Waits until Redis answers this queue again (after a pause).
async fn answering(q: &Queue) {
    eventually(Duration::from_secs(30), "redis to answer", || async {
        q.topics().await.ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_reach_a_paused_redis_after_their_timeout_change_nothing() {
    let redis = RedisServer::start();
    // The queue under test gives up after 0.5 s; the set-up and the checks
    // go through one that waits 10 s, so that only the calls under test
    // are held to 0.5 s on a busy machine.
    let q = Queue::connect(Config {
        redis_timeout: Duration::from_millis(500),
        ..config(&redis)
    })
    .unwrap();
    let patient = Queue::connect(Config {
        redis_timeout: Duration::from_secs(10),
        ..config(&redis)
    })
    .unwrap();
    // Pushes through the queue under test: it has connected, read Redis's
    // clock and the eviction policy, so the calls below are sent at once.
    for i in 0..10 {
        let p = NewJob {
            retry: one_attempt(),
            ..job(&format!("p{i}"), "paused", 0, 60_000)
        };
        retried("a push", || q.push(&p)).await;
    }
    eventually(Duration::from_secs(20), "all ten ready", || async {
        let o = patient.topics().await.ok()?;
        (o.topics.get("paused")?.ready == 10).then_some(())
    })
    .await;

    // Redis stops serving clients for 5 s; delayq gives up after 0.5 s, so
    // both calls below reach Redis past their deadlines however slowly
    // this machine sends them.
    arm_slowlog(&redis, 100_000).await;
    let _: String = redis.cmd(&["CLIENT", "PAUSE", "5000", "ALL"]).await;
    let e = q.try_pop(&topics(&["paused"]), 10).await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    // A producer told "unavailable" pushes again, with a new generated id.
    let e = q
        .push(&job("generated-1", "paused", 0, 60_000))
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    answering(&patient).await;
    // Both calls reached Redis (and ran, after the pause).
    eventually(Duration::from_secs(30), "both calls run", || async {
        (script_calls(&redis, "dq_pop").await >= 1 && script_calls(&redis, "dq_push").await >= 1)
            .then_some(())
    })
    .await;

    // The pop that Redis ran late leased nothing: it left no entry among
    // the latest pops (a pop that leases writes one, in the same script),
    // so nothing was stranded, nor given back by this process when the
    // late reply came; no attempt was spent. The push that was refused
    // wrote nothing.
    let pops: usize = redis.cmd(&["LLEN", "{dq}:pops"]).await;
    assert_eq!(pops, 0, "the late pop leased jobs");
    let o = patient.topics().await.unwrap();
    let c = o.topics["paused"];
    assert_eq!((c.ready, c.reserved, c.dead), (10, 0, 0), "{c:?}");
    for i in 0..10 {
        let j = patient.get(&format!("p{i}")).await.unwrap().unwrap();
        assert_eq!((j.state, j.attempts), (JobState::Ready, 0));
    }
    assert!(patient.get("generated-1").await.unwrap().is_none());
    // And every job is delivered now, first time.
    let got = patient.try_pop(&topics(&["paused"]), 10).await.unwrap();
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|d| d.attempts == 1));
    patient.close().await;
    q.close().await;
}

/// The whole process stalls (as under SIGSTOP or a long GC-like pause of
/// the host) between Redis running a pop and the reply being read: here the
/// one runtime thread is blocked until the lease has ended.
#[tokio::test(flavor = "current_thread")]
async fn a_pop_reply_read_after_its_lease_ended_is_not_handed_over() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let mut sync = redis.client().get_connection().unwrap();
    let hget = |c: &mut redis::Connection, field: &str| -> Option<String> {
        redis::cmd("HGET")
            .arg("{dq}:j:stalled")
            .arg(field)
            .query(c)
            .unwrap()
    };
    for attempt in 0..20 {
        q.push(&job("stalled", "stall", 0, 300)).await.unwrap();
        eventually(Duration::from_secs(30), "ready", || async {
            let j = q.get("stalled").await.ok()??;
            (j.state == JobState::Ready).then_some(())
        })
        .await;
        let popper = q.clone();
        let pop = tokio::spawn(async move {
            popper
                .pop(&topics(&["stall"]), Duration::from_secs(60))
                .await
        });
        // Let the pop reach Redis...
        while hget(&mut sync, "s").as_deref() != Some("reserved") {
            tokio::task::yield_now().await;
        }
        if pop.is_finished() {
            // The reply was read before the stall began: try again.
            let d = pop.await.unwrap().unwrap().unwrap();
            q.finish(&d.id, &d.token).await.unwrap();
            continue;
        }
        // ...then stall until its lease has ended (Redis clock) by more
        // than the process's estimate of Redis time may lag behind (the
        // round trip of the reply it was read from: at most 100 ms; on a
        // busy machine it is near that).
        let stale_token = hget(&mut sync, "k").unwrap();
        let lease_end: i64 = hget(&mut sync, "l").unwrap().parse().unwrap();
        loop {
            let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut sync).unwrap();
            if s * 1000 + us / 1000 > lease_end + 250 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let d = pop.await.unwrap().unwrap().expect("delivered afresh");
        assert_ne!(
            d.token, stale_token,
            "attempt {attempt}: the stale lease was handed over"
        );
        assert!(d.lease_until_ms > lease_end);
        q.finish(&d.id, &d.token).await.unwrap();
        q.close().await;
        return;
    }
    panic!("the pop's reply was always read before the stall could begin");
}

/// `try_pop` keeps the promise `pop` keeps: a reply that arrives after the
/// lease it carries has ended is not handed over (the job goes back, and a
/// later pop gets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_pop_reply_read_after_its_lease_ended_is_not_handed_over() {
    let redis = RedisServer::start();
    let proxy = SlowProxy::start(&redis, Duration::from_millis(0)).await;
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(format!("redis://127.0.0.1:{}/", proxy.port)),
        redis_timeout: Duration::from_secs(5),
        ..Config::default()
    })
    .unwrap();
    let late = topics(&["late"]);
    q.push(&job("late-1", "late", 0, 300)).await.unwrap();
    eventually(Duration::from_secs(30), "the job to be ready", || async {
        let o = q.topics().await.ok()?;
        (o.topics.get("late")?.ready == 1).then_some(())
    })
    .await;
    // The reply comes 1.5 s after the pop: its 300 ms lease has ended.
    proxy.set_delay(Duration::from_millis(1500));
    let got = q.try_pop(&late, 1).await.unwrap();
    proxy.set_delay(Duration::from_millis(0));
    if let Some(d) = got.first() {
        panic!(
            "a lease that ended {} ms before its reply arrived was handed over",
            redis.time_ms().await - d.lease_until_ms
        );
    }
    let d = eventually(Duration::from_secs(60), "the job again", || async {
        q.pop(&late, Duration::from_secs(1)).await.ok().flatten()
    })
    .await;
    assert_eq!(d.id, "late-1");
    q.finish(&d.id, &d.token).await.unwrap();
    q.close().await;
}

/// What `redis-cli monitor` sees, line by line; killed on drop.
struct Monitor {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Monitor {
    fn start(redis: &RedisServer) -> Monitor {
        use std::io::BufRead;
        let mut child = std::process::Command::new("redis-cli")
            .arg("-s")
            .arg(redis.socket())
            .arg("monitor")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let m = Monitor { child, lines };
        m.next_with("OK");
        m
    }

    fn next_with(&self, text: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("monitor: no line with {text:?}"));
            if line.contains(text) {
                return line;
            }
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Monitor {
    /// Every line up to and including the next one with `text`.
    fn lines_until(&self, text: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("monitor: no line with {text:?}"));
            let found = line.contains(text);
            seen.push(line);
            if found {
                return seen;
            }
        }
    }
}

/// The first script call of a fresh process carries a deadline too: the
/// clock is read before it, not after it was sent without one.
#[tokio::test(flavor = "multi_thread")]
async fn the_first_script_call_carries_a_deadline() {
    let redis = RedisServer::start();
    let monitor = Monitor::start(&redis);
    let q = Queue::connect(Config {
        dispatch: false,
        ..config(&redis)
    })
    .unwrap();
    q.push(&job("first", "t", 60_000, 30_000)).await.unwrap();
    let line = monitor.next_with(&script_call_of(&redis, "push").await);
    // "FCALL" "dq_push_<v>" "1" "{dq}:schedule" "{dq}:" ... "<deadline>" "<events>"
    // (or "EVALSHA" "<the push script's sha>" ...)
    let args: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
    let deadline: i64 = args[args.len() - 2].parse().unwrap();
    assert!(
        deadline > 0,
        "the first call went without a deadline: {line}"
    );
}

/// What a MONITOR line of a call of transition `name` holds: its function's
/// name, or on a server without FUNCTION its script's SHA1.
async fn script_call_of(redis: &RedisServer, name: &str) -> String {
    if has_functions(redis).await {
        format!("\"dq_{name}_")
    } else {
        format!("\"{}\"", delayq::testing::eval_script_of(name).unwrap().0)
    }
}

/// With Redis far away (every reply 150 ms late) the clock still gets its
/// readings: script calls carry a deadline without a TIME before each,
/// schedules list, jobs push, pop and finish, and a pop reply that arrives
/// after its lease ended is not handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_away_redis_still_gives_the_clock_its_readings() {
    let redis = RedisServer::start();
    let proxy = SlowProxy::start(&redis, Duration::from_millis(150)).await;
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(format!("redis://127.0.0.1:{}/", proxy.port)),
        redis_timeout: Duration::from_secs(5),
        ..Config::default()
    })
    .unwrap();
    let mut problems = Vec::new();

    // The first calls (a push, the sweep's first look, each on its own
    // connection) may each read the clock, and under load a reading sent
    // first can run after another's script call: so counting starts once
    // the first push has its reply, when the clock has its reading.
    q.push(&job("far0", "far", 0, 60_000)).await.unwrap();
    let monitor = Monitor::start(&redis);
    for i in 1..5 {
        q.push(&job(&format!("far{i}"), "far", 0, 60_000))
            .await
            .unwrap();
    }
    let seen = monitor.lines_until("\"far4\"");
    drop(monitor);
    let times = seen
        .iter()
        .filter(|l| l.contains("\"TIME\"") && !l.contains(" lua]"))
        .count();
    if times > 0 {
        problems.push(format!("{times} TIME calls between 4 pushes"));
    }
    let push = script_call_of(&redis, "push").await;
    for line in seen.iter().filter(|l| l.contains(&push)) {
        // The deadline is the last argument but one (the events setting).
        let args: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        if args[args.len() - 2].parse::<i64>().unwrap() <= 0 {
            problems.push(format!("a push went without a deadline: {line}"));
        }
    }

    if let Err(e) = q.list_recurring().await {
        problems.push(format!("list_recurring: {e}"));
    }

    let far = topics(&["far"]);
    for _ in 0..5 {
        let d = q
            .pop(&far, Duration::from_secs(10))
            .await
            .unwrap()
            .expect("a ready job");
        q.finish(&d.id, &d.token).await.unwrap();
    }

    // A pop whose reply comes 1.5 s late, for a lease of 300 ms.
    q.push(&job("stale", "far", 0, 300)).await.unwrap();
    eventually(Duration::from_secs(30), "the job to be ready", || async {
        let o = q.topics().await.ok()?;
        (o.topics.get("far")?.ready == 1).then_some(())
    })
    .await;
    proxy.set_delay(Duration::from_millis(1500));
    match q.pop(&far, Duration::ZERO).await {
        Ok(None) => {}
        Ok(Some(d)) => problems.push(format!(
            "a lease that ended {} ms before its reply arrived was handed over",
            redis.time_ms().await - d.lease_until_ms
        )),
        Err(e) => problems.push(format!("the late pop: {e}")),
    }
    proxy.set_delay(Duration::from_millis(150));
    // The job is not lost: a later pop gets it and can finish it.
    let d = eventually(Duration::from_secs(60), "the stale job again", || async {
        q.pop(&far, Duration::from_secs(1)).await.ok().flatten()
    })
    .await;
    assert_eq!(d.id, "stale");
    let _ = q.finish(&d.id, &d.token).await;

    assert!(problems.is_empty(), "{problems:#?}");
    q.close().await;
}
