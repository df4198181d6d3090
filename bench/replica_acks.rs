//! The cost of replica acks (`--only replica-acks`): one master with one
//! replica (both `redis-conf/redis.conf`), one queue without acks and one
//! with `replica_acks` 1 on it, run by turns in the same run (rounds
//! interleaved, so both see the same machine). Each round pushes jobs due
//! at once from 64 callers, then 64 consumers pop and finish them; every
//! call's latency is recorded, and the master's and the replica's CPU over
//! the round. Printed: p50/p99 of push, pop (one that brought a job) and
//! finish, and Redis CPU per job lifecycle (the master's, and both
//! servers').

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};

use delayq::{Config, Queue};

use crate::common::{cpu, id, new_job};
use crate::Redis;

/// One mode's latencies (us) and CPU over its rounds.
#[derive(Default)]
struct Sample {
    push: Vec<u64>,
    pop: Vec<u64>,
    finish: Vec<u64>,
    jobs: usize,
    master_cpu_s: f64,
    replica_cpu_s: f64,
}

fn queue(master: &Redis, acks: usize) -> Queue {
    Queue::connect(Config {
        redis: delayq::Redis::Url(master.url()),
        replica_acks: acks,
        ..Config::default()
    })
    .unwrap()
}

fn us(since: Instant) -> u64 {
    since.elapsed().as_micros() as u64
}

/// One round of `n` jobs on `q`, added to `s`.
async fn round(q: &Queue, tag: &str, n: usize, master: &Redis, replica: &Redis, s: &mut Sample) {
    let (m0, r0) = (cpu(master), cpu(replica));
    let pushes: Vec<u64> = stream::iter(0..n)
        .map(|i| {
            let job = new_job(id(tag, i), "t", Duration::ZERO);
            async move {
                let t = Instant::now();
                q.push(&job).await.expect("push");
                us(t)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    s.push.extend(pushes);
    let lat = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let left = Arc::new(std::sync::atomic::AtomicUsize::new(n));
    let consumers: Vec<_> = (0..64)
        .map(|_| {
            let (q, lat, left) = (q.clone(), lat.clone(), left.clone());
            tokio::spawn(async move {
                let topic = ["t".to_string()];
                while left.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                    let t = Instant::now();
                    let Some(d) = q
                        .pop(&topic, Duration::from_millis(100))
                        .await
                        .expect("pop")
                    else {
                        continue;
                    };
                    let popped = us(t);
                    let t = Instant::now();
                    q.finish(&d.id, &d.token).await.expect("finish");
                    let finished = us(t);
                    left.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                    let mut l = lat.lock().unwrap();
                    l.0.push(popped);
                    l.1.push(finished);
                }
            })
        })
        .collect();
    for c in consumers {
        c.await.unwrap();
    }
    let (pops, finishes) = std::mem::take(&mut *lat.lock().unwrap());
    s.pop.extend(pops);
    s.finish.extend(finishes);
    s.jobs += n;
    s.master_cpu_s += cpu(master) - m0;
    s.replica_cpu_s += cpu(replica) - r0;
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i] as f64 / 1000.0
}

/// `rounds` rounds of `n` jobs per mode, interleaved.
pub(crate) async fn run(n: usize, rounds: usize) {
    let master = Redis::start_tcp(&[]);
    let port = master.port().expect("tcp").to_string();
    let replica = Redis::start_tcp(&["--replicaof", "127.0.0.1", &port]);
    // The first full sync waits for repl-diskless-sync-delay (5 s).
    let mut c = master.client().get_connection().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while redis::cmd("WAIT")
        .arg(1)
        .arg(1000)
        .query::<i64>(&mut c)
        .unwrap()
        < 1
    {
        assert!(Instant::now() < deadline, "the replica never acknowledged");
    }
    let modes = [(0, queue(&master, 0)), (1, queue(&master, 1))];
    let mut samples = [Sample::default(), Sample::default()];
    // A warm-up round each, not counted.
    for (acks, q) in &modes {
        round(
            q,
            &format!("warm{acks}-"),
            n / 4,
            &master,
            &replica,
            &mut Sample::default(),
        )
        .await;
    }
    for r in 0..rounds {
        for (i, (acks, q)) in modes.iter().enumerate() {
            round(
                q,
                &format!("r{r}a{acks}-"),
                n,
                &master,
                &replica,
                &mut samples[i],
            )
            .await;
        }
    }
    println!(
        "replica acks: one master and one replica (redis-conf/redis.conf, loopback), {rounds} round(s) of {n} jobs per mode, interleaved; 64 pushers, then 64 consumers popping and finishing:"
    );
    println!("| replica acks | push p50 / p99 (ms) | pop p50 / p99 (ms) | finish p50 / p99 (ms) | master CPU per job (us) | master + replica CPU per job (us) |");
    println!("|---|---|---|---|---|---|");
    for (i, s) in samples.iter_mut().enumerate() {
        let per_job = |cpu_s: f64| cpu_s * 1e6 / s.jobs as f64;
        println!(
            "| {} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.1} | {:.1} |",
            modes[i].0,
            pct(&mut s.push, 0.5),
            pct(&mut s.push, 0.99),
            pct(&mut s.pop, 0.5),
            pct(&mut s.pop, 0.99),
            pct(&mut s.finish, 0.5),
            pct(&mut s.finish, 0.99),
            per_job(s.master_cpu_s),
            per_job(s.master_cpu_s + s.replica_cpu_s),
        );
    }
    for (_, q) in modes {
        q.close().await;
    }
}
