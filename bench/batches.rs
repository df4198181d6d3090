//! Batches (`--only batches`): one batch of N jobs beside N plain jobs,
//! and N batches of one job each, on one server (`redis-conf/redis.conf`),
//! one queue of 4 partitions. Printed: Redis CPU per job (the whole
//! lifecycle: push, pop, finish, and for a batch its taking in, the
//! relay's counting and the callback), memory per job (or per open
//! batch), the time from the last finish to the callback popped, and the
//! relay's calls from the SLOWLOG (at 1 ms: the costly ones).

use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};

use delayq::{BatchCallback, BatchOn, Config, Delivery, NewBatch, NewJob, Queue};

use crate::common::{cpu, id, new_job};
use crate::Redis;

pub(crate) const PARTITIONS: usize = 4;

pub(crate) fn queue(redis: &Redis) -> Queue {
    Queue::connect(Config {
        redis: delayq::Redis::Url(redis.url()),
        partitions: PARTITIONS,
        ..Config::default()
    })
    .unwrap()
}

fn batch(id: &str) -> NewBatch {
    NewBatch {
        id: id.into(),
        on: BatchOn::Settled,
        callback: BatchCallback {
            topic: "settle".into(),
            body: String::new(),
            ttr: Duration::from_secs(60),
            retry: None,
        },
    }
}

/// What Redis holds for data once it holds still: used_memory less the
/// clients' buffers, read every 200 ms until five reads agree within 2 KB.
pub(crate) async fn memory_at_rest(redis: &Redis) -> f64 {
    let read = || redis.info("memory", "used_memory") - redis.info("memory", "mem_clients_normal");
    let mut still = vec![read()];
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = read();
        if still.iter().any(|r| (r - now).abs() > 2048.0) {
            still.clear();
        }
        still.push(now);
        if still.len() >= 5 {
            return now;
        }
    }
    read()
}

/// Pushes `jobs`, 500 a call, 8 calls at once.
pub(crate) async fn push_all(q: &Queue, jobs: &[NewJob]) {
    stream::iter(jobs.chunks(500))
        .map(|chunk| async move {
            for r in q.push_many(chunk).await.expect("push_many") {
                r.expect("push");
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
}

/// Pops and finishes `n` jobs of `topic`, 500 a pop, two consumers; when
/// the last finish was answered.
pub(crate) async fn drain(q: &Queue, topic: &str, n: usize) -> Instant {
    let left = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(n));
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            let (q, left, topic) = (q.clone(), left.clone(), vec![topic.to_string()]);
            tokio::spawn(async move {
                let mut last = Instant::now();
                while left.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                    let got: Vec<Delivery> = q
                        .pop_many(&topic, 500, Duration::from_millis(100))
                        .await
                        .unwrap_or_default();
                    if got.is_empty() {
                        continue;
                    }
                    let leases: Vec<(&str, &str)> = got
                        .iter()
                        .map(|d| (d.id.as_str(), d.token.as_str()))
                        .collect();
                    for r in q.finish_many(&leases).await.expect("finish_many") {
                        r.expect("finish");
                    }
                    last = Instant::now();
                    left.fetch_sub(got.len(), std::sync::atomic::Ordering::Relaxed);
                }
                last
            })
        })
        .collect();
    let mut last = None::<Instant>;
    for c in consumers {
        let l = c.await.unwrap();
        last = Some(last.map_or(l, |x| x.max(l)));
    }
    last.unwrap()
}

/// The relay's `batch_note` calls in the slowlog: how many, their notes
/// in all, the most a call, the median and largest Redis time (us).
pub(crate) async fn relay_calls(redis: &Redis) -> (usize, usize, usize, i64, i64) {
    let log: Vec<redis::Value> = redis.cmd(&["SLOWLOG", "GET", "-1"]).await;
    let mut calls: Vec<(usize, i64)> = Vec::new();
    for entry in &log {
        let redis::Value::Array(f) = entry else {
            continue;
        };
        let (Some(redis::Value::Int(us)), Some(redis::Value::Array(args))) = (f.get(2), f.get(3))
        else {
            continue;
        };
        let text: Vec<String> = args
            .iter()
            .map(|a| match a {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            })
            .collect();
        if text.len() < 2 || !text[1].starts_with("dq_batch_note_") {
            continue;
        }
        let more = text
            .last()
            .and_then(|a| a.strip_prefix("... ("))
            .and_then(|a| a.strip_suffix(" more arguments)"))
            .and_then(|n| n.parse::<usize>().ok());
        let argc = more.map_or(text.len(), |m| text.len() - 1 + m);
        // Four values a note: batch, job id, outcome, result.
        calls.push(((argc - 6) / 4, *us));
    }
    let mut times: Vec<i64> = calls.iter().map(|c| c.1).collect();
    times.sort_unstable();
    (
        calls.len(),
        calls.iter().map(|c| c.0).sum(),
        calls.iter().map(|c| c.0).max().unwrap_or(0),
        times.get(times.len() / 2).copied().unwrap_or(0),
        times.last().copied().unwrap_or(0),
    )
}

pub(crate) async fn arm_slowlog(redis: &Redis) {
    for (k, v) in [
        ("slowlog-max-len", "100000"),
        ("slowlog-log-slower-than", "1000"),
    ] {
        let _: () = redis.cmd(&["CONFIG", "SET", k, v]).await;
    }
    let _: () = redis.cmd(&["SLOWLOG", "RESET"]).await;
}

/// N plain jobs pushed, popped and finished on a server of their own,
/// the baseline of the batches' and flows' runs: Redis CPU (us) and memory
/// (B) a job.
pub(crate) async fn plain_baseline(n: usize) -> (f64, f64) {
    let redis = Redis::start_tcp(&[]);
    let q = queue(&redis);
    q.check_connection().await.unwrap();
    let plain: Vec<NewJob> = (0..n)
        .map(|i| new_job(id("plain", i), "work", Duration::ZERO))
        .collect();
    let m0 = memory_at_rest(&redis).await;
    let c0 = cpu(&redis);
    push_all(&q, &plain).await;
    let m1 = memory_at_rest(&redis).await;
    drain(&q, "work", n).await;
    let per = ((cpu(&redis) - c0) / n as f64 * 1e6, (m1 - m0) / n as f64);
    q.close().await;
    per
}

/// A plain job's lifecycle beside a batch job's, N each, then N batches
/// of one job.
pub(crate) async fn run(n: usize) {
    println!();
    println!(
        "batches: {n} jobs, one queue of {PARTITIONS} partitions on one redis-server (redis-conf/redis.conf, AOF always), \
         64-byte bodies, pushes of 500 jobs 8 at once, two consumers popping and finishing 500 at a time; \
         Redis CPU from INFO cpu, memory from INFO memory at rest (less client buffers)"
    );

    let (plain_cpu, plain_mem) = plain_baseline(n).await;

    // One batch of N jobs.
    let redis = Redis::start_tcp(&[]);
    let q = queue(&redis);
    q.check_connection().await.unwrap();
    let m0 = memory_at_rest(&redis).await;
    let c0 = cpu(&redis);
    q.create_batch(&batch("big")).await.unwrap();
    let members: Vec<NewJob> = (0..n)
        .map(|i| NewJob {
            batch: Some("big".into()),
            ..new_job(id("member", i), "work", Duration::ZERO)
        })
        .collect();
    let started = Instant::now();
    push_all(&q, &members).await;
    let pushed_in = started.elapsed();
    let m1 = memory_at_rest(&redis).await;
    q.close_batch("big").await.unwrap();
    arm_slowlog(&redis).await;
    let waiter = {
        let q = q.clone();
        tokio::spawn(async move {
            let topic = ["settle".to_string()];
            loop {
                if let Ok(Some(d)) = q.pop(&topic, Duration::from_secs(5)).await {
                    let at = Instant::now();
                    q.finish(&d.id, &d.token).await.unwrap();
                    return at;
                }
            }
        })
    };
    let last_finish = drain(&q, "work", n).await;
    let popped = waiter.await.unwrap();
    let big_cpu = (cpu(&redis) - c0) / n as f64 * 1e6;
    let (calls, notes, most, median, max) = relay_calls(&redis).await;
    let b = q.batch("big").await.unwrap().unwrap();
    assert_eq!(b.finished, n as u64);
    println!(
        "  plain jobs:          Redis CPU {plain_cpu:.1} us a job (push, pop, finish), {plain_mem:.0} B a pending job"
    );
    println!(
        "  one batch of {n}: Redis CPU {big_cpu:.1} us a job (with taking in, counting, the callback), {:.0} B a pending job; \
         pushed in {pushed_in:?}; last finish answered to callback popped: {:?}; relay calls of 1 ms or more: \
         {calls} carrying {notes} notes, at most {most} a call, median {median} us, max {max} us",
        (m1 - m0) / n as f64,
        popped.saturating_duration_since(last_finish),
    );
    q.close().await;
    drop(redis);

    // N batches of one job each, open at once.
    let redis = Redis::start_tcp(&[]);
    let q = queue(&redis);
    q.check_connection().await.unwrap();
    let ids: Vec<String> = (0..n).map(|i| format!("open-{i}")).collect();
    let m0 = memory_at_rest(&redis).await;
    let c0 = cpu(&redis);
    let started = Instant::now();
    stream::iter(&ids)
        .map(|i| {
            let q = &q;
            async move {
                q.create_batch(&batch(i)).await.expect("create_batch");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let created_in = started.elapsed();
    let m1 = memory_at_rest(&redis).await;
    let members: Vec<NewJob> = ids
        .iter()
        .enumerate()
        .map(|(i, b)| NewJob {
            batch: Some(b.clone()),
            ..new_job(id("single", i), "work", Duration::ZERO)
        })
        .collect();
    push_all(&q, &members).await;
    let m2 = memory_at_rest(&redis).await;
    stream::iter(&ids)
        .map(|i| {
            let q = &q;
            async move {
                q.close_batch(i).await.expect("close_batch");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    arm_slowlog(&redis).await;
    let started = Instant::now();
    let (_, _) = tokio::join!(drain(&q, "work", n), drain(&q, "settle", n));
    let drained_in = started.elapsed();
    let per = (cpu(&redis) - c0) / n as f64 * 1e6;
    let (calls, notes, most, median, max) = relay_calls(&redis).await;
    println!(
        "  {n} batches of one job: Redis CPU {per:.1} us a batch (create, push, close, pop, finish, callback pushed, \
         popped and finished); {:.0} B an open batch, {:.0} B with its pending job; created in {created_in:?} \
         (32 at once); jobs and callbacks drained in {drained_in:?}; relay calls of 1 ms or more: {calls} carrying \
         {notes} notes, at most {most} a call, median {median} us, max {max} us",
        (m1 - m0) / n as f64,
        (m2 - m0) / n as f64,
    );
    q.close().await;
}
