//! A batch's dashboard page, reached from the header's finder, in both
//! languages: its state, trigger, counts and callback as they change;
//! closed from there; a batch that is not there said so.

use super::*;
use delayq::{BatchCallback, BatchOn, NewBatch};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_found_from_the_header_and_its_page_follows_it_to_firing() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let created = q
        .create_batch(&NewBatch {
            id: "sale-9".into(),
            on: BatchOn::Settled,
            callback: BatchCallback {
                topic: "settle".into(),
                body: String::new(),
                ttr: Duration::from_secs(60),
                retry: None,
            },
        })
        .await
        .unwrap();
    for i in 1..=2 {
        q.push(&NewJob {
            batch: Some("sale-9".into()),
            ..job(&format!("close-{i}"), "close", 0, 60_000)
        })
        .await
        .unwrap();
    }
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let Some(b) = Browser::start().await else {
        s.stop().await;
        return;
    };
    b.view(&s.base, "", "overview").await;
    // The finder looks for a batch once switched to it.
    b.run("const k = document.getElementById('find-kind'); k.value = 'batch'; k.dispatchEvent(new Event('change'));")
        .await;
    assert_eq!(b.text("#find button").await, "Find batch");
    b.type_in("#find-id", "sale-9").await;
    b.click("#find button").await;
    b.find("main[data-page=batch]").await;
    let field = |k: &str| format!("#batch dd[data-field={k}]");
    b.wait_text(&field("state"), "open").await;
    assert_eq!(b.text(&field("jobs")).await, "2");
    assert_eq!(b.text(&field("pending")).await, "2");
    assert_eq!(
        b.text(&field("on")).await,
        "once every job finished or died"
    );
    assert!(b
        .text(&field("callback"))
        .await
        .contains(&created.callback_id));
    assert_eq!(
        b.attrs(&format!("{} a", field("callback")), "href").await,
        [format!("#/job/{}", created.callback_id)]
    );
    assert_eq!(b.text(&field("callback_topic")).await, "settle");
    assert_eq!(b.text(&field("ended")).await, "none");
    b.no_stray_words("batch/sale-9").await;

    b.click_until_flash("#batch-close", "Batch sale-9 closed")
        .await;
    assert_eq!(
        q.batch("sale-9").await.unwrap().unwrap().state,
        delayq::BatchState::Closed
    );
    b.wait_text(&field("state"), "closed").await;
    // A job of the batch links to it.
    b.view(&s.base, "job/close-1", "job").await;
    assert_eq!(b.text("#job dd[data-field=batch]").await, "sale-9");
    b.click("#job dd[data-field=batch] a").await;
    b.find("main[data-page=batch]").await;
    b.wait_text(&field("state"), "closed").await;
    for _ in 0..2 {
        let d = q
            .pop(&topics(&["close"]), Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        q.finish(&d.id, &d.token).await.unwrap();
    }
    eventually(Duration::from_secs(30), "the batch fired", || async {
        let b = q.batch("sale-9").await.ok()??;
        (b.state == delayq::BatchState::Fired).then_some(())
    })
    .await;
    // The page refreshes itself.
    b.wait_text(&field("state"), "fired").await;
    assert_eq!(b.text(&field("finished")).await, "2");
    assert_eq!(b.text(&field("pending")).await, "0");
    assert!(!b.text(&field("ended")).await.contains("none"));
    assert!(b.try_find("#batch-close").await.is_none());
    assert!(b.try_find("#batch-cancel").await.is_none());
    // Its callback job's page.
    b.click(&format!("{} a", field("callback"))).await;
    b.find("main[data-page=job]").await;
    assert_eq!(b.text("#job-id").await, created.callback_id);

    b.view(&s.base, "batch/no-such", "batch").await;
    b.wait_text("#batch-missing", "No batch \"no-such\"").await;
    drop(b);

    let Some(zh) = Browser::start_with(Setup {
        lang: "zh-CN",
        ..Setup::default()
    })
    .await
    else {
        s.stop().await;
        return;
    };
    zh.view(&s.base, "batch/sale-9", "batch").await;
    zh.wait_text("#batch dd[data-field=state]", "已触发").await;
    let labels = zh.texts("#batch dt").await;
    assert!(
        labels.iter().any(|l| l == "触发条件") && labels.iter().any(|l| l == "回调任务"),
        "{labels:?}"
    );
    assert_eq!(zh.text("#find button").await, "查找任务");
    zh.no_stray_words("batch/sale-9").await;
    drop(zh);
    s.stop().await;
    q.close().await;
}
