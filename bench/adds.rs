//! Adding jobs due an hour away: one at a time (64 in flight, with Redis CPU
//! per add) and in batches.

use serde_json::json;

use crate::common::{add_bulk, add_single, apalis, bullmq, cpu, queue, HOUR};
use crate::options::{Sizes, System};
use crate::table::{record, Table};
use crate::Redis;

/// The single-add rows, then the batch row, for `system`.
pub(crate) async fn run(system: System, s: &Sizes, t: &mut Table) {
    let row = "add, single, 64 in flight (jobs/s)";
    let redis = Redis::start_tcp(&[]);
    let (v, us) = match system {
        System::Delayq => {
            let q = queue(&redis);
            add_single(&q, "warm", 1000, HOUR).await;
            let c0 = cpu(&redis);
            let took = add_single(&q, "one", s.adds, HOUR).await;
            let us = (cpu(&redis) - c0) * 1e6 / s.adds as f64;
            q.close().await;
            (s.adds as f64 / took.as_secs_f64(), us)
        }
        System::Bullmq => {
            // The whole node run (its warm-up included) over the adds: a
            // little in BullMQ's disfavour.
            let c0 = cpu(&redis);
            let v = bullmq("add_single", &redis, json!({"n": s.adds, "inflight": 64}))
                ["jobs_per_s"]
                .as_f64()
                .unwrap();
            (v, (cpu(&redis) - c0) * 1e6 / s.adds as f64)
        }
        System::Apalis => {
            // The 64-byte JSON body; CPU over the measured adds only.
            let r = apalis("add_single", &redis, json!({"n": s.adds, "inflight": 64}));
            (
                r["jobs_per_s"].as_f64().unwrap(),
                r["cpu_us_per_job"].as_f64().unwrap(),
            )
        }
    };
    record(t, row, system, v);
    record(t, "Redis CPU per single add (us)", system, us);
    // Stop this run's server before the next starts: an idle redis-server
    // with a million keys still expires and syncs.
    drop(redis);
    if system == System::Apalis {
        // Not measured for apalis: the single add is its row.
        return;
    }

    let row = "add, batches of 100 (jobs/s)";
    let redis = Redis::start_tcp(&[]);
    let v = match system {
        System::Delayq => {
            let q = queue(&redis);
            add_bulk(&q, "warm", 1000, HOUR, s.batch).await;
            let took = add_bulk(&q, "bulk", s.adds, HOUR, s.batch).await;
            q.close().await;
            s.adds as f64 / took.as_secs_f64()
        }
        System::Bullmq => bullmq("add_bulk", &redis, json!({"n": s.adds, "batch": s.batch}))
            ["jobs_per_s"]
            .as_f64()
            .unwrap(),
        System::Apalis => unreachable!(),
    };
    record(t, row, system, v);
}
