//! The command line: which systems and scenarios, and how big.

/// What `--help` prints.
const USAGE: &str = "usage: cargo run --release --example bench -- [--quick | --smoke] [--only delayq|bullmq|apalis|cluster|refresh|sidecars|burst|memory|scale|http-lateness|idle|evalsha|replica-acks|groups|batches|flows]
                                       [--repeats N] [--pending 0,100000,1000000] [--scale-burst N] [--settle-rewrites] [--idle-secs N]
  --quick            small counts, one repeat
  --smoke            tiny counts: checks the harness, not the speed
  --only SYSTEM      delayq (no Node needed), bullmq, apalis (delayq and apalis on its Redis storage, the main
                     table's rows; bench/apalis is built with cargo on first use; the full and --quick runs
                     include it, --smoke does not), cluster (standalone against a 3-master cluster),
                     refresh (a dashboard refresh's Redis cost at 1M delayed jobs over 100 topics)
                     or sidecars (K = 1, 4, 16, 64 instances on one Redis, BullMQ beside; --only sidecars-delayq: no Node)
                     or burst (20,000 jobs due at one instant, drained by the library, an HTTP sidecar, a webhook
                     and BullMQ (when Node is there); --only burst-delayq: no BullMQ; burst-webhook: the library
                     and the webhook alone; needs the delayq binary:
                     cargo build --release --example bench --bin delayq)
                     or memory (memory per pending job at body sizes 28 to 1000 B, like for like, BullMQ beside,
                     and delayq's bytes by structure; --only memory-delayq: no Node; also at the end of a run
                     of both systems or of delayq)
                     or scale (10k, 100k and 1M pending: add rate, bytes per job, idle Redis CPU; then at 1M a burst
                     of 100,000 due at one instant, Consumer and BullMQ Worker at 64, and 300 jobs due one by one;
                     --pending sets the sizes, --scale-burst N the burst; --only scale-delayq: no BullMQ)
                     or http-lateness (3,000 jobs paced over 5 s, each due 1 s after its push, 32 long-polling
                     HTTP consumers, compatible and /v1 APIs, AOF always and no persistence; then one traced run
                     each (MONITOR, SLOWLOG) for where the time goes; needs the delayq binary too)
                     or idle (Redis commands a minute of an idle delayq, 8 consumers waiting, one job an hour
                     away, and of BullMQ's idle Worker, same window; then delayq on a 12-partition cluster;
                     --only idle-delayq: no BullMQ)
                     or evalsha (the scripts' Redis time a job by EVALSHA, as on Redis 6.2, beside FCALL, one server)
                     or replica-acks (one master and one replica: push, pop and finish latency p50/p99 and Redis
                     CPU per job lifecycle without and with replica acks, rounds interleaved; --repeats N rounds)
                     or groups (20,000 jobs due at one instant over 1,000 groups, one holding 90%: each group's
                     lateness, delayq grouped and not, and plain BullMQ; --only groups-delayq: no BullMQ)
                     or batches (a batch of 100,000 jobs beside 100,000 plain jobs, then 100,000 batches of one
                     job: Redis CPU and memory per job, last finish to callback, the relay's costly calls)
                     or flows (a parent of 10,000 children, 100 parents of 100 under a root, a parent whose
                     children finish with results, beside plain jobs: Redis CPU and memory per job, last
                     child's finish to the parent popped)
  --repeats N        runs of every scenario (medians are shown); default 3
  --pending N,...    jobs waiting an hour away during the lateness runs (a day away during a burst;
                     default 0 there; with --only scale, the sizes the set grows to)
  --scale-burst N    the scale section's burst (default 100,000; --quick 10,000, --smoke 500)
  --scale-inflight N the scale section's stages loaded one job a push, N pushes in flight, on both
                     sides (default 0: batches of 1,000)
  --idle-secs N      the idle scenario's window (default 600); with --only scale, each stage's idle window (default 5)
  --short-ids        ids like far0-123456 instead of 36 characters, on both sides (scale, memory, the main table)
  --no-persistence   the scale and burst sections' servers without AOF (default: redis-conf/redis.conf, appendfsync always)
  --settle-rewrites  delayq's lateness runs wait for Redis's AOF rewrites first
  DELAYQ_BENCH_SAMPLES=FILE  writes the raw lateness samples to FILE";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum System {
    Delayq,
    Bullmq,
    Apalis,
}

impl System {
    /// Its column in the tables.
    pub(crate) fn column(self) -> &'static str {
        match self {
            System::Delayq => "delayq",
            System::Bullmq => "bullmq",
            System::Apalis => "apalis",
        }
    }
}

/// Sizes of one run.
pub(crate) struct Sizes {
    pub(crate) adds: usize,
    pub(crate) batch: usize,
    pub(crate) wrk_secs: u32,
    pub(crate) due_jobs: usize,
    pub(crate) due_spread_ms: u64,
    pub(crate) memory_jobs: usize,
    /// Jobs per body size in the memory-by-size scenario.
    pub(crate) memory_size_jobs: usize,
    /// Delayed jobs under the dashboard refresh (`--only refresh`).
    pub(crate) refresh_jobs: usize,
    pub(crate) cpu_jobs: usize,
    pub(crate) e2e_jobs: usize,
}

pub(crate) struct Options {
    pub(crate) systems: Vec<System>,
    /// Run the cluster comparison.
    pub(crate) cluster: bool,
    /// Run the dashboard refresh cost (only with `--only refresh`).
    pub(crate) refresh: bool,
    /// Run the sidecars scenario (Some: with BullMQ beside or not).
    pub(crate) sidecars: Option<bool>,
    pub(crate) sidecar_flow: crate::sidecars::Flow,
    /// Run the burst scenario (Some: with BullMQ beside or not).
    pub(crate) burst: Option<bool>,
    /// The burst's library and webhook ways alone (`--only burst-webhook`).
    pub(crate) burst_webhook_only: bool,
    /// Run the groups scenario (Some: with BullMQ beside or not); its size
    /// is the burst's.
    pub(crate) groups: Option<bool>,
    pub(crate) burst_jobs: usize,
    /// Run the scale section (Some: with BullMQ beside or not).
    pub(crate) scale: Option<bool>,
    pub(crate) scale_sizes: crate::scale::Scale,
    /// Run memory by body size (Some: with BullMQ beside or not).
    pub(crate) memory: Option<bool>,
    /// Run the HTTP lateness scenario.
    pub(crate) http_lateness: bool,
    /// Run the idle scenario (Some: with BullMQ beside or not).
    pub(crate) idle: Option<bool>,
    pub(crate) idle_window: std::time::Duration,
    /// Run the EVALSHA-beside-FCALL scenario.
    pub(crate) evalsha: bool,
    pub(crate) replica_acks: bool,
    /// Run the batches scenario with this many jobs (and batches).
    pub(crate) batches: Option<usize>,
    /// Run the flows scenario with this many children.
    pub(crate) flows: Option<usize>,
    pub(crate) http_flow: crate::http_lateness::Flow,
    /// `--pending` was given (the burst then loads those; 0 otherwise).
    pub(crate) pending_given: bool,
    /// Let AOF rewrites finish before delayq's lateness windows.
    pub(crate) settle_rewrites: bool,
    pub(crate) repeats: usize,
    pub(crate) pending: Vec<usize>,
    pub(crate) sizes: Sizes,
    pub(crate) label: &'static str,
}

pub(crate) fn options() -> Options {
    let mut o = Options {
        systems: vec![System::Delayq, System::Bullmq, System::Apalis],
        cluster: true,
        refresh: false,
        sidecars: None,
        sidecar_flow: crate::sidecars::Flow {
            jobs: 20_000,
            secs: 10,
        },
        burst: None,
        burst_webhook_only: false,
        groups: None,
        idle: None,
        idle_window: std::time::Duration::from_secs(600),
        evalsha: false,
        replica_acks: false,
        batches: None,
        flows: None,
        burst_jobs: 20_000,
        memory: Some(true),
        scale: None,
        scale_sizes: crate::scale::sizes("full"),
        http_lateness: false,
        http_flow: crate::http_lateness::Flow {
            jobs: 3000,
            spread_ms: 5000,
        },
        pending_given: false,
        settle_rewrites: false,
        repeats: 3,
        pending: vec![0, 100_000, 1_000_000],
        sizes: Sizes {
            adds: 100_000,
            batch: 100,
            wrk_secs: 10,
            due_jobs: 5000,
            due_spread_ms: 10_000,
            memory_jobs: 1_000_000,
            memory_size_jobs: 200_000,
            refresh_jobs: 1_000_000,
            cpu_jobs: 20_000,
            e2e_jobs: 50_000,
        },
        label: "full",
    };
    let (mut smoke_run, mut only_given) = (false, false);
    let mut idle_given = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" | "--smoke" => {
                let smoke = a == "--smoke";
                o.repeats = 1;
                smoke_run |= smoke;
                o.pending = if smoke { vec![1000] } else { vec![0, 20_000] };
                o.sizes = Sizes {
                    adds: if smoke { 2000 } else { 10_000 },
                    batch: 100,
                    wrk_secs: if smoke { 1 } else { 3 },
                    due_jobs: if smoke { 200 } else { 1000 },
                    due_spread_ms: if smoke { 1000 } else { 3000 },
                    memory_jobs: if smoke { 5000 } else { 50_000 },
                    memory_size_jobs: if smoke { 2000 } else { 20_000 },
                    refresh_jobs: if smoke { 5000 } else { 100_000 },
                    cpu_jobs: if smoke { 1000 } else { 5000 },
                    e2e_jobs: if smoke { 2000 } else { 10_000 },
                };
                o.sidecar_flow = crate::sidecars::Flow {
                    jobs: if smoke { 500 } else { 5000 },
                    secs: if smoke { 1 } else { 5 },
                };
                o.burst_jobs = if smoke { 200 } else { 5000 };
                o.scale_sizes = crate::scale::sizes(if smoke { "smoke" } else { "quick" });
                o.http_flow = crate::http_lateness::Flow {
                    jobs: if smoke { 100 } else { 1000 },
                    spread_ms: if smoke { 500 } else { 2000 },
                };
                o.label = if smoke {
                    "smoke (tiny counts: checks the harness, not the speed)"
                } else {
                    "quick (small counts)"
                };
            }
            "--only" => {
                only_given = true;
                let only = args.next();
                o.memory = match only.as_deref() {
                    Some("delayq" | "memory-delayq") => Some(false),
                    Some("memory") => Some(true),
                    _ => None,
                };
                (o.systems, o.cluster, o.refresh) = match only.as_deref() {
                    Some("delayq") => (vec![System::Delayq], true, false),
                    Some("bullmq") => (vec![System::Bullmq], false, false),
                    // apalis with delayq beside, for same-run ratios.
                    Some("apalis") => (vec![System::Delayq, System::Apalis], false, false),
                    Some("cluster") => (vec![], true, false),
                    Some("refresh") => (vec![], false, true),
                    Some("memory" | "memory-delayq") => (vec![], false, false),
                    Some("sidecars") => {
                        o.sidecars = Some(true);
                        (vec![], false, false)
                    }
                    Some("sidecars-delayq") => {
                        o.sidecars = Some(false);
                        (vec![], false, false)
                    }
                    Some("burst") => {
                        o.burst = Some(true);
                        (vec![], false, false)
                    }
                    Some("burst-delayq") => {
                        o.burst = Some(false);
                        (vec![], false, false)
                    }
                    Some("burst-webhook") => {
                        o.burst = Some(false);
                        o.burst_webhook_only = true;
                        (vec![], false, false)
                    }
                    Some("groups") => {
                        o.groups = Some(true);
                        (vec![], false, false)
                    }
                    Some("groups-delayq") => {
                        o.groups = Some(false);
                        (vec![], false, false)
                    }
                    Some("scale") => {
                        o.scale = Some(true);
                        (vec![], false, false)
                    }
                    Some("scale-delayq") => {
                        o.scale = Some(false);
                        (vec![], false, false)
                    }
                    Some("idle") => {
                        o.idle = Some(true);
                        (vec![], false, false)
                    }
                    Some("idle-delayq") => {
                        o.idle = Some(false);
                        (vec![], false, false)
                    }
                    Some("evalsha") => {
                        o.evalsha = true;
                        (vec![], false, false)
                    }
                    Some("replica-acks") => {
                        o.replica_acks = true;
                        (vec![], false, false)
                    }
                    Some("batches") => {
                        o.batches = Some(if smoke_run { 2_000 } else { 100_000 });
                        (vec![], false, false)
                    }
                    Some("flows") => {
                        o.flows = Some(if smoke_run { 1_000 } else { 10_000 });
                        (vec![], false, false)
                    }
                    Some("http-lateness") => {
                        o.http_lateness = true;
                        (vec![], false, false)
                    }
                    other => panic!(
                    "--only delayq|bullmq|apalis|cluster|refresh|sidecars|sidecars-delayq|burst|burst-delayq|burst-webhook|memory|memory-delayq|scale|scale-delayq|http-lateness|idle|idle-delayq|evalsha|replica-acks|groups|groups-delayq|batches|flows, not {other:?}"
                ),
                }
            }
            "--settle-rewrites" => o.settle_rewrites = true,
            "--idle-secs" => {
                o.idle_window = std::time::Duration::from_secs(
                    args.next()
                        .and_then(|n| n.parse().ok())
                        .expect("--idle-secs N"),
                );
                idle_given = true;
            }
            "--short-ids" => {
                crate::common::SHORT_IDS.store(true, std::sync::atomic::Ordering::Relaxed)
            }
            "--no-persistence" => {
                crate::common::NO_PERSISTENCE.store(true, std::sync::atomic::Ordering::Relaxed)
            }
            "--scale-inflight" => {
                o.scale_sizes.inflight = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--scale-inflight N")
            }
            "--scale-burst" => {
                o.scale_sizes.burst = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--scale-burst N")
            }
            "--repeats" => {
                o.repeats = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--repeats N")
            }
            "--pending" => {
                o.pending_given = true;
                o.pending = args
                    .next()
                    .expect("--pending N[,N...]")
                    .split(',')
                    .map(|n| n.parse().expect("--pending takes numbers"))
                    .collect()
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    // After the loop: `--quick` or `--smoke` resets the scale's sizes.
    if idle_given {
        o.scale_sizes.idle_ms = o.idle_window.as_millis() as u64;
    }
    o.scale_sizes.persist = crate::common::persist();
    if smoke_run && !only_given {
        // The smoke run checks the harness within seconds: building apalis
        // would take minutes (`--smoke --only apalis` still runs it).
        o.systems.retain(|&s| s != System::Apalis);
    }
    o
}
