//! delayq's test suite: one binary, one module per public surface, every
//! test against real redis-server processes it starts and stops itself.
//!
//! The engine through the library:
//! - [`delivery`]: never early, leases, re-delivery, one hand-over per due time.
//! - [`deadlines`]: late calls change nothing, late pop replies hand over no
//!   ended lease, the Redis clock read however far away Redis is.
//! - [`retry`]: retry schedules, stale tokens, dead letters, requeue.
//! - [`consumer`]: the `Consumer`'s concurrency, finishes and nacks.
//! - [`batching`]: group commit, each caller still answered on its own, lanes
//!   that outlive a dead sender.
//! - [`expired_events`]: expired events' ids looked up together, one
//!   dispatch call at a time per partition.
//! - [`recurring`]: recurring schedules and rate limits across instances:
//!   [`recurring::ticks`], [`recurring::rate_limits`], [`recurring::definitions`],
//!   [`recurring::pausing`].
//! - [`priority`]: priorities among ready jobs, per partition on a split queue.
//! - [`groups`]: per-group concurrency limits, turns over groups, group pauses
//!   and rate limits; [`groups::surfaces`] over HTTP, the CLI and /metrics;
//!   [`groups::failover`] a master killed behind Sentinel.
//! - [`steering`]: listings by state, what falls due next, paused topics.
//! - [`ready_lists`]: jobs leaving a long ready list, bounded by what changes.
//! - [`history`]: finished jobs' records kept (`--keep-finished`).
//! - [`horizon`]: trigger keys written only within the horizon, armed by
//!   the sweep ahead of the due time, by every path that schedules a job.
//! - [`idle`]: what an idle queue costs Redis; its sleeping dispatcher still
//!   hands over and fires on time.
//! - [`idle_faults`]: an idle queue's faults: a cluster master killed, the
//!   partition's holder killed just after a push elsewhere, a standby's
//!   subscriber cut, a consumer gone with its job.
//! - [`events`]: the event stream (`--events`, `/v1/events`, `delayq events`).
//! - [`dedup`]: deduplication windows (simple, throttle, debounce).
//! - [`tags`]: tagged jobs listed, cancelled and rescheduled a page at a time.
//! - [`stats`]: throughput, backlog age and lateness; `/metrics` series bounded.
//! - [`topic_schedule`]: each topic's own schedule of delayed jobs: listed
//!   from its first page, kept exact, backfilled on a Redis without them.
//!
//! - [`batches`]: batches of jobs and their callback, pushed once after the
//!   last job's outcome, across partitions and instances; [`batches::http`].
//! - [`flows`]: a parent that waits for its children (a tree), their
//!   results handed to it; a dead child fails it or not; cancel down the tree.
//! - [`results`]: a job's result, carried by its finish, bounded, kept on
//!   its finished record (or for the result retention), read back;
//!   [`results::work`] `delayq work`'s from a command's output or its own
//!   result file.
//! - [`running`]: a running job's progress and log lines, fenced by its
//!   lease, bounded, gone with the job.
//! - [`layout`]: long bodies in pieces (layout 2) through every path that
//!   reads or writes a body; the layout switch, `delayq layout --hold 1`
//!   back to whole bodies, doctor naming an instance that reads less.
//!
//! The HTTP APIs and the dashboard:
//! - [`compat_contract`]: the ouqiang/delay-queue contract, message by message.
//! - [`native_api`]: the `/v1` API: [`native_api::requests`] what each request
//!   gets, [`native_api::document`] the OpenAPI document.
//! - [`bad_input`]: bad requests and calls (generated, blank names, empty
//!   tokens, times past year 9999), refused and changing nothing.
//! - [`security`]: bearer tokens, Redis passwords and ACL users.
//! - [`webhooks`]: [`webhooks::delivery`] by POST, [`webhooks::receivers`] that
//!   hang, redirect or misbehave, [`webhooks::status`] metrics and view,
//!   [`webhooks::settings`] checked at start, [`webhooks::ahead`]: jobs
//!   leased ahead of the slots, deleted, rescheduled or short of lease
//!   while they wait.
//! - [`trace`]: W3C trace context kept and handed on; OTLP export.
//! - [`dashboard`]: `/ui/` driven in a headless browser: [`dashboard::actions`],
//!   [`dashboard::views`], [`dashboard::layout`] (language, window widths).
//!
//! The command line and the docs:
//! - [`cli_client`]: [`cli_client::commands`] `delayq push/get/delete/stats/dead`
//!   against a server, [`cli_client::work`] `delayq work`.
//! - [`serve_cli`]: `delayq serve` stopping, its private redis-server, its flags.
//! - [`import`]: `delayq import-ouqiang` from the Go server's keys.
//! - [`doctor`]: `delayq doctor`'s verdicts on Redis servers set up right and wrong.
//! - [`docs`]: the README and the book (docs/) in step across English and
//!   Chinese, their links and anchors resolving, their tables equal to the
//!   code's; the benchmark's lock file in step with its package.json.
//!
//! Redis deployments, faults and load:
//! - [`events_canary`]: whether expired events are heard, found by a canary
//!   key (CONFIG renamed away), in `/readyz` and `/metrics`; rechecked.
//! - [`faults`]: subscriber, redis-server and delayq killed for real; a full
//!   and an evicting Redis.
//! - [`fault_suite`]: mixed faults, a ledger checked against the promises.
//! - [`load`]: 10,000 long-polls held at once; trickled bodies hold no slot.
//! - [`tls`]: Redis over TLS (`rediss://`).
//! - [`sentinel`]: behind Sentinel, the master killed, failover followed.
//! - [`cluster`]: one queue over a Redis Cluster, and its faults.
//! - [`failover`]: masters killed for good behind Sentinel and on a Cluster.
//! - [`instances`]: each instance's heartbeat, `/v1/instances`.
//! - [`sidecars`]: many instances on one Redis, one dispatcher per partition.
//! - [`servers`]: the server binary the run names (Valkey in the conformance
//!   run); Redis 6.2 refused at start.
//! - [`upgrade`]: a rolling upgrade from the old build to this one on one
//!   Redis under load, and the way back.
//!
//! The harness (the launchers shared with the benchmark):
//! - [`common`]: delayq servers in process or as children, small helpers.
//! - [`redis_server`]: one redis-server, killed when dropped.
//! - [`redis_cluster`]: a local Redis Cluster, stopped when dropped.
//! - [`pacing`]: hand-over times checked against a rate limit.
//! - [`old_build`]: the delayq of an earlier commit, built from its source
//!   kept in `tests/upgrade/` (once per machine, cached under `target/`).

mod common;
mod old_build;
mod pacing;
mod redis_cluster;
mod redis_server;
mod shell_words;
mod slowlog;

mod bad_input;
mod batches;
mod batching;
mod call_time;
mod cancel;
mod cli_client;
mod cluster;
mod compat_contract;
mod consumer;
mod dashboard;
mod deadlines;
mod dedup;
mod delivery;
mod docs;
mod doctor;
mod events;
mod events_canary;
mod expired_events;
mod failover;
mod fault_suite;
mod faults;
mod flows;
mod groups;
mod history;
mod horizon;
mod idle;
mod idle_faults;
mod import;
mod instances;
mod layout;
mod load;
mod native_api;
mod priority;
mod ready_lists;
mod recurring;
mod replica_acks;
mod results;
mod retry;
mod running;
mod security;
mod sentinel;
mod serve_cli;
mod servers;
mod sidecars;
mod stats;
mod steering;
mod tags;
mod tls;
mod topic_schedule;
mod trace;
mod upgrade;
mod webhooks;

/// reqwest's https (rustls without a provider of its own) needs the
/// process's rustls provider, which `reqwest::Client::new()` in any test
/// reads: ring, installed before the first test runs (an ELF constructor:
/// Rust has no hook before the test harness starts its threads).
#[used]
#[link_section = ".init_array"]
static INSTALL_RING: extern "C" fn() = install_ring;

extern "C" fn install_ring() {
    let _ = delayq::https::ring_provider().install_default();
}
