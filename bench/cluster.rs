//! One queue on a standalone Redis against the same queue split over a
//! three-master Redis Cluster, in the same run.

use std::collections::BTreeMap;
use std::sync::Mutex;

use delayq::{Config, Queue};

use crate::common::{add_single, cpu, median, queue, settled, HOUR};
use crate::lifecycle::lifecycle;
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
    // Commands over the lifecycle phase, summed over the repeats: the
    // standalone server's, and each master's.
    let mut alone = Stats::new();
    let mut nodes: Vec<Stats> = vec![Stats::new(); 3];
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
        let seen = Mutex::new(Vec::new());
        let v = lifecycle(queue(&redis), s.cpu_jobs, true, &|| {
            seen.lock().unwrap().push(vec![commandstats(&redis)]);
            cpu(&redis)
        })
        .await;
        add_phase(&seen, std::slice::from_mut(&mut alone));
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
        settled(&q).await;
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
        let seen = Mutex::new(Vec::new());
        let total = || {
            seen.lock()
                .unwrap()
                .push(masters.iter().map(|m| commandstats(m)).collect());
            masters.iter().map(|m| cpu(m)).sum::<f64>()
        };
        let q = cq(&cluster);
        settled(&q).await;
        let v = lifecycle(q, s.cpu_jobs, true, &total).await;
        add_phase(&seen, &mut nodes);
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
    print_commands(&alone, &nodes, (s.cpu_jobs * repeats) as f64);
}

/// Calls and microseconds per command, as `INFO commandstats` counts them.
type Stats = BTreeMap<String, (f64, f64)>;

fn commandstats(r: &Redis) -> Stats {
    let mut c = r.client().get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let usec = crate::sidecars::commandstats_field(&info, "usec=");
    crate::sidecars::commandstats_field(&info, "calls=")
        .into_iter()
        .map(|(name, calls)| {
            let us = usec.get(&name).copied().unwrap_or(0.0);
            (name, (calls, us))
        })
        .collect()
}

/// Adds the lifecycle phase (between the third and fourth CPU reads: the
/// first two bound the idle rate's window) of each server to `into`.
fn add_phase(seen: &Mutex<Vec<Vec<Stats>>>, into: &mut [Stats]) {
    let seen = seen.lock().unwrap();
    let (a, b) = (&seen[seen.len() - 2], &seen[seen.len() - 1]);
    for (i, into) in into.iter_mut().enumerate() {
        for (name, &(calls, usec)) in &b[i] {
            let (c0, u0) = a[i].get(name).copied().unwrap_or_default();
            let e = into.entry(name.clone()).or_default();
            e.0 += calls - c0;
            e.1 += usec - u0;
        }
    }
}

/// Where the CPU goes: each command's calls and time per job lifecycle,
/// standalone against the cluster's masters together (commands run by
/// scripts count in their own rows and in their script's time).
fn print_commands(alone: &Stats, nodes: &[Stats], jobs: f64) {
    let mut names: Vec<&String> = alone
        .keys()
        .chain(nodes.iter().flat_map(|n| n.keys()))
        .collect();
    names.sort();
    names.dedup();
    let sum = |name: &str| {
        nodes.iter().fold((0.0, 0.0), |(c, u), n| {
            let (c1, u1) = n.get(name).copied().unwrap_or_default();
            (c + c1, u + u1)
        })
    };
    println!();
    println!("Commands per job lifecycle, as INFO commandstats counts them over the lifecycle phase (calls / µs; cluster: all masters, then calls per master):");
    println!("| command | standalone calls | standalone µs | cluster calls | cluster µs | calls per master |");
    println!("|---|---:|---:|---:|---:|---|");
    for name in names {
        let (sc, su) = alone.get(name).copied().unwrap_or_default();
        let (cc, cu) = sum(name);
        if (sc + cc) / jobs < 0.005 {
            continue;
        }
        let per: Vec<String> = nodes
            .iter()
            .map(|n| format!("{:.2}", n.get(name).map_or(0.0, |x| x.0) / jobs))
            .collect();
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            sc / jobs,
            su / jobs,
            cc / jobs,
            cu / jobs,
            per.join(" / ")
        );
    }
}
