//! Redis memory per job waiting an hour away.

use serde_json::json;

use crate::common::{add_bulk, bullmq, queue, HOUR};
use crate::options::{Sizes, System};
use crate::table::{record, Table};
use crate::Redis;

pub(crate) async fn run(system: System, s: &Sizes, t: &mut Table) {
    let row = "Redis memory per pending job (bytes)";
    let redis = Redis::start_tcp(&[]);
    let v = match system {
        System::Delayq => {
            let q = queue(&redis);
            add_bulk(&q, "warm", 100, HOUR, 100).await;
            let before = redis.info("memory", "used_memory");
            add_bulk(&q, "mem", s.memory_jobs, HOUR, 1000).await;
            let after = redis.info("memory", "used_memory");
            q.close().await;
            (after - before) / s.memory_jobs as f64
        }
        System::Bullmq => bullmq("memory", &redis, json!({"n": s.memory_jobs}))["bytes_per_job"]
            .as_f64()
            .unwrap(),
    };
    record(t, row, system, v);
}
