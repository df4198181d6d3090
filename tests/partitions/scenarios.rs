//! One scenario: a topology started, the load run, a nemesis applied and
//! healed, the load drained, the ledger checked and its line printed.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use crate::checker::{self, Findings};
use crate::load::{self, Kind, Load, TTR_MS};
use crate::net;
use crate::topology::{Redis, Topology, DELAYQ, MASTER, SENTINELS};

#[derive(Clone, Copy, Debug)]
pub enum Nemesis {
    /// No fault for 10 s: the baseline.
    Calm,
    /// The master's link cut for 9 s: a failover; it returns as a replica.
    MasterCut,
    /// 14 s with the master, one delayq and one sentinel on the minority
    /// side: both sides keep running.
    Split,
    /// One delayq's link to Redis cut for 12 s while it holds leases (its
    /// clients still reach it).
    DelayqCut,
    /// The master SIGSTOPped for 6 s, past Sentinel's failure detector.
    MasterPaused,
    /// The master's link down and up every 1-3 s for 20 s.
    Flapping,
    /// The second delayq's clock stepped 30 s ahead for 8 s, then 30 s
    /// behind for 8 s (libfaketime: Linux has no per-namespace realtime
    /// clock).
    ClockStep,
    /// A Redis Cluster master and one delayq split from the other five
    /// nodes and the other delayq for 14 s.
    ClusterSplit,
}

impl Nemesis {
    fn name(self) -> &'static str {
        match self {
            Nemesis::Calm => "no fault (baseline)",
            Nemesis::MasterCut => "master cut off 9 s",
            Nemesis::Split => "majority/minority split 14 s",
            Nemesis::DelayqCut => "one delayq cut from Redis 12 s",
            Nemesis::MasterPaused => "master SIGSTOPped 6 s",
            Nemesis::Flapping => "master's link flapping 20 s",
            Nemesis::ClockStep => "one delayq's clock stepped ±30 s",
            Nemesis::ClusterSplit => "a cluster master split off 14 s",
        }
    }

    async fn apply(self, t: &Topology) {
        let sleep = |ms: u64| tokio::time::sleep(Duration::from_millis(ms));
        match self {
            Nemesis::Calm => sleep(10_000).await,
            Nemesis::MasterCut => {
                t.net.cut(MASTER);
                sleep(9000).await;
            }
            Nemesis::Split => {
                t.net.split(&[MASTER, SENTINELS[0], DELAYQ[0]]);
                sleep(14_000).await;
            }
            Nemesis::DelayqCut => {
                t.net.cut(DELAYQ[0]);
                sleep(12_000).await;
            }
            Nemesis::MasterPaused => {
                t.pause(MASTER, true);
                sleep(6000).await;
                t.pause(MASTER, false);
            }
            Nemesis::Flapping => {
                let end = Instant::now() + Duration::from_secs(20);
                let mut i = 0u64;
                while Instant::now() < end {
                    i += 1;
                    t.net.cut(MASTER);
                    sleep(1000 + (i * 7919) % 2000).await;
                    t.net.heal();
                    sleep(1000 + (i * 104_729) % 2000).await;
                }
            }
            Nemesis::ClockStep => {
                t.step_clock("+30s");
                sleep(8000).await;
                t.step_clock("-30s");
                sleep(8000).await;
                t.step_clock("+0s");
            }
            Nemesis::ClusterSplit => {
                let master = t.cluster_masters()[0];
                t.net.split(&[master, t.delayq_nodes[0]]);
                sleep(14_000).await;
            }
        }
        t.net.heal();
    }
}

/// Each topology's own subnets.
static NEXT: AtomicU8 = AtomicU8::new(0);
static SETUP: Once = Once::new();

/// Load before the nemesis, load after the heal, and the wait for the
/// cluster to settle after it (lateness counts only after that).
const WARM_UP: Duration = Duration::from_secs(3);
const AFTER_HEAL: Duration = Duration::from_secs(12);
const SETTLE_MS: u64 = 8000;

/// Runs `nemesis` once in a mode and returns what the checker found.
pub async fn run(nemesis: Nemesis, replica_acks: bool) -> Findings {
    SETUP.call_once(|| {
        net::require_namespaces();
        net::remove_leftovers();
    });
    let k = NEXT.fetch_add(1, Ordering::Relaxed);
    let redis = match nemesis {
        Nemesis::ClusterSplit => Redis::Cluster,
        n => Redis::Sentinel {
            stepped: matches!(n, Nemesis::ClockStep),
        },
    };
    let topo = Topology::start(k, redis, replica_acks).await;
    let load = Load::start(topo.delayq.clone()).await;
    tokio::time::sleep(WARM_UP).await;
    nemesis.apply(&topo).await;
    let healed = load::now_ms();
    tokio::time::sleep(AFTER_HEAL).await;
    load.stop_pushing();
    let stopped = load::now_ms();
    drain(&load).await;
    // One more lease: a job whose holder lost it is handed out again now,
    // and that is what the checker looks for.
    tokio::time::sleep(Duration::from_millis(TTR_MS)).await;
    let ops = load.stop().await;
    let f = checker::check(&ops, healed + SETTLE_MS, stopped);
    let mode = if replica_acks {
        "replica acks 1"
    } else {
        "no acks"
    };
    let line = f.line(nemesis.name(), mode);
    // Straight to stderr, past the test harness's capture, so every run
    // prints its line; and to a file when asked (the docs' tables).
    let mut out = format!("{}\n{line}\n", checker::HEADER);
    for (name, ids) in f.rows() {
        if let Some(id) = ids.first() {
            out += &format!("  {name} {id}:\n{}\n", checker::excerpt(&ops, id));
        }
    }
    if f.rows().iter().any(|(_, ids)| !ids.is_empty()) {
        for (i, n) in topo.delayq_nodes.iter().enumerate() {
            out += &format!(
                "  delayq {i}'s log, last lines:\n{}\n",
                topo.delayq_log_tail(*n, 6)
            );
        }
    }
    let _ = write!(std::io::stderr(), "{out}");
    if let Ok(path) = std::env::var("DELAYQ_PARTITIONS_TABLE") {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "{line}");
        }
    }
    let _ = writeln!(
        std::io::stderr(),
        "agreed master after the run: {:?}",
        topo.agreed_master()
    );
    f
}

/// Waits until every acknowledged, uncancelled push has been handed out,
/// for at most 25 s (what is left then is lost).
async fn drain(load: &Load) {
    let deadline = Instant::now() + Duration::from_secs(25);
    while Instant::now() < deadline {
        let outstanding = {
            let ops = load.ledger.lock().unwrap();
            let popped: std::collections::HashSet<&str> = ops
                .iter()
                .filter(|o| o.kind == Kind::Pop)
                .map(|o| o.id.as_str())
                .collect();
            let cancelled: std::collections::HashSet<&str> = ops
                .iter()
                .filter(|o| o.kind == Kind::Cancel)
                .map(|o| o.id.as_str())
                .collect();
            ops.iter()
                .filter(|o| o.kind == Kind::Push && matches!(o.status, 200 | 201))
                .filter(|o| !popped.contains(o.id.as_str()) && !cancelled.contains(o.id.as_str()))
                .count()
        };
        if outstanding == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The assertions: with replica acks every anomaly is zero; without, never
/// early and never unexpected (the rest is that mode's price, printed).
pub fn assert_holds(f: &Findings, replica_acks: bool) {
    if replica_acks {
        for (name, ids) in f.rows() {
            assert!(
                ids.is_empty(),
                "with replica acks, {} {name}: {:?}",
                ids.len(),
                &ids[..ids.len().min(8)]
            );
        }
    } else {
        assert!(f.early.is_empty(), "early: {:?}", f.early);
        assert!(f.unexpected.is_empty(), "unexpected: {:?}", f.unexpected);
    }
    // The load ran (with replica acks most pushes of a failover run are
    // refused: a few dozen acknowledged are enough).
    assert!(
        f.pushed >= 20,
        "the load ran: {} pushes acknowledged",
        f.pushed
    );
}
