//! Group commit: single pushes and finishes that arrive together go to
//! Redis as one script call, and each caller still gets its own answer.

use std::time::Duration;

use delayq::{Error, IfExists, Limits, PushOutcome, Queue};
use futures::future::join_all;

use crate::common::{config, job, topics, RedisServer};

/// How many FCALLs Redis has run since its start.
async fn fcalls(redis: &RedisServer) -> u64 {
    let info: String = redis.cmd(&["INFO", "commandstats"]).await;
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
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
    far.delay = Duration::from_secs(300_000 * 365 * 24 * 3600);
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
    // 303 pushes: a few calls of up to 128 jobs, plus the bad one's batch
    // again job by job (at most 128 calls).
    assert!(calls < 140, "303 pushes took {calls} script calls");

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
    assert!(calls < 10, "302 finishes took {calls} script calls");

    let o = q.topics().await.unwrap();
    let b = &o.topics["b"];
    assert_eq!((b.delayed, b.ready, b.reserved), (1, 0, 0), "{b:?}");
    q.close().await;
}
