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

/// A scenario in both modes side by side, on two topologies of their own:
/// the same machine's load for both, so their figures compare.
macro_rules! scenario {
    ($name:ident, $nemesis:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let (with, without) = tokio::join!(run($nemesis, true), run($nemesis, false));
            assert_holds(&without, false);
            assert_holds(&with, true);
        }
    };
}

scenario!(no_fault, Nemesis::Calm);
scenario!(master_cut_off, Nemesis::MasterCut);
scenario!(majority_minority_split, Nemesis::Split);
scenario!(delayq_cut_off_from_redis, Nemesis::DelayqCut);
scenario!(master_paused, Nemesis::MasterPaused);
scenario!(master_link_flapping, Nemesis::Flapping);
scenario!(clock_stepped, Nemesis::ClockStep);
scenario!(cluster_master_split, Nemesis::ClusterSplit);
