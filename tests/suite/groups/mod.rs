//! Groups: per-group concurrency limits across instances, slots given back
//! by every way a reservation ends, pops taking turns over the groups
//! (bounded by what they return, never by the number of groups), pause and
//! resume of one group, counts and listings, bad group keys refused,
//! retries and priorities inside a group; over HTTP and the CLI; a master
//! killed behind Sentinel.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use delayq::{Config, Error, GroupSettings, NewJob, Queue, RetryPolicy};

mod beside_older;
mod failover;
mod partitioned;
mod probes;
mod surfaces;

const LIMIT: Duration = Duration::from_secs(20);

fn grouped(id: &str, topic: &str, group: &str) -> NewJob {
    NewJob {
        group: Some(group.into()),
        ..job(id, topic, 0, 60_000)
    }
}

/// Waits until `n` jobs of `topic` are ready.
async fn ready(q: &Queue, topic: &str, n: u64) {
    eventually(LIMIT * 3, &format!("{n} jobs of {topic} ready"), || async {
        let o = q.topics().await.ok()?;
        (o.topics.get(topic).map_or(0, |c| c.ready) == n).then_some(())
    })
    .await;
}

async fn limit(q: &Queue, topic: &str, group: &str, n: u32) {
    q.set_group(
        topic,
        group,
        GroupSettings {
            concurrency: Some(n),
            paused: false,
            rate: None,
        },
    )
    .await
    .unwrap();
}

async fn pop1(q: &Queue, topic: &str) -> Option<delayq::Delivery> {
    q.try_pop(&topics(&[topic]), 1)
        .await
        .unwrap()
        .into_iter()
        .next()
}

/// The commands Redis ran, by name, from INFO commandstats (scripts'
/// commands included).
async fn commandstats(redis: &RedisServer) -> BTreeMap<String, u64> {
    let info: String = redis.cmd(&["INFO", "commandstats"]).await;
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// How many commands a script call ran between two readings (the calls
/// themselves, the readings and the connection's own left out).
fn ran(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> u64 {
    after
        .iter()
        .filter(|(k, _)| {
            !["info", "fcall", "evalsha", "client|setinfo", "hello"].contains(&k.as_str())
        })
        .map(|(k, v)| v - before.get(k).copied().unwrap_or(0))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_limit_holds_across_two_queues_popping_at_once() {
    let redis = RedisServer::start();
    let (a, b) = (queue(&redis), queue(&redis));
    let jobs: Vec<NewJob> = (0..40)
        .map(|i| grouped(&format!("j{i:02}"), "sms", "acct"))
        .collect();
    push_all(&a, &jobs).await;
    limit(&a, "sms", "acct", 3).await;
    ready(&a, "sms", 40).await;
    let holding = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for q in [a.clone(), b.clone(), a.clone(), b.clone()] {
        let (holding, peak) = (holding.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let mut idle = 0;
            while idle < 200 {
                let Some(d) = pop1(&q, "sms").await else {
                    idle += 1;
                    tokio::task::yield_now().await;
                    continue;
                };
                idle = 0;
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                // Counted in Redis at every pop, too.
                let g = q.group("sms", "acct").await.unwrap();
                assert!(g.reserved <= 3, "{} reserved with a limit of 3", g.reserved);
                tokio::time::sleep(Duration::from_millis(2)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
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
    assert!(peak.load(Ordering::SeqCst) <= 3, "peak {peak:?}");
    let distinct: BTreeSet<_> = all.iter().collect();
    assert_eq!((all.len(), distinct.len()), (40, 40), "each job once");
    let g = a.group("sms", "acct").await.unwrap();
    assert_eq!((g.ready, g.reserved, g.held), (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_dies_gives_its_slot_back_and_its_job_goes_out_again_once() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // Short, yet long enough for the steps made under each lease on a
    // busy machine.
    let short = |id: &str| NewJob {
        ttr: Duration::from_secs(2),
        ..grouped(id, "t", "g")
    };
    push_all(&q, &[short("a"), short("b")]).await;
    limit(&q, "t", "g", 1).await;
    ready(&q, "t", 2).await;
    // Due at the same instant, the two may become ready in either order
    // (a sweep moves both; expired triggers one at a time, as they come).
    let first = pop1(&q, "t").await.unwrap();
    let other = if first.id == "a" { "b" } else { "a" };
    assert!(pop1(&q, "t").await.is_none(), "the group is at its limit");
    assert_eq!(q.group("t", "g").await.unwrap().held, 1);
    // The holder dies: its lease runs out, the slot comes back, and the job
    // goes to the back of its group's line.
    let second = eventually(LIMIT, "the slot back after the lease", || async {
        pop1(&q, "t").await
    })
    .await;
    assert_eq!(second.id, other);
    assert!(pop1(&q, "t").await.is_none(), "one slot: b holds it");
    q.finish(&second.id, &second.token).await.unwrap();
    let again = pop1(&q, "t").await.expect("a again once b finished");
    assert_eq!((&again.id, again.attempts), (&first.id, 2));
    q.finish(&again.id, &again.token).await.unwrap();
    assert!(pop1(&q, "t").await.is_none());
    let g = q.group("t", "g").await.unwrap();
    assert_eq!((g.ready, g.reserved), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_a_reservation_ends_gives_its_slot_back() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let topic = "ends";
    limit(&q, topic, "g", 1).await;
    let once = NewJob {
        retry: Some(RetryPolicy {
            intervals: vec![],
            max_attempts: Some(1),
        }),
        ..grouped("dies", topic, "g")
    };
    let mut jobs: Vec<NewJob> = [
        "fin", "nack", "del", "cancel", "resched", "replace", "release",
    ]
    .iter()
    .map(|id| grouped(id, topic, "g"))
    .collect();
    jobs.push(once);
    push_all(&q, &jobs).await;
    ready(&q, topic, jobs.len() as u64).await;
    let mut seen = Vec::new();
    let (mut nacked, mut released) = (false, false);
    while let Some(d) = pop1(&q, topic).await {
        assert_eq!(q.group(topic, "g").await.unwrap().reserved, 1);
        assert!(pop1(&q, topic).await.is_none(), "held while {} runs", d.id);
        seen.push(d.id.clone());
        match d.id.as_str() {
            "fin" => q.finish(&d.id, &d.token).await.unwrap(),
            "nack" if !nacked => {
                nacked = true;
                q.nack(&d.id, &d.token, Some(Duration::ZERO), "again")
                    .await
                    .unwrap();
            }
            "nack" => q.finish(&d.id, &d.token).await.unwrap(),
            "del" => assert!(q.delete(&d.id).await.unwrap()),
            "cancel" => {
                q.cancel(&d.id).await.unwrap();
            }
            "resched" => {
                q.reschedule(&d.id, Duration::from_secs(3600), None, None)
                    .await
                    .unwrap();
            }
            "replace" => {
                q.push(&NewJob {
                    delay: Duration::from_secs(3600),
                    ..grouped("replace", topic, "g")
                })
                .await
                .unwrap();
            }
            "release" if !released => {
                released = true;
                q.release(&d.id, &d.token).await.unwrap();
            }
            "release" => q.finish(&d.id, &d.token).await.unwrap(),
            "dies" => {
                q.nack(&d.id, &d.token, None, "dead").await.unwrap();
            }
            other => panic!("unexpected {other}"),
        }
        if seen.len() > 20 {
            break;
        }
    }
    // The release gave it back to the head of the line: it came next.
    let count = |id: &str| seen.iter().filter(|s| *s == id).count();
    assert_eq!(seen.len(), 10, "{seen:?}");
    assert_eq!(count("release"), 2, "{seen:?}");
    let at = seen.iter().position(|s| s == "release").unwrap();
    assert_eq!(seen[at + 1], "release", "{seen:?}");
    assert_eq!(count("nack"), 2, "{seen:?}");
    assert_eq!(
        seen.last().map(String::as_str),
        Some("nack"),
        "a nack goes to the back"
    );
    for id in ["fin", "del", "cancel", "resched", "replace", "dies"] {
        assert_eq!(count(id), 1, "{id} in {seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pops_take_turns_over_groups_so_small_groups_are_not_held_behind_a_big_one() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let big: Vec<NewJob> = (0..10_000)
        .map(|i| grouped(&format!("big{i:05}"), "shop", "flash"))
        .collect();
    push_all(&q, &big).await;
    ready(&q, "shop", 10_000).await;
    let small: Vec<NewJob> = (0..10)
        .flat_map(|g| {
            (0..5).map(move |i| grouped(&format!("m{g}-{i}"), "shop", &format!("merchant{g}")))
        })
        .collect();
    push_all(&q, &small).await;
    ready(&q, "shop", 10_050).await;
    let mut out = Vec::new();
    while out.len() < 60 {
        for d in q.try_pop(&topics(&["shop"]), 4).await.unwrap() {
            out.push(d.id);
        }
    }
    let smalls = out.iter().filter(|id| id.starts_with('m')).count();
    assert_eq!(
        smalls, 50,
        "every small group's jobs in the first 60 pops: {out:?}"
    );
    // Within a group, first in, first out.
    let m0: Vec<&String> = out.iter().filter(|id| id.starts_with("m0-")).collect();
    assert_eq!(m0, ["m0-0", "m0-1", "m0-2", "m0-3", "m0-4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pops_commands_do_not_grow_with_the_number_of_groups() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let many: Vec<NewJob> = (0..100_000)
        .map(|i| grouped(&format!("n{i:06}"), "many", &format!("g{i}")))
        .collect();
    push_all(&q, &many).await;
    let few: Vec<NewJob> = (0..100)
        .map(|i| grouped(&format!("f{i:03}"), "few", &format!("g{}", i % 10)))
        .collect();
    push_all(&q, &few).await;
    ready(&q, "many", 100_000).await;
    ready(&q, "few", 100).await;
    // A group at its limit is out of the rotation, not walked by every pop.
    limit(&q, "few", "g0", 1).await;
    // The least of a few pops each: the queue's own loops (heartbeats)
    // may run a command beside one of them.
    let mut costs = BTreeMap::new();
    for topic in ["few", "many", "few", "many", "few", "many"] {
        let before = commandstats(&redis).await;
        let got = q.try_pop(&topics(&[topic]), 5).await.unwrap();
        let after = commandstats(&redis).await;
        assert_eq!(got.len(), 5);
        let c = ran(&before, &after);
        let least = costs.entry(topic).or_insert(c);
        *least = c.min(*least);
    }
    eprintln!("commands per pop of 5 jobs: {costs:?}");
    assert!(costs["many"] <= costs["few"], "{costs:?}");
    assert!(costs["many"] <= 5 * 12 + 20, "{costs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_group_pauses_and_resumes_alone() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let jobs: Vec<NewJob> = (0..3)
        .flat_map(|i| {
            [
                grouped(&format!("a{i}"), "rem", "a"),
                grouped(&format!("b{i}"), "rem", "b"),
            ]
        })
        .collect();
    push_all(&q, &jobs).await;
    ready(&q, "rem", 6).await;
    let g = q.pause_group("rem", "a").await.unwrap();
    assert!(g.paused);
    assert_eq!((g.ready, g.held), (3, 3));
    let mut got = Vec::new();
    while let Some(d) = pop1(&q, "rem").await {
        q.finish(&d.id, &d.token).await.unwrap();
        got.push(d.id);
    }
    assert_eq!(got, ["b0", "b1", "b2"]);
    assert_eq!(
        q.group("rem", "a").await.unwrap().ready,
        3,
        "a's jobs wait in ready"
    );
    assert_eq!(q.group("rem", "b").await.unwrap().oldest_ready_ms, None);
    // Its head's wait grows while it is held.
    eventually(LIMIT, "a's head waiting 200 ms", || async {
        let g = q.group("rem", "a").await.ok()?;
        (g.oldest_ready_ms? >= 200).then_some(())
    })
    .await;
    q.resume_group("rem", "a").await.unwrap();
    let d = pop1(&q, "rem").await.expect("a's jobs go out once resumed");
    assert_eq!(d.id, "a0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_lowered_while_jobs_run_hands_out_none_until_under_it() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let jobs: Vec<NewJob> = (0..5)
        .map(|i| grouped(&format!("j{i}"), "t", "g"))
        .collect();
    push_all(&q, &jobs).await;
    limit(&q, "t", "g", 3).await;
    ready(&q, "t", 5).await;
    let running = q.try_pop(&topics(&["t"]), 5).await.unwrap();
    assert_eq!(running.len(), 3);
    limit(&q, "t", "g", 1).await;
    for (done, d) in running.iter().enumerate() {
        assert!(
            pop1(&q, "t").await.is_none(),
            "{} reserved, limit 1",
            3 - done
        );
        q.finish(&d.id, &d.token).await.unwrap();
    }
    let mut rest = Vec::new();
    while let Some(d) = pop1(&q, "t").await {
        assert!(pop1(&q, "t").await.is_none(), "one at a time now");
        q.finish(&d.id, &d.token).await.unwrap();
        rest.push(d.id);
    }
    assert_eq!(rest, ["j3", "j4"], "none lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_a_finish_gives_the_slot_back_once() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    limit(&q, "t", "g", 1).await;
    for round in 0..20 {
        let id = format!("r{round}");
        q.push(&grouped(&id, "t", "g")).await.unwrap();
        let d = eventually(LIMIT, "the job", || async { pop1(&q, "t").await }).await;
        let (a, b) = (q.clone(), q.clone());
        let (i1, i2, token) = (d.id.clone(), d.id.clone(), d.token.clone());
        let cancel = tokio::spawn(async move { a.cancel(&i1).await });
        let finish = tokio::spawn(async move { b.finish(&i2, &token).await });
        let _ = cancel.await.unwrap();
        let _ = finish.await.unwrap();
        let g = q.group("t", "g").await.unwrap();
        assert_eq!((g.reserved, g.ready), (0, 0), "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_group_key_is_refused_and_changes_nothing() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    for (bad, why) in [
        (String::new(), "empty"),
        ("x".repeat(129), "129 bytes"),
        ("a\nb".into(), "control"),
        ("a\u{7}".into(), "control"),
        (".".into(), "a dot segment: no URL can name it"),
        ("..".into(), "a dot segment: no URL can name it"),
    ] {
        let e = q.push(&grouped("j", "t", &bad)).await.unwrap_err();
        let Error::Invalid(msg) = e else {
            panic!("{why}: {e:?}")
        };
        assert!(msg.starts_with("group:"), "{why}: {msg}");
        let e = q
            .set_group("t", &bad, GroupSettings::default())
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{why}: {e:?}");
    }
    assert!(q.get("j").await.unwrap().is_none());
    let e = q
        .set_group(
            "t",
            "g",
            GroupSettings {
                concurrency: Some(0),
                paused: false,
                rate: None,
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e:?}");
    let keys: Vec<String> = redis.cmd(&["KEYS", "*"]).await;
    assert!(
        keys.iter()
            .all(|k| !k.contains("grp:") && !k.contains("gready:")),
        "{keys:?}"
    );
    // 128 bytes is fine, and the job says its group.
    let ok = "x".repeat(128);
    q.push(&grouped("j", "t", &ok)).await.unwrap();
    assert_eq!(
        q.get("j").await.unwrap().unwrap().group.as_deref(),
        Some(ok.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_counted_and_listed_a_page_at_a_time() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // Topic "a:b" + group "c" and topic "a" + group "b:c" are apart.
    push_all(
        &q,
        &[
            grouped("x1", "a:b", "c"),
            grouped("x2", "a", "b:c"),
            grouped("x3", "a", "b:c"),
        ],
    )
    .await;
    let jobs: Vec<NewJob> = (0..5)
        .flat_map(|g| (0..=g).map(move |i| grouped(&format!("{g}-{i}"), "t", &format!("g{g}"))))
        .collect();
    push_all(&q, &jobs).await;
    ready(&q, "t", 15).await;
    ready(&q, "a", 2).await;
    assert_eq!(q.group("a:b", "c").await.unwrap().ready, 1);
    assert_eq!(q.group("a", "b:c").await.unwrap().ready, 2);
    limit(&q, "t", "g4", 2).await;
    let popped = q.try_pop(&topics(&["t"]), 15).await.unwrap();
    assert_eq!(popped.len(), 12, "g4 gives 2 of its 5");
    let mut names = Vec::new();
    let mut after = String::new();
    loop {
        let page = q.groups("t", &after, 2).await.unwrap();
        assert!(page.groups.len() <= 2);
        names.extend(page.groups.iter().map(|g| g.group.clone()));
        if let Some(g4) = page.groups.iter().find(|g| g.group == "g4") {
            assert_eq!(
                (g4.ready, g4.reserved, g4.held, g4.concurrency),
                (3, 2, 3, Some(2))
            );
        }
        match page.next {
            Some(n) => after = n,
            None => break,
        }
    }
    assert_eq!(names, ["g0", "g1", "g2", "g3", "g4"]);
    for d in popped {
        q.finish(&d.id, &d.token).await.unwrap();
    }
    while let Some(d) = pop1(&q, "t").await {
        q.finish(&d.id, &d.token).await.unwrap();
    }
    // Done groups leave no keys; g4 stays listed for its setting.
    let page = q.groups("t", "", 10).await.unwrap();
    assert_eq!(
        page.groups
            .iter()
            .map(|g| g.group.as_str())
            .collect::<Vec<_>>(),
        ["g4"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_priorities_and_dead_letters_keep_their_meaning_inside_a_group() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let p = |id: &str, priority: u8| NewJob {
        priority,
        ..grouped(id, "t", "g")
    };
    push_all(&q, &[p("low", 5), p("high", 0), p("mid", 2)]).await;
    ready(&q, "t", 3).await;
    limit(&q, "t", "g", 1).await;
    let d = pop1(&q, "t").await.unwrap();
    assert_eq!(d.id, "high");
    // A retried job goes back to its group, by its priority.
    q.nack(&d.id, &d.token, Some(Duration::ZERO), "again")
        .await
        .unwrap();
    let j = q.get("high").await.unwrap().unwrap();
    assert_eq!(j.group.as_deref(), Some("g"));
    let order: Vec<String> = {
        let mut v = Vec::new();
        while let Some(d) = pop1(&q, "t").await {
            q.finish(&d.id, &d.token).await.unwrap();
            v.push(d.id);
        }
        v
    };
    assert_eq!(order, ["high", "mid", "low"]);
}

/// A pop whose reply was lost (the connection cut before it arrived) gives
/// its job back uncounted, and its group's slot with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_whose_reply_was_lost_gives_the_groups_slot_back() {
    let redis = RedisServer::start();
    let proxy = CutProxy::start(&redis).await;
    let q = queue_at(proxy.url());
    q.push(&NewJob {
        ttr: Duration::from_secs(600),
        ..grouped("lost1", "lost", "g")
    })
    .await
    .unwrap();
    limit(&q, "lost", "g", 1).await;
    ready(&q, "lost", 1).await;
    // A pop of nothing first: by EVALSHA each script loads at its first call.
    assert!(q.try_pop(&topics(&["none"]), 1).await.unwrap().is_empty());
    proxy.swallow_replies(true);
    let popping = {
        let q = q.clone();
        tokio::spawn(async move { q.try_pop(&topics(&["lost"]), 1).await })
    };
    let direct = queue(&redis);
    eventually(LIMIT, "the pop to run in redis", || async {
        (direct.group("lost", "g").await.ok()?.reserved == 1).then_some(())
    })
    .await;
    proxy.cut();
    let reply = popping.await.unwrap();
    assert!(
        !reply.as_ref().is_ok_and(|got| !got.is_empty()),
        "{reply:?}"
    );
    // The ttr is 10 minutes: out again within the bound only if the slot
    // came back with the job.
    let again = eventually(LIMIT, "the job out again", || async {
        direct.try_pop(&topics(&["lost"]), 1).await.ok()?.pop()
    })
    .await;
    assert_eq!((again.id.as_str(), again.attempts), ("lost1", 1));
    assert_eq!(direct.group("lost", "g").await.unwrap().reserved, 1);
}

/// Groups cost a plain job nothing: a pop of one plain job runs as many
/// Redis commands with grouped jobs of its topic waiting behind it as in a
/// topic without groups, and on a server with FUNCTION 11 (TIME included),
/// measured the same way: the build before groups ran 12, and the latest
/// pops list is now trimmed every 64th pop, not at each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_pop_runs_what_it_ran_before_groups() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let mut jobs: Vec<NewJob> = Vec::new();
    for topic in ["mixed", "plain"] {
        jobs.extend((0..6).map(|i| job(&format!("{topic}-p{i}"), topic, 0, 60_000)));
    }
    jobs.extend((0..3).map(|i| grouped(&format!("g{i}"), "mixed", "g")));
    push_all(&q, &jobs).await;
    ready(&q, "mixed", 9).await;
    ready(&q, "plain", 6).await;
    let mut least = BTreeMap::new();
    for topic in ["mixed", "plain", "mixed", "plain", "mixed", "plain"] {
        let before = commandstats(&redis).await;
        let got = q.try_pop(&topics(&[topic]), 1).await.unwrap();
        let after = commandstats(&redis).await;
        assert!(got[0].id.contains("-p"), "ungrouped jobs first");
        let c = ran(&before, &after);
        let l = least.entry(topic).or_insert(c);
        *l = c.min(*l);
    }
    assert_eq!(least["mixed"], least["plain"], "{least:?}");
    if has_functions(&redis).await {
        assert_eq!(least["plain"], 11, "a plain pop's commands");
    }
}

/// Ready grouped jobs that leave ready without a pop leave their group's
/// line at once (a tag cancel, a reschedule), and a dead grouped job
/// requeued goes back to its group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_leaving_ready_leave_their_group_and_a_requeued_one_returns() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let tagged = NewJob {
        tags: vec!["bulk".into()],
        ..grouped("tagged", "t", "g")
    };
    let dies = NewJob {
        retry: Some(RetryPolicy {
            intervals: vec![],
            max_attempts: Some(1),
        }),
        ..grouped("dies", "t", "g")
    };
    push_all(&q, &[tagged, grouped("moved", "t", "g"), dies]).await;
    ready(&q, "t", 3).await;
    assert_eq!(q.group("t", "g").await.unwrap().ready, 3);
    q.cancel_tag("bulk", None, 100).await.unwrap();
    q.reschedule("moved", Duration::from_secs(3600), None, None)
        .await
        .unwrap();
    assert_eq!(q.group("t", "g").await.unwrap().ready, 1);
    let d = pop1(&q, "t").await.unwrap();
    assert_eq!(d.id, "dies");
    q.nack(&d.id, &d.token, None, "no").await.unwrap();
    let g = q.group("t", "g").await.unwrap();
    assert_eq!((g.ready, g.reserved), (0, 0));
    assert_eq!(q.requeue_dead("t", &[]).await.unwrap(), 1);
    assert_eq!(q.group("t", "g").await.unwrap().ready, 1);
    let d = pop1(&q, "t")
        .await
        .expect("the requeued job, from its group");
    assert_eq!(d.id, "dies");
    q.finish(&d.id, &d.token).await.unwrap();
    assert!(pop1(&q, "t").await.is_none());
}

/// A topic's ready listing goes on from its ungrouped jobs to its groups'
/// (by group key, then each group's hand-out order), a page at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_ready_listing_takes_in_its_groups() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let mut jobs = vec![job("plain", "t", 0, 60_000)];
    for (g, n) in [("b", 2), ("a", 3), ("c", 1)] {
        jobs.extend((0..n).map(|i| grouped(&format!("{g}{i}"), "t", g)));
    }
    push_all(&q, &jobs).await;
    ready(&q, "t", 7).await;
    let listed = |after: Option<String>| {
        let q = q.clone();
        async move {
            q.list_jobs("t", delayq::JobState::Ready, after.as_deref(), 2)
                .await
                .unwrap()
        }
    };
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let (page, next) = listed(cursor).await;
        assert!(page.len() <= 2);
        all.extend(page.into_iter().map(|j| j.id));
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    assert_eq!(all, ["plain", "a0", "a1", "a2", "b0", "b1", "c0"]);
    let d = pop1(&q, "t").await.unwrap();
    assert_eq!(d.id, "plain");
    let d = pop1(&q, "t").await.unwrap();
    let (page, _) = listed(None).await;
    assert!(!page.iter().any(|j| j.id == d.id), "{} is reserved", d.id);
}
