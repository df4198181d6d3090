//! The load, over delayq's HTTP `/v1` against both instances: about 50
//! jobs a second due in 0.5-4 s, popped and finished by workers on each
//! instance; one in 20 cancelled a moment later, one in 20 in a group whose
//! concurrency limit is 2, and a recurring schedule ticking every second.
//! Every request and its answer goes in the ledger with its times.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// The topic of the pushed jobs, and the recurring schedule's.
pub const TOPIC: &str = "t";
pub const TICKS: &str = "rec";
/// The group's concurrency limit.
pub const GROUP_LIMIT: usize = 2;
/// Every job's lease.
pub const TTR_MS: u64 = 5000;
const WORKERS_PER_INSTANCE: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Push,
    Pop,
    Finish,
    Cancel,
}

/// One request and its answer (status 0: no answer, a transport error or
/// the client's timeout). Times are Unix ms on the shared clock.
#[derive(Clone, Debug)]
pub struct Op {
    pub kind: Kind,
    pub id: String,
    pub instance: usize,
    pub sent: u64,
    pub recv: u64,
    pub status: u16,
    /// Push: the earliest its job may be handed out (sent + delay).
    /// Finish: when the pop that gave its token answered.
    pub at: u64,
    pub group: bool,
}

pub type Ledger = Arc<Mutex<Vec<Op>>>;

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A small deterministic generator (no dependency for a few dice).
fn dice(seed: u64) -> u64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

pub struct Load {
    pub ledger: Ledger,
    pushing: Arc<AtomicBool>,
    running: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

struct Client {
    http: reqwest::Client,
    bases: Vec<String>,
    ledger: Ledger,
}

impl Client {
    /// Sends a request; returns the status (0: no answer), the body and the
    /// times it was sent and answered.
    async fn send(&self, instance: usize, path: &str, body: Value) -> (u16, Value, u64, u64) {
        let sent = now_ms();
        let r = self
            .http
            .post(format!("{}{path}", self.bases[instance]))
            .json(&body)
            .send()
            .await;
        let (status, value) = match r {
            Ok(r) => {
                let s = r.status().as_u16();
                (s, r.json::<Value>().await.unwrap_or(Value::Null))
            }
            Err(_) => (0, Value::Null),
        };
        (status, value, sent, now_ms())
    }

    /// Sends a request and records it.
    async fn call(&self, kind: Kind, id: &str, instance: usize, path: &str, body: Value) -> u16 {
        let (status, _, sent, recv) = self.send(instance, path, body).await;
        self.record(kind, id, instance, sent, recv, status, 0, false);
        status
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        kind: Kind,
        id: &str,
        instance: usize,
        sent: u64,
        recv: u64,
        status: u16,
        at: u64,
        group: bool,
    ) {
        self.ledger.lock().unwrap().push(Op {
            kind,
            id: id.to_owned(),
            instance,
            sent,
            recv,
            status,
            at,
            group,
        });
    }
}

impl Load {
    /// Sets up the group and the schedule, then starts pushing and working.
    pub async fn start(bases: Vec<String>) -> Load {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(6))
            .build()
            .unwrap();
        let setup = [
            (
                format!("/v1/topics/{TOPIC}/groups/g"),
                json!({"concurrency": GROUP_LIMIT}),
            ),
            (
                "/v1/recurring/tick".to_owned(),
                json!({"topic": TICKS, "cron": "* * * * * *", "ttr_ms": TTR_MS}),
            ),
        ];
        for (path, body) in setup {
            let r = http
                .put(format!("{}{path}", bases[0]))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "PUT {path}: {:?}", r.text().await);
        }
        let client = Arc::new(Client {
            http,
            bases: bases.clone(),
            ledger: Ledger::default(),
        });
        let pushing = Arc::new(AtomicBool::new(true));
        let running = Arc::new(AtomicBool::new(true));
        let mut tasks = vec![tokio::spawn(push_loop(client.clone(), pushing.clone()))];
        for instance in 0..bases.len() {
            for _ in 0..WORKERS_PER_INSTANCE {
                tasks.push(tokio::spawn(work_loop(
                    client.clone(),
                    instance,
                    running.clone(),
                )));
            }
        }
        Load {
            ledger: client.ledger.clone(),
            pushing,
            running,
            tasks,
        }
    }

    pub fn stop_pushing(&self) {
        self.pushing.store(false, Ordering::Relaxed);
    }

    pub async fn stop(self) -> Vec<Op> {
        self.stop_pushing();
        self.running.store(false, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
        // Finishes and cancels still in flight end within the client's
        // timeout; what answers later is not in the ledger.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ops = self.ledger.lock().unwrap().clone();
        ops
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// One push every 20 ms, each in a task of its own so a push stuck in a
/// partition does not slow the rate.
async fn push_loop(client: Arc<Client>, pushing: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while pushing.load(Ordering::Relaxed) {
        tick.tick().await;
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let client = client.clone();
        tokio::spawn(async move {
            let r = dice(seq);
            // A grouped job's id takes the group's hash tag: on a cluster
            // the group lives whole in one partition.
            let id = if seq.is_multiple_of(20) {
                format!("{{g}}:j{seq}")
            } else {
                format!("j{seq}")
            };
            let instance = (seq % 2) as usize;
            let delay = 500 + r % 3500;
            let group = is_grouped(&id);
            let mut job = json!({"id": id, "topic": TOPIC, "delay_ms": delay, "ttr_ms": TTR_MS});
            if group {
                job["group"] = json!("g");
            }
            let (status, _, sent, recv) = client.send(instance, "/v1/jobs", job).await;
            // The push's record carries its due time and group.
            client.record(
                Kind::Push,
                &id,
                instance,
                sent,
                recv,
                status,
                sent + delay,
                group,
            );
            if seq % 20 == 3 && matches!(status, 200 | 201) {
                tokio::time::sleep(Duration::from_millis(r % 3000)).await;
                let other = 1 - instance;
                let path = format!("/v1/jobs/{}/cancel", escaped(&id));
                client
                    .call(Kind::Cancel, &id, other, &path, json!({}))
                    .await;
            }
        });
    }
}

/// Pops from one instance and finishes what it got after a little work
/// (longer for the group's jobs, so their limit is reached).
async fn work_loop(client: Arc<Client>, instance: usize, running: Arc<AtomicBool>) {
    while running.load(Ordering::Relaxed) {
        let body = json!({"topics": [TOPIC, TICKS], "max": 5, "wait_ms": 1000});
        let (status, reply, sent, recv) = client.send(instance, "/v1/pop", body).await;
        if status != 200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let jobs = reply["jobs"].as_array().cloned().unwrap_or_default();
        for job in jobs {
            let id = job["id"].as_str().unwrap_or_default().to_owned();
            let token = job["token"].as_str().unwrap_or_default().to_owned();
            let group = is_grouped(&id);
            client.record(Kind::Pop, &id, instance, sent, recv, 200, 0, group);
            let client = client.clone();
            tokio::spawn(async move {
                let work = if group { 500 } else { 100 };
                tokio::time::sleep(Duration::from_millis(work)).await;
                let path = format!("/v1/jobs/{}/finish", escaped(&id));
                let body = json!({"token": token});
                let (status, _, fsent, frecv) = client.send(instance, &path, body).await;
                client.record(
                    Kind::Finish,
                    &id,
                    instance,
                    fsent,
                    frecv,
                    status,
                    recv,
                    group,
                );
            });
        }
    }
}

/// One job in 20 is in the group (2.5 a second, where the group's limit
/// and work let 4 a second through: it reaches its limit, and keeps up).
pub fn is_grouped(id: &str) -> bool {
    id.starts_with("{g}:")
}

/// An id as one path segment: a tick's id holds `/`, `{` and `}`.
fn escaped(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
