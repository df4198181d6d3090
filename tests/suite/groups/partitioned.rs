//! Groups on a queue split into partitions: each group lives whole in its
//! home partition, so its limit holds across instances and partitions, a
//! dead holder's slot comes back, groups in different partitions all get
//! their turns, listings and gauges take in every partition, and a
//! grouped job's id must fall in its group's home.

use super::*;
use crate::cluster::cluster_config;
use crate::redis_cluster::{node_config, TestCluster};
use delayq::testing::partition_of;

/// Group names of `n` different home partitions out of `parts`.
fn spread_groups(n: usize, parts: usize) -> Vec<String> {
    let mut homes = BTreeSet::new();
    (0..)
        .map(|i| format!("acct:{i}"))
        .filter(|g| homes.insert(partition_of(g, parts)))
        .take(n)
        .collect()
}

/// A job of `group` whose id delayq picks in the group's partition.
fn unnamed(topic: &str, group: &str) -> NewJob {
    grouped("", topic, group)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_limit_holds_across_two_queues_over_six_partitions_of_a_cluster() {
    let cluster = TestCluster::start_with(3, 0, &node_config());
    let a = Queue::connect(cluster_config(&cluster, 6)).unwrap();
    let b = Queue::connect(cluster_config(&cluster, 6)).unwrap();
    let groups = spread_groups(3, 6);
    let limits = [3u32, 2, 1];
    let mut jobs = Vec::new();
    for (g, n) in groups.iter().zip(limits) {
        limit(&a, "sms", g, n).await;
        jobs.extend((0..20).map(|_| unnamed("sms", g)));
    }
    // Plain jobs beside them, in every partition.
    jobs.extend((0..12).map(|i| job(&format!("plain{i}"), "sms", 0, 60_000)));
    let mut ids = BTreeSet::new();
    for r in a.push_many(&jobs).await.unwrap() {
        ids.insert(r.unwrap().id);
    }
    assert_eq!(ids.len(), 72, "each push its own id");
    ready(&a, "sms", 72).await;
    let holding: Arc<Vec<AtomicI64>> = Arc::new((0..3).map(|_| AtomicI64::new(0)).collect());
    let peak: Arc<Vec<AtomicI64>> = Arc::new((0..3).map(|_| AtomicI64::new(0)).collect());
    let groups = Arc::new(groups);
    let mut tasks = Vec::new();
    for q in [a.clone(), b.clone(), a.clone(), b.clone()] {
        let (holding, peak, groups) = (holding.clone(), peak.clone(), groups.clone());
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let mut idle = 0;
            while idle < 100 {
                let Some(d) = pop1(&q, "sms").await else {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                idle = 0;
                let info = q.get(&d.id).await.unwrap().expect("a popped job is there");
                let k = info
                    .group
                    .as_ref()
                    .map(|g| groups.iter().position(|x| x == g).unwrap());
                if let Some(k) = k {
                    let now = holding[k].fetch_add(1, Ordering::SeqCst) + 1;
                    peak[k].fetch_max(now, Ordering::SeqCst);
                    // Counted in Redis at every pop, too.
                    let g = q.group("sms", &groups[k]).await.unwrap();
                    assert!(
                        g.reserved <= limits[k] as u64,
                        "{} of {} reserved with a limit of {}",
                        g.reserved,
                        groups[k],
                        limits[k]
                    );
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                if let Some(k) = k {
                    holding[k].fetch_sub(1, Ordering::SeqCst);
                }
                q.finish(&d.id, &d.token).await.unwrap();
                got.push(d.id);
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    for k in 0..3 {
        let p = peak[k].load(Ordering::SeqCst);
        assert!(
            p <= limits[k] as i64,
            "{}: peak {p} over {}",
            groups[k],
            limits[k]
        );
    }
    let distinct: BTreeSet<_> = all.iter().cloned().collect();
    assert_eq!(all.len(), 72, "each job once");
    assert_eq!(distinct, ids, "every job handed out");
    for g in groups.iter() {
        let f = a.group("sms", g).await.unwrap();
        assert_eq!((f.ready, f.reserved, f.held), (0, 0, 0), "{g}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holder_on_a_partitioned_queue_gives_its_slot_back_and_its_job_goes_out_once() {
    let cluster = TestCluster::start_with(3, 0, &node_config());
    let q = Queue::connect(cluster_config(&cluster, 6)).unwrap();
    // Short, yet long enough for the steps made under each lease on a
    // busy machine (a cluster's calls take longer than one server's).
    let short = |id: &str| NewJob {
        ttr: Duration::from_secs(5),
        ..grouped(id, "t", "g")
    };
    // The group's hash tag puts the ids in its partition.
    push_all(&q, &[short("{g}:a"), short("{g}:b")]).await;
    limit(&q, "t", "g", 1).await;
    ready(&q, "t", 2).await;
    // Due at the same instant, the two may become ready in either order
    // (a sweep moves both; expired triggers one at a time, as they come).
    let first = pop1(&q, "t").await.unwrap();
    let other = if first.id == "{g}:a" {
        "{g}:b"
    } else {
        "{g}:a"
    };
    assert!(pop1(&q, "t").await.is_none(), "the group is at its limit");
    assert_eq!(q.group("t", "g").await.unwrap().held, 1);
    let second = eventually(LIMIT, "the slot back after the lease", || async {
        pop1(&q, "t").await
    })
    .await;
    assert_eq!(second.id, other);
    assert!(pop1(&q, "t").await.is_none(), "one slot: b holds it");
    q.finish(&second.id, &second.token).await.unwrap();
    let again = pop1(&q, "t").await.expect("a again once b finished");
    assert_eq!((&again.id, again.attempts), (&first.id, 2));
    // The first holder's token no longer finishes it.
    assert!(q.finish(&first.id, &first.token).await.is_err());
    q.finish(&again.id, &again.token).await.unwrap();
    assert!(pop1(&q, "t").await.is_none());
    let g = q.group("t", "g").await.unwrap();
    assert_eq!((g.ready, g.reserved), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_in_different_partitions_all_get_turns_and_are_listed_together() {
    let redis = RedisServer::start();
    let cfg = || Config {
        partitions: 6,
        ..config(&redis)
    };
    let q = Queue::connect(cfg()).unwrap();
    let groups = spread_groups(4, 6);
    // One big group, three small ones, each in a partition of its own.
    // The big group's jobs become ready last, a notice from its partition
    // that every instance hears: a pop that did not wait for it still takes
    // its turn over the partitions.
    let mut jobs: Vec<NewJob> = Vec::new();
    for g in &groups[1..] {
        jobs.extend((0..5).map(|_| unnamed("shop", g)));
    }
    jobs.extend((0..200).map(|_| NewJob {
        delay: Duration::from_millis(300),
        ..unnamed("shop", &groups[0])
    }));
    push_all(&q, &jobs).await;
    // Another instance pops, one job a call, without waiting.
    let p = Queue::connect(cfg()).unwrap();
    ready(&q, "shop", 215).await;
    // The gauges add up every partition's groups.
    let metrics = q.metrics().render(&q.gauges().await);
    for line in [
        "delayq_topic_groups{topic=\"shop\",state=\"known\"} 4",
        "delayq_topic_groups{topic=\"shop\",state=\"in_turn\"} 4",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    let mut out = Vec::new();
    for _ in 0..60 {
        let d = pop1(&p, "shop").await.expect("jobs are ready");
        out.push(p.get(&d.id).await.unwrap().unwrap().group.unwrap());
    }
    for g in &groups[1..] {
        let n = out.iter().filter(|x| *x == g).count();
        assert_eq!(
            n, 5,
            "every small group's jobs in the first 60 pops: {out:?}"
        );
    }
    // The listing merges the partitions by name, a page at a time.
    let mut names = Vec::new();
    let mut after = String::new();
    loop {
        let page = q.groups("shop", &after, 3).await.unwrap();
        assert!(page.groups.len() <= 3);
        names.extend(page.groups.iter().map(|g| g.group.clone()));
        match page.next {
            Some(n) => after = n,
            None => break,
        }
    }
    let mut sorted = groups.clone();
    sorted.sort();
    assert_eq!(names, sorted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_job_outside_its_groups_partition_is_refused_naming_the_form() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    let id = (0..)
        .map(|i| format!("j{i}"))
        .find(|id| partition_of(id, 4) != partition_of("acct:7", 4))
        .unwrap();
    let e = q.push(&grouped(&id, "t", "acct:7")).await.unwrap_err();
    let Error::Invalid(msg) = e else {
        panic!("{e:?}")
    };
    assert!(msg.contains("{acct:7}:r1"), "{msg}");
    assert!(q.get(&id).await.unwrap().is_none());
    assert_eq!(q.group("t", "acct:7").await.unwrap().ready, 0);
    // The group's hash tag, or no id at all, puts it there.
    q.push(&grouped("{acct:7}:r1", "t", "acct:7"))
        .await
        .unwrap();
    let picked = q.push(&unnamed("t", "acct:7")).await.unwrap().id;
    assert_eq!(partition_of(&picked, 4), partition_of("acct:7", 4));
    ready(&q, "t", 2).await;
    assert_eq!(q.group("t", "acct:7").await.unwrap().ready, 2);
    // A dedup key must share the group's partition too.
    let key = (0..)
        .map(|i| format!("k{i}"))
        .find(|k| partition_of(k, 4) != partition_of("acct:7", 4))
        .unwrap();
    let e = q
        .push(&NewJob {
            dedup: Some(delayq::Dedup {
                key: key.clone(),
                mode: delayq::DedupMode::Simple,
                window: None,
                max_wait: None,
            }),
            ..unnamed("t", "acct:7")
        })
        .await
        .unwrap_err();
    let Error::Invalid(msg) = e else {
        panic!("{e:?}")
    };
    assert!(msg.contains(&key) && msg.contains("acct:7"), "{msg}");
    assert_eq!(q.group("t", "acct:7").await.unwrap().ready, 2);
    // Plain jobs go anywhere.
    q.push(&job(&id, "t", 0, 60_000)).await.unwrap();
}

/// The id a refusal suggests is one a push takes, whatever the group's
/// name (braces that make no hash tag included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_id_a_refusal_suggests_is_taken_for_odd_group_names() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    for group in ["}{", "{}x", "}", "{}", "a}b{c", "x}", "acct:7"] {
        let id = (0..)
            .map(|i| format!("j{i}"))
            .find(|id| partition_of(id, 4) != partition_of(group, 4))
            .unwrap();
        let e = q.push(&grouped(&id, "t", group)).await.unwrap_err();
        let Error::Invalid(msg) = e else {
            panic!("{e:?}")
        };
        let hint: String = msg
            .split_once("e.g. id ")
            .and_then(|(_, rest)| serde_json::Deserializer::from_str(rest).into_iter().next())
            .and_then(|v: serde_json::Result<String>| v.ok())
            .unwrap_or_else(|| panic!("no id in {msg}"));
        q.push(&grouped(&hint, "t", group))
            .await
            .unwrap_or_else(|e| panic!("group {group:?}: the hint {hint:?} is refused: {e}"));
    }
}

/// Over HTTP, a grouped push without an id gets one in its group's
/// partition, as a library push does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_push_over_http_without_an_id_lands_in_its_groups_partition() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    let s = TestServer::start(q.clone(), delayq::http::ServerConfig::default()).await;
    let b = &s.base;
    for _ in 0..4 {
        let (st, reply) = request_json(
            reqwest::Method::POST,
            format!("{b}/v1/jobs"),
            Some(serde_json::json!({"topic": "t", "body": "x", "group": "acct:7"})),
        )
        .await;
        assert_eq!(st, 201, "{reply}");
        let id = reply["id"].as_str().unwrap();
        assert_eq!(partition_of(id, 4), partition_of("acct:7", 4), "{id}");
    }
    ready(&q, "t", 4).await;
    assert_eq!(q.group("t", "acct:7").await.unwrap().ready, 4);
    s.stop().await;
}
