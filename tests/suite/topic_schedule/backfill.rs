//! The backfill beside the queue's own traffic: a pass over a Redis an
//! older build filled ends exact while jobs are pushed, fire and move.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backfill_beside_pushes_and_fires_ends_exact() {
    let redis = RedisServer::start();
    // An older build ran: the layout is below 3.
    let _: () = redis.cmd(&["SET", "{dq}:layout", "2 held"]).await;
    let base = now_ms() + 3_600_000;
    let topics = ["a", "b", "c", "d", "e"];
    {
        let q = queue(&redis);
        fill(&q, &topics, 1000, base).await;
        indexed(&redis).await;
        q.close().await;
    }
    // As an older build left it.
    let mut c = redis.conn().await;
    let _: () = redis::cmd("DEL")
        .arg("{dq}:s:a")
        .arg("{dq}:s:b")
        .arg("{dq}:s:c")
        .arg("{dq}:s:d")
        .arg("{dq}:s:e")
        .arg("{dq}:indexed")
        .query_async(&mut c)
        .await
        .unwrap();
    let q = queue(&redis);
    // While the pass runs: new jobs, jobs that fire within a second,
    // replaces into other topics, deletes.
    let soon = now_ms() + 300;
    for i in 0..1000usize {
        let t = topics[i % 5];
        let j = match i % 4 {
            0 => NewJob {
                due_at_ms: Some(base + 5_000 + i as i64),
                ..job(&format!("new-{i}"), t, 0, 60_000)
            },
            1 => NewJob {
                due_at_ms: Some(soon + (i % 50) as i64),
                ..job(&format!("fires-{i}"), t, 0, 60_000)
            },
            2 => NewJob {
                due_at_ms: Some(base + 7_000),
                ..job(&format!("{t}-{i}"), topics[(i + 1) % 5], 0, 60_000)
            },
            _ => {
                assert!(q.delete(&format!("{t}-{i}")).await.unwrap());
                continue;
            }
        };
        q.push(&j).await.unwrap();
    }
    indexed(&redis).await;
    eventually(LONG, "the short jobs fired", || async {
        let ready: i64 = redis
            .cmd(&["ZCOUNT", "{dq}:schedule", "-inf", &(base - 1).to_string()])
            .await;
        (ready == 0).then_some(())
    })
    .await;
    for t in topics {
        exact(&redis, t, "the backfill beside pushes and fires").await;
    }
    let (own, _) = both(&redis, "a").await;
    assert_eq!(
        own.len(),
        1000,
        "a: 50 new, 50 moved in, 50 moved out, 50 deleted"
    );
    q.close().await;
}
