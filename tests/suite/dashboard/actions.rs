//! Acting through the dashboard: a job found and deleted, a dead job
//! requeued, markup shown as text, read-only mode, `/` leading to `/ui/`.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_queue_and_acts_on_it_in_a_real_browser() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    for i in 1..=3 {
        q.push(&job(&format!("order-{i}"), "orders", 3_600_000 * i, 60_000))
            .await
            .unwrap();
    }
    let nasty = "<script>document.title='pwned'</script><b id=\"bold\">bold</b>";
    q.push(&NewJob {
        body: nasty.into(),
        ..job("markup", "orders", 7_200_000, 60_000)
    })
    .await
    .unwrap();
    q.push(&NewJob {
        retry: Some(RetryPolicy {
            intervals: vec![],
            max_attempts: Some(1),
        }),
        ..job("sms-9", "sms", 0, 60_000)
    })
    .await
    .unwrap();
    let d = q
        .pop(&["sms".to_string()], Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    q.nack(&d.id, &d.token, None, "provider said 503")
        .await
        .unwrap();
    let s = TestServer::start(
        q.clone(),
        ServerConfig {
            auth_token: Some(delayq::webhook::Secret("s3cret".into())),
            webhooks: [("hooks".to_owned(), "127.0.0.1:9".to_owned())].into(),
            ..ServerConfig::default()
        },
    )
    .await;

    // The page's own headers: no inline script may run.
    let r = reqwest::get(format!("{}/ui/", s.base)).await.unwrap();
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    // The login cookie alone, without the dashboard's header, opens nothing.
    let cookie = crate::security::dashboard_cookie(&s.base, "s3cret").await;
    let forged = reqwest::Client::new()
        .delete(format!("{}/v1/jobs/order-2", s.base))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(
        forged.status(),
        401,
        "a cross-site request with the cookie is refused"
    );

    let Some(b) = Browser::start().await else {
        s.stop().await;
        return;
    };
    b.go(&format!("{}/ui/", s.base)).await;
    b.type_in("#token", "s3cret").await;
    b.click("#login button").await;
    // The counts match the API.
    b.find("#topics tr[data-topic=orders]").await;
    // A webhook topic with no jobs is listed, marked with its host.
    let hooks = b
        .text("#topics tr[data-topic=hooks] td[data-delivery]")
        .await;
    assert_eq!(hooks, "webhook to 127.0.0.1:9");
    let orders = b
        .text("#topics tr[data-topic=orders] td[data-delivery]")
        .await;
    assert_eq!(orders, "pop");
    let counts = q.topics().await.unwrap().topics;
    for (topic, c) in &counts {
        for (state, n) in [
            ("delayed", c.delayed),
            ("ready", c.ready),
            ("reserved", c.reserved),
            ("dead", c.dead),
        ] {
            let shown = b
                .text(&format!(
                    "#topics tr[data-topic={topic}] td[data-count={state}]"
                ))
                .await;
            assert_eq!(shown, n.to_string(), "{topic} {state}");
        }
    }
    b.find("#upcoming").await;

    // A body with markup is shown as text, and runs nothing.
    b.type_in("#find-id", "markup").await;
    b.click("#find button").await;
    b.wait_text("#job-id", "markup").await;
    assert_eq!(b.text("#body").await, nasty);
    assert_eq!(
        b.run("return Array.from(document.querySelectorAll('script')).map((s) => s.getAttribute('src')).join(' ')")
            .await,
        json!("i18n.js chart.js app.js"),
        "the page's own scripts only"
    );
    assert_eq!(
        b.run("return document.getElementById('bold')").await,
        Value::Null
    );
    assert_ne!(b.run("return document.title").await, json!("pwned"));

    // The topic page sets and removes a rate limit, pauses and resumes.
    b.view(&s.base, "topic/orders", "topic").await;
    assert_eq!(b.text("#topic dd[data-field=rate]").await, "none");
    b.type_in("#rate-per-second", "7.5").await;
    b.type_in("#rate-burst", "3").await;
    b.click("#rate-save").await;
    eventually(Duration::from_secs(30), "the rate limit set", || async {
        let r = q.rates().await.unwrap();
        r.get("orders")
            .filter(|l| l.per_second == 7.5 && l.burst == 3)
            .map(|_| ())
    })
    .await;
    b.wait_text("#topic dd[data-field=rate]", "7.5/s, burst 3")
        .await;
    b.click("#rate-remove").await;
    eventually(
        Duration::from_secs(30),
        "the rate limit removed",
        || async { (!q.rates().await.unwrap().contains_key("orders")).then_some(()) },
    )
    .await;
    b.wait_text("#topic dd[data-field=rate]", "none").await;
    b.click("#toggle-pause").await;
    eventually(Duration::from_secs(30), "orders paused", || async {
        q.topics().await.unwrap().topics["orders"]
            .paused
            .then_some(())
    })
    .await;
    b.wait_text("#toggle-pause", "Resume").await;
    b.click("#toggle-pause").await;
    eventually(Duration::from_secs(30), "orders resumed", || async {
        (!q.topics().await.unwrap().topics["orders"].paused).then_some(())
    })
    .await;

    // A job found by id is deleted.
    b.go(&format!("{}/ui/#/job/order-1", s.base)).await;
    b.wait_text("#job-id", "order-1").await;
    // The job's fields as the API gives them.
    let api: Value = reqwest::Client::new()
        .get(format!("{}/v1/jobs/order-1", s.base))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        b.text("#job dd[data-field=state]").await,
        api["state"].as_str().unwrap()
    );
    assert_eq!(
        b.text("#job dd[data-field=attempts]").await,
        api["attempts"].to_string()
    );
    // In the browser's zone, with the zone shown, and how far off.
    let due_ms = api["due_at_ms"].as_i64().unwrap();
    let shown_due = b.text("#job dd[data-field=due]").await;
    assert!(
        shown_due.starts_with(&shanghai(due_ms)) && shown_due.contains("(in "),
        "{shown_due:?} is not {}",
        shanghai(due_ms)
    );
    assert_eq!(b.text("#job dd[data-field='last error']").await, "none");
    assert_eq!(b.text("#job dd[data-field='lease until']").await, "none");
    b.click("#delete").await;
    b.accept().await;
    eventually(Duration::from_secs(30), "order-1 deleted", || async {
        q.get("order-1").await.unwrap().is_none().then_some(())
    })
    .await;

    // A dead job is requeued.
    b.open_until(&format!("{}/ui/#/dead/sms", s.base), "#dead")
        .await;
    b.wait_text("#dead", "provider said 503").await;
    b.click("#dead tr[data-id=sms-9] input").await;
    b.click("#requeue-selected").await;
    eventually(Duration::from_secs(30), "sms-9 requeued", || async {
        (q.get("sms-9").await.unwrap().unwrap().state == JobState::Ready).then_some(())
    })
    .await;
    // Signing out ends the session: the page asks again, and the cookie
    // the browser may still hold opens nothing.
    b.click("#signout").await;
    b.find("#login").await;
    let status = b
        .run(&format!(
            "const r = await fetch('{}/v1/topics', {{headers: {{'X-Delayq-UI': '1'}}}}); return r.status;",
            s.base
        ))
        .await;
    assert_eq!(status, json!(401));
    s.stop().await;

    // Read-only: no actions on the page, and the server refuses them.
    let ro = TestServer::start(
        q.clone(),
        ServerConfig {
            ui: UiMode::ReadOnly,
            ..ServerConfig::default()
        },
    )
    .await;
    b.go(&format!("{}/ui/#/job/order-2", ro.base)).await;
    b.wait_text("#job-id", "order-2").await;
    assert!(
        b.try_find("#delete").await.is_none(),
        "read-only shows no delete"
    );
    let status = b
        .run(&format!(
            "const r = await fetch('{}/v1/jobs/order-2', {{method: 'DELETE', headers: {{'X-Delayq-UI': '1'}}}}); return r.status;",
            ro.base
        ))
        .await;
    assert_eq!(status, json!(403));
    assert!(q.get("order-2").await.unwrap().is_some());
    ro.stop().await;
    drop(b);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_dashboard_shows_every_view_and_no_action() {
    let redis = RedisServer::start();
    let (q, s) = sample(
        &redis,
        ServerConfig {
            ui: UiMode::ReadOnly,
            ..ServerConfig::default()
        },
    )
    .await;
    let Some(b) = Browser::start().await else {
        s.stop().await;
        return;
    };
    let base = s.base.clone();
    for (hash, page) in VIEWS {
        b.view(&base, hash, page).await;
        // View controls (the chart's resolution) only.
        let actions = b
            .run("return document.querySelectorAll('main button:not([data-view]), main input, main form, main select').length;")
            .await;
        assert_eq!(actions, json!(0), "#/{hash} offers an action");
        b.no_stray_words(hash).await;
    }
    assert_eq!(b.text("#mode").await, "read-only");
    drop(b);
    s.stop().await;
    q.close().await;
}

/// `GET /` leads a browser to the dashboard; the compatible API is where
/// it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_leads_to_the_dashboard() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = http.get(format!("{}/", s.base)).send().await.unwrap();
    assert!(r.status().is_redirection(), "GET / answered {}", r.status());
    assert_eq!(r.headers()["location"], "ui/");
    let r = http
        .post(format!("{}/push", s.base))
        .body(r#"{"topic":"t","id":"1","delay":1,"ttr":60}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["code"], 0);
    s.stop().await;
    q.close().await;
}

/// A running job's page offers "cancel": confirmed, the lease ends, the
/// holder's finish is answered "cancelled" and changes nothing, and the job
/// is not handed out again. A job that is not running offers no cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_is_cancelled_from_its_page() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("close-7", "orders", 0, 600_000)).await.unwrap();
    q.push(&job("close-8", "orders", 3_600_000, 600_000))
        .await
        .unwrap();
    let held = q
        .pop(&["orders".to_string()], Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(held.id, "close-7");
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let Some(b) = Browser::start().await else {
        s.stop().await;
        return;
    };
    b.go(&format!("{}/ui/#/job/close-8", s.base)).await;
    b.wait_text("#job-id", "close-8").await;
    assert!(
        b.try_find("#cancel").await.is_none(),
        "a delayed job offers no cancel"
    );
    b.go(&format!("{}/ui/#/job/close-7", s.base)).await;
    b.wait_text("#job-id", "close-7").await;
    assert_eq!(b.text("#job dd[data-field=state]").await, "reserved");
    b.click("#cancel").await;
    b.accept().await;
    eventually(Duration::from_secs(30), "close-7 cancelled", || async {
        let j = q.get("close-7").await.unwrap();
        j.is_none_or(|j| j.state != JobState::Reserved)
            .then_some(())
    })
    .await;
    let finished = q.finish(&held.id, &held.token).await;
    assert!(
        matches!(finished, Err(delayq::Error::Cancelled(_))),
        "the holder's finish after a cancel: {finished:?}"
    );
    let again = q
        .pop(&["orders".to_string()], Duration::from_millis(300))
        .await
        .unwrap();
    assert!(again.is_none(), "handed out again: {again:?}");
    drop(b);
    s.stop().await;
    q.close().await;
}
