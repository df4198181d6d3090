//! Upgrading in place: a queue written by the old build (see
//! [`crate::old_build`]) on one Redis, its instances replaced one at a time
//! by this build while a producer pushes and consumers pop and finish
//! through both builds; then the way back. Nothing lost, early or twice,
//! delivery never paused, and every kind of data a user has still read and
//! worked through the other build.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::common::*;
use crate::old_build::{old_binary, start_new, start_old};

/// Every instance's flags: finished jobs leave a record.
const FLAGS: &[&str] = &["--keep-finished", "1h"];
const HOUR_MS: u64 = 3_600_000;
/// The longest a job may wait past its due time for its delivery, whatever
/// instance starts or stops (generous: the suite runs beside CPU hogs).
const MAX_LATE_MS: i64 = 5_000;
/// The lease of the jobs the old build hands out and nobody finishes.
const LEASE_MS: u64 = 30_000;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Build {
    Old,
    New,
}

struct Member {
    base: String,
    build: Build,
    busy: Arc<AtomicUsize>,
}

/// The running instances as a load balancer sees them: requests go round
/// the members; an instance is drained (taken out, the requests it has in
/// flight answered) before it stops.
#[derive(Default)]
struct Pool {
    members: Mutex<Vec<Member>>,
    next: AtomicUsize,
}

/// One request's pick of an instance, counted in flight until dropped.
struct Picked {
    base: String,
    build: Build,
    busy: Arc<AtomicUsize>,
}

impl Drop for Picked {
    fn drop(&mut self) {
        self.busy.fetch_sub(1, SeqCst);
    }
}

impl Pool {
    fn add(&self, p: &DelayqProcess, build: Build) {
        self.members.lock().unwrap().push(Member {
            base: p.base.clone(),
            build,
            busy: Arc::new(AtomicUsize::new(0)),
        });
    }

    fn pick(&self) -> Picked {
        let members = self.members.lock().unwrap();
        assert!(!members.is_empty(), "no instance left in the pool");
        let m = &members[self.next.fetch_add(1, SeqCst) % members.len()];
        // Counted under the lock: a drain sees every request it must await.
        m.busy.fetch_add(1, SeqCst);
        Picked {
            base: m.base.clone(),
            build: m.build,
            busy: m.busy.clone(),
        }
    }

    async fn drain(&self, p: &DelayqProcess) {
        let busy = {
            let mut members = self.members.lock().unwrap();
            let i = members.iter().position(|m| m.base == p.base).unwrap();
            members.remove(i).busy
        };
        eventually(
            Duration::from_secs(30),
            "the drained instance's requests answered",
            || {
                let busy = busy.clone();
                async move { (busy.load(SeqCst) == 0).then_some(()) }
            },
        )
        .await;
    }
}

struct Delivery {
    id: String,
    topic: String,
    due: i64,
    popped: i64,
    build: Build,
}

/// What the producer pushed and the consumers got, Redis time.
#[derive(Default)]
struct Ledger {
    /// Jobs of topic `up`: id -> due time.
    pushed: Mutex<HashMap<String, i64>>,
    pushed_by: Mutex<HashMap<String, Build>>,
    deliveries: Mutex<Vec<Delivery>>,
    /// Id -> finishes answered 204.
    finished: Mutex<HashMap<String, usize>>,
    finished_total: AtomicUsize,
}

async fn call(method: Method, url: String, body: Option<Value>) -> (u16, Value) {
    request_json(method, url, body).await
}

async fn push(base: &str, job: Value) -> Value {
    let (status, reply) = call(Method::POST, format!("{base}/v1/jobs"), Some(job.clone())).await;
    assert_eq!(status, 201, "push {job}: {reply}");
    reply
}

async fn get_job(base: &str, id: &str) -> (u16, Value) {
    call(Method::GET, format!("{base}/v1/jobs/{id}"), None).await
}

/// Pops `n` jobs of `topic` through `base` (waiting up to `limit`), in
/// the order handed out.
async fn pop_n(base: &str, topic: &str, n: usize, limit: Duration) -> Vec<Value> {
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + limit;
    while got.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {n} jobs of {topic} came within {limit:?}",
            got.len()
        );
        let (status, reply) = call(
            Method::POST,
            format!("{base}/v1/pop"),
            Some(json!({"topics": [topic], "max": n - got.len(), "wait_ms": 1000})),
        )
        .await;
        assert_eq!(status, 200, "pop {topic}: {reply}");
        got.extend(reply["jobs"].as_array().unwrap().iter().cloned());
    }
    got
}

async fn finish(base: &str, job: &Value) {
    let (status, reply) = call(
        Method::POST,
        format!("{base}/v1/jobs/{}/finish", job["id"].as_str().unwrap()),
        Some(json!({"token": job["token"]})),
    )
    .await;
    assert_eq!(status, 204, "finish {}: {reply}", job["id"]);
}

fn ids(jobs: &[Value]) -> Vec<&str> {
    jobs.iter().map(|j| j["id"].as_str().unwrap()).collect()
}

/// Pushes a job of topic `up` every 40 ms through the next instance, due
/// 0 to 3 s later, until `stop`.
async fn produce(pool: Arc<Pool>, ledger: Arc<Ledger>, stop: Arc<AtomicBool>) {
    let mut i: u64 = 0;
    while !stop.load(SeqCst) {
        let id = format!("p-{i}");
        let picked = pool.pick();
        let (status, reply) = call(
            Method::POST,
            format!("{}/v1/jobs", picked.base),
            Some(json!({"id": id, "topic": "up", "body": "x",
                        "delay_ms": (i * 7919) % 3000, "ttr_ms": 30_000})),
        )
        .await;
        let build = picked.build;
        drop(picked);
        assert_eq!(
            status, 201,
            "push {id} through the {build:?} build: {reply}"
        );
        let due = reply["due_at_ms"].as_i64().unwrap();
        ledger.pushed.lock().unwrap().insert(id.clone(), due);
        ledger.pushed_by.lock().unwrap().insert(id, build);
        i += 1;
        // The producer's pace, not a wait for anything.
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

/// Pops `up` and the recurring ticks (`rec`) through the next instance and
/// finishes them through the one after, until `stop`.
async fn consume(pool: Arc<Pool>, ledger: Arc<Ledger>, stop: Arc<AtomicBool>) {
    while !stop.load(SeqCst) {
        let picked = pool.pick();
        let (status, reply) = call(
            Method::POST,
            format!("{}/v1/pop", picked.base),
            Some(json!({"topics": ["up", "rec"], "max": 10, "wait_ms": 500})),
        )
        .await;
        let build = picked.build;
        drop(picked);
        assert_eq!(status, 200, "pop through the {build:?} build: {reply}");
        let jobs = reply["jobs"].as_array().unwrap();
        if jobs.is_empty() {
            continue;
        }
        ledger
            .deliveries
            .lock()
            .unwrap()
            .extend(jobs.iter().map(|j| Delivery {
                id: j["id"].as_str().unwrap().to_string(),
                topic: j["topic"].as_str().unwrap().to_string(),
                due: j["due_at_ms"].as_i64().unwrap(),
                popped: j["popped_at_ms"].as_i64().unwrap(),
                build,
            }));
        let tokens: Vec<Value> = jobs
            .iter()
            .map(|j| json!({"id": j["id"], "token": j["token"]}))
            .collect();
        let picked = pool.pick();
        let (status, reply) = call(
            Method::POST,
            format!("{}/v1/finish", picked.base),
            Some(json!({ "jobs": tokens })),
        )
        .await;
        let build = picked.build;
        drop(picked);
        assert_eq!(status, 200, "finish through the {build:?} build: {reply}");
        for r in reply["results"].as_array().unwrap() {
            assert_eq!(r["status"], 204, "finish through the {build:?} build: {r}");
            let id = r["id"].as_str().unwrap().to_string();
            *ledger.finished.lock().unwrap().entry(id).or_default() += 1;
            ledger.finished_total.fetch_add(1, SeqCst);
        }
    }
}

/// Waits until the consumers finished `n` more jobs: the queue moves on
/// between two steps of the upgrade. A producer or consumer that stopped
/// (its assertion failed) fails the test at once.
async fn step(ledger: &Arc<Ledger>, workers: &[tokio::task::JoinHandle<()>], n: usize) {
    let from = ledger.finished_total.load(SeqCst);
    eventually(
        Duration::from_secs(60),
        "the consumers finishing jobs",
        || {
            let stopped = workers.iter().any(|w| w.is_finished());
            let ledger = ledger.clone();
            async move {
                assert!(
                    !stopped,
                    "a producer or consumer failed: its panic is above"
                );
                (ledger.finished_total.load(SeqCst) >= from + n).then_some(())
            }
        },
    )
    .await;
}

/// What the old build wrote before the upgrade, one of each kind.
struct Seeded {
    /// far-0..5, due in an hour; the even ones tagged member:77.
    far: HashMap<String, i64>,
    /// lease-0..4, popped through the old build, never finished.
    leases: Vec<Value>,
    /// The dedup key's job.
    dedup_id: String,
}

const DEDUP_PUSH: &str = r#"{"topic":"score","body":"77","delay_ms":3600000,"dedup":{"key":"score:77","mode":"simple"}}"#;

async fn seed(base: &str, ledger: &Ledger) -> Seeded {
    let mut far = HashMap::new();
    for i in 0..6u64 {
        let id = format!("far-{i}");
        let tags = if i % 2 == 0 {
            json!(["member:77"])
        } else {
            json!([])
        };
        let r = push(
            base,
            json!({"id": id, "topic": "far", "delay_ms": HOUR_MS + i, "tags": tags}),
        )
        .await;
        far.insert(id, r["due_at_ms"].as_i64().unwrap());
    }
    // Due while the instances are replaced.
    for i in 0..20u64 {
        let id = format!("soon-{i}");
        let r = push(
            base,
            json!({"id": id, "topic": "up", "delay_ms": 1000 + i * 1000, "ttr_ms": 30_000}),
        )
        .await;
        let mut pushed = ledger.pushed.lock().unwrap();
        pushed.insert(id.clone(), r["due_at_ms"].as_i64().unwrap());
        ledger.pushed_by.lock().unwrap().insert(id, Build::Old);
    }
    // Ready, by priority.
    for (id, priority) in [("r5-a", 5), ("r0-a", 0), ("r5-b", 5), ("r0-b", 0)] {
        push(
            base,
            json!({"id": id, "topic": "prio", "priority": priority}),
        )
        .await;
    }
    // Leased and left.
    for i in 0..5 {
        push(
            base,
            json!({"id": format!("lease-{i}"), "topic": "leased", "ttr_ms": LEASE_MS}),
        )
        .await;
    }
    let leases = pop_n(base, "leased", 5, Duration::from_secs(30)).await;
    // Dead letters.
    for i in 0..3 {
        push(
            base,
            json!({"id": format!("dl-{i}"), "topic": "dl", "retry": {"max_attempts": 1}}),
        )
        .await;
    }
    for job in pop_n(base, "dl", 3, Duration::from_secs(30)).await {
        let (status, reply) = call(
            Method::POST,
            format!("{base}/v1/jobs/{}/nack", job["id"].as_str().unwrap()),
            Some(json!({"token": job["token"], "error": "boom"})),
        )
        .await;
        assert_eq!((status, &reply["state"]), (200, &json!("dead")), "{reply}");
    }
    // A finished job's record.
    push(base, json!({"id": "fin-old", "topic": "fin"})).await;
    let done = pop_n(base, "fin", 1, Duration::from_secs(30)).await;
    finish(base, &done[0]).await;
    // A dedup key.
    let r = push(base, serde_json::from_str(DEDUP_PUSH).unwrap()).await;
    let dedup_id = r["id"].as_str().unwrap().to_string();
    // A recurring schedule, every second.
    let (status, reply) = call(
        Method::PUT,
        format!("{base}/v1/recurring/tick"),
        Some(json!({"topic": "rec", "cron": "* * * * * *"})),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    Seeded {
        far,
        leases,
        dedup_id,
    }
}

/// The far jobs as they were pushed (and moved), through `base`.
async fn check_far(base: &str, far: &HashMap<String, i64>, build: Build) {
    for (id, due) in far {
        let (status, job) = get_job(base, id).await;
        assert_eq!(status, 200, "{id} through the {build:?} build: {job}");
        assert_eq!(
            (&job["state"], job["due_at_ms"].as_i64()),
            (&json!("delayed"), Some(*due)),
            "{id} through the {build:?} build: {job}"
        );
    }
}

async fn tagged(base: &str) -> BTreeSet<String> {
    let (status, reply) = call(
        Method::GET,
        format!("{base}/v1/tags/member:77/jobs?limit=100"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    ids(reply["jobs"].as_array().unwrap())
        .into_iter()
        .map(String::from)
        .collect()
}

async fn dead(base: &str) -> Vec<Value> {
    let (status, reply) = call(
        Method::GET,
        format!("{base}/v1/topics/dl/dead?limit=100"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    reply["jobs"].as_array().unwrap().clone()
}

async fn assert_finished_record(base: &str, id: &str, build: Build) {
    let (status, job) = get_job(base, id).await;
    assert_eq!(
        (status, &job["state"]),
        (200, &json!("finished")),
        "{id} through the {build:?} build: {job}"
    );
}

async fn assert_deduplicated(base: &str, dedup_id: &str, build: Build) {
    let (status, reply) = call(
        Method::POST,
        format!("{base}/v1/jobs"),
        Some(serde_json::from_str(DEDUP_PUSH).unwrap()),
    )
    .await;
    assert_eq!(
        (status, &reply["outcome"], reply["id"].as_str()),
        (200, &json!("deduplicated"), Some(dedup_id)),
        "the dedup key through the {build:?} build: {reply}"
    );
}

async fn assert_schedule(base: &str, build: Build) {
    let (status, reply) = call(Method::GET, format!("{base}/v1/recurring/tick"), None).await;
    assert_eq!(
        (status, &reply["topic"], &reply["paused"]),
        (200, &json!("rec"), &json!(false)),
        "the schedule through the {build:?} build: {reply}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_upgrade_and_back_loses_nothing_and_never_pauses() {
    // Built (the first time: minutes) before anything runs.
    old_binary();
    let redis = RedisServer::start();
    // When each instance started and stopped (Redis ms), for a failure to
    // tell what happened around it.
    let mut timeline: Vec<(i64, &str)> = Vec::new();
    let old1 = start_old(&redis, FLAGS);
    let old2 = start_old(&redis, FLAGS);
    timeline.push((redis.time_ms().await, "old1, old2 started"));
    let pool = Arc::new(Pool::default());
    pool.add(&old1, Build::Old);
    pool.add(&old2, Build::Old);
    let ledger = Arc::new(Ledger::default());
    let (stop_producer, stop_consumers) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    // The producer first, then two consumers.
    let mut workers = vec![tokio::spawn(produce(
        pool.clone(),
        ledger.clone(),
        stop_producer.clone(),
    ))];
    for _ in 0..2 {
        workers.push(tokio::spawn(consume(
            pool.clone(),
            ledger.clone(),
            stop_consumers.clone(),
        )));
    }
    let mut seeded = seed(&old1.base, &ledger).await;
    step(&ledger, &workers, 30).await;

    // The rolling upgrade: one instance at a time.
    let new1 = start_new(&redis, FLAGS);
    timeline.push((redis.time_ms().await, "new1 started"));
    pool.add(&new1, Build::New);
    step(&ledger, &workers, 30).await;
    pool.drain(&old1).await;
    timeline.push((redis.time_ms().await, "old1 stopping"));
    old1.terminate();
    // Leases the old build handed out end through the new one.
    for job in &seeded.leases[..2] {
        finish(&new1.base, job).await;
    }
    step(&ledger, &workers, 30).await;
    let new2 = start_new(&redis, FLAGS);
    timeline.push((redis.time_ms().await, "new2 started"));
    pool.add(&new2, Build::New);
    step(&ledger, &workers, 30).await;
    pool.drain(&old2).await;
    timeline.push((redis.time_ms().await, "old2 stopping"));
    old2.terminate();
    step(&ledger, &workers, 30).await;

    // Only the new build runs: what the old one wrote is there and works.
    let (nb, build) = (new2.base.as_str(), Build::New);
    check_far(nb, &seeded.far, build).await;
    let member: BTreeSet<String> = ["far-0", "far-2", "far-4"].map(String::from).into();
    assert_eq!(
        tagged(nb).await,
        member,
        "the tag's jobs through the new build"
    );
    let (status, reply) = call(
        Method::POST,
        format!("{nb}/v1/tags/member:77/reschedule"),
        Some(json!({"shift_ms": 60_000})),
    )
    .await;
    assert_eq!((status, &reply["changed"]), (200, &json!(3)), "{reply}");
    for id in &member {
        *seeded.far.get_mut(id).unwrap() += 60_000;
    }
    check_far(nb, &seeded.far, build).await;
    let ready = pop_n(nb, "prio", 2, Duration::from_secs(30)).await;
    assert_eq!(ids(&ready), ["r0-a", "r0-b"], "priority 0 first");
    for job in &ready {
        finish(&new1.base, job).await;
    }
    for (id, priority) in [("r5-c", 5), ("r0-c", 0)] {
        push(nb, json!({"id": id, "topic": "prio", "priority": priority})).await;
    }
    for job in &seeded.leases[..2] {
        assert_finished_record(nb, job["id"].as_str().unwrap(), build).await;
    }
    // The other leases run out under the new build and come again.
    let limit = Duration::from_millis(LEASE_MS) + Duration::from_secs(60);
    let again = pop_n(nb, "leased", 3, limit).await;
    let again_ids: BTreeSet<&str> = ids(&again).into_iter().collect();
    assert_eq!(again_ids, ["lease-2", "lease-3", "lease-4"].into());
    for job in &again {
        assert_eq!(job["attempts"], 2, "a second attempt: {job}");
        finish(&new1.base, job).await;
    }
    let dl = dead(nb).await;
    assert_eq!(
        ids(&dl),
        ["dl-0", "dl-1", "dl-2"],
        "dead letters through the new build"
    );
    assert!(dl.iter().all(|j| j["last_error"] == "boom"), "{dl:?}");
    let (status, reply) = call(
        Method::POST,
        format!("{nb}/v1/topics/dl/dead/requeue"),
        Some(json!({"ids": ["dl-0"]})),
    )
    .await;
    assert_eq!((status, &reply["requeued"]), (200, &json!(1)), "{reply}");
    let requeued = pop_n(nb, "dl", 1, Duration::from_secs(30)).await;
    assert_eq!(ids(&requeued), ["dl-0"]);
    finish(nb, &requeued[0]).await;
    assert_finished_record(nb, "fin-old", build).await;
    push(nb, json!({"id": "fin-new", "topic": "fin"})).await;
    let done = pop_n(nb, "fin", 1, Duration::from_secs(30)).await;
    finish(&new1.base, &done[0]).await;
    assert_deduplicated(nb, &seeded.dedup_id, build).await;
    assert_schedule(nb, build).await;
    step(&ledger, &workers, 30).await;

    // The way back: the old build again, one instance at a time.
    let old3 = start_old(&redis, FLAGS);
    timeline.push((redis.time_ms().await, "old3 started"));
    pool.add(&old3, Build::Old);
    step(&ledger, &workers, 30).await;
    pool.drain(&new1).await;
    timeline.push((redis.time_ms().await, "new1 stopping"));
    new1.terminate();
    step(&ledger, &workers, 30).await;
    let old4 = start_old(&redis, FLAGS);
    timeline.push((redis.time_ms().await, "old4 started"));
    pool.add(&old4, Build::Old);
    step(&ledger, &workers, 30).await;
    pool.drain(&new2).await;
    timeline.push((redis.time_ms().await, "new2 stopping"));
    new2.terminate();
    step(&ledger, &workers, 30).await;

    // Only the old build runs: what the new one wrote is there and works.
    let (ob, build) = (old4.base.as_str(), Build::Old);
    check_far(ob, &seeded.far, build).await;
    assert_eq!(
        tagged(ob).await,
        member,
        "the tag's jobs through the old build"
    );
    let (status, reply) = call(
        Method::POST,
        format!("{}/v1/tags/member:77/cancel", old3.base),
        Some(json!({})),
    )
    .await;
    assert_eq!((status, &reply["changed"]), (200, &json!(3)), "{reply}");
    assert_eq!(get_job(ob, "far-0").await.0, 404, "cancelled");
    let ready = pop_n(ob, "prio", 4, Duration::from_secs(30)).await;
    assert_eq!(
        ids(&ready),
        ["r0-c", "r5-a", "r5-b", "r5-c"],
        "priority 0 first, then in order"
    );
    for job in &ready {
        finish(&old3.base, job).await;
    }
    assert_eq!(
        ids(&dead(ob).await),
        ["dl-1", "dl-2"],
        "dead letters through the old build"
    );
    for id in ["fin-old", "fin-new", "lease-0", "dl-0"] {
        assert_finished_record(ob, id, build).await;
    }
    assert_deduplicated(ob, &seeded.dedup_id, build).await;
    assert_schedule(ob, build).await;

    // Everything pushed is delivered and finished before the consumers stop.
    stop_producer.store(true, SeqCst);
    let consumers = workers.split_off(1);
    workers.pop().unwrap().await.unwrap();
    let expected = ledger.pushed.lock().unwrap().len() as u64;
    until_value(
        expected,
        Duration::from_secs(30),
        "every pushed job finished",
        || {
            let ledger = ledger.clone();
            async move {
                let pushed = ledger.pushed.lock().unwrap();
                let finished = ledger.finished.lock().unwrap();
                Some(
                    pushed
                        .keys()
                        .filter(|id| finished.contains_key(*id))
                        .count() as u64,
                )
            }
        },
    )
    .await;
    stop_consumers.store(true, SeqCst);
    for c in consumers {
        c.await.unwrap();
    }

    let pushed = ledger.pushed.lock().unwrap();
    let pushed_by = ledger.pushed_by.lock().unwrap();
    let deliveries = ledger.deliveries.lock().unwrap();
    let finished = ledger.finished.lock().unwrap();
    let mut delivered: HashMap<&str, usize> = HashMap::new();
    for d in deliveries.iter() {
        *delivered.entry(&d.id).or_default() += 1;
        assert!(
            d.popped >= d.due,
            "{} delivered {} ms early",
            d.id,
            d.due - d.popped
        );
        assert!(
            d.popped - d.due <= MAX_LATE_MS,
            "{} delivered {} ms late (through the {:?} build): delivery paused",
            d.id,
            d.popped - d.due,
            d.build
        );
        if d.topic == "up" {
            assert_eq!(Some(&d.due), pushed.get(&d.id), "{}: due as pushed", d.id);
        }
    }
    for id in pushed.keys() {
        assert_eq!(delivered.get(id.as_str()), Some(&1), "{id} delivered once");
        assert_eq!(finished.get(id), Some(&1), "{id} finished once");
    }
    let mut ticks: Vec<(i64, Build)> = deliveries
        .iter()
        .filter(|d| d.topic == "rec")
        .map(|d| (d.due, d.build))
        .collect();
    ticks.sort_by_key(|t| t.0);
    assert!(ticks.len() >= 10, "the schedule ticked: {ticks:?}");
    let gap = ticks.windows(2).max_by_key(|w| w[1].0 - w[0].0).unwrap();
    let longest = gap[1].0 - gap[0].0;
    assert!(
        longest <= MAX_LATE_MS,
        "the recurring schedule paused {longest} ms between ticks {:?} and {:?} \
         (tick, build that delivered it); instances: {timeline:?}",
        gap[0],
        gap[1]
    );
    for build in [Build::Old, Build::New] {
        assert!(
            deliveries
                .iter()
                .any(|d| d.build == build && d.topic == "up"),
            "the {build:?} build delivered"
        );
        assert!(
            pushed_by.values().any(|b| *b == build),
            "the {build:?} build took pushes"
        );
    }
    eprintln!(
        "upgrade: {} jobs pushed, {} ticks, latest delivery {} ms past due",
        pushed.len(),
        ticks.len(),
        deliveries
            .iter()
            .map(|d| d.popped - d.due)
            .max()
            .unwrap_or(0)
    );
}
