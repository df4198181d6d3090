//! Lateness over HTTP (issue 29, goal 7): jobs pushed paced over a few
//! seconds, each due 1 s after its push, taken by 32 long-polling
//! consumers of a `delayq serve` process that finish each one, through the
//! compatible API (`/push`, `/pop`, `/finish`) and the native one
//! (`/v1/jobs`, `/v1/pop`, `/v1/jobs/{id}/finish`), each on a fresh
//! redis-server (`redis-conf/redis.conf`) with AOF `appendfsync always`
//! and with no persistence.
//!
//! Lateness is the consumer's receipt (the pop's reply read and parsed)
//! minus the job's due time, both on this host's realtime clock: Redis
//! stamps the due time from its TIME (gettimeofday) and the consumer reads
//! `SystemTime` (one machine, loopback). The due time is read from the
//! schedule in Redis right after its push (the compatible pop's reply has
//! none).
//!
//! Then one traced run per API and persistence, with Redis's MONITOR feed
//! and a SLOWLOG of every call, says where each job's time went: due ->
//! the dispatch call that moved it (sweep timer or expired event) -> the
//! pop call that took it (dispatch script, its fsync, the local wake-up or
//! ready notice, the consumer's wake-up) -> the consumer's receipt (pop
//! script, its fsync, the HTTP reply). MONITOR stamps each call as Redis
//! starts it; the SLOWLOG gives each script's run time; fsync is what AOF
//! always adds over no persistence. The traced runs' own lateness is shown
//! apart (MONITOR costs Redis a little per command). Last, how late tokio's
//! timer (the sweep's) and a thread's sleep wake for a deadline 1-2 ms
//! ahead, on this machine now.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::burst::{http_client, serve};
use crate::common::{id, median, percentile, redis_sync, Persist};
use crate::Redis;

mod trace;

use trace::{breakdown, slowlog, Monitor, Trace};

const TOPIC: &str = "t";
const CONSUMERS: usize = 32;
/// Each job is due this long after its push (the compatible API's delay is
/// in whole seconds).
const DELAY_S: u64 = 1;

/// How big a run is.
#[derive(Clone, Copy)]
pub(crate) struct Flow {
    pub(crate) jobs: usize,
    pub(crate) spread_ms: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Api {
    Compat,
    V1,
}

impl Api {
    fn label(self) -> &'static str {
        match self {
            Api::Compat => "compatible /pop",
            Api::V1 => "native /v1/pop",
        }
    }
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1000.0
}

/// What one run saw, per job id.
#[derive(Default)]
struct Seen {
    /// Due time, Unix ms (Redis's stamp).
    due: HashMap<String, i64>,
    /// Receipt, Unix ms (this host's realtime clock).
    got: HashMap<String, f64>,
    /// When the push request was sent, Unix ms.
    sent: HashMap<String, f64>,
    twice: usize,
}

/// One run's samples, ms, sorted.
struct Samples {
    /// Receipt minus due.
    late: Vec<f64>,
    /// Due minus (push sent + the delay): how much later than a client's
    /// own reckoning Redis stamped the due time.
    stamp_lag: Vec<f64>,
}

/// One run: its samples, and the trace when `traced`.
async fn run_once(api: Api, persist: Persist, flow: Flow, traced: bool) -> (Samples, Trace) {
    let redis = Redis::start_tcp(persist.redis_args());
    let http = http_client();
    let server = serve(&redis, &[], &http).await;
    let base = server.base.clone();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        let (http, base, seen) = (http.clone(), base.clone(), seen.clone());
        consumers.push(tokio::spawn(async move {
            loop {
                let Some((id, token)) = pop(api, &http, &base).await else {
                    continue;
                };
                {
                    let mut s = seen.lock().unwrap();
                    if s.got.insert(id.clone(), now_ms()).is_some() {
                        s.twice += 1;
                    }
                }
                finish(api, &http, &base, &id, &token).await;
            }
        }));
    }
    // Every consumer waits before the first push.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // An HTTP round trip that does not touch Redis: the floor under every
    // pop's reply.
    let mut rtt = Vec::new();
    if traced {
        for _ in 0..300 {
            let t = Instant::now();
            let r = http.get(format!("{base}/healthz")).send().await.unwrap();
            r.bytes().await.unwrap();
            rtt.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        rtt.sort_by(|a, b| a.partial_cmp(b).unwrap());
    }
    let monitor = traced.then(|| Monitor::start(&redis));
    if traced {
        redis_sync(&redis, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
        redis_sync(&redis, &["CONFIG", "SET", "slowlog-max-len", "1000000"]);
        redis_sync(&redis, &["SLOWLOG", "RESET"]);
    }
    let redis_client = redis.client();
    let step = Duration::from_micros(flow.spread_ms * 1000 / flow.jobs as u64);
    let t0 = tokio::time::Instant::now();
    let mut pushes = Vec::with_capacity(flow.jobs);
    for i in 0..flow.jobs {
        tokio::time::sleep_until(t0 + step * i as u32).await;
        let (http, base, seen, client) = (
            http.clone(),
            base.clone(),
            seen.clone(),
            redis_client.clone(),
        );
        pushes.push(tokio::spawn(async move {
            let job = id("http", i);
            let sent = now_ms();
            push(api, &http, &base, &job).await;
            let mut c = client.get_multiplexed_async_connection().await.unwrap();
            // The schedule's score is the due time.
            let due: i64 = redis::cmd("ZSCORE")
                .arg("{dq}:schedule")
                .arg(&job)
                .query_async(&mut c)
                .await
                .unwrap();
            let mut s = seen.lock().unwrap();
            s.sent.insert(job.clone(), sent);
            s.due.insert(job, due);
        }));
    }
    for p in pushes {
        p.await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().got.len() < flow.jobs {
        assert!(
            Instant::now() < deadline,
            "http-lateness: not every job was received"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The last finishes land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let trace = match monitor {
        Some(m) => Trace {
            monitor: m.stop(),
            slowlog: slowlog(&redis),
            ..Trace::default()
        },
        None => Trace::default(),
    };
    for c in consumers {
        c.abort();
    }
    drop(server);
    let s = seen.lock().unwrap();
    assert_eq!(s.twice, 0, "http-lateness: a job was received twice");
    let mut late: Vec<f64> = s
        .got
        .iter()
        .map(|(id, at)| at - *s.due.get(id).expect("a due time for every job") as f64)
        .collect();
    late.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mut stamp_lag: Vec<f64> = s
        .due
        .iter()
        .map(|(id, due)| *due as f64 - (s.sent[id] + DELAY_S as f64 * 1000.0))
        .collect();
    stamp_lag.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let trace = Trace {
        due: s.due.clone(),
        got: s.got.clone(),
        rtt,
        ..trace
    };
    (Samples { late, stamp_lag }, trace)
}

async fn push(api: Api, http: &reqwest::Client, base: &str, id: &str) {
    let body = "b".repeat(64);
    let (url, req) = match api {
        Api::Compat => (
            format!("{base}/push"),
            json!({"id": id, "topic": TOPIC, "body": body, "delay": DELAY_S, "ttr": 60}),
        ),
        Api::V1 => (
            format!("{base}/v1/jobs"),
            json!({"id": id, "topic": TOPIC, "body": body, "delay_ms": DELAY_S * 1000, "ttr_ms": 60_000}),
        ),
    };
    let r: Value = http
        .post(url)
        .json(&req)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    if api == Api::Compat {
        assert_eq!(r["code"], 0, "/push: {r}");
    } else {
        assert_eq!(r["id"], id, "/v1/jobs: {r}");
    }
}

/// One long-poll; the job's id and lease token (none for the compatible
/// API) if one came.
async fn pop(api: Api, http: &reqwest::Client, base: &str) -> Option<(String, String)> {
    let (url, req) = match api {
        Api::Compat => (format!("{base}/pop"), json!({"topic": TOPIC})),
        Api::V1 => (
            format!("{base}/v1/pop"),
            json!({"topics": [TOPIC], "max": 1, "wait_ms": 10_000}),
        ),
    };
    let r: Value = http
        .post(url)
        .json(&req)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    match api {
        Api::Compat => {
            let d = r["data"].as_object()?;
            Some((d["id"].as_str()?.to_owned(), String::new()))
        }
        Api::V1 => {
            let j = r["jobs"].as_array()?.first()?;
            Some((
                j["id"].as_str()?.to_owned(),
                j["token"].as_str()?.to_owned(),
            ))
        }
    }
}

async fn finish(api: Api, http: &reqwest::Client, base: &str, id: &str, token: &str) {
    let r = match api {
        Api::Compat => http
            .post(format!("{base}/finish"))
            .json(&json!({"id": id}))
            .send()
            .await
            .unwrap(),
        Api::V1 => http
            .post(format!("{base}/v1/jobs/{id}/finish"))
            .json(&json!({"token": token}))
            .send()
            .await
            .unwrap(),
    };
    assert!(r.status().is_success(), "finish: {}", r.status());
}

fn p(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        percentile(v, q)
    }
}

/// /proc/loadavg's first three fields: how busy the shared machine was.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// How late a wake-up comes for a deadline 1-2 ms ahead, ms (sorted):
/// tokio's `sleep_until` (what the sweep sleeps with) and a thread's
/// `sleep`, 300 each, the deadlines spread over the millisecond.
async fn timer_lateness() -> (Vec<f64>, Vec<f64>) {
    let target = |i: u64| Duration::from_micros(1000 + (i * 37) % 1000);
    let mut tokio_late = Vec::new();
    for i in 0..300 {
        let at = tokio::time::Instant::now() + target(i);
        tokio::time::sleep_until(at).await;
        tokio_late.push(at.elapsed().as_secs_f64() * 1000.0);
    }
    let thread_late = tokio::task::spawn_blocking(move || {
        let mut v = Vec::new();
        for i in 0..300 {
            let at = Instant::now() + target(i);
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            v.push(at.elapsed().as_secs_f64() * 1000.0);
        }
        v
    })
    .await
    .unwrap();
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v
    };
    (sorted(tokio_late), sorted(thread_late))
}

pub(crate) async fn run(flow: Flow, repeats: usize) {
    let combos: Vec<(Persist, Api)> = [Persist::AofAlways, Persist::None]
        .into_iter()
        .flat_map(|p| [Api::Compat, Api::V1].map(|a| (p, a)))
        .collect();
    let load_before = loadavg();
    let mut runs: BTreeMap<(Persist, Api), Vec<Samples>> = BTreeMap::new();
    for rep in 0..repeats {
        for &(persist, api) in &combos {
            eprintln!(
                "http-lateness: repeat {} of {repeats}, {}, {}",
                rep + 1,
                persist.label(),
                api.label()
            );
            let (late, _) = run_once(api, persist, flow, false).await;
            runs.entry((persist, api)).or_default().push(late);
        }
    }
    println!();
    println!(
        "lateness over HTTP, ms (consumer receipt minus due time, both on this host's realtime clock): {} jobs pushed paced over {:.1} s through the API, each due {DELAY_S} s after its push; {CONSUMERS} consumers long-polling one `delayq serve` (max 1 a pop) and finishing each job; a fresh redis-server per run; each figure the median over {repeats} run(s), [min-max] beside",
        flow.jobs,
        flow.spread_ms as f64 / 1000.0
    );
    println!(
        "load average (1, 5, 15 min) before: {load_before}; after: {}",
        loadavg()
    );
    println!("| API | persistence | p50 | p90 | p99 | max | early | due stamped after push sent + 1 s, p50 / p99 |");
    println!("|---|---|---:|---:|---:|---:|---:|---|");
    for ((persist, api), rs) in &runs {
        let cell = |f: &dyn Fn(&[f64]) -> f64| {
            let v: Vec<f64> = rs.iter().map(|r| f(&r.late)).collect();
            let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            if v.len() > 1 {
                format!("{:.2} [{lo:.2}-{hi:.2}]", median(v))
            } else {
                format!("{:.2}", median(v))
            }
        };
        let lag = |q: f64| median(rs.iter().map(|r| p(&r.stamp_lag, q)).collect());
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} / {:.2} |",
            api.label(),
            persist.label(),
            cell(&|r| p(r, 0.5)),
            cell(&|r| p(r, 0.9)),
            cell(&|r| p(r, 0.99)),
            cell(&|r| *r.last().unwrap()),
            rs.iter()
                .map(|r| r.late.iter().filter(|x| **x < 0.0).count())
                .sum::<usize>(),
            lag(0.5),
            lag(0.99),
        );
    }
    let mut traced = Vec::new();
    for &(persist, api) in &combos {
        eprintln!(
            "http-lateness: traced, {}, {}",
            persist.label(),
            api.label()
        );
        let (samples, trace) = run_once(api, persist, flow, true).await;
        traced.push((persist, api, samples.late, breakdown(&trace)));
    }
    println!();
    println!("where the time goes (one traced run each, Redis MONITOR on, every call in the SLOWLOG): per job, ms, p50 / p99; stamps are the starts of Redis calls as MONITOR gives them; sweep = jobs moved by the sweep's timer (the rest by an expired event); notice = jobs whose dispatch published a ready notice (the rest woke a local waiter directly)");
    println!("| API | persistence | lateness (traced) | due -> dispatch call | dispatch call -> pop call | pop call -> receipt | /healthz round trip | sweep | notice | jobs traced |");
    println!("|---|---|---|---|---|---|---|---:|---:|---:|");
    for (persist, api, late, b) in &traced {
        let pp = |v: &[f64]| format!("{:.2} / {:.2}", p(v, 0.5), p(v, 0.99));
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0}% | {:.0}% | {} |",
            api.label(),
            persist.label(),
            pp(late),
            pp(&b.to_dispatch),
            pp(&b.dispatch_to_pop),
            pp(&b.pop_to_receipt),
            pp(&b.rtt),
            b.sweep_share * 100.0,
            b.notice_share * 100.0,
            b.total.len(),
        );
    }
    let (tokio_late, thread_late) = timer_lateness().await;
    println!();
    println!(
        "a timer's own lateness here (a deadline 1-2 ms ahead, 300 each), ms p10 / p50 / p90 / p99: tokio sleep_until (the sweep's) {:.2} / {:.2} / {:.2} / {:.2}; std::thread::sleep {:.2} / {:.2} / {:.2} / {:.2}",
        p(&tokio_late, 0.1),
        p(&tokio_late, 0.5),
        p(&tokio_late, 0.9),
        p(&tokio_late, 0.99),
        p(&thread_late, 0.1),
        p(&thread_late, 0.5),
        p(&thread_late, 0.9),
        p(&thread_late, 0.99),
    );
    println!();
    println!("Redis run time of each call in the traced runs (SLOWLOG, us: calls, p50 / p99; fsync not included):");
    println!("| API | persistence | calls |");
    println!("|---|---|---|");
    for (persist, api, _, b) in &traced {
        let calls: Vec<String> = b
            .scripts
            .iter()
            .filter(|(_, v)| v.len() >= 5)
            .map(|(name, v)| format!("{name} {}: {:.0} / {:.0}", v.len(), p(v, 0.5), p(v, 0.99)))
            .collect();
        println!(
            "| {} | {} | {} |",
            api.label(),
            persist.label(),
            calls.join(", ")
        );
    }
}
