//! Group commit: single pushes and finishes that arrive together go to
//! Redis as one script call, and each caller still gets its own answer; a
//! lane goes on after its sender died.

use std::time::Duration;

use delayq::{Config, Error, IfExists, JobState, Limits, PushOutcome, Queue};
use futures::future::join_all;
use futures::FutureExt;

use crate::common::{
    arm_slowlog, command_calls, config, eventually, job, push_all, queue, script_calls, topics,
    CutProxy, RedisServer,
};

/// How many script calls Redis has run since its start.
async fn fcalls(redis: &RedisServer) -> u64 {
    // EVALSHA where the server has no FUNCTION (Redis 6.2).
    command_calls(redis, "fcall").await + command_calls(redis, "evalsha").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_calls_that_arrive_together_share_a_script_call_and_keep_their_own_outcomes() {
    let redis = RedisServer::start();
    // A limit loose enough to let through a delay the script refuses (past
    // the year 9999): one bad job in a batch must fail alone.
    let q = Queue::connect(delayq::Config {
        limits: Limits {
            max_delay: Duration::from_secs(u64::MAX / 4),
            ..Limits::default()
        },
        ..config(&redis)
    })
    .unwrap();
    q.ping().await.unwrap();
    q.push(&job("warm", "b", 3_600_000, 60_000)).await.unwrap();

    let mut jobs: Vec<_> = (0..300)
        .map(|i| job(&format!("j{i}"), "b", 0, 60_000))
        .collect();
    for _ in 0..2 {
        let mut twice = job("twice", "b", 0, 60_000);
        twice.if_exists = IfExists::Keep;
        jobs.push(twice);
    }
    let mut far = job("far", "b", 0, 60_000);
    let far_delay = Duration::from_secs(300_000 * 365 * 24 * 3600);
    far.delay = far_delay;
    jobs.push(far);

    let before = fcalls(&redis).await;
    let results = join_all(jobs.iter().map(|j| q.push(j))).await;
    let calls = fcalls(&redis).await - before;

    let outcomes: Vec<_> = results
        .iter()
        .map(|r| r.as_ref().map(|p| p.outcome))
        .collect();
    assert!(
        outcomes[..300]
            .iter()
            .all(|o| matches!(o, Ok(PushOutcome::Created))),
        "{outcomes:?}"
    );
    let mut twice: Vec<_> = outcomes[300..302]
        .iter()
        .map(|o| *o.as_ref().unwrap())
        .collect();
    twice.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(twice, [PushOutcome::Created, PushOutcome::Kept]);
    let e = results[302].as_ref().unwrap_err();
    assert!(
        matches!(e, Error::Invalid(m) if m.contains("year 9999")),
        "{e}"
    );
    assert!(q.get("far").await.unwrap().is_none());
    // 303 pushes: a few calls of up to 128 jobs, and the bad one's batch
    // once more without it (on an idle machine under 20). How many arrive
    // while a call is in flight depends on the machine's pace: the bound
    // asserts that they share calls, not how well.
    assert!(calls <= 303 / 3, "303 pushes took {calls} script calls");

    // A batch push: the bad job fails alone there too.
    let mut batch: Vec<_> = (0..5)
        .map(|i| job(&format!("m{i}"), "m", 0, 60_000))
        .collect();
    batch[2].delay = far_delay;
    let results = q.push_many(&batch).await.unwrap();
    assert!(
        matches!(&results[2], Err(Error::Invalid(m)) if m.contains("year 9999")),
        "{results:?}"
    );
    for i in [0, 1, 3, 4] {
        assert!(results[i].is_ok(), "{results:?}");
        q.delete(&format!("m{i}")).await.unwrap();
    }

    // Finishes batch the same way; a stale token among them fails alone.
    let mut got = Vec::new();
    while got.len() < 301 {
        let d = q
            .pop_many(&topics(&["b"]), 100, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(!d.is_empty(), "only {} of 301 ready jobs popped", got.len());
        got.extend(d);
    }
    let before = fcalls(&redis).await;
    let mut finishes: Vec<_> = got.iter().map(|d| q.finish(&d.id, &d.token)).collect();
    finishes.push(q.finish(&got[0].id, "not-the-token"));
    let results = join_all(finishes).await;
    let calls = fcalls(&redis).await - before;
    let (last, firsts) = results.split_last().unwrap();
    // The stale finish either came before the real one (stale) or after it
    // (the job is gone); it never succeeds, and every real one does.
    assert!(last.is_err(), "a finish with a wrong token succeeded");
    assert!(firsts.iter().all(|r| r.is_ok()), "{results:?}");
    assert!(calls < 20, "302 finishes took {calls} script calls");

    let o = q.topics().await.unwrap();
    let b = &o.topics["b"];
    assert_eq!((b.delayed, b.ready, b.reserved), (1, 0, 0), "{b:?}");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_woken_together_pop_in_one_call_and_each_gets_its_own_job() {
    let redis = RedisServer::start();
    let q = Queue::connect(config(&redis)).unwrap();
    q.ping().await.unwrap();
    q.push(&job("warm", "w", 0, 60_000)).await.unwrap();
    let before = fcalls(&redis).await;
    let waiters: Vec<_> = (0..40)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                q.pop(&topics(&["c"]), Duration::from_secs(10))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let jobs: Vec<_> = (0..40)
        .map(|i| job(&format!("c{i}"), "c", 0, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    let mut got = Vec::new();
    for w in waiters {
        let d = w.await.unwrap().expect("every waiting consumer gets a job");
        got.push((d.id, d.token));
    }
    let calls = fcalls(&redis).await - before;
    let ids: std::collections::BTreeSet<_> = got.iter().map(|(id, _)| id.clone()).collect();
    let tokens: std::collections::BTreeSet<_> = got.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!((ids.len(), tokens.len()), (40, 40), "{got:?}");
    // Each waiter looked once before the jobs came and once after: 80 pops
    // one by one, far fewer batched (plus the push and the dispatch).
    assert!(calls < 40, "40 consumers took {calls} script calls");
    for (id, token) in &got {
        q.finish(id, token).await.unwrap();
    }
    q.close().await;
}

/// On a partitioned queue (a cluster's), pops that come together meet at
/// the partition whose turn it is and go to it as one call, each with its
/// own job; one that finds it empty goes on to the next with the others.
/// (A call per pop, from a partition one further on each, was most of a
/// cluster's Redis CPU per job.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pops_of_a_partitioned_queue_that_come_together_share_a_call_per_partition() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        partitions: 4,
        ..config(&redis)
    })
    .unwrap();
    let n = 48;
    let jobs: Vec<_> = (0..n)
        .map(|i| job(&format!("p{i}"), "p", 0, 60_000))
        .collect();
    push_all(&q, &jobs).await;
    eventually(Duration::from_secs(30), "every job ready", || async {
        let o = q.topics().await.ok()?;
        (o.topics.get("p")?.ready == n as u64).then_some(())
    })
    .await;
    arm_slowlog(&redis, 10_000).await;
    let got = join_all((0..n).map(|_| {
        let q = q.clone();
        async move { q.try_pop(&topics(&["p"]), 1).await.unwrap() }
    }))
    .await;
    let calls = script_calls(&redis, "dq_pop").await;
    let ids: std::collections::BTreeSet<_> = got.iter().flatten().map(|d| d.id.clone()).collect();
    assert!(
        got.iter().all(|g| g.len() == 1) && ids.len() == n,
        "each pop gets a job of its own: {got:?}"
    );
    // One call per pop would be 48 at least.
    assert!(calls <= n / 3, "{n} pops took {calls} pop calls");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_dropped_while_its_batch_is_at_redis_gives_its_job_back_at_once() {
    let redis = RedisServer::start();
    let q = Queue::connect(config(&redis)).unwrap();
    q.push(&job("given-back", "g", 0, 600_000)).await.unwrap();
    eventually(Duration::from_secs(20), "the job ready", || async {
        (q.topics().await.unwrap().topics["g"].ready == 1).then_some(())
    })
    .await;
    // Polled once and dropped: the pop is queued and its batch sent, but
    // no caller is left to take the reply.
    let before = fcalls(&redis).await;
    let r = q.try_pop(&topics(&["g"]), 1).now_or_never();
    assert!(
        r.is_none(),
        "the pop was meant to be dropped, but it finished: {r:?}"
    );
    // Released (a second script call), not left reserved until its
    // ten-minute ttr.
    eventually(
        Duration::from_secs(20),
        "the pop and its release",
        || async { (fcalls(&redis).await >= before + 2).then_some(()) },
    )
    .await;
    let job = eventually(Duration::from_secs(20), "the job ready again", || async {
        q.get("given-back")
            .await
            .unwrap()
            .filter(|j| j.state == JobState::Ready)
    })
    .await;
    assert_eq!(job.attempts, 0, "a release does not count as an attempt");
    let d = q.try_pop(&topics(&["g"]), 1).await.unwrap();
    assert_eq!(d.len(), 1);
    q.finish(&d[0].id, &d[0].token).await.unwrap();
    q.close().await;
}

/// A lane's sender that dies with its batch at Redis (here: it ran on a
/// caller's short-lived runtime, shut down meanwhile) does not stop the
/// later acknowledged writes of its partition: the next one starts a new
/// sender.
#[tokio::test(flavor = "multi_thread")]
async fn acked_writes_go_on_after_their_lane_sender_died() {
    let (master, _replica) = crate::sentinel::master_and_replica();
    let q = Queue::connect(Config {
        replica_acks: 1,
        // No sweep: the acknowledged batch is the only write at Redis.
        dispatch: false,
        ..config(&master)
    })
    .unwrap();
    // Functions, clock and connections, made on this runtime.
    q.push(&job("warm", "t", 60_000, 30_000)).await.unwrap();

    // Writes wait at Redis until unpaused.
    let _: String = master.cmd(&["CLIENT", "PAUSE", "60000", "WRITE"]).await;
    let (q2, blocked) = (q.clone(), master.client());
    let stranding = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.spawn(async move { q2.push(&job("stranded", "t", 60_000, 30_000)).await });
        rt.block_on(eventually(
            Duration::from_secs(20),
            "the acknowledged batch at Redis",
            || {
                let blocked = blocked.clone();
                async move {
                    let mut c = blocked.get_multiplexed_async_connection().await.ok()?;
                    let info: String = redis::cmd("INFO")
                        .arg("clients")
                        .query_async(&mut c)
                        .await
                        .ok()?;
                    info.contains("blocked_clients:1").then_some(())
                }
            },
        ));
        // The runtime ends with the batch's sender in it.
        drop(rt);
    });
    // Joined off the runtime's workers: a worker blocked in join() could
    // hold the task that drives the connection (a busy machine hung here).
    tokio::task::spawn_blocking(move || stranding.join())
        .await
        .unwrap()
        .unwrap();
    let _: String = master.cmd(&["CLIENT", "UNPAUSE"]).await;
    // Due jobs are dispatched by another instance.
    let _dispatcher = queue(&master);

    let pushed = q.push(&job("after", "t", 0, 30_000)).await;
    assert!(pushed.is_ok(), "a later push: {pushed:?}");
    let d = eventually(Duration::from_secs(10), "the job to pop", || async {
        q.pop(&topics(&["t"]), Duration::ZERO).await.unwrap()
    })
    .await;
    let nacked = q.nack(&d.id, &d.token, None, "again").await;
    assert!(nacked.is_ok(), "a later nack: {nacked:?}");
}

/// While a batch of single pushes is at Redis, enough pushes waiting go
/// as a second batch at once, not after the first's reply: Redis has the
/// next batch in hand when it answers the first. Its reply held back, the
/// first batch never answers here, so a second batch in Redis is one sent
/// beside it. A cut then loses no answer: each push is answered as it
/// ended (run, with its reply lost: outcome unknown or a connection error;
/// never reported as changing nothing), and with replies flowing again
/// every caller of a crowd gets its own outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_push_batch_goes_while_the_first_is_at_redis_and_each_caller_keeps_its_answer() {
    let redis = RedisServer::start();
    let proxy = CutProxy::start(&redis).await;
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(proxy.url()),
        // Longer than any wait below: with one batch at a time, the lane
        // would hold the others back until the first's callers give up.
        redis_timeout: Duration::from_secs(120),
        dispatch: false,
        limits: Limits {
            max_delay: Duration::from_secs(u64::MAX / 4),
            ..Limits::default()
        },
        ..Config::default()
    })
    .unwrap();
    // What Redis holds, read beside the proxy.
    let direct = Queue::connect(Config {
        dispatch: false,
        ..config(&redis)
    })
    .unwrap();
    let delayed = || async {
        let o = direct.topics().await.unwrap();
        o.topics.get("s").copied().unwrap_or_default().delayed
    };
    // Scripts loaded, clock and policy read: later calls are pushes only.
    q.push(&job("warm", "s", 3_600_000, 60_000)).await.unwrap();

    proxy.swallow_replies(true);
    let first_job = job("first", "s", 3_600_000, 60_000);
    let first = {
        let q = q.clone();
        tokio::spawn(async move { q.push(&first_job).await })
    };
    eventually(
        Duration::from_secs(30),
        "the first batch in redis",
        || async { (delayed().await == 2).then_some(()) },
    )
    .await;
    let crowd: Vec<_> = (0..40)
        .map(|i| {
            let (q, j) = (q.clone(), job(&format!("g{i}"), "s", 3_600_000, 60_000));
            tokio::spawn(async move { q.push(&j).await })
        })
        .collect();
    eventually(
        Duration::from_secs(60),
        "a second batch in redis while the first's reply is outstanding",
        || async { (delayed().await > 2).then_some(()) },
    )
    .await;
    assert!(!first.is_finished(), "the first push was answered");

    proxy.cut();
    let mut ended = vec![("first".to_owned(), first.await.unwrap())];
    for (i, h) in crowd.into_iter().enumerate() {
        ended.push((format!("g{i}"), h.await.unwrap()));
    }
    let mut held = std::collections::BTreeSet::new();
    for (id, r) in &ended {
        let stored = direct.get(id).await.unwrap().is_some();
        match r {
            Ok(p) => {
                assert_eq!(p.outcome, PushOutcome::Created, "{id}: pushed twice?");
                assert!(stored, "{id} answered OK but not in redis");
            }
            // The call may have run: either way is right.
            Err(Error::Unknown { .. } | Error::Redis { .. }) => {}
            Err(e) => assert!(!stored, "{id}: {e}, yet it is in redis"),
        }
        if stored {
            held.insert(id.clone());
        }
    }
    assert_eq!(
        delayed().await,
        held.len() as u64 + 1,
        "a job counted twice"
    );

    // Replies flow again. A crowd of new jobs, jobs kept, jobs replaced and
    // one the script refuses: each caller gets its own outcome.
    let replaced: Vec<_> = (0..40)
        .map(|i| job(&format!("r{i}"), "s", 3_600_000, 60_000))
        .collect();
    push_all(&q, &replaced).await;
    let mut jobs = Vec::new();
    let mut expect = Vec::new();
    for i in 0..100 {
        jobs.push(job(&format!("n{i}"), "s", 3_600_000, 60_000));
        expect.push((PushOutcome::Created, format!("body-n{i}")));
    }
    for (id, _) in &ended {
        let mut j = job(id, "s", 3_600_000, 60_000);
        j.if_exists = IfExists::Keep;
        j.body = format!("kept-{id}");
        expect.push(if held.contains(id) {
            (PushOutcome::Kept, format!("body-{id}"))
        } else {
            (PushOutcome::Created, format!("kept-{id}"))
        });
        jobs.push(j);
    }
    for i in 0..40 {
        let mut j = job(&format!("r{i}"), "s", 3_600_000, 60_000);
        j.body = format!("new-r{i}");
        jobs.push(j);
        expect.push((PushOutcome::Replaced, format!("new-r{i}")));
    }
    let mut far = job("far", "s", 0, 60_000);
    far.delay = Duration::from_secs(300_000 * 365 * 24 * 3600);
    jobs.push(far);
    let results = join_all(jobs.iter().map(|j| q.push(j))).await;
    let (refused, answered) = results.split_last().unwrap();
    assert!(
        matches!(refused, Err(Error::Invalid(m)) if m.contains("year 9999")),
        "{refused:?}"
    );
    for ((j, r), (outcome, body)) in jobs.iter().zip(answered).zip(&expect) {
        let p = r.as_ref().unwrap_or_else(|e| panic!("{}: {e}", j.id));
        assert_eq!(p.outcome, *outcome, "{}", j.id);
        let stored = direct.get(&j.id).await.unwrap().expect("in redis");
        assert_eq!(&stored.body, body, "{}", j.id);
    }
    assert!(direct.get("far").await.unwrap().is_none());
    assert_eq!(delayed().await, 1 + 41 + 40 + 100, "jobs lost or twice");
    q.close().await;
    direct.close().await;
}

/// Two push batches at Redis at once (the first's reply held), the
/// second carrying the same id as the first (replaced, then kept) and a
/// push with the first's dedup key: each caller's answer is what Redis
/// holds. The first created; the replace replaced it (its body and due
/// time stored); the dedup push names the first and stored nothing; a
/// keep beside a later slow batch kept it (body unchanged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_push_batches_in_flight_with_one_id_and_one_dedup_key_answer_what_redis_holds() {
    let redis = RedisServer::start();
    let proxy = crate::common::SlowProxy::start(&redis, Duration::ZERO).await;
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(proxy.url()),
        redis_timeout: Duration::from_secs(60),
        dispatch: false,
        ..Config::default()
    })
    .unwrap();
    let direct = Queue::connect(Config {
        dispatch: false,
        ..config(&redis)
    })
    .unwrap();
    q.push(&job("warm", "s", 3_600_000, 60_000)).await.unwrap();
    // Replies held: the first batch's until both are in Redis; then 4 s
    // late each.
    proxy.set_delay(Duration::from_secs(4));
    proxy.hold(true);
    let dedup = |id: &str| delayq::NewJob {
        dedup: Some(delayq::Dedup {
            key: "k".into(),
            mode: delayq::DedupMode::Simple,
            window: None,
            max_wait: None,
        }),
        ..job(id, "s", 3_600_000, 60_000)
    };
    let first = {
        let (q, j) = (q.clone(), dedup("dup"));
        tokio::spawn(async move { q.push(&j).await })
    };
    eventually(
        Duration::from_secs(30),
        "the first batch in redis",
        || async { direct.get("dup").await.unwrap().map(|_| ()) },
    )
    .await;
    // The same id and the same dedup key first in the crowd: in the
    // second batch, which goes once 32 wait (join_all submits in order).
    let mut crowd = vec![
        delayq::NewJob {
            body: "two".into(),
            ..job("dup", "s", 7_200_000, 60_000)
        },
        dedup("other"),
    ];
    crowd.extend((0..38).map(|i| job(&format!("c{i}"), "s", 3_600_000, 60_000)));
    let pushes = {
        let q = q.clone();
        tokio::spawn(async move { join_all(crowd.iter().map(|j| q.push(j))).await })
    };
    eventually(
        Duration::from_secs(30),
        "the second batch in redis",
        || async {
            let j = direct.get("dup").await.unwrap()?;
            (j.body == "two").then_some(())
        },
    )
    .await;
    assert!(
        !first.is_finished(),
        "the first batch was answered: not two at once"
    );
    proxy.hold(false);
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.outcome, PushOutcome::Created);
    let answers: Vec<_> = pushes
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let replace = &answers[0];
    assert_eq!(
        (replace.id.as_str(), replace.outcome),
        ("dup", PushOutcome::Replaced)
    );
    let stored = direct.get("dup").await.unwrap().unwrap();
    assert_eq!(
        (stored.body.as_str(), stored.due_ms),
        ("two", replace.due_ms)
    );
    assert!(replace.due_ms > first.due_ms + 3_000_000);
    // The replace ended the old job and its key with it (the new push
    // carried none): the key is free for the next push of the same batch.
    let other = &answers[1];
    assert_eq!(
        (other.id.as_str(), other.outcome),
        ("other", PushOutcome::Created)
    );
    assert!(direct.get("other").await.unwrap().is_some());
    // The id kept, in a batch beside a slow one: its answer is the job
    // Redis holds.
    let keep = delayq::NewJob {
        if_exists: IfExists::Keep,
        body: "three".into(),
        ..job("dup", "s", 0, 60_000)
    };
    let slow = {
        let q = q.clone();
        tokio::spawn(async move { q.push(&job("slow", "s", 3_600_000, 60_000)).await })
    };
    eventually(
        Duration::from_secs(30),
        "a first batch in redis",
        || async { direct.get("slow").await.unwrap().map(|_| ()) },
    )
    .await;
    let pushes = (0..38)
        .map(|i| job(&format!("d{i}"), "s", 3_600_000, 60_000))
        .chain([keep])
        .collect::<Vec<_>>();
    let b = join_all(pushes.iter().map(|j| q.push(j))).await;
    slow.await.unwrap().unwrap();
    let kept = b.last().unwrap().as_ref().unwrap();
    assert_eq!(
        (kept.outcome, kept.due_ms),
        (PushOutcome::Kept, replace.due_ms)
    );
    assert_eq!(direct.get("dup").await.unwrap().unwrap().body, "two");
    q.close().await;
    direct.close().await;
}

/// A remove call writes its plain finishes' lease ends and keys together at
/// its end. One call that names a job more than once (two finishes under
/// its lease, then a delete) finishes it once: the later ones find it gone
/// (not still there, waiting for the call's last write), and its count
/// moves once.
#[tokio::test]
async fn one_remove_call_that_names_a_job_twice_finishes_it_once() {
    use delayq::testing::{call, scripts, Keys, Status};
    let redis = RedisServer::start();
    let q = queue(&redis);
    for i in 0..3 {
        q.push(&job(&format!("t{i}"), "twice", 0, 60_000))
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    while got.len() < 3 {
        let d = q
            .pop_many(&topics(&["twice"]), 3, Duration::from_secs(5))
            .await
            .unwrap();
        assert!(!d.is_empty(), "only {} of 3 jobs popped", got.len());
        got.extend(d);
    }
    let mut args = redis::Cmd::new();
    // No windows; a result retention; then id, mode, token, result.
    args.arg(0).arg(0).arg(60_000);
    for d in &got {
        args.arg(&d.id).arg("lease").arg(&d.token).arg("");
    }
    args.arg(&got[0].id).arg("lease").arg(&got[0].token).arg("");
    args.arg(&got[0].id).arg("any").arg("").arg("");
    let path = crate::common::script_path(&redis, scripts::REMOVE).await;
    let cmd = call(path, scripts::REMOVE, &Keys::new("dq"), false, 0, &args);
    let reply: Vec<redis::Value> = cmd.query_async(&mut redis.conn().await).await.unwrap();
    let statuses: Vec<i64> = reply[1..]
        .chunks(3)
        .map(|r| match r[0] {
            redis::Value::Int(n) => n,
            ref v => panic!("status {v:?}"),
        })
        .collect();
    let (done, missing) = (Status::Done as i64, Status::Missing as i64);
    assert_eq!(statuses, [done, done, done, missing, missing]);

    let o = q.topics().await.unwrap();
    let t = o.topics.get("twice").copied().unwrap_or_default();
    assert_eq!((t.delayed, t.ready, t.reserved), (0, 0, 0), "{t:?}");
    let counts: Vec<String> = redis.cmd(&["HKEYS", "{dq}:count"]).await;
    assert!(counts.iter().all(|f| !f.ends_with(":twice")), "{counts:?}");
    let left: Vec<String> = redis.cmd(&["KEYS", "{dq}:j:*"]).await;
    assert!(left.is_empty(), "{left:?}");
    let leases: u64 = redis.cmd(&["ZCARD", "{dq}:schedule"]).await;
    assert_eq!(leases, 0);
    q.close().await;
}
