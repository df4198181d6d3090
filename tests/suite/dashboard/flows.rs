//! Flows on the dashboard, in both languages: a job of a flow links to
//! its parent's flow page (its raw batch id starts with a control byte,
//! never shown); a flow's page, found from the header's finder, follows
//! it to its release and cancels it; a released parent's page lists its
//! children, a waiting one's links to its flow.

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

/// Reads GET /v1/flows/{id} and a parent's `children` in GET
/// /v1/jobs/{id}: the flows' HTTP routes, built beside the dashboard's
/// page (it fails where they are not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flows_page_follows_it_to_release_and_its_parents_page_lists_its_children() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push_flow(&parent(
        "digest-1",
        "digest",
        vec![
            leaf("member-1", "remind"),
            parent("notify-2", "notify", vec![leaf("sms-2", "send")]),
        ],
    ))
    .await
    .unwrap();
    q.push_flow(&parent(
        "digest-2",
        "digest",
        vec![leaf("member-2", "remind2")],
    ))
    .await
    .unwrap();
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let Some(b) = Browser::start().await else {
        s.stop().await;
        return;
    };
    b.view(&s.base, "", "overview").await;
    // The finder finds a flow by its parent's id.
    b.run("const k = document.getElementById('find-kind'); k.value = 'flow'; k.dispatchEvent(new Event('change'));")
        .await;
    b.type_in("#find-id", "digest-1").await;
    b.click("#find button").await;
    b.find("main[data-page=flow]").await;
    let field = |k: &str| format!("#flow dd[data-field={k}]");
    b.wait_text(&field("state"), "waiting").await;
    assert_eq!(b.text(&field("children")).await, "2");
    assert_eq!(b.text(&field("pending")).await, "2");
    assert_eq!(b.text(&field("topic")).await, "digest");
    assert_eq!(
        b.text(&field("parent_job")).await,
        "(made when its children are done)"
    );
    assert_eq!(b.text(&field("upper")).await, "none");
    assert_eq!(b.text(&field("ended")).await, "none");
    b.no_stray_words("flow/digest-1").await;
    // A waiting parent has no job: its job page says so and links here.
    b.view(&s.base, "job/digest-1", "job").await;
    b.wait_text("#job-flow", "waiting for its children").await;
    assert_eq!(b.attrs("#job-flow a", "href").await, ["#/flow/digest-1"]);
    // A flow below links to the flow above.
    b.view(&s.base, "flow/notify-2", "flow").await;
    assert_eq!(
        b.attrs(&format!("{} a", field("upper")), "href").await,
        ["#/flow/digest-1"]
    );

    // The children finish, with results: the parent is released.
    let pop = |topic: &'static str| {
        let q = q.clone();
        async move {
            q.pop(&topics(&[topic]), Duration::from_secs(10))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let m = pop("remind").await;
    q.finish_with_result(&m.id, &m.token, &json!({"lines": 3}))
        .await
        .unwrap();
    let sms = pop("send").await;
    q.finish(&sms.id, &sms.token).await.unwrap();
    let notify = eventually(Duration::from_secs(30), "notify-2 released", || async {
        q.pop(&topics(&["notify"]), Duration::from_millis(200))
            .await
            .unwrap()
    })
    .await;
    q.finish(&notify.id, &notify.token).await.unwrap();
    eventually(Duration::from_secs(30), "digest-1 released", || async {
        q.get("digest-1").await.unwrap().map(|_| ())
    })
    .await;
    b.view(&s.base, "flow/digest-1", "flow").await;
    b.wait_text(&field("state"), "released").await;
    assert_eq!(b.text(&field("finished")).await, "2");
    assert_eq!(b.text(&field("pending")).await, "0");
    assert!(!b.text(&field("ended")).await.contains("none"));
    assert!(b.try_find("#flow-cancel").await.is_none());
    // Its parent's job page lists the children.
    b.click(&format!("{} a", field("parent_job"))).await;
    b.find("main[data-page=job]").await;
    b.wait_text("#job-id", "digest-1").await;
    assert_eq!(
        b.texts("#children tr[data-id] td:first-child").await,
        ["member-1", "notify-2"]
    );
    assert_eq!(
        b.attrs("#children tr[data-id] td:first-child a", "href")
            .await,
        ["#/job/member-1", "#/job/notify-2"]
    );
    assert_eq!(
        b.texts("#children td[data-outcome]").await,
        ["finished", "finished"]
    );
    assert_eq!(
        b.text("#children tr[data-id=member-1] td:last-child").await,
        r#"{"lines":3}"#
    );
    b.no_stray_words("job/digest-1").await;

    // A waiting flow is cancelled from its page.
    b.view(&s.base, "flow/digest-2", "flow").await;
    b.click("#flow-cancel").await;
    b.accept().await;
    b.wait_text("#flash", "Flow digest-2 cancelled: 1 jobs deleted")
        .await;
    b.wait_text(&field("state"), "cancelled").await;
    assert!(q.get("member-2").await.unwrap().is_none());
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
    zh.view(&s.base, "flow/digest-1", "flow").await;
    zh.wait_text(&field("state"), "已放行").await;
    let labels = zh.texts("#flow dt").await;
    assert!(
        labels.iter().any(|l| l == "父任务") && labels.iter().any(|l| l == "上层流程"),
        "{labels:?}"
    );
    zh.no_stray_words("flow/digest-1").await;
    drop(zh);
    s.stop().await;
    q.close().await;
}
