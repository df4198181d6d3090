//! A topic's groups on its dashboard page, in both languages: their
//! figures, and a group paused and resumed from there.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_page_shows_its_groups_and_pauses_one() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    for i in 0..3 {
        q.push(&NewJob {
            group: Some("acct:1".into()),
            ..job(&format!("m{i}"), "sms", 0, 60_000)
        })
        .await
        .unwrap();
    }
    q.set_group(
        "sms",
        "acct:1",
        delayq::GroupSettings {
            concurrency: Some(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    eventually(Duration::from_secs(30), "3 jobs ready", || async {
        (q.topics().await.ok()?.topics.get("sms")?.ready == 3).then_some(())
    })
    .await;
    let d = q.try_pop(&topics(&["sms"]), 5).await.unwrap();
    assert_eq!(d.len(), 1, "the limit lets one out");
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let Some(b) = Browser::start().await else {
        return;
    };
    b.view(&s.base, "topic/sms/ready", "topic").await;
    let row = "#groups tr[data-group='acct:1']";
    b.wait_text(&format!("{row} td[data-col=ready]"), "2").await;
    assert_eq!(b.text(&format!("{row} td[data-col=held]")).await, "2");
    assert_eq!(b.text(&format!("{row} td[data-col=reserved]")).await, "1");
    assert_eq!(b.text(&format!("{row} td[data-col=limit]")).await, "1");
    b.no_stray_words("topic/sms/ready").await;
    b.click(&format!("{row} button.group-toggle")).await;
    b.wait_text(&format!("{row} td[data-col=state]"), "paused")
        .await;
    assert!(q.group("sms", "acct:1").await.unwrap().paused);
    b.click(&format!("{row} button.group-toggle")).await;
    b.wait_text(&format!("{row} td[data-col=state]"), "running")
        .await;
    assert!(!q.group("sms", "acct:1").await.unwrap().paused);
    drop(b);
    // In Chinese.
    let Some(zh) = Browser::start_with(Setup {
        lang: "zh-CN",
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    zh.view(&s.base, "topic/sms/ready", "topic").await;
    zh.find(row).await;
    assert!(
        zh.texts("h2").await.iter().any(|h| h == "分组"),
        "{:?}",
        zh.texts("h2").await
    );
    zh.wait_text("#groups", "并发上限").await;
    zh.no_stray_words("topic/sms/ready").await;
    drop(zh);
    s.stop().await;
}
