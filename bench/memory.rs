//! Redis memory per job waiting an hour away: the main table's row, and
//! (`--only memory`) the same at every body size, like for like, with
//! where delayq's bytes go.
//!
//! Like for like: both systems keep the same serialized bytes. The body is
//! a JSON object of exactly N bytes ([`json_body`]); delayq stores that
//! string, BullMQ gets the parsed object as data and stores its
//! JSON.stringify, checked equal in Node. (A bare string would not do:
//! BullMQ would store it quoted, two bytes longer, which at 64 bytes tips
//! only BullMQ's job hash over Redis's `hash-max-listpack-value`.)

use std::collections::HashMap;

use serde_json::json;

use crate::common::{add_bulk_body, apalis, bullmq, json_body, queue, HOUR};
use crate::options::{Sizes, System};
use crate::table::{record, Table};
use crate::Redis;

/// The body of the main table's row.
const MAIN_BODY: usize = 64;

/// Body sizes of `--only memory`: a small JSON object, 64 (the listpack
/// limit), and past it.
const BODY_SIZES: &[usize] = &[28, 64, 100, 200, 1000];

/// Sizes whose delayq bytes are broken down by structure.
const BREAKDOWN_SIZES: &[usize] = &[64, 100];

pub(crate) async fn run(system: System, s: &Sizes, t: &mut Table) {
    let row = "Redis memory per pending job (bytes)";
    let m = measure(system, s.memory_jobs, MAIN_BODY, false).await;
    record(t, row, system, m.per_job);
}

/// One system's memory at one body size.
struct Measured {
    per_job: f64,
    /// OBJECT ENCODING of one job's hash.
    encoding: String,
    breakdown: Option<Breakdown>,
}

/// delayq's bytes per job by structure. Redis's two counters overlap:
/// MEMORY USAGE of a key counts its name, value object (16 B), value and
/// keyspace entry (24 B); MEMORY STATS's keyspace table counts each key's
/// entry and value object and the bucket array. Each byte is put in one
/// column here.
struct Breakdown {
    /// One job hash's name and value (MEMORY USAGE less entry and object).
    hash: f64,
    /// One trigger key's name (its value is Redis's shared integer 1, so
    /// its object is not its own).
    trigger: f64,
    /// MEMORY USAGE of the schedule (every entry) per job.
    schedule: f64,
    /// MEMORY USAGE of the jobs' topic schedule (`{dq}:s:t`) per job.
    topic_schedule: f64,
    /// Keyspace table per job: two entries, the hash's object, buckets.
    keyspace: f64,
    /// Expiry table per job: the trigger's TTL entry and buckets.
    expires: f64,
    /// used_memory freed per job by deleting every trigger key, and then
    /// the schedule: what the design's two per-job records cost.
    freed_triggers: f64,
    freed_schedule: f64,
}

async fn measure(system: System, n: usize, body_len: usize, breakdown: bool) -> Measured {
    let body = json_body(body_len);
    let redis = Redis::start_tcp(&[]);
    match system {
        System::Delayq => {
            let q = queue(&redis);
            // The layout new data is written in: the leader raises it at
            // its first upkeep pass (no older build runs here).
            let start = std::time::Instant::now();
            while redis
                .cmd::<Option<String>>(&["GET", "{dq}:layout"])
                .await
                .is_none()
            {
                assert!(
                    start.elapsed() < std::time::Duration::from_secs(60),
                    "layout never raised"
                );
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            add_bulk_body(&q, "warm", 100, HOUR, 100, &body).await;
            let before = redis.info("memory", "used_memory");
            let tables = hashtables(&redis);
            add_bulk_body(&q, "mem", n, HOUR, 1000, &body).await;
            let after = redis.info("memory", "used_memory");
            let tables_after = hashtables(&redis);
            // The default prefix "dq", one partition.
            let one = crate::common::id("mem", 0);
            let stored = q.get(&one).await.unwrap().unwrap().body;
            assert_eq!(stored, body, "delayq keeps the body as given");
            q.close().await;
            let encoding: String = redis
                .cmd(&["OBJECT", "ENCODING", &format!("{{dq}}:j:{one}")])
                .await;
            let breakdown = if breakdown {
                Some(breakdown_of(&redis, n, &one, tables, tables_after).await)
            } else {
                None
            };
            Measured {
                per_job: (after - before) / n as f64,
                encoding,
                breakdown,
            }
        }
        System::Bullmq => bullmq_memory(&redis, n, &body, false),
        // The same bytes: apalis's JSON codec writes the parsed body back
        // as given (checked there).
        System::Apalis => Measured {
            per_job: apalis("memory", &redis, json!({"n": n, "body": body}))["bytes_per_job"]
                .as_f64()
                .unwrap(),
            encoding: String::new(),
            breakdown: None,
        },
    }
}

/// BullMQ's side; `plain`: its own ids and no options but the delay.
fn bullmq_memory(redis: &Redis, n: usize, body: &str, plain: bool) -> Measured {
    let r = bullmq(
        "memory",
        redis,
        json!({"n": n, "body": body, "plain": plain}),
    );
    Measured {
        per_job: r["bytes_per_job"].as_f64().unwrap(),
        encoding: r["encoding"].as_str().unwrap_or("?").to_owned(),
        breakdown: None,
    }
}

async fn breakdown_of(
    redis: &Redis,
    n: usize,
    one: &str,
    tables: (f64, f64),
    tables_after: (f64, f64),
) -> Breakdown {
    let usage = |key: String| async move {
        // None: no such key (layout 3 keeps no delayed job in the
        // shared schedule, which is then empty).
        let v: Option<i64> = redis.cmd(&["MEMORY", "USAGE", &key, "SAMPLES", "0"]).await;
        v.unwrap_or(0) as f64
    };
    const ENTRY: f64 = 24.0;
    const OBJECT: f64 = 16.0;
    let trigger = format!("{{dq}}:t:{one}");
    // OBJECT REFCOUNT of a shared integer is INT_MAX. A job beyond the
    // trigger horizon has no trigger key yet (None).
    let refcount: Option<i64> = redis.cmd(&["OBJECT", "REFCOUNT", &trigger]).await;
    let shared = refcount == Some(i32::MAX as i64);
    let own_object = if shared { 0.0 } else { OBJECT };
    let schedule = usage("{dq}:schedule".into()).await;
    // The columns use Redis's sizes; jemalloc has no 24-byte class, so each
    // table entry takes 32 B: the rest column is mostly those 8 B each.
    let mut b = Breakdown {
        hash: usage(format!("{{dq}}:j:{one}")).await - ENTRY - OBJECT,
        trigger: match refcount {
            Some(_) => usage(trigger).await - ENTRY - OBJECT,
            None => 0.0,
        },
        // The warm-up's 100 jobs are in the schedule too.
        schedule: schedule / (n + 100) as f64,
        // Every job, the warm-up's too, is of topic "t".
        topic_schedule: usage("{dq}:s:t".into()).await / (n + 100) as f64,
        // MEMORY STATS counts an object for the trigger even when shared.
        keyspace: (tables_after.0 - tables.0) / n as f64 - (OBJECT - own_object),
        expires: (tables_after.1 - tables.1) / n as f64,
        freed_triggers: 0.0,
        freed_schedule: 0.0,
    };
    // Delete every trigger key (the measured jobs' and the warm-up's), wait
    // for Redis's cron to shrink the emptied expiry table (bounded), then
    // the schedule.
    const DEL: &str = "for i = ARGV[2], ARGV[3] - 1 do \
        local k = string.format('{dq}:t:%8s-0000-0000-0000-%012d', ARGV[1], i):gsub(' ', '0') \
        redis.call('DEL', k) end";
    let m0 = redis.info("memory", "used_memory");
    for (tag, count) in [("mem", n), ("warm", 100)] {
        for from in (0..count).step_by(10_000) {
            let to = (from + 10_000).min(count);
            let _: () = redis
                .cmd(&["EVAL", DEL, "0", tag, &from.to_string(), &to.to_string()])
                .await;
        }
    }
    let left: i64 = redis.cmd(&["EXISTS", &format!("{{dq}}:t:{one}")]).await;
    assert_eq!(left, 0, "the trigger keys were deleted");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while hashtables(redis).1 > 4096.0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let m1 = redis.info("memory", "used_memory");
    let _: i64 = redis.cmd(&["DEL", "{dq}:schedule"]).await;
    let m2 = redis.info("memory", "used_memory");
    b.freed_triggers = (m0 - m1) / (n + 100) as f64;
    b.freed_schedule = (m1 - m2) / (n + 100) as f64;
    b
}

/// MEMORY STATS's db.0 overhead.hashtable.main and .expires (0 with no
/// keys yet).
fn hashtables(redis: &Redis) -> (f64, f64) {
    let mut c = redis.client().get_connection().unwrap();
    let stats: HashMap<String, redis::Value> =
        redis::cmd("MEMORY").arg("STATS").query(&mut c).unwrap();
    let Some(db) = stats.get("db.0") else {
        return (0.0, 0.0);
    };
    let db: HashMap<String, i64> = redis::from_redis_value_ref(db).unwrap();
    (
        db["overhead.hashtable.main"] as f64,
        db["overhead.hashtable.expires"] as f64,
    )
}

/// `--only memory` (`memory-delayq`: without BullMQ): every body size, one
/// fresh redis-server per size and system, `n` jobs an hour away each.
pub(crate) async fn sizes(n: usize, with_bullmq: bool) {
    let mut rows = Vec::new();
    for &size in BODY_SIZES {
        eprintln!("memory: body {size} B, delayq");
        let d = measure(System::Delayq, n, size, BREAKDOWN_SIZES.contains(&size)).await;
        let (b, plain) = if with_bullmq {
            eprintln!("memory: body {size} B, BullMQ");
            let b = measure(System::Bullmq, n, size, false).await;
            eprintln!("memory: body {size} B, BullMQ with its own ids, no removal");
            let redis = Redis::start_tcp(&[]);
            (
                Some(b),
                Some(bullmq_memory(&redis, n, &json_body(size), true)),
            )
        } else {
            (None, None)
        };
        rows.push((size, d, b, plain));
    }
    println!();
    println!(
        "memory per pending job at every body size, like for like: the body a JSON object of exactly N bytes on both sides (BullMQ's data its parse, stored as the same N bytes); {n} jobs an hour away per size, one fresh redis-server per size and system; bytes = used_memory delta / jobs"
    );
    println!("| body bytes | delayq | BullMQ | delayq/BullMQ | delayq beyond body | BullMQ beyond body | delayq job hash | BullMQ job hash | BullMQ, own ids, no removal (not like for like) |");
    println!("|---:|---:|---:|---:|---:|---:|---|---|---|");
    for (size, d, b, plain) in &rows {
        let bf = |f: &dyn Fn(&Measured) -> String| b.as_ref().map_or("-".to_owned(), f);
        println!(
            "| {size} | {:.0} | {} | {} | {:.0} | {} | {} | {} | {} |",
            d.per_job,
            bf(&|b| format!("{:.0}", b.per_job)),
            bf(&|b| format!("{:.2}x", d.per_job / b.per_job)),
            d.per_job - *size as f64,
            bf(&|b| format!("{:.0}", b.per_job - *size as f64)),
            d.encoding,
            bf(&|b| b.encoding.clone()),
            plain.as_ref().map_or("-".to_owned(), |p| format!(
                "{:.0} ({})",
                p.per_job, p.encoding
            )),
        );
    }
    println!();
    println!("delayq's bytes per job by structure: job hash (its name and value) and trigger key (its name; its value is a shared integer) from MEMORY USAGE of one, less what the tables count; schedule and topic schedule: MEMORY USAGE SAMPLES 0 / jobs; keyspace (two entries, the hash's object, buckets) and expiry tables: MEMORY STATS deltas / jobs; rest: the used_memory figure less these. Then used_memory freed per job by deleting every trigger key, and then the schedule");
    println!("| body bytes | per job | job hash | trigger key | schedule entry | topic schedule entry | keyspace table | expiry table | rest | freed: trigger keys | freed: schedule |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (size, d, _, _) in &rows {
        if let Some(k) = &d.breakdown {
            let rest = d.per_job
                - k.hash
                - k.trigger
                - k.schedule
                - k.topic_schedule
                - k.keyspace
                - k.expires;
            println!(
                "| {size} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                d.per_job,
                k.hash,
                k.trigger,
                k.schedule,
                k.topic_schedule,
                k.keyspace,
                k.expires,
                rest,
                k.freed_triggers,
                k.freed_schedule
            );
        }
    }
}
