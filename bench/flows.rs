//! Flows (`--only flows`): N plain jobs, then one parent with N children,
//! then N/100 parents of 100 children under one root (three levels), each
//! on its own redis-server (`redis-conf/redis.conf`), one queue of 4
//! partitions, the children finished without results (as the plain jobs
//! are: like for like), then a flow whose children finish with a result
//! each. Printed: Redis CPU per job (push, pop, finish; for a flow also
//! taking the children in, the relay's counting and the parent's
//! release), memory per pending job, the time from the last child's
//! finish answered to its parent popped, and the parent's delivery size.

use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};

use delayq::{NewFlow, NewJob, Queue};

use crate::batches::{drain, memory_at_rest, plain_baseline, push_all, queue, PARTITIONS};
use crate::common::{cpu, id, new_job};
use crate::Redis;

fn parent(id: String, topic: &str, children: Vec<NewFlow>) -> NewFlow {
    NewFlow {
        job: new_job(id, topic, Duration::ZERO),
        children,
        ..NewFlow::default()
    }
}

fn leaves(tag: &str, n: usize) -> Vec<NewFlow> {
    (0..n)
        .map(|i| NewFlow::leaf(new_job(id(tag, i), "work", Duration::ZERO)))
        .collect()
}

/// Waits for the parent of `topic` and finishes it: when it was popped
/// and its children's outcomes' size in bytes (as JSON).
fn await_parent(q: &Queue, topic: &str) -> tokio::task::JoinHandle<(Instant, usize)> {
    let (q, topic) = (q.clone(), vec![topic.to_string()]);
    tokio::spawn(async move {
        loop {
            if let Ok(Some(d)) = q.pop(&topic, Duration::from_secs(5)).await {
                let at = Instant::now();
                let bytes = serde_json::to_string(&d.children).unwrap().len();
                q.finish(&d.id, &d.token).await.unwrap();
                return (at, bytes);
            }
        }
    })
}

/// Pops and finishes `n` jobs of `topic`, each with a 32-byte result,
/// 100 a pop and 16 finishes at once.
async fn drain_with_results(q: &Queue, topic: &str, n: usize) -> Instant {
    let topics = vec![topic.to_string()];
    let mut left = n;
    let mut last = Instant::now();
    while left > 0 {
        let got = q
            .pop_many(&topics, 100, Duration::from_millis(100))
            .await
            .unwrap_or_default();
        left -= got.len();
        stream::iter(&got)
            .map(|d| {
                let r = serde_json::json!({ "receipt": format!("{:0>20}", d.id.len()) });
                async move { q.finish_with_result(&d.id, &d.token, &r).await.unwrap() }
            })
            .buffer_unordered(16)
            .collect::<Vec<()>>()
            .await;
        last = Instant::now();
    }
    last
}

pub(crate) async fn run(n: usize) {
    println!();
    println!(
        "flows: {n} jobs, one queue of {PARTITIONS} partitions on one redis-server a run (redis-conf/redis.conf, AOF always), \
         64-byte bodies, pushes of 500 jobs 8 at once (a flow: one push_flow), two consumers popping and finishing 500 at a time; \
         Redis CPU from INFO cpu, memory from INFO memory at rest (less client buffers)"
    );
    let (plain_cpu, plain_mem) = plain_baseline(n).await;
    println!(
        "  plain jobs:              Redis CPU {plain_cpu:.1} us a job (push, pop, finish), {plain_mem:.0} B a pending job"
    );
    let plain: Vec<NewJob> = (0..n)
        .map(|i| new_job(id("plain", i), "work", Duration::ZERO))
        .collect();
    // N plain jobs finished with results, one call each: the peer of the
    // flow whose children do.
    let redis = Redis::start_tcp(&[]);
    let q = queue(&redis);
    q.check_connection().await.unwrap();
    let c0 = cpu(&redis);
    push_all(&q, &plain).await;
    drain_with_results(&q, "work", n).await;
    let plain_results_cpu = (cpu(&redis) - c0) / n as f64 * 1e6;
    println!("  plain jobs, results:     Redis CPU {plain_results_cpu:.1} us a job (push, pop, finish with a result)");
    q.close().await;
    drop(redis);

    // One parent, N children; then N/100 parents of 100 under one root.
    let wide = parent(id("parent", 0), "settle", leaves("child", n));
    let mids: Vec<NewFlow> = (0..n / 100)
        .map(|p| {
            let kids = (0..100)
                .map(|i| NewFlow::leaf(new_job(id(&format!("c{p}"), i), "work", Duration::ZERO)))
                .collect();
            parent(id("mid", p), "middle", kids)
        })
        .collect();
    let deep = parent(id("root", 0), "settle", mids);
    for (what, flow, jobs, results) in [
        (format!("one parent of {n}"), &wide, n + 1, false),
        (
            format!("{} parents of 100 under a root", n / 100),
            &deep,
            n + n / 100 + 1,
            false,
        ),
        (format!("one parent of {n}, results"), &wide, n + 1, true),
    ] {
        let redis = Redis::start_tcp(&[]);
        let q = queue(&redis);
        q.check_connection().await.unwrap();
        let m0 = memory_at_rest(&redis).await;
        let c0 = cpu(&redis);
        let started = Instant::now();
        q.push_flow(flow).await.expect("push_flow");
        let pushed_in = started.elapsed();
        let m1 = memory_at_rest(&redis).await;
        let root = await_parent(&q, "settle");
        let last = if results {
            drain_with_results(&q, "work", n).await
        } else {
            drain(&q, "work", n).await
        };
        let mids_done = if flow.children.len() < n {
            drain(&q, "middle", flow.children.len()).await
        } else {
            last
        };
        let (popped, bytes) = root.await.unwrap();
        let per = (cpu(&redis) - c0) / jobs as f64 * 1e6;
        let peer = if results {
            plain_results_cpu
        } else {
            plain_cpu
        };
        println!(
            "  {what:<24} Redis CPU {per:.1} us a job ({:.2}x plain{}), {:.0} B a pending job, pushed in {pushed_in:?}; \
             last child's finish answered to its parent popped: {:?}; the root's children {bytes} B",
            per / peer,
            if results { " with results" } else { "" },
            (m1 - m0) / jobs as f64,
            popped.saturating_duration_since(mids_done.max(last)),
        );
        q.close().await;
        drop(redis);
    }
}
