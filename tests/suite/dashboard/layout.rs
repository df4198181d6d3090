//! The page's language and its switch, and the layout at 420 px and
//! 1400 px.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_speaks_the_browsers_language_and_its_switch_is_remembered() {
    let redis = RedisServer::start();
    let (q, s) = sample(&redis, ServerConfig::default()).await;
    let Some(b) = Browser::start_with(Setup {
        lang: "zh-CN",
        ..Setup::default()
    })
    .await
    else {
        s.stop().await;
        return;
    };
    let base = s.base.clone();
    // One table per language, the same strings in each.
    b.view(&base, "", "overview").await;
    assert_eq!(
        b.run("return JSON.stringify(Object.keys(STRINGS.en)) === JSON.stringify(Object.keys(STRINGS.zh));")
            .await,
        json!(true)
    );
    // The browser's language picks Chinese.
    assert_eq!(b.text("#nav a[href='#/']").await, "概览");
    assert_eq!(b.text("#main h2").await, "主题");
    assert_eq!(b.text("#refresh-note").await, "每 5 秒自动刷新。");
    b.shot("dashboard-zh.png").await;
    for (hash, page) in VIEWS {
        b.view(&base, hash, page).await;
        b.no_stray_words(hash).await;
    }
    b.view(&base, "job/sms-9", "job").await;
    assert_eq!(b.text("#job dd[data-field=state]").await, "死信");
    // The switch changes it, and a reload keeps the choice.
    b.click("#lang").await;
    b.wait_text("#job dd[data-field=state]", "dead").await;
    assert_eq!(b.text("#nav a[href='#/']").await, "Overview");
    b.go("about:blank").await;
    b.view(&base, "", "overview").await;
    assert_eq!(b.text("#nav a[href='#/']").await, "Overview");
    assert_eq!(b.text("#main h2").await, "Topics");
    b.click("#lang").await;
    b.wait_text("#nav a[href='#/']", "概览").await;
    drop(b);
    s.stop().await;
    q.close().await;
}

/// The nav marks the link of the page shown, and only it: none on a
/// topic's, a job's or dead letters' page, which the nav does not list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nav_marks_only_the_page_shown() {
    let redis = RedisServer::start();
    let (q, s) = sample(&redis, ServerConfig::default()).await;
    let Some(b) = Browser::start().await else {
        s.stop().await;
        return;
    };
    for (hash, page) in VIEWS {
        b.view(&s.base, hash, page).await;
        let marked = b.attrs("#nav a.current", "href").await;
        let listed = ["", "schedule", "recurring", "webhooks", "instances"];
        let expected: Vec<String> = if listed.contains(hash) {
            vec![format!("#/{hash}")]
        } else {
            vec![]
        };
        assert_eq!(marked, expected, "#/{hash}");
    }
    drop(b);
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_is_usable_in_a_420_px_wide_window() {
    let redis = RedisServer::start();
    let (q, s) = sample(&redis, ServerConfig::default()).await;
    let Some(b) = Browser::start_with(Setup {
        width: 420,
        ..Setup::default()
    })
    .await
    else {
        s.stop().await;
        return;
    };
    let base = s.base.clone();
    b.view(&base, "", "overview").await;
    let width = b.run("return window.innerWidth;").await.as_u64().unwrap();
    assert!(width <= 420, "the window is {width} px wide");
    // No view is wider than the window: wide tables scroll on their own.
    for (hash, page) in VIEWS {
        b.view(&base, hash, page).await;
        let (page_w, view_w) = (
            b.run("return document.documentElement.scrollWidth;").await,
            b.run("return document.documentElement.clientWidth;").await,
        );
        assert!(
            page_w.as_u64().unwrap() <= view_w.as_u64().unwrap(),
            "#/{hash} is {page_w} px wide in a {view_w} px window"
        );
    }
    // And its actions are within reach.
    b.view(&base, "topic/orders", "topic").await;
    b.click("#toggle-pause").await;
    eventually(Duration::from_secs(30), "orders paused", || async {
        q.topics().await.unwrap().topics["orders"]
            .paused
            .then_some(())
    })
    .await;
    b.view(&base, "", "overview").await;
    b.shot("dashboard-narrow.png").await;
    drop(b);
    s.stop().await;
    q.close().await;
}

/// Every table on the view fits the box it scrolls in (none wider).
async fn tables_fit(b: &Browser, view: &str) {
    let wide = b
        .run(
            "return Array.from(document.querySelectorAll('main .scroll')).filter((s) => s.scrollWidth > s.clientWidth)
               .map((s) => (s.firstChild.id || '?') + ': ' + s.scrollWidth + ' px in ' + s.clientWidth + ' ' +
                 Array.from(s.querySelectorAll('tr:nth-child(2) td')).map((c) => Math.round(c.offsetWidth) + ':' + c.textContent.slice(0, 20)).join(' | '));",
        )
        .await;
    assert_eq!(wide, json!([]), "#/{view} has tables wider than their box");
}

/// A new user's reading of the dashboard at 1400 px, in both languages:
/// lateness figures say "≤" once and tell sub-millisecond buckets apart,
/// an instance says which partitions it dispatches in words, a job without
/// tags says so in the page's language, and no table overflows its box.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_reads_right_and_fits_at_1400_px_in_both_languages() {
    let redis = RedisServer::start();
    let d = DelayqProcess::start(&redis, &["--webhook", "hooks=http://127.0.0.1:9/in?key=k"]);
    // Pushes only: the delayq process dispatches, so its histogram counts.
    let q = Queue::connect(delayq::Config {
        dispatch: false,
        ..config(&redis)
    })
    .unwrap();
    q.push(&job("late-1", "reminders-for-members", 200, 60_000))
        .await
        .unwrap();
    q.push(&job("later-1", "reminders-for-members", 3_600_000, 60_000))
        .await
        .unwrap();
    // No max_attempts: one more than its two waits, not "unlimited".
    q.push(&NewJob {
        retry: Some(RetryPolicy {
            intervals: vec![Duration::from_secs(60), Duration::from_secs(300)],
            max_attempts: None,
        }),
        ..job("retry-1", "reminders-for-members", 3_600_000, 60_000)
    })
    .await
    .unwrap();
    let base = d.base.clone();
    let http = reqwest::Client::new();
    for (path, body) in [
        (
            "/v1/topics/reminders-for-members/rate",
            json!({"per_second": 12.5, "burst": 1000}),
        ),
        (
            "/v1/recurring/daily-member-expiry-report",
            json!({"topic": "reports", "cron": "0 0 9 * * *", "timezone": "Asia/Shanghai"}),
        ),
    ] {
        let r = http
            .put(format!("{base}{path}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
    }
    // Fired and counted in every instance's lateness, and an instance heard.
    eventually(Duration::from_secs(60), "lateness samples", || async {
        let (_, v) = api(&base, "/v1/topics").await;
        (v["lateness_ms"]["samples"].as_u64().unwrap_or(0) > 0).then_some(())
    })
    .await;
    eventually(Duration::from_secs(30), "an instance", || async {
        let (_, v) = api(&base, "/v1/instances").await;
        (!v["instances"].as_array()?.is_empty()).then_some(())
    })
    .await;
    let Some(b) = Browser::start_with(Setup {
        width: 1400,
        ..Setup::default()
    })
    .await
    else {
        drop(d);
        return;
    };
    for (lang, partition, tags, no_tags, unlimited) in [
        ("en", "partition 0", "tags", "none", "unlimited"),
        ("zh", "分区 0", "标签", "无", "不限"),
    ] {
        b.view(&base, "", "overview").await;
        if lang == "zh" {
            b.click("#lang").await;
            b.wait_text("#nav a[href='#/']", "概览").await;
        }
        let line = b.text("#lateness-all").await;
        assert!(line.contains("p50 ≤ ") && !line.contains("≤ ≤"), "{line}");
        let labels = b.texts("#lateness tr td:first-child").await;
        let mut unique = labels.clone();
        unique.dedup();
        assert_eq!(unique, labels, "histogram rows read alike");
        assert_eq!(
            labels[0],
            "≤ 0.5 ms".replace("ms", if lang == "en" { "ms" } else { "毫秒" })
        );
        tables_fit(&b, "").await;
        for (hash, page) in [
            ("topic/reminders-for-members", "topic"),
            ("topic/reminders-for-members/delayed", "topic"),
            ("recurring", "recurring"),
            ("webhooks", "webhooks"),
            ("instances", "instances"),
            ("schedule", "schedule"),
        ] {
            b.view(&base, hash, page).await;
            tables_fit(&b, hash).await;
        }
        b.view(&base, "instances", "instances").await;
        assert_eq!(
            b.texts("#instances td[data-col=dispatching]").await,
            [partition]
        );
        let many = if lang == "en" {
            "partitions 0, 2"
        } else {
            "分区 0, 2"
        };
        assert_eq!(b.run("return partitionsText([0, 2]);").await, json!(many));
        b.view(&base, "job/later-1", "job").await;
        assert_eq!(b.text("#job dd[data-field=tags]").await, no_tags);
        let fields = b.texts("#job dt").await;
        assert!(fields.iter().any(|f| f == tags), "{fields:?}");
        let text = b.text("#main").await;
        assert!(!text.contains("[]"), "{text}");
        if lang == "zh" {
            assert!(!fields.iter().any(|f| f == "tags"), "{fields:?}");
        }
        b.view(&base, "job/retry-1", "job").await;
        let retry = b.text("#job dd[data-field=retry]").await;
        assert!(retry.contains('3') && !retry.contains(unlimited), "{retry}");
    }
    drop(b);
    q.close().await;
    d.terminate();
}
