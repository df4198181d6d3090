//! Flows on the dashboard: a job of a flow links to its parent's flow page
//! (its raw batch id starts with a control byte, never shown), in both
//! languages.

use super::*;
use delayq::{ChildDead, NewFlow};

fn leaf(id: &str, topic: &str) -> NewFlow {
    NewFlow::leaf(job(id, topic, 0, 60_000))
}

fn parent(id: &str, topic: &str, children: Vec<NewFlow>) -> NewFlow {
    NewFlow {
        job: job(id, topic, 0, 60_000),
        children,
        on_child_dead: ChildDead::Fail,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_a_flow_links_to_its_parents_flow_not_to_a_raw_batch_id() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push_flow(&parent(
        "order-1",
        "close",
        vec![
            leaf("refund-a", "refund"),
            parent("notify-1", "notify", vec![leaf("sms-1", "send")]),
        ],
    ))
    .await
    .unwrap();
    // The sub-parent released: a job of the flow above.
    let d = q
        .pop(&topics(&["send"]), Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    q.finish(&d.id, &d.token).await.unwrap();
    eventually(Duration::from_secs(30), "notify-1 released", || async {
        q.get("notify-1").await.unwrap().map(|_| ())
    })
    .await;
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let Some(b) = Browser::start().await else {
        s.stop().await;
        return;
    };
    let flow = "#job dd[data-field=flow]";
    for child in ["refund-a", "notify-1"] {
        b.view(&s.base, &format!("job/{child}"), "job").await;
        b.wait_text("#job-id", child).await;
        assert_eq!(b.text(flow).await, "order-1", "{child}");
        assert_eq!(
            b.attrs(&format!("{flow} a"), "href").await,
            ["#/flow/order-1"],
            "{child}"
        );
        assert!(b.try_find("#job dd[data-field=batch]").await.is_none());
        assert!(!b.text("#job").await.contains('\u{1}'), "{child}");
        b.no_stray_words(&format!("job/{child}")).await;
    }
    let labels = b.texts("#job dt").await;
    assert!(labels.iter().any(|l| l == "flow"), "{labels:?}");
    // The finder offers flows.
    b.run("const k = document.getElementById('find-kind'); k.value = 'flow'; k.dispatchEvent(new Event('change'));")
        .await;
    assert_eq!(b.text("#find button").await, "Find flow");
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
    zh.view(&s.base, "job/refund-a", "job").await;
    assert_eq!(zh.text(flow).await, "order-1");
    let labels = zh.texts("#job dt").await;
    assert!(labels.iter().any(|l| l == "流程"), "{labels:?}");
    drop(zh);
    s.stop().await;
    q.close().await;
}
