//! Scale (`--only scale`; `scale-delayq` without BullMQ): the pending set
//! grown on one redis-server per system, stage by stage (default 10k, 100k,
//! 1M jobs a day away, pushed in batches of 1000 as users load reminders),
//! and per stage the add rate, bytes per pending job (used_memory delta over
//! the stage's jobs) and Redis CPU while consumers wait. Then, at the
//! largest size and on the same server, the burst ([`crate::burst`]: the
//! library's `Consumer` and a BullMQ `Worker` at concurrency 64) with where
//! its Redis time went, and fire lateness of jobs due one by one
//! ([`crate::lateness`]). Growing one server rather than loading each size
//! afresh keeps a full run to one 1M load per system.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use delayq::{Consumer, Delivery, Shutdown};
use serde_json::json;

use crate::burst::{bullmq_figures, lead_ms, library_on, Run, BATCH, TOPIC};
use crate::common::{
    add_bulk_body, add_single_body, bullmq, cpu, json_body, percentile, queue, Persist, HOUR,
};
use crate::lateness::delayq_lateness;
use crate::Redis;

/// Sizes of the scale section.
pub(crate) struct Scale {
    /// Pending jobs after each stage, rising.
    pub(crate) sizes: Vec<usize>,
    pub(crate) burst: usize,
    /// Jobs due evenly over `late_spread_ms` for the lateness sample.
    pub(crate) late_jobs: usize,
    pub(crate) late_spread_ms: u64,
    /// The idle window per stage.
    pub(crate) idle_ms: u64,
    /// AOF always, or none with `--no-persistence`.
    pub(crate) persist: Persist,
    /// Pushes in flight, one job each (`--scale-inflight N`); 0: the
    /// stages load in batches of [`BATCH`].
    pub(crate) inflight: usize,
}

/// One stage: (pending, adds/s, bytes per job, idle Redis CPU %, Redis
/// CPU per add in us).
type Stage = (usize, f64, f64, f64, f64);

/// One system's figures.
struct Side {
    stages: Vec<Stage>,
    burst: Run,
    /// Redis time of the burst per job, by command, and the expire cycle.
    time: String,
    /// Sorted lateness samples (ms).
    late: Vec<f64>,
}

/// `INFO commandstats` as command -> usec.
fn usec(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let us = rest.split(',').find_map(|f| f.strip_prefix("usec="))?;
            Some((name.to_owned(), us.parse().ok()?))
        })
        .collect()
}

/// Redis us per job by command, the ones that reach 0.1 us; a script's
/// figure includes the commands it ran, which are listed too.
fn time_per_job(text: &str, n: usize, expire: Option<(f64, f64)>) -> String {
    let mut v: Vec<(String, f64)> = usec(text)
        .into_iter()
        .map(|(c, us)| (c, us / n as f64))
        .filter(|(_, us)| *us >= 0.1)
        .collect();
    let mut expiry = String::new();
    if let Some((ms, keys)) = expire {
        v.push(("expire cycle".into(), ms * 1000.0 / n as f64));
        expiry = format!(" (keys expired per job: {:.2})", keys / n as f64);
    }
    v.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
    let list = v
        .iter()
        .map(|(c, us)| format!("{c} {us:.1}"))
        .collect::<Vec<_>>()
        .join(", ");
    list + &expiry
}

fn info_text(redis: &Redis, section: &str) -> String {
    let mut c = redis.client().get_connection().unwrap();
    redis::cmd("INFO").arg(section).query(&mut c).unwrap()
}

async fn delayq_side(s: &Scale) -> Side {
    let redis = Redis::start_tcp(s.persist.redis_args());
    let q = queue(&redis);
    let mut stages = Vec::new();
    let mut have = 0;
    for (k, &size) in s.sizes.iter().enumerate() {
        eprintln!("scale: delayq, loading to {size} pending");
        let n = size - have;
        let before = redis.info("memory", "used_memory");
        let c0 = cpu(&redis);
        // The same 64 serialized bytes as BullMQ stores (see memory.rs).
        let (tag, body) = (format!("far{k}"), json_body(64));
        let took = if s.inflight > 0 {
            add_single_body(&q, &tag, n, 24 * HOUR, s.inflight, &body).await
        } else {
            add_bulk_body(&q, &tag, n, 24 * HOUR, BATCH, &body).await
        };
        let add_us = (cpu(&redis) - c0) * 1e6 / n as f64;
        let after = redis.info("memory", "used_memory");
        // A Consumer at 64 waiting on the pending jobs' topic.
        let shutdown = Shutdown::new();
        let consumer = tokio::spawn(Consumer::new(q.clone(), &[TOPIC]).concurrency(64).run(
            |_: Delivery| async { Ok::<(), String>(()) },
            shutdown.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (c0, t0) = (cpu(&redis), Instant::now());
        tokio::time::sleep(Duration::from_millis(s.idle_ms)).await;
        let idle = (cpu(&redis) - c0) / t0.elapsed().as_secs_f64();
        shutdown.trigger();
        let _ = consumer.await;
        stages.push((
            size,
            n as f64 / took.as_secs_f64(),
            (after - before) / n as f64,
            idle * 100.0,
            add_us,
        ));
        have = size;
    }
    eprintln!("scale: delayq, burst of {} at {have} pending", s.burst);
    let burst = library_on(&redis, &q, 0, s.burst, 64).await;
    // Stats were reset at the due instant (the expire cycle's too).
    let time = time_per_job(
        &info_text(&redis, "commandstats"),
        s.burst,
        Some((
            redis.info("stats", "expire_cycle_cpu_milliseconds"),
            redis.info("stats", "expired_keys"),
        )),
    );
    q.close().await;
    eprintln!("scale: delayq, lateness at {have} pending");
    let mut late = delayq_lateness(&redis, 0, s.late_jobs, s.late_spread_ms, false).await;
    late.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Side {
        stages,
        burst,
        time,
        late,
    }
}

fn bullmq_side(s: &Scale) -> Side {
    eprintln!("scale: BullMQ, {:?} pending, then the burst", s.sizes);
    let redis = Redis::start_tcp(s.persist.redis_args());
    // More lead than delayq's: BullMQ adds more slowly.
    let r = bullmq(
        "scale",
        &redis,
        json!({"sizes": s.sizes, "batch": BATCH, "inflight": s.inflight, "body": json_body(64), "idle_ms": s.idle_ms, "burst": s.burst,
               "burst_lead_ms": 2 * lead_ms(s.burst), "late_jobs": s.late_jobs,
               "late_spread_ms": s.late_spread_ms}),
    );
    let stages = r["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|st| {
            let f = |k: &str| st[k].as_f64().unwrap_or(f64::NAN);
            (
                st["pending"].as_u64().unwrap() as usize,
                f("add_per_s"),
                f("bytes_per_job"),
                f("idle_cpu_pct"),
                f("cpu_us_per_add"),
            )
        })
        .collect();
    let mut late: Vec<f64> = r["lateness_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    late.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Side {
        stages,
        burst: bullmq_figures(&r["burst"], s.burst),
        time: time_per_job(
            r["burst"]["commandstats"].as_str().unwrap_or(""),
            s.burst,
            None,
        ),
        late,
    }
}

/// Commands per job, all kinds summed.
fn calls_per_job(per_job: &str) -> f64 {
    per_job
        .split(", ")
        .filter_map(|c| c.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

pub(crate) async fn run(s: &Scale, with_bullmq: bool) {
    assert!(
        s.sizes.windows(2).all(|w| w[0] < w[1]) && s.sizes[0] > 0,
        "the scale section's sizes grow: --pending N1,N2,... rising"
    );
    let d = delayq_side(s).await;
    let b = with_bullmq.then(|| bullmq_side(s));
    let top = *s.sizes.last().unwrap();
    println!();
    println!(
        "scale: one fresh redis-server per system (redis-conf/redis.conf, {}), the pending set grown stage by stage, jobs a day away pushed {}; bytes per job = used_memory delta over a stage / its jobs; idle Redis CPU over {:.0} s with a consumer at concurrency 64 waiting; then at {top} pending a burst of {} due at one instant drained at concurrency 64 (delayq: the library's Consumer; BullMQ: a Worker), and {} jobs due evenly over {} s with 16 consumers",
        s.persist.label(),
        if s.inflight > 0 {
            format!("singly (Queue::push; BullMQ: queue.add), {} in flight", s.inflight)
        } else {
            format!("in batches of {BATCH}")
        },
        s.idle_ms as f64 / 1000.0,
        s.burst,
        s.late_jobs,
        s.late_spread_ms / 1000,
    );
    println!("| measure | delayq | BullMQ | delayq/BullMQ |");
    println!("|---|---:|---:|---:|");
    let row = |name: String, dv: f64, bv: Option<f64>| {
        let fmt = |v: f64| {
            if v.abs() >= 100.0 || v == v.trunc() {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        };
        let ratio = bv
            .filter(|b| *b != 0.0 && b.is_finite())
            .map_or("-".into(), |b| format!("{:.2}x", dv / b));
        println!(
            "| {name} | {} | {} | {ratio} |",
            fmt(dv),
            bv.map_or("-".into(), fmt)
        );
    };
    for (i, st) in d.stages.iter().enumerate() {
        let bs = b.as_ref().map(|b| b.stages[i]);
        let from = if i == 0 { 0 } else { d.stages[i - 1].0 };
        row(
            format!("add rate, {from} -> {} pending (jobs/s)", st.0),
            st.1,
            bs.map(|x| x.1),
        );
        row(
            format!("Redis CPU per add, {from} -> {} pending (us)", st.0),
            st.4,
            bs.map(|x| x.4),
        );
        row(
            format!("bytes per pending job, {from} -> {}", st.0),
            st.2,
            bs.map(|x| x.2),
        );
        row(
            format!("idle Redis CPU at {} pending (% of a core)", st.0),
            st.3,
            bs.map(|x| x.3),
        );
    }
    let (db, bb) = (&d.burst, b.as_ref().map(|b| &b.burst));
    let n = s.burst;
    let burst = |m: &str| format!("burst of {n} at {top} pending: {m}");
    row(
        burst("due -> last finished (s)"),
        db.drain_s,
        bb.map(|x| x.drain_s),
    );
    row(
        burst("drain rate (jobs/s)"),
        db.rate(n),
        bb.map(|x| x.rate(n)),
    );
    row(
        burst("Redis CPU per job (us)"),
        db.cpu_us_per_job,
        bb.map(|x| x.cpu_us_per_job),
    );
    row(burst("lateness p50 (ms)"), db.p50, bb.map(|x| x.p50));
    row(burst("lateness p99 (ms)"), db.p99, bb.map(|x| x.p99));
    row(burst("early"), db.early as f64, bb.map(|x| x.early as f64));
    row(
        burst("lost + twice"),
        (db.lost + db.twice) as f64,
        bb.map(|x| (x.lost + x.twice) as f64),
    );
    row(
        burst("Redis commands per job"),
        calls_per_job(&db.commands),
        bb.map(|x| calls_per_job(&x.commands)),
    );
    let late = |m: &str| format!("{} jobs due one by one at {top} pending: {m}", s.late_jobs);
    let bl = b.as_ref().map(|b| &b.late);
    for (m, p) in [("p50", 0.5), ("p99", 0.99)] {
        row(
            late(&format!("lateness {m} (ms)")),
            percentile(&d.late, p),
            bl.map(|l| percentile(l, p)),
        );
    }
    row(
        late("lateness max (ms)"),
        *d.late.last().unwrap(),
        bl.map(|l| *l.last().unwrap()),
    );
    let early = |l: &[f64]| l.iter().filter(|x| **x < 0.0).count() as f64;
    row(late("early"), early(&d.late), bl.map(|l| early(l)));
    println!();
    println!("the burst's Redis commands per job (INFO commandstats from the due instant, scripts' commands included):");
    println!("- delayq: {}", d.burst.commands);
    if let Some(b) = &b {
        println!("- BullMQ: {}", b.burst.commands);
    }
    println!("the burst's Redis time per job, us (commandstats usec / jobs; a script's time includes the commands it ran, listed beside it; delayq's expire cycle: expiring the trigger keys and sending their events):");
    println!("- delayq: {}", d.time);
    if let Some(b) = &b {
        println!("- BullMQ: {}", b.time);
    }
}

/// Sizes by run kind.
pub(crate) fn sizes(label: &str) -> Scale {
    match label {
        "smoke" => Scale {
            sizes: vec![1000, 5000],
            burst: 500,
            late_jobs: 50,
            late_spread_ms: 2000,
            idle_ms: 1000,
            persist: Persist::AofAlways,
            inflight: 0,
        },
        "quick" => Scale {
            sizes: vec![1000, 10_000, 100_000],
            burst: 10_000,
            late_jobs: 100,
            late_spread_ms: 5000,
            idle_ms: 3000,
            persist: Persist::AofAlways,
            inflight: 0,
        },
        _ => Scale {
            sizes: vec![10_000, 100_000, 1_000_000],
            burst: 100_000,
            late_jobs: 300,
            late_spread_ms: 20_000,
            idle_ms: 5000,
            persist: Persist::AofAlways,
            inflight: 0,
        },
    }
}
