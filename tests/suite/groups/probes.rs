//! Groups meeting the other surfaces: bodies kept in pieces (multi-byte
//! characters cut between pieces) through a pop, a ready listing, a cancel
//! and a kept finished record; group keys that look like other names.

use super::*;
use crate::layout::body;

async fn layout_2(redis: &RedisServer) {
    eventually(LIMIT * 3, "layout 2 or more", || async {
        let v: Option<String> = redis.cmd(&["GET", "{dq}:layout"]).await;
        matches!(v.as_deref(), Some("2" | "3")).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_jobs_with_pieced_bodies_list_pop_cancel_and_keep_finished() {
    let redis = RedisServer::start();
    let q = Queue::connect(Config {
        keep_finished: Some(Duration::from_secs(3600)),
        ..config(&redis)
    })
    .unwrap();
    layout_2(&redis).await;
    // 128 bytes of three-byte characters and two ASCII ones.
    let key = format!("{}ab", "日".repeat(42));
    assert_eq!(key.len(), 128);
    let lens = [65, 100, 1000, 1024];
    let jobs: Vec<NewJob> = lens
        .iter()
        .map(|&n| NewJob {
            body: body(n),
            ..grouped(&format!("p{n}"), "t", &key)
        })
        .collect();
    push_all(&q, &jobs).await;
    ready(&q, "t", 4).await;
    let size: Option<String> = redis.cmd(&["HGET", "{dq}:j:p1000", "z"]).await;
    assert_eq!(size.as_deref(), Some("1000"), "kept in pieces");

    let (page, _) = q
        .list_jobs("t", delayq::JobState::Ready, None, 10)
        .await
        .unwrap();
    // Listed in hand-out order (pushed with no delay: in push order), each
    // body whole.
    let listed: Vec<(String, String, Option<String>)> =
        page.into_iter().map(|j| (j.id, j.body, j.group)).collect();
    let order = lens;
    let want: Vec<(String, String, Option<String>)> = order
        .iter()
        .map(|&n| (format!("p{n}"), body(n), Some(key.clone())))
        .collect();
    assert_eq!(listed, want);

    assert_eq!(
        q.cancel("p100").await.unwrap(),
        Some(delayq::JobState::Ready)
    );
    let mut last = None;
    for n in [65, 1000, 1024] {
        let d = pop1(&q, "t").await.unwrap();
        assert_eq!((d.id.clone(), d.body.clone()), (format!("p{n}"), body(n)));
        if n == 65 {
            last = Some(d);
        } else {
            q.finish(&d.id, &d.token).await.unwrap();
            let kept = q.get(&d.id).await.unwrap().unwrap();
            // A record keeps no body, whole or in pieces.
            assert_eq!(kept.state, delayq::JobState::Finished);
            assert_eq!(kept.body, "");
            let fields: u64 = redis.cmd(&["HLEN", &format!("{{dq}}:j:{}", d.id)]).await;
            assert!(fields < 10, "{fields} fields: pieces left");
        }
    }
    let d = last.unwrap();
    assert!(pop1(&q, "t").await.is_none());
    let g = q.group("t", &key).await.unwrap();
    assert_eq!((g.ready, g.reserved), (0, 1));
    q.finish(&d.id, &d.token).await.unwrap();
    let left: u64 = redis
        .cmd(&["EXISTS", &format!("{{dq}}:grp:t\n{key}")])
        .await;
    assert_eq!(left, 0, "the group leaves no key");
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_keys_that_look_like_other_names_stay_apart() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // A key equal to a job id, a tag, the topic, with ':' either side of
    // a topic with ':' in it; each its own group of limit 1.
    let cases = [
        ("x1", "a:b", "x1"),
        ("x2", "a:b", "a:b"),
        ("x3", "a:b", "c"),
        ("x4", "a", "b:c"),
        ("x5", "a:b", "tg"),
    ];
    let jobs: Vec<NewJob> = cases
        .iter()
        .map(|(id, topic, g)| NewJob {
            tags: vec!["tg".into()],
            ..grouped(id, topic, g)
        })
        .collect();
    push_all(&q, &jobs).await;
    for (_, topic, g) in cases {
        limit(&q, topic, g, 1).await;
    }
    ready(&q, "a:b", 4).await;
    ready(&q, "a", 1).await;
    let mut got = Vec::new();
    for topic in ["a:b", "a"] {
        while let Some(d) = pop1(&q, topic).await {
            got.push(d.id);
        }
    }
    got.sort();
    assert_eq!(got, ["x1", "x2", "x3", "x4", "x5"]);
    for (id, topic, g) in cases {
        let gr = q.group(topic, g).await.unwrap();
        assert_eq!((gr.ready, gr.reserved), (0, 1), "{id}: {topic} / {g}");
    }
    q.close().await;
}
