//! delayq's test suite: one binary, one module per public surface, every
//! test against real redis-server processes it starts and stops itself.
//!
//! The engine through the library:
//! - [`delivery`]: never early, leases, re-delivery, one hand-over per due time.
//! - [`retry`]: retry schedules, stale tokens, dead letters, requeue.
//! - [`consumer`]: the `Consumer`'s concurrency, finishes and nacks.
//! - [`batching`]: group commit, each caller still answered on its own.
//! - [`recurring`]: recurring schedules and rate limits across instances.
//! - [`priority`]: priorities among ready jobs, per partition on a split queue.
//! - [`steering`]: listings by state, what falls due next, paused topics.
//! - [`ready_lists`]: jobs leaving a long ready list, bounded by what changes.
//! - [`history`]: finished jobs' records kept (`--keep-finished`).
//! - [`events`]: the event stream (`--events`, `/v1/events`, `delayq events`).
//! - [`dedup`]: deduplication windows (simple, throttle, debounce).
//!
//! The HTTP APIs and the dashboard:
//! - [`compat_contract`]: the ouqiang/delay-queue contract, message by message.
//! - [`native_api`]: the `/v1` API's status codes and its OpenAPI document.
//! - [`bad_input`]: generated bad requests, refused and changing nothing.
//! - [`security`]: bearer tokens, Redis passwords and ACL users.
//! - [`webhooks`]: delivery by POST, and its metrics.
//! - [`trace`]: W3C trace context kept and handed on; OTLP export.
//! - [`dashboard`]: `/ui/` driven in a headless browser.
//!
//! The command line and the docs:
//! - [`cli_client`]: `delayq push/get/delete/stats/dead` against a server.
//! - [`serve_cli`]: `delayq serve` stopping, its private redis-server.
//! - [`import`]: `delayq import-ouqiang` from the Go server's keys.
//! - [`docs`]: the Chinese README in step with the English one.
//!
//! Redis deployments, faults and load:
//! - [`faults`]: subscriber, redis-server and delayq killed for real.
//! - [`fault_suite`]: mixed faults, a ledger checked against the promises.
//! - [`defects`]: defects found by an adversarial trial, each reproduced.
//! - [`load`]: 10,000 long-polls held at once.
//! - [`tls`]: Redis over TLS (`rediss://`).
//! - [`sentinel`]: behind Sentinel, the master killed, failover followed.
//! - [`cluster`]: one queue over a Redis Cluster, and its faults.
//! - [`failover`]: masters killed for good behind Sentinel and on a Cluster.
//!
//! The harness (the launchers shared with the benchmark):
//! - [`common`]: delayq servers in process or as children, small helpers.
//! - [`redis_server`]: one redis-server, killed when dropped.
//! - [`redis_cluster`]: a local Redis Cluster, stopped when dropped.

mod common;
mod redis_cluster;
mod redis_server;

mod adversary_webhook;
mod bad_input;
mod batching;
mod cli_client;
mod cluster;
mod compat_contract;
mod consumer;
mod dashboard;
mod dedup;
mod defects;
mod delivery;
mod docs;
mod events;
mod failover;
mod fault_suite;
mod faults;
mod history;
mod import;
mod instances;
mod load;
mod native_api;
mod priority;
mod ready_lists;
mod recurring;
mod retry;
mod security;
mod sentinel;
mod serve_cli;
mod sidecars;
mod stats;
mod steering;
mod tags;
mod tls;
mod trace;
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
