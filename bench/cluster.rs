//! One queue on a standalone Redis against the same queue split over a
//! three-master Redis Cluster, in the same run.

use std::collections::BTreeMap;

use delayq::{Config, Queue};

use crate::common::{add_single, cpu, median, queue, HOUR};
use crate::lifecycle::{delayq_lifecycle, lifecycle};
use crate::options::Sizes;
use crate::Redis;

/// Partitions of the cluster runs: four per master.
const CLUSTER_PARTITIONS: usize = 12;

/// One queue on a standalone Redis against the same queue split over a
/// three-master cluster (no replicas), in the same run, same config.
pub(crate) async fn run(s: &Sizes, repeats: usize) {
    use crate::redis_cluster::TestCluster;
    let mut rows: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut per_master: Vec<Vec<f64>> = Vec::new();
    for _ in 0..repeats {
        let redis = Redis::start_tcp(&[]);
        let q = queue(&redis);
        add_single(&q, "warm", 1000, HOUR).await;
        let took = add_single(&q, "one", s.adds, HOUR).await;
        q.close().await;
        drop(redis);
        rows.entry("standalone pushes/s")
            .or_default()
            .push(s.adds as f64 / took.as_secs_f64());
        let redis = Redis::start_tcp(&[]);
        let v = delayq_lifecycle(&redis, s.cpu_jobs, true).await;
        drop(redis);
        rows.entry("standalone cpu").or_default().push(v);

        let cq = |cluster: &TestCluster| {
            Queue::connect(Config {
                redis: delayq::Redis::Cluster(cluster.seeds()),
                partitions: CLUSTER_PARTITIONS,
                ..Config::default()
            })
            .unwrap()
        };
        let cluster = TestCluster::start_with(3, 0, &[]);
        let q = cq(&cluster);
        add_single(&q, "warm", 1000, HOUR).await;
        let took = add_single(&q, "one", s.adds, HOUR).await;
        q.close().await;
        rows.entry("cluster pushes/s")
            .or_default()
            .push(s.adds as f64 / took.as_secs_f64());
        drop(cluster);

        let cluster = TestCluster::start_with(3, 0, &[]);
        let masters: Vec<&Redis> = cluster.nodes.iter().collect();
        let before: Vec<f64> = masters.iter().map(|m| cpu(m)).collect();
        let total = || masters.iter().map(|m| cpu(m)).sum::<f64>();
        let v = lifecycle(cq(&cluster), s.cpu_jobs, true, &total).await;
        rows.entry("cluster cpu").or_default().push(v);
        // Each master's share of that, by its share of the CPU used.
        let used: Vec<f64> = masters
            .iter()
            .zip(before)
            .map(|(m, b)| cpu(m) - b)
            .collect();
        let sum: f64 = used.iter().sum();
        per_master.push(used.iter().map(|u| v * u / sum).collect());
    }
    let m = |k: &str| median(rows.get(k).cloned().unwrap_or_default());
    println!();
    println!(
        "Redis Cluster: the same queue on one standalone Redis and split into {CLUSTER_PARTITIONS} partitions over a three-master cluster (no replicas; each node with redis-conf/redis.conf), same run, {repeats} repeat(s), medians:"
    );
    println!("| measure | standalone | cluster, 3 masters | cluster/standalone |");
    println!("|---|---:|---:|---:|");
    let (sp, cp) = (m("standalone pushes/s"), m("cluster pushes/s"));
    println!(
        "| add, single, 64 in flight (jobs/s) | {sp:.0} | {cp:.0} | {:.2}x |",
        cp / sp
    );
    let (sc, cc) = (m("standalone cpu"), m("cluster cpu"));
    println!(
        "| Redis CPU per job lifecycle, all nodes (us) | {sc:.1} | {cc:.1} | {:.2}x |",
        cc / sc
    );
    let shares: Vec<String> = (0..3)
        .map(|i| format!("{:.1}", median(per_master.iter().map(|r| r[i]).collect())))
        .collect();
    println!(
        "| Redis CPU per job lifecycle, per master (us) | - | {} | - |",
        shares.join(" / ")
    );
}
