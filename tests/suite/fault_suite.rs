//! The fault suite: jobs flow through two delayq processes and the library
//! while faults are caused for real, and a ledger of every push and every
//! hand-over is checked afterwards against delayq's promises:
//!
//! - every acknowledged push is handed out at least once (with AOF
//!   `everysec`, only pushes acknowledged in the last second before a Redis
//!   crash may be lost, and they are counted);
//! - no job is handed out before its due time (Redis clock);
//! - no job is leased to two consumers at the same time;
//! - a finished job is never handed out again;
//! - exactly the jobs that used up their retry schedule are dead.
//!
//! Each scenario prints its figures: jobs, faults, lost, duplicates, early,
//! max lateness.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use delayq::{Config, Delivery, JobState, NewJob, Queue, RetryPolicy};
use serde_json::json;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    KillDelayq,
    KillRedisAlways,
    KillRedisEverysec,
    ClientKill,
    ClientPause,
    MaxMemory,
}

/// What a consumer does with a job, by its number.
fn behaviour(n: usize) -> &'static str {
    match n % 10 {
        1 => "let-lease-expire-once",
        2 => "nack-once",
        3 => "always-fail",
        _ => "finish",
    }
}

#[derive(Debug, Clone)]
struct Handover {
    token: String,
    popped_at_us: i64,
    lease_until_ms: i64,
    /// Redis time just before its holder sent finish or nack (the lease
    /// cannot end earlier), and whether that was a finish.
    settled: Option<(i64, bool)>,
}

#[derive(Default, Debug)]
struct Record {
    /// Lowest possible due time (Redis ms): push start + delay.
    due_floor_ms: i64,
    acked_at: Option<Instant>,
    deliveries: Vec<Handover>,
}

impl Record {
    fn finished(&self) -> bool {
        self.deliveries
            .iter()
            .any(|h| h.settled.is_some_and(|(_, fin)| fin))
    }
}

#[derive(Default)]
pub(crate) struct Ledger {
    jobs: Mutex<HashMap<String, Record>>,
}

impl Ledger {
    fn delivered(&self, d: &Delivery) -> usize {
        let mut jobs = self.jobs.lock().unwrap();
        let r = jobs.entry(d.id.clone()).or_default();
        r.deliveries.push(Handover {
            token: d.token.clone(),
            popped_at_us: d.popped_at_us,
            lease_until_ms: d.lease_until_ms,
            settled: None,
        });
        r.deliveries.len()
    }
    fn settled(&self, id: &str, token: &str, at_ms: i64, finished: bool) {
        let mut jobs = self.jobs.lock().unwrap();
        let r = jobs.get_mut(id).unwrap();
        if let Some(h) = r.deliveries.iter_mut().find(|h| h.token == token) {
            h.settled = Some((at_ms, finished));
        }
    }
}

fn number(id: &str) -> usize {
    id.rsplit('-').next().unwrap().parse().unwrap()
}

async fn redis_ms(
    conn: &mut Option<redis::aio::MultiplexedConnection>,
    client: &redis::Client,
) -> Option<i64> {
    if conn.is_none() {
        *conn = client.get_multiplexed_async_connection().await.ok();
    }
    match redis::cmd("TIME")
        .query_async::<(i64, i64)>(conn.as_mut()?)
        .await
    {
        Ok((s, us)) => Some(s * 1000 + us / 1000),
        Err(_) => {
            // Connect afresh next time (Redis may have restarted).
            *conn = None;
            None
        }
    }
}

/// One consumer loop on the library.
pub(crate) async fn consume(
    q: Queue,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
    redis: redis::Client,
) {
    let topics = vec!["fs".to_string()];
    let mut conn = None;
    while !stop.load(Ordering::Relaxed) {
        let d = match q.pop(&topics, Duration::from_millis(300)).await {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let nth = ledger.delivered(&d);
        let what = behaviour(number(&d.id));
        let fail = what == "always-fail" || (what == "nack-once" && nth == 1);
        if what == "let-lease-expire-once" && nth == 1 {
            continue;
        }
        // Without a clock reading the settlement could not be checked:
        // leave the job to its lease instead.
        let Some(before) = redis_ms(&mut conn, &redis).await else {
            continue;
        };
        let result = if fail {
            q.nack(&d.id, &d.token, None, "consumer failed")
                .await
                .map(|_| false)
        } else {
            q.finish(&d.id, &d.token).await.map(|_| true)
        };
        match result {
            Ok(finished) => ledger.settled(&d.id, &d.token, before, finished),
            // A refusal changed nothing.
            Err(
                delayq::Error::StaleLease(_)
                | delayq::Error::NotFound(_)
                | delayq::Error::Invalid(_),
            ) => {}
            // A call without an answer (a timeout, a connection killed
            // under it) may still have been applied: record it as given
            // back (the lease check then allows an early re-delivery).
            Err(_) => ledger.settled(&d.id, &d.token, before, false),
        }
    }
}

/// How long the producer may take to get its pushes acknowledged once the
/// faults are over: far more than a busy machine needs.
const PRODUCE_LIMIT: Duration = Duration::from_secs(300);

/// Pushes jobs, about 100 a second, half through the compatible HTTP API of
/// the delayq processes at `bases`, half through the library, until the
/// faults are over (`faults_over`) and at least `want` pushes were
/// acknowledged (a busy machine gets fewer through each fault, so it pushes
/// for longer), and books each acknowledged push with the lowest due time
/// it may have (the clock is `client`'s Redis TIME).
pub(crate) fn produce(
    q: Queue,
    ledger: Arc<Ledger>,
    bases: Vec<String>,
    client: redis::Client,
    want: usize,
    faults_over: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let mut acked_count = 0;
        let mut over_at = None;
        for i in 0.. {
            if faults_over.load(Ordering::Relaxed) {
                let over = *over_at.get_or_insert_with(Instant::now);
                if acked_count >= want || over.elapsed() > PRODUCE_LIMIT {
                    break;
                }
            }
            let id = format!("fs-{i}");
            let delay_ms = 500 + (i as u64 * 7919) % 2500;
            let before = match tokio::time::timeout(
                Duration::from_secs(1),
                client.get_multiplexed_async_connection(),
            )
            .await
            .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "timeout"))))
            {
                Ok(mut c) => redis::cmd("TIME")
                    .query_async::<(i64, i64)>(&mut c)
                    .await
                    .ok(),
                Err(_) => None,
            };
            let Some((s, us)) = before else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let acked = if i % 2 == 0 {
                // Compatible push: whole seconds.
                let body = json!({"topic":"fs","id":id,"delay": delay_ms.div_ceil(1000),"ttr":1})
                    .to_string();
                let base = &bases[i % bases.len()];
                match http.post(format!("{base}/push")).body(body).send().await {
                    Ok(r) => r
                        .json::<serde_json::Value>()
                        .await
                        .map(|v| v["code"] == 0)
                        .unwrap_or(false),
                    Err(_) => false,
                }
            } else {
                let retry = (behaviour(i) == "always-fail").then(|| RetryPolicy {
                    intervals: vec![],
                    max_attempts: Some(2),
                });
                q.push(&NewJob {
                    id: id.clone(),
                    topic: "fs".into(),
                    delay: Duration::from_millis(delay_ms),
                    ttr: Duration::from_secs(1),
                    retry,
                    ..NewJob::default()
                })
                .await
                .is_ok()
            };
            let delay_floor = if i % 2 == 0 {
                delay_ms.div_ceil(1000) * 1000
            } else {
                delay_ms
            } as i64;
            if acked {
                acked_count += 1;
                let mut jobs = ledger.jobs.lock().unwrap();
                let r = jobs.entry(id).or_default();
                r.due_floor_ms = s * 1000 + us / 1000 + delay_floor;
                r.acked_at = Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
}

pub(crate) struct Figures {
    pub jobs: usize,
    pub faults: usize,
    pub lost: usize,
    pub lost_allowed: usize,
    pub duplicates: usize,
    pub early: usize,
    pub max_late_ms: f64,
}

async fn scenario(faults: &[Fault]) -> Figures {
    let everysec = faults.contains(&Fault::KillRedisEverysec);
    let mut redis = RedisServer::start_with(if everysec {
        &["--appendfsync", "everysec"]
    } else {
        &[]
    });
    let args = ["--pop-timeout", "1s", "--redis-timeout", "500ms"];
    let mut delayqs = vec![
        DelayqProcess::start(&redis, &args),
        DelayqProcess::start(&redis, &args),
    ];
    // The test's own queue pushes and pops but does not dispatch: the
    // delayq processes do that.
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(redis.url()),
        dispatch: false,
        redis_timeout: Duration::from_millis(500),
        ..Config::default()
    })
    .unwrap();
    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(consume(
                q.clone(),
                ledger.clone(),
                stop.clone(),
                redis.client(),
            ))
        })
        .collect();

    // Producers: jobs until the faults are over and WANT were
    // acknowledged, half over HTTP, half through the library; the faults
    // strike meanwhile.
    let bases: Vec<String> = delayqs.iter().map(|d| d.base.clone()).collect();
    let faults_over = Arc::new(AtomicBool::new(false));
    let producer = produce(
        q.clone(),
        ledger.clone(),
        bases,
        redis.client(),
        WANT,
        faults_over.clone(),
    );

    let mut injected = 0;
    let mut crash_at = None;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for fault in faults {
        match fault {
            Fault::KillDelayq => {
                let victim = delayqs.remove(0);
                victim.kill9();
                tokio::time::sleep(Duration::from_millis(500)).await;
                delayqs.push(DelayqProcess::start(&redis, &args));
            }
            Fault::KillRedisAlways | Fault::KillRedisEverysec => {
                let killed = Instant::now();
                redis.kill();
                tokio::time::sleep(Duration::from_millis(1500)).await;
                // An acknowledgement that reaches the producer before the
                // restart was written before the kill, whenever it arrives.
                crash_at = Some((killed, Instant::now()));
                redis.restart();
            }
            Fault::ClientKill => {
                for kind in ["pubsub", "normal"] {
                    let _: redis::RedisResult<i64> = redis::cmd("CLIENT")
                        .arg(&["KILL", "TYPE", kind, "SKIPME", "yes"])
                        .query_async(&mut redis.conn().await)
                        .await;
                }
            }
            Fault::ClientPause => {
                let _: String = redis.cmd(&["CLIENT", "PAUSE", "2000", "ALL"]).await;
                tokio::time::sleep(Duration::from_millis(2200)).await;
            }
            Fault::MaxMemory => {
                // Below what is in use: with noeviction every write is refused.
                let _: String = redis.cmd(&["CONFIG", "SET", "maxmemory", "1"]).await;
                // A push now is refused with a clear error and writes
                // nothing (one that timed out, on a busy machine, is tried
                // again: the same id, so a second push is safe whatever
                // the first did).
                let mut tries = 0;
                let err = loop {
                    let err = q
                        .push(&job("oom-probe", "fs-probe", 0, 1000))
                        .await
                        .unwrap_err();
                    tries += 1;
                    match err {
                        delayq::Error::Timeout { .. }
                        | delayq::Error::Unknown { .. }
                        | delayq::Error::Late { .. }
                            if tries < 20 => {}
                        err => break err,
                    }
                };
                assert!(err.to_string().contains("OOM"), "{err}");
                let exists: i64 = redis.cmd(&["EXISTS", "{dq}:j:oom-probe"]).await;
                assert_eq!(exists, 0, "a refused push left a job behind");
                tokio::time::sleep(Duration::from_millis(1000)).await;
                let _: String = redis.cmd(&["CONFIG", "SET", "maxmemory", "0"]).await;
            }
        }
        injected += 1;
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    faults_over.store(true, Ordering::Relaxed);
    producer.await.unwrap();

    let mut f = judge(&q, &ledger, &stop, consumers, everysec, crash_at).await;
    f.faults = injected;
    q.close().await;
    f
}

/// Waits until no job is in flight, stops the consumers, and reads the
/// ledger's verdict (the figures, faults left at 0 for the caller).
pub(crate) async fn judge(
    q: &Queue,
    ledger: &Ledger,
    stop: &AtomicBool,
    consumers: Vec<tokio::task::JoinHandle<()>>,
    everysec: bool,
    crash_at: Option<(Instant, Instant)>,
) -> Figures {
    // Wait until nothing is left in flight: no job delayed, leased (both
    // in the schedule) or ready. Whatever the ledger still misses then is
    // lost, or was finished by a call whose reply a fault cut off.
    // The bound is far beyond the few seconds this takes on an idle
    // machine (the last due times and leases end within 5 s of the last
    // push); a job still in flight after it is reported, and counted below.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let left = match q.topics().await {
            Ok(o) => o
                .topics
                .get("fs")
                .map_or(0, |c| c.delayed + c.ready + c.reserved),
            Err(_) => 1,
        };
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("{left} jobs still in flight after 180 s");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in consumers {
        let _ = c.await;
    }

    // The ledger's verdict.
    let jobs = std::mem::take(&mut *ledger.jobs.lock().unwrap());
    // Every hand-over has a token of its own, also across Redis restarts
    // and failovers.
    let mut tokens = std::collections::HashSet::new();
    for h in jobs.values().flat_map(|r| &r.deliveries) {
        assert!(
            tokens.insert(h.token.clone()),
            "lease token {} handed out twice",
            h.token
        );
    }
    // A finish whose reply was lost (connection killed mid-call) leaves no
    // job in Redis: that job was finished.
    let mut gone = std::collections::HashSet::new();
    for id in jobs.keys() {
        if retried("a ledger read", || q.get(id)).await.is_none() {
            gone.insert(id.clone());
        }
    }
    let mut f = Figures {
        jobs: 0,
        faults: 0,
        lost: 0,
        lost_allowed: 0,
        duplicates: 0,
        early: 0,
        max_late_ms: 0.0,
    };
    for (id, r) in jobs.iter() {
        let Some(acked_at) = r.acked_at else { continue };
        f.jobs += 1;
        let what = behaviour(number(id));
        if r.deliveries.is_empty() {
            // Written at most a second (and a little) before the kill, and
            // acknowledged before the restart (a reply can still be on its
            // way when Redis dies).
            let in_crash_window = everysec
                && crash_at.is_some_and(|(killed, restarted)| {
                    acked_at <= restarted
                        && killed.saturating_duration_since(acked_at) <= Duration::from_millis(1500)
                });
            if in_crash_window {
                f.lost_allowed += 1;
            } else {
                f.lost += 1;
                eprintln!("LOST {id}: {r:?}");
            }
            continue;
        }
        let mut hs = r.deliveries.clone();
        hs.sort_by_key(|h| h.popped_at_us);
        let first = hs[0].popped_at_us;
        if first < r.due_floor_ms * 1000 {
            f.early += 1;
            eprintln!("EARLY {id}: {r:?}");
        }
        f.max_late_ms = f
            .max_late_ms
            .max((first - r.due_floor_ms * 1000) as f64 / 1000.0);
        for w in hs.windows(2) {
            // The next hand-over comes after the previous lease ended, or
            // after its holder gave it back.
            let free_from_ms = w[0]
                .settled
                .map_or(w[0].lease_until_ms, |(at, _)| at.min(w[0].lease_until_ms));
            if w[1].popped_at_us < free_from_ms * 1000 {
                f.duplicates += 1;
                eprintln!("OVERLAP {id}: {r:?}");
            }
        }
        if let Some(done) = hs
            .iter()
            .position(|h| h.settled.is_some_and(|(_, fin)| fin))
        {
            if done + 1 < hs.len() {
                f.duplicates += 1;
                eprintln!("AFTER FINISH {id}: {r:?}");
            }
        }
        if !r.finished() && what != "always-fail" && !gone.contains(id) {
            eprintln!("UNSETTLED {id}: {r:?}");
            f.lost += 1;
        }
    }
    // Dead exactly those that used up their schedule (library pushes of
    // "always-fail" jobs; compatible ones retry for ever, as the original).
    let mut dead: Vec<String> = Vec::new();
    for id in jobs.keys().cloned() {
        if let Ok(Some(j)) = q.get(&id).await {
            if j.state == JobState::Dead {
                dead.push(id);
            }
        }
    }
    for id in &dead {
        let n = number(id);
        assert!(
            behaviour(n) == "always-fail" && n % 2 == 1,
            "{id} is dead but should not be"
        );
    }
    f
}

/// Acknowledged pushes each scenario waits for (so that a busy machine
/// checks as many jobs as an idle one).
pub(crate) const WANT: usize = 300;

async fn run(name: &str, faults: &[Fault]) {
    let f = scenario(faults).await;
    println!(
        "fault suite [{name}]: jobs {}, faults {}, lost {} (+{} inside the everysec window), duplicates {}, early {}, max lateness {:.1} ms",
        f.jobs, f.faults, f.lost, f.lost_allowed, f.duplicates, f.early, f.max_late_ms
    );
    // Pushes to a killed instance or a down Redis fail (and are not
    // counted); once the faults are over, pushes get through again.
    assert!(
        f.jobs >= WANT,
        "only {} pushes were acknowledged within {PRODUCE_LIMIT:?} after the faults",
        f.jobs
    );
    assert_eq!(
        (f.lost, f.duplicates, f.early),
        (0, 0, 0),
        "[{name}] promises broken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_one_of_two_delayq_instances() {
    run("SIGKILL delayq", &[Fault::KillDelayq, Fault::KillDelayq]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_redis_with_appendfsync_always() {
    run("SIGKILL redis, always", &[Fault::KillRedisAlways]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_redis_with_appendfsync_everysec() {
    run("SIGKILL redis, everysec", &[Fault::KillRedisEverysec]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_subscriber_and_command_connections() {
    run(
        "CLIENT KILL",
        &[Fault::ClientKill, Fault::ClientKill, Fault::ClientKill],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_redis() {
    run("CLIENT PAUSE", &[Fault::ClientPause]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reach_maxmemory() {
    run("maxmemory", &[Fault::MaxMemory]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_faults_mixed() {
    run(
        "mixed",
        &[
            Fault::ClientKill,
            Fault::KillDelayq,
            Fault::MaxMemory,
            Fault::ClientPause,
            Fault::KillRedisAlways,
            Fault::ClientKill,
        ],
    )
    .await;
}
