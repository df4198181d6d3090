//! delayq under network partitions: every process (a master with AOF, its
//! replica, three sentinels, two delayq instances) in a network namespace
//! of its own on a private bridge, a steady load over HTTP with a ledger of
//! every answer, a nemesis that splits the network while both sides keep
//! running, and a checker in the manner of Jepsen's total-queue. Each
//! scenario runs once with `--replica-acks 1` and once without.
//!
//! - [`net`]: namespaces, bridges and veths; cuts, splits and heals.
//! - [`topology`]: the processes in them.
//! - [`load`]: the load and its ledger.
//! - [`checker`]: lost, again, early, unexpected, resurrected, a group over
//!   its limit, a tick twice, late.
//! - [`scenarios`]: the nemeses and the run.
//!
//! Needs root (network namespaces): `./dev test` and CI run as root. Each
//! run prints its line of the table to stderr; `DELAYQ_PARTITIONS_TABLE=FILE`
//! appends it to FILE too. docs/partitions.md reads the figures.

mod checker;
mod load;
mod net;
mod scenarios;
mod topology;

use scenarios::{assert_holds, run, Nemesis};

/// reqwest (rustls without a provider of its own) reads the process's
/// rustls provider: ring, installed before the first test runs.
#[used]
#[link_section = ".init_array"]
static INSTALL_RING: extern "C" fn() = install_ring;

extern "C" fn install_ring() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

macro_rules! scenario {
    ($name:ident, $nemesis:expr, $acks:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let f = run($nemesis, $acks).await;
            assert_holds(&f, $acks);
        }
    };
}

scenario!(no_fault_with_acks, Nemesis::Calm, true);
scenario!(no_fault_without_acks, Nemesis::Calm, false);
scenario!(master_cut_off_with_acks, Nemesis::MasterCut, true);
scenario!(master_cut_off_without_acks, Nemesis::MasterCut, false);
scenario!(majority_minority_split_with_acks, Nemesis::Split, true);
scenario!(majority_minority_split_without_acks, Nemesis::Split, false);
scenario!(
    delayq_cut_off_from_redis_with_acks,
    Nemesis::DelayqCut,
    true
);
scenario!(
    delayq_cut_off_from_redis_without_acks,
    Nemesis::DelayqCut,
    false
);
scenario!(master_paused_with_acks, Nemesis::MasterPaused, true);
scenario!(master_paused_without_acks, Nemesis::MasterPaused, false);
scenario!(master_link_flapping_with_acks, Nemesis::Flapping, true);
scenario!(master_link_flapping_without_acks, Nemesis::Flapping, false);
scenario!(clock_stepped_with_acks, Nemesis::ClockStep, true);
scenario!(clock_stepped_without_acks, Nemesis::ClockStep, false);
scenario!(cluster_master_split_with_acks, Nemesis::ClusterSplit, true);
scenario!(
    cluster_master_split_without_acks,
    Nemesis::ClusterSplit,
    false
);
