//! delayq's test suite: one binary, one module per public surface, every
//! test against real redis-server processes it starts and stops itself.
//!
//! - [`delivery`], [`retry`], [`consumer`]: the engine through the library.
//! - [`compat_contract`], [`native_api`], [`bad_input`], [`security`]: the
//!   HTTP APIs.
//! - [`cli_client`], [`serve_cli`]: the command line.
//! - [`webhooks`]: delivery by POST, and its metrics.
//! - [`faults`], [`fault_suite`], [`load`]: faults caused for real, and
//!   many waiting consumers.
//! - [`defects`]: defects found by an adversarial trial, each reproduced.
//! - [`cluster`]: one queue over a Redis Cluster, and its faults.
//! - [`sentinel`], [`failover`]: Sentinel failovers, and masters killed
//!   for good behind Sentinel and on a Cluster.
//! - [`common`], [`redis_server`], [`redis_cluster`]: the harness (the
//!   launchers shared with the benchmark).

mod common;
mod redis_cluster;
mod redis_server;

mod bad_input;
mod batching;
mod cli_client;
mod cluster;
mod compat_contract;
mod consumer;
mod dashboard;
mod defects;
mod delivery;
mod docs;
mod failover;
mod fault_suite;
mod faults;
mod import;
mod load;
mod native_api;
mod recurring;
mod retry;
mod security;
mod sentinel;
mod serve_cli;
mod steering;
mod tls;
mod webhooks;

/// reqwest's https (rustls without a provider of its own) needs the
/// process's rustls provider, which `reqwest::Client::new()` in any test
/// reads: ring, installed before the first test runs (an ELF constructor:
/// Rust has no hook before the test harness starts its threads).
#[used]
#[link_section = ".init_array"]
static INSTALL_RING: extern "C" fn() = install_ring;

extern "C" fn install_ring() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
