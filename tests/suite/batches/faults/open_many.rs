//! Batches at scale: 20,000 open at once, each firing once, in relay calls
//! bounded by what they carry (the benchmark's `batches` section runs
//! 100,000).

use super::*;

/// How many batches the open-at-once test holds (the benchmark's
/// `batches` section runs 100,000).
const OPEN_AT_ONCE: usize = 20_000;

/// Most batches one relay call may name, so most callbacks it may fire:
/// no more than one push call writes jobs (a push script call takes at
/// most 128).
const MOST_FIRES_A_CALL: usize = 128;

/// How many arguments a call in the slowlog had: Redis keeps 31 and says
/// how many more.
fn argc(args: &[String]) -> usize {
    let more = args
        .last()
        .and_then(|a| a.strip_prefix("... ("))
        .and_then(|a| a.strip_suffix(" more arguments)"))
        .and_then(|n| n.parse::<usize>().ok());
    match more {
        Some(n) => args.len() - 1 + n,
        None => args.len(),
    }
}

/// 20,000 batches of one job each, open at once over 4 partitions, then
/// closed and their jobs finished by a fast consumer (500 a pop): each
/// fires once (20,000 callbacks, each its own batch's). The relay's calls
/// are bounded by what they carry: none names more batches (here, notes),
/// so fires more callbacks, than a push call writes jobs (SLOWLOG at 1 ms over the drain: each costly call with its
/// arguments and Redis time, printed with the memory an open batch costs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_batches_open_at_once_fire_once_each_in_bounded_relay_calls() {
    let n = OPEN_AT_ONCE;
    let redis = RedisServer::start();
    let q = super::super::split_queue(&redis, 4);
    q.check_connection().await.unwrap();
    let started = Instant::now();
    let before = memory_at_rest(&redis).await;
    let ids: Vec<String> = (0..n).map(|i| format!("open-{i}")).collect();
    futures::stream::iter(&ids)
        .map(|id| {
            let q = &q;
            async move { create_retried(q, id).await }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let created = started.elapsed();
    let opened = memory_at_rest(&redis).await;
    let members: Vec<NewJob> = ids
        .iter()
        .map(|id| member(&format!("{id}-job"), id))
        .collect();
    futures::stream::iter(members.chunks(500))
        .map(|chunk| push_all(&q, chunk))
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
    let with_jobs = memory_at_rest(&redis).await;
    let first = read(&q, "open-0").await;
    assert_eq!((first.state, first.jobs), (BatchState::Open, 1));
    futures::stream::iter(&ids)
        .map(|id| {
            let q = &q;
            async move {
                let s = retried("close", || q.close_batch(id)).await;
                assert_eq!(s, BatchState::Closed);
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    // From here every call of 1 ms or more is logged (Redis 7 logs the
    // commands a script calls too, so everything would be millions): the
    // relay's calls that carry many notes, pops and finishes of many jobs.
    arm_slowlog(&redis, 100_000).await;
    let _: () = redis
        .cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "1000"])
        .await;
    let closed_at = Instant::now();
    let (jobs, cbs) = tokio::join!(finish_all(&q, "close", n), finish_all(&q, "settle", n));
    let drained = closed_at.elapsed();
    assert!(jobs.iter().all(|d| d.attempts == 1));
    let mut batches = HashSet::new();
    for d in &cbs {
        assert_eq!(d.attempts, 1, "callback {} delivered again", d.id);
        let r: Value = serde_json::from_str(&d.body).unwrap();
        assert_eq!(r["finished"], 1, "{r}");
        assert!(
            batches.insert(r["batch"].as_str().unwrap().to_owned()),
            "{r}: a second callback"
        );
    }
    assert_eq!((cbs.len(), batches.len()), (n, n), "one callback a batch");
    eventually(FIRE_WITHIN, "every note relayed", || async {
        let mut notes = 0;
        for k in Keys::partitions("dq", 4) {
            notes += redis.cmd::<i64>(&["XLEN", &k.notes()]).await;
        }
        (notes == 0).then_some(())
    })
    .await;
    assert_eq!(callbacks(&q).await, 0, "no callback beyond one a batch");
    let last = read(&q, &ids[n - 1]).await;
    assert_eq!((last.state, last.finished), (BatchState::Fired, 1));

    // Each relay call of 1 ms or more: its notes (batch, id, outcome each, after the
    // function's name, the key count, the key, the prefix and the
    // retention) and its Redis time.
    let log = slowlog_entries(&redis).await;
    assert!(log.len() < 100_000, "the slowlog overflowed: {}", log.len());
    let relays: Vec<(usize, i64)> = log
        .iter()
        .filter(|(_, a)| a.len() > 1 && a[0] == "fcall" && a[1].starts_with("dq_batch_note_"))
        .map(|(us, a)| ((argc(a) - 6) / 4, *us))
        .collect();
    let notes: usize = relays.iter().map(|r| r.0).sum();
    let most = relays.iter().map(|r| r.0).max().unwrap_or(0);
    let mut times: Vec<i64> = relays.iter().map(|r| r.1).collect();
    times.sort();
    let over_10ms = |prefix: &str| {
        log.iter()
            .filter(|(us, a)| *us > 10_000 && a.len() > 1 && a[1].starts_with(prefix))
            .count()
    };
    println!(
        "{n} batches open at once (4 partitions): created in {created:?}; Redis memory {:.0} B an open batch, \
         {:.0} B with its job; closed, jobs finished and {n} callbacks handed out in {drained:?}; \
         relay calls of 1 ms or more: {} carrying {notes} notes (at most {most} a call), Redis time a call median {} us, \
         max {} us, {:.1} us a note; calls over 10 ms: batch scripts {}, pops {}, finishes {}, all {} of {}",
        (opened - before) / n as f64,
        (with_jobs - before) / n as f64,
        relays.len(),
        times.get(times.len() / 2).copied().unwrap_or(0),
        times.last().copied().unwrap_or(0),
        times.iter().sum::<i64>() as f64 / notes.max(1) as f64,
        over_10ms("dq_batch_"),
        over_10ms("dq_pop_"),
        over_10ms("dq_remove_"),
        log.iter().filter(|(us, _)| *us > 10_000).count(),
        log.len(),
    );
    assert!(
        most <= MOST_FIRES_A_CALL,
        "a relay call carried {most} notes of as many batches, each of which may fire its callback: more than a push call's \
         {MOST_FIRES_A_CALL} jobs (Redis time of the relay's calls: median {} us, max {} us)",
        times.get(times.len() / 2).copied().unwrap_or(0),
        times.last().copied().unwrap_or(0),
    );
    q.close().await;
}
