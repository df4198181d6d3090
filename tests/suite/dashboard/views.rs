//! Every view against the API in the browser's zone, what a refresh costs
//! Redis, the instances and webhooks views.

use super::*;

/// Redis commands run (scripts' own commands included) and their CPU (µs)
/// since the last `CONFIG RESETSTAT`, the stats commands left out.
async fn redis_cost(redis: &RedisServer) -> (u64, u64) {
    let info: String = redis.cmd(&["INFO", "commandstats"]).await;
    let (mut calls, mut usec) = (0, 0);
    for line in info.lines() {
        let Some((name, stats)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if name == "info" || name.starts_with("config") {
            continue;
        }
        for kv in stats.split(',') {
            match kv.split_once('=') {
                Some(("calls", n)) => calls += n.parse::<u64>().unwrap(),
                Some(("usec", n)) => usec += n.parse::<u64>().unwrap(),
                _ => {}
            }
        }
    }
    (calls, usec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_costs_redis_what_the_page_shows_and_every_topic_with_delayed_jobs_shows_when() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    // 40 topics of 75 delayed jobs each, one topic after another in due
    // time, then one job of "late" after all 3,000.
    let mut jobs = Vec::new();
    for t in 0..40u64 {
        for j in 0..75u64 {
            jobs.push(job(
                &format!("t{t:02}-{j}"),
                &format!("t{t:02}"),
                3_600_000 + (t * 75 + j) * 1000,
                60_000,
            ));
        }
    }
    for chunk in jobs.chunks(500) {
        push_all(&q, chunk).await;
    }
    q.push(&job("late-1", "late", 7_200_000, 60_000))
        .await
        .unwrap();
    // The upkeep's first look at topic schedules (at once on a fresh Redis).
    eventually(Duration::from_secs(60), "topic schedules ready", || async {
        redis
            .cmd::<Option<String>>(&["HGET", "{dq}:indexed", "done"])
            .await
            .filter(|d| d == "1")
    })
    .await;
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let Some(b) = Browser::start().await else {
        s.stop().await;
        return;
    };
    // One page load: its API calls, and nothing else, against Redis.
    let _: () = redis.cmd(&["CONFIG", "RESETSTAT"]).await;
    b.go(&format!("{}/ui/", s.base)).await;
    b.find("#topics tr[data-topic=late]").await;
    b.wait_text("#updated", "Updated").await;
    let (calls, usec) = redis_cost(&redis).await;
    eprintln!("one dashboard load: {calls} Redis commands, {usec} µs");
    // The page shows 41 topic rows and 20 upcoming jobs: a few hundred
    // commands at most (one listing per topic read thousands of entries).
    assert!(
        calls <= 1_000,
        "one refresh ran {calls} Redis commands ({usec} µs)"
    );
    // "late" has one delayed job, due after 3,000 jobs of other topics:
    // its next due time is its own job's, read from its topic schedule,
    // not "none" nor "after" the stretch of the shared schedule looked at.
    let next = b
        .text("#topics tr[data-topic=late] td[data-col=next_due]")
        .await;
    assert!(
        next.contains("(in 2 h)") || next.contains("(in 119 min)"),
        "{next:?}"
    );
    // The first topic's next due is the first job's.
    let first = b
        .text("#topics tr[data-topic=t00] td[data-col=next_due]")
        .await;
    assert!(
        first.contains("(in 60 min)") || first.contains("(in 59 min)"),
        "{first:?}"
    );
    drop(b);
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_view_shows_what_the_api_gives_in_the_browsers_zone_with_no_null_text() {
    let redis = RedisServer::start();
    let (q, s) = sample(&redis, ServerConfig::default()).await;
    let Some(b) = Browser::start().await else {
        s.stop().await;
        return;
    };
    let base = s.base.clone();

    // Overview: counts, rate limits, backlog ages, throughput, upcoming.
    b.view(&base, "", "overview").await;
    let (_, topics) = api(&base, "/v1/topics").await;
    for (topic, c) in topics["topics"].as_object().unwrap() {
        for state in ["delayed", "ready", "reserved", "finished", "dead"] {
            if c.get(state).is_none() {
                continue;
            }
            let shown = b
                .text(&format!(
                    "#topics tr[data-topic={topic}] td[data-count={state}]"
                ))
                .await;
            assert_eq!(shown, c[state].to_string(), "{topic} {state}");
        }
    }
    assert_eq!(
        b.text("#topics tr[data-topic=mail] td[data-col=rate]")
            .await,
        "5/s, burst 5"
    );
    if topics["topics"]["mail"].get("oldest_ready_ms").is_some() {
        b.find("#topics tr[data-topic=mail] td[data-col=oldest_ready]")
            .await;
        for (topic, c) in topics["topics"].as_object().unwrap() {
            let want = match c["held"].as_str() {
                Some("paused") => "paused",
                Some("rate") => "rate limit",
                Some(other) => other,
                None => "–",
            };
            let shown = b
                .text(&format!("#topics tr[data-topic={topic}] td[data-col=held]"))
                .await;
            assert_eq!(shown, want, "{topic} held");
        }
    } else {
        b.wait_text(".not-available", "Backlog age").await;
    }
    let (status, _) = api(&base, "/v1/stats/throughput?resolution=minute").await;
    if status == 404 {
        assert!(b
            .texts(".not-available")
            .await
            .iter()
            .any(|t| t.starts_with("Throughput")));
    } else {
        // Each instance adds its counts once a second: the chart's totals
        // are the API's once both have read the same flushed counts.
        eventually(Duration::from_secs(60), "the chart's totals", || async {
            let (_, tp) = api(&base, "/v1/stats/throughput?resolution=minute").await;
            let mut want = Vec::new();
            for (kind, points) in tp["series"].as_object().unwrap() {
                let sum: u64 = points
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n.as_u64().unwrap())
                    .sum();
                want.push((kind.clone(), sum.to_string()));
            }
            let mut shown = Vec::new();
            for (kind, _) in &want {
                let css = format!("#throughput .key[data-series={kind}] .total");
                shown.push((kind.clone(), b.texts(&css).await.concat()));
            }
            if shown == want {
                return Some(());
            }
            println!("chart {shown:?}, API {want:?}");
            b.view(&base, "", "overview").await;
            None
        })
        .await;
        // Something was counted: the sample pushed and finished jobs.
        assert_ne!(
            b.text("#throughput .key[data-series=pushed] .total").await,
            "0"
        );
    }
    let (_, upcoming) = api(&base, "/v1/schedule?limit=10").await;
    assert_eq!(
        b.texts("#upcoming tr td:nth-child(4)").await,
        upcoming["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    );
    assert_eq!(b.text("#refresh-note").await, "Refreshes every 5 seconds.");
    assert_eq!(b.text("#zone").await, "Times in Asia/Shanghai (UTC+8).");
    b.shot("dashboard.png").await;

    // A topic's jobs in each state, as the API lists them.
    for (topic, state) in [
        ("orders", "delayed"),
        ("mail", "reserved"),
        ("orders", "finished"),
    ] {
        b.view(&base, &format!("topic/{topic}/{state}"), "topic")
            .await;
        let (status, page) = api(
            &base,
            &format!("/v1/topics/{topic}/jobs?state={state}&limit=50"),
        )
        .await;
        if status == 200 {
            let ids: Vec<String> = page["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(b.attrs("#jobs tr[data-id]", "data-id").await, ids);
            if state == "finished" {
                assert_eq!(ids, ["done-1"]);
            }
        } else {
            assert_eq!(state, "finished", "{status} {page}");
            let lines = b.texts(".not-available").await;
            assert!(
                lines.iter().any(|l| l.starts_with("Finished jobs")),
                "{lines:?}"
            );
        }
        b.no_stray_words(&format!("topic/{topic}/{state}")).await;
    }
    b.view(&base, "topic/mail/reserved", "topic").await;
    assert_eq!(b.text("#topic dd[data-field=rate]").await, "5/s, burst 5");
    let lease = q
        .get("mail-1")
        .await
        .unwrap()
        .unwrap()
        .lease_until_ms
        .unwrap();
    assert!(b
        .text("#jobs tr[data-id=mail-1] td:nth-child(4)")
        .await
        .starts_with(&shanghai(lease)));
    b.view(&base, "topic/orders", "topic").await;
    b.shot("dashboard-topic.png").await;

    // The job page: every field, its failed attempts, times in the zone.
    b.view(&base, "job/sms-9", "job").await;
    let (_, j) = api(&base, "/v1/jobs/sms-9").await;
    assert_eq!(b.text("#job dd[data-field=state]").await, "dead");
    assert_eq!(
        b.text("#job dd[data-field=attempts]").await,
        j["attempts"].to_string()
    );
    assert_eq!(
        b.text("#job dd[data-field='last error']").await,
        "provider said 503"
    );
    assert!(b
        .text("#job dd[data-field='dead since']")
        .await
        .starts_with(&shanghai(j["dead_at_ms"].as_i64().unwrap())));
    assert!(b
        .text("#job dd[data-field=due]")
        .await
        .starts_with(&shanghai(j["due_at_ms"].as_i64().unwrap())));
    assert_eq!(
        b.text("#job dd[data-field=retry]").await,
        "no waits; attempts: at most 1"
    );
    let history = b.texts("#history tr td:nth-child(3)").await;
    assert_eq!(history, vec!["provider said 503".to_owned()]);
    // Its progress, and its log as text (markup shown, not run).
    assert_eq!(
        b.text("#job dd[data-field=progress]").await,
        r#"{"sent":2}"#
    );
    let logs = b.texts("#logs tr td:nth-child(2)").await;
    assert_eq!(logs, vec!["<b>calling</b> the provider".to_owned()]);
    assert_eq!(
        b.text("#refresh-note").await,
        "",
        "the job page does not refresh"
    );
    assert!(!b.text("body").await.contains("Refreshes every"));
    b.view(&base, "job/order-1", "job").await;
    assert_eq!(b.text("#body").await, "order 1");
    b.shot("dashboard-job.png").await;
    // A finished job's kept record: when, by which attempt, its result.
    b.view(&base, "job/done-1", "job").await;
    let (_, j) = api(&base, "/v1/jobs/done-1").await;
    assert_eq!(b.text("#job dd[data-field=state]").await, "finished");
    assert_eq!(
        b.text("#job dd[data-field=result]").await,
        r#"{"refunded":"r-991"}"#
    );
    assert!(b
        .text("#job dd[data-field=finished]")
        .await
        .starts_with(&shanghai(j["finished_at_ms"].as_i64().unwrap())));
    assert_eq!(
        b.text("#job dd[data-field=attempts]").await,
        j["attempts"].to_string()
    );
    assert!(
        b.try_find("#run-now").await.is_none(),
        "a finished job does not run again"
    );

    // What falls due next, every topic.
    b.view(&base, "schedule", "schedule").await;
    let (_, up) = api(&base, "/v1/schedule?limit=50").await;
    let ids: Vec<String> = up["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(b.attrs("#schedule tr[data-id]", "data-id").await, ids);

    // Recurring schedules with their next runs.
    b.view(&base, "recurring", "recurring").await;
    let (_, rec) = api(&base, "/v1/recurring/daily-report").await;
    let next: Vec<i64> = match rec.get("next_runs_ms") {
        Some(v) => serde_json::from_value(v.clone()).unwrap(),
        None => vec![rec["next_fire_ms"].as_i64().unwrap()],
    };
    let shown = b
        .texts("#recurring tr[data-name=daily-report] td[data-col=next_runs] li")
        .await;
    assert_eq!(shown.len(), next.len());
    for (s, ms) in shown.iter().zip(&next) {
        assert!(s.starts_with(&shanghai(*ms)), "{s:?}");
    }
    b.shot("dashboard-recurring.png").await;
    if rec.get("paused").is_some() {
        // Run now pushes a job; pause holds the schedule.
        b.click_until_flash(
            "#recurring tr[data-name=daily-report] button[data-act=run]",
            "Pushed job",
        )
        .await;
        // The notice outlives the view's refresh (every 5 s), which once
        // dropped it before it could be read.
        let updated = b.text("#updated").await;
        let until = Instant::now() + Duration::from_secs(60);
        while b.text("#updated").await == updated {
            assert!(Instant::now() < until, "the view never refreshed");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(
            b.text("#flash").await.contains("Pushed job"),
            "the notice went with the refresh"
        );
        // The view re-renders after run now too: pause is clicked until
        // the schedule says paused.
        let mut paused = false;
        for _ in 0..6 {
            b.click("#recurring tr[data-name=daily-report] button[data-act=pause]")
                .await;
            let until = Instant::now() + Duration::from_secs(10);
            while !paused && Instant::now() < until {
                let (_, r) = api(&base, "/v1/recurring/daily-report").await;
                paused = r["paused"] == json!(true);
                if !paused {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            if paused {
                break;
            }
        }
        assert!(paused, "the schedule was not paused from its button");
        b.wait_text(
            "#recurring tr[data-name=daily-report] td[data-col=state]",
            "paused",
        )
        .await;
    }

    // Webhooks and instances, as the API gives them (or not available).
    for (view, list, key) in [
        ("webhooks", "webhooks", "topic"),
        ("instances", "instances", "id"),
    ] {
        b.view(&base, view, view).await;
        let (status, v) = api(&base, &format!("/v1/{view}")).await;
        if status == 404 {
            b.find(".not-available").await;
        } else {
            let want: Vec<String> = v[list]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x[key].as_str().unwrap().to_owned())
                .collect();
            let attr = if key == "id" { "data-id" } else { "data-topic" };
            assert_eq!(b.attrs(&format!("#{view} tr[{attr}]"), attr).await, want);
        }
    }

    // Dead letters.
    b.view(&base, "dead/sms", "dead").await;
    b.wait_text("#dead tr[data-id=sms-9]", "provider said 503")
        .await;

    // No view shows a stray null or undefined.
    for (hash, page) in VIEWS {
        b.view(&base, hash, page).await;
        b.no_stray_words(hash).await;
    }
    drop(b);
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_and_webhooks_views_show_what_the_running_delayqs_report() {
    let redis = RedisServer::start();
    // A webhook whose receiver is not there: its deliveries fail. The
    // query string's value is a secret the page must not show.
    let d = DelayqProcess::start(
        &redis,
        &["--webhook", "hooks=http://127.0.0.1:9/in?key=hush-hush"],
    );
    let q = queue(&redis);
    q.push(&job("hook-1", "hooks", 0, 60_000)).await.unwrap();
    let Some(b) = Browser::start().await else {
        drop(d);
        return;
    };
    let base = d.base.clone();
    let (status, _) = api(&base, "/v1/instances").await;
    if status == 404 {
        for view in ["instances", "webhooks"] {
            b.view(&base, view, view).await;
            b.find(".not-available").await;
        }
    } else {
        let (_, v) = eventually(Duration::from_secs(30), "an instance", || async {
            let r = api(&base, "/v1/instances").await;
            (!r.1["instances"].as_array().unwrap().is_empty()).then_some(r)
        })
        .await;
        b.view(&base, "instances", "instances").await;
        let me = &v["instances"][0];
        let id = me["id"].as_str().unwrap();
        let row = format!("#instances tr[data-id='{id}']");
        assert_eq!(
            b.text(&format!("{row} td[data-col=host]")).await,
            me["host"].as_str().unwrap()
        );
        assert_eq!(
            b.text(&format!("{row} td[data-col=version]")).await,
            me["version"].as_str().unwrap()
        );
        assert_eq!(
            b.text(&format!("{row} td[data-col=listen]")).await,
            me["listen"].as_str().unwrap()
        );
        b.no_stray_words("instances").await;
        b.shot("dashboard-instances.png").await;

        // The failed delivery shows, and the secret does not.
        let (_, w) = eventually(Duration::from_secs(60), "a failed delivery", || async {
            let r = api(&base, "/v1/webhooks").await;
            let n = r.1["webhooks"][0]["failures_last_hour"]
                .as_u64()
                .unwrap_or(0);
            (n > 0).then_some(r)
        })
        .await;
        b.view(&base, "webhooks", "webhooks").await;
        let hook = &w["webhooks"][0];
        assert_eq!(
            b.text("#webhooks tr[data-topic=hooks] td[data-col=url]")
                .await,
            hook["url"].as_str().unwrap()
        );
        let failures = b
            .text("#webhooks tr[data-topic=hooks] td[data-col=failures]")
            .await;
        assert!(failures.parse::<u64>().unwrap() >= 1, "{failures}");
        let text = b.text("body").await;
        assert!(!text.contains("hush-hush"), "the secret is shown: {text}");
        b.no_stray_words("webhooks").await;
        b.shot("dashboard-webhooks.png").await;
    }
    drop(b);
    q.close().await;
    d.terminate();
}
