//! delayq's benchmark, side by side with BullMQ and apalis on the same
//! redis-server configuration, in the same run.
//!
//! ```text
//! cargo run --release --example bench -- [--quick | --smoke] [--only delayq|bullmq|apalis|cluster|refresh|sidecars|burst|groups|memory|scale|http-lateness]
//!                                        [--repeats N] [--pending 0,100000,1000000] [--scale-burst N]
//!                                        [--settle-rewrites]
//! ```
//!
//! Every scenario runs for delayq and BullMQ alternately, each run on a fresh
//! redis-server started here (loopback TCP, `redis-conf/redis.conf`), and the
//! table shows medians over the repeats and delayq/BullMQ ratios. BullMQ runs
//! in Node (`bench/bullmq/`, installed with npm on first use); `--only
//! delayq` needs no Node. HTTP push uses `wrk` (apt-get install wrk) as the
//! load generator, a separate C process, and is skipped without it. With
//! delayq, the run ends with the same queue on a standalone Redis and on a
//! three-master Redis Cluster (`--only cluster`: that alone).
//! apalis (the Rust job queue, on its Redis storage) runs from
//! `bench/apalis/`, a crate of its own built with cargo on first use and
//! skipped if it does not build; it has the main table's single add,
//! memory and lifecycle rows (and its start times against due), in the full
//! and `--quick` runs and with `--only apalis` (delayq beside), not in
//! `--smoke`.
//! `--settle-rewrites` makes delayq's lateness runs wait, after loading the
//! pending jobs, until Redis has finished the AOF rewrites the load set off:
//! lateness without Redis's rewrite fork and child in the window.
//! `--only http-lateness`: lateness over HTTP through the compatible and
//! the native API, with AOF always and without persistence, and where a
//! job's time goes from its due instant to the consumer ([`http_lateness`]).
//! `--only burst`: N jobs due at one instant, drained by the library, an HTTP
//! sidecar (pop 100, one batch finish), a webhook (concurrency 64 and 8) and
//! BullMQ, side by side ([`burst`]; `burst-delayq` without BullMQ,
//! `burst-webhook` the library and the webhook alone).
//! `--only memory`: memory per pending job at body sizes from 28 to 1000
//! bytes, the same serialized bytes on both sides, and delayq's bytes by
//! structure ([`memory`]; `memory-delayq` without BullMQ; also after the
//! main table in a run of both systems or of delayq).
//! `--only groups`: a burst over 1,000 groups, one holding 90% of it: each
//! group's lateness, delayq with and without groups, plain BullMQ beside
//! ([`groups`]; `groups-delayq` without BullMQ).
//! `--only scale`: 10k, 100k and 1M pending (add rate, bytes per job, idle
//! Redis CPU), then at 1M a burst of 100,000 and jobs due one by one, BullMQ
//! beside ([`scale`]; `scale-delayq` without BullMQ; `--pending` sets the
//! sizes, `--scale-burst` the burst).
//!
//! `--only evalsha`: the scripts' Redis time a job by EVALSHA (Redis 6.2's
//! path) beside FCALL on one server ([`evalsha`]).
//! `--only replica-acks`: latency and Redis CPU per job without and with
//! replica acks, one master and one replica, same run ([`replica_acks`]).
//! `--only idle`: the Redis commands a minute of an idle delayq and of
//! BullMQ's idle Worker, same window ([`idle`]; `idle-delayq` without
//! BullMQ; `--idle-secs N` sets the window, 600 by default).
//! `--only batches`: a batch of 100,000 jobs beside plain jobs, and
//! 100,000 batches of one job ([`batches`]).
//! `--only flows`: a parent of 10,000 children, and 100 parents of 100
//! under a root, beside plain jobs ([`flows`]).
//!
//! One module per scenario ([`adds`], [`http_push`], [`memory`],
//! [`lifecycle`], [`lateness`], [`http_lateness`], [`cluster`], [`sidecars`], [`refresh`]: a dashboard
//! refresh's Redis cost, only with `--only refresh`); [`options`] reads the command
//! line, [`table`] prints the main table, [`common`] holds what they share.

mod adds;
mod batches;
mod burst;
mod cluster;
mod common;
mod evalsha;
mod flows;
mod groups;
mod http_lateness;
mod http_push;
mod idle;
mod lateness;
mod lifecycle;
mod memory;
mod options;
mod refresh;
mod replica_acks;
mod scale;
mod sidecars;
mod table;

use std::process::Command;

use options::System;

/// The test suite's redis-server launcher: the same config, a fresh temp
/// dir, killed on drop. The benchmark listens on TCP (BullMQ's client needs
/// it) and uses a part of what the tests use.
#[allow(dead_code)]
#[path = "../tests/suite/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer as Redis;
#[allow(dead_code)]
#[path = "../tests/suite/redis_cluster.rs"]
mod redis_cluster;

#[tokio::main]
async fn main() {
    let mut o = options::options();
    if o.systems.contains(&System::Apalis) && !common::apalis_ready() {
        o.systems.retain(|&s| s != System::Apalis);
    }
    print_conditions(&o);
    let s = &o.sizes;
    let mut t = table::Table::new();
    let mut lateness = lateness::Lateness::default();
    for rep in 0..o.repeats {
        eprintln!("repeat {} of {}", rep + 1, o.repeats);
        for &system in &o.systems {
            adds::run(system, s, &mut t).await;
            if system == System::Delayq {
                http_push::run(s, &mut t).await;
            }
            memory::run(system, s, &mut t).await;
            lifecycle::run(system, s, &mut t).await;
            lateness.run(&o, system).await;
        }
    }
    if !o.systems.is_empty() {
        table::print(&t);
        let notes = lifecycle::APALIS_NOTES.lock().unwrap();
        if !notes.is_empty() {
            println!();
            println!("apalis's handler start against each job's due instant (both read from the system clock in the apalis process; one line per run, in repeat order):");
        }
        for line in notes.iter() {
            println!("{line}");
        }
        lateness.print(s);
    }
    lateness.print_stalls();
    if let Some(with_bullmq) = o.memory {
        let with_bullmq = with_bullmq && node_here();
        if o.memory == Some(true) && !with_bullmq {
            println!("memory: no Node here, so no BullMQ beside");
        }
        memory::sizes(s.memory_size_jobs, with_bullmq).await;
    }
    if o.cluster {
        cluster::run(s, o.repeats).await;
    }
    if o.refresh {
        refresh::run(s.refresh_jobs).await;
    }
    if let Some(with_bullmq) = o.sidecars {
        sidecars::run(o.sidecar_flow, o.repeats, with_bullmq).await;
    }
    if let Some(with_bullmq) = o.burst {
        let pending = if o.pending_given {
            o.pending.clone()
        } else {
            vec![0]
        };
        let node = node_here();
        if with_bullmq && !node {
            println!("burst: no Node here, so no BullMQ beside");
        }
        burst::run(
            o.burst_jobs,
            &pending,
            with_bullmq && node,
            o.burst_webhook_only,
        )
        .await;
    }
    if let Some(with_bullmq) = o.groups {
        let node = node_here();
        if with_bullmq && !node {
            println!("groups: no Node here, so no BullMQ beside");
        }
        groups::run(o.burst_jobs, with_bullmq && node).await;
    }
    if let Some(with_bullmq) = o.scale {
        let mut sizes = o.scale_sizes;
        if o.pending_given {
            sizes.sizes = o.pending.clone();
        }
        let node = node_here();
        if with_bullmq && !node {
            println!("scale: no Node here, so no BullMQ beside");
        }
        scale::run(&sizes, with_bullmq && node).await;
    }
    if o.evalsha {
        evalsha::run().await;
    }
    if o.replica_acks {
        replica_acks::run(5_000, o.repeats).await;
    }
    if let Some(n) = o.batches {
        batches::run(n).await;
    }
    if let Some(n) = o.flows {
        flows::run(n).await;
    }
    if let Some(with_bullmq) = o.idle {
        let node = node_here();
        if with_bullmq && !node {
            println!("idle: no Node here, so no BullMQ beside");
        }
        idle::run(o.idle_window, with_bullmq && node).await;
    }
    if o.http_lateness {
        http_lateness::run(o.http_flow, o.repeats).await;
    }
    if let Ok(path) = std::env::var("DELAYQ_BENCH_SAMPLES") {
        lateness.write_samples(&path);
    }
}

fn node_here() -> bool {
    Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The run's heading: its size, and the versions and cores it ran on.
fn print_conditions(o: &options::Options) {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let redis_version = Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .find_map(|w| w.strip_prefix("v="))
                .unwrap_or("?")
                .to_owned()
        })
        .unwrap_or_default();
    println!(
        "delayq benchmark: {} run, {} repeat(s), medians",
        o.label, o.repeats
    );
    println!(
        "conditions: redis-server {redis_version} on loopback TCP with redis-conf/redis.conf ({}), a fresh server per run; {} cores shared by Redis, the system under test and the load; {}, 64-byte bodies (the memory row: a 64-byte JSON object, the same bytes on both sides); node {}",
        match common::persist() {
            common::Persist::AofAlways => "AOF, appendfsync always",
            common::Persist::None => "without AOF in the burst and scale sections (--no-persistence), AOF always elsewhere",
        },
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        if common::SHORT_IDS.load(std::sync::atomic::Ordering::Relaxed) {
            "short ids (--short-ids: like far0-123456, on both sides)"
        } else {
            "36-char ids"
        },
        node.as_deref().unwrap_or("absent"),
    );
    if o.systems.contains(&System::Apalis) {
        println!(
            "apalis: 1.0.0 with apalis-redis 1.0.0 (bench/apalis/Cargo.lock), its RedisStorage with the default Config, a worker of concurrency 64 polling every {} ms when idle; schedules are whole seconds (run_after)",
            lifecycle::APALIS_POLL_MS
        );
    }
}
