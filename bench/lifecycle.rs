//! The job lifecycle, add -> fire -> pop -> finish: Redis CPU and calls per
//! job, and the end-to-end rate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delayq::Queue;
use serde_json::json;

use crate::common::{add_single, apalis, bullmq, cpu, finish, pop, queue};
use crate::options::{Sizes, System};
use crate::table::{record, Table};
use crate::Redis;

/// The CPU rows (with script calls and commands per job) and the
/// end-to-end row, for `system`.
pub(crate) async fn run(system: System, s: &Sizes, t: &mut Table) {
    let row = "Redis CPU per job lifecycle (us)";
    let redis = Redis::start_tcp(&[]);
    let v = match system {
        System::Delayq => delayq_lifecycle(&redis, s.cpu_jobs, true).await,
        System::Bullmq => bullmq("cpu", &redis, json!({"n": s.cpu_jobs}))["cpu_us_per_job"]
            .as_f64()
            .unwrap(),
        System::Apalis => {
            let r = apalis(
                "lifecycle",
                &redis,
                json!({"n": s.cpu_jobs, "poll_ms": APALIS_POLL_MS}),
            );
            let idle = r["idle_cpu_pct"].as_f64().unwrap_or(f64::NAN);
            note_lateness(
                &format!("lifecycle, CPU run (Redis idle with the worker polling: {idle:.1}% CPU)"),
                s.cpu_jobs,
                &r["lateness"],
            );
            r["cpu_us_per_job"].as_f64().unwrap()
        }
    };
    record(t, row, system, v);
    // Where that CPU goes: script calls, and the commands Redis ran
    // (inside scripts or sent alone), over the whole run (warm-up
    // included) per job.
    let (scripts, commands) = command_counts(&redis);
    let n = s.cpu_jobs as f64;
    record(
        t,
        "Redis script calls per job lifecycle",
        system,
        scripts / n,
    );
    record(
        t,
        "Redis commands per job lifecycle (run by scripts, or sent)",
        system,
        commands / n,
    );
    // Stop this run's server before the next starts.
    drop(redis);

    let row = "end to end, add->fire->pop->finish (jobs/s)";
    let redis = Redis::start_tcp(&[]);
    let v = match system {
        System::Delayq => delayq_lifecycle(&redis, s.e2e_jobs, false).await,
        System::Bullmq => bullmq("e2e", &redis, json!({"n": s.e2e_jobs, "concurrency": 64}))
            ["jobs_per_s"]
            .as_f64()
            .unwrap(),
        System::Apalis => {
            let r = apalis(
                "lifecycle",
                &redis,
                json!({"n": s.e2e_jobs, "poll_ms": APALIS_POLL_MS}),
            );
            note_lateness("lifecycle, end-to-end run", s.e2e_jobs, &r["lateness"]);
            r["jobs_per_s"].as_f64().unwrap()
        }
    };
    record(t, row, system, v);
    drop(redis);

    if system == System::Apalis {
        // Jobs due one by one over a few seconds, each at a millisecond
        // instant: where apalis's whole-second schedule shows.
        let redis = Redis::start_tcp(&[]);
        let r = apalis(
            "due_spread",
            &redis,
            json!({"n": s.due_jobs, "lead_ms": 1000, "spread_ms": s.due_spread_ms, "poll_ms": APALIS_POLL_MS}),
        );
        note_lateness(
            &format!(
                "{} jobs due one by one over {} ms",
                s.due_jobs, s.due_spread_ms
            ),
            s.due_jobs,
            &r,
        );
    }
}

/// apalis's worker polls Redis this often when it finds nothing (apalis
/// sets no default: a backend is wrapped with `poll_with_interval`).
pub(crate) const APALIS_POLL_MS: u64 = 100;

/// apalis's early starts and lateness, printed after the main table.
pub(crate) static APALIS_NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn note_lateness(run: &str, n: usize, l: &serde_json::Value) {
    let f = |k: &str| l[k].as_f64().unwrap_or(f64::NAN);
    let early = match l["early"].as_u64().unwrap_or(0) {
        0 => format!("none of {n} started before its due instant"),
        e => format!(
            "{e} of {n} started before their due instant (at most {:.0} ms early)",
            f("most_early_ms")
        ),
    };
    APALIS_NOTES.lock().unwrap().push(format!(
        "apalis, {run}: {early}; lateness p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms{}",
        f("p50_ms"),
        f("p99_ms"),
        f("max_ms"),
        l.get("lost")
            .map_or(String::new(), |x| format!(", {x} never started")),
    ));
}

/// Script calls (FCALL, EVALSHA, EVAL) and other data commands Redis ran
/// since it started, from `INFO commandstats` (commands run by scripts
/// count there too); administrative ones (INFO, CONFIG, CLIENT, ...) are
/// left out.
pub(crate) fn command_counts(redis: &Redis) -> (f64, f64) {
    let mut c = redis.client().get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let (mut scripts, mut commands) = (0.0, 0.0);
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(":calls="))
        else {
            continue;
        };
        let calls: f64 = rest
            .split(',')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0);
        let admin = [
            "info", "config", "client", "hello", "select", "ping", "function", "script", "latency",
            "command",
        ];
        if ["fcall", "fcall_ro", "evalsha", "eval"].contains(&name) {
            scripts += calls;
        } else if !admin
            .iter()
            .any(|a| name == *a || name.starts_with(&format!("{a}|")))
        {
            commands += calls;
        }
    }
    (scripts, commands)
}

/// 64 consumers popping and finishing until `n` are done; returns when.
pub(crate) fn consume(
    q: &Queue,
    n: usize,
    done: Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..64)
        .map(|_| {
            let (q, done) = (q.clone(), done.clone());
            tokio::spawn(async move {
                let topic = ["t".to_string()];
                while done.load(Ordering::Relaxed) < n {
                    if let Some(d) = pop(&q, &topic, Duration::from_millis(100)).await {
                        finish(&q, &d).await;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect()
}

/// Redis CPU (µs) per add -> fire -> pop -> finish, idle subtracted; and the
/// end-to-end rate of the same flow (jobs/s).
pub(crate) async fn delayq_lifecycle(redis: &Redis, n: usize, measure_cpu: bool) -> f64 {
    lifecycle(queue(redis), n, measure_cpu, &|| cpu(redis)).await
}

/// [`delayq_lifecycle`] on any queue, with Redis CPU read by `cpu`.
pub(crate) async fn lifecycle(q: Queue, n: usize, measure_cpu: bool, cpu: &dyn Fn() -> f64) -> f64 {
    let done = Arc::new(AtomicUsize::new(0));
    let consumers = consume(&q, n, done.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rate = if measure_cpu {
        let (c0, t0) = (cpu(), Instant::now());
        tokio::time::sleep(Duration::from_secs(2)).await;
        (cpu() - c0) / t0.elapsed().as_secs_f64()
    } else {
        0.0
    };
    let (c0, t0) = (cpu(), Instant::now());
    add_single(&q, "life", n, Duration::from_millis(10)).await;
    while done.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu() - c0 - idle_rate * wall;
    for c in consumers {
        let _ = c.await;
    }
    q.close().await;
    if measure_cpu {
        cpu * 1e6 / n as f64
    } else {
        n as f64 / wall
    }
}
