//! Where schedules come from: the config file, the CLI and the APIs, and
//! what a definition may not be (a tick's id, a misnamed field).

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_and_limits_come_from_the_config_file_the_cli_and_survive_restarts() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("topics.toml");
    std::fs::write(
        &conf,
        r#"
[topics.sms]
rate = { per_second = 50, burst = 100 }

[recurring.expiry-reminders]
topic = "member-expiry"
cron = "0 0 9 * * *"
timezone = "Asia/Shanghai"
body = "within 7 days"
"#,
    )
    .unwrap();
    let conf = conf.to_str().unwrap();
    let a = DelayqProcess::start(&redis, &["--config", conf]);
    let (ok, out, err) = cli(&a.base, &["recurring", "list"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("expiry-reminders")
            && out.contains("0 0 9 * * *")
            && out.contains("Asia/Shanghai"),
        "{out}"
    );
    let (ok, out, _) = cli(&a.base, &["rate", "get", "sms"]);
    assert!(
        ok && out.contains("at most 50 jobs a second, bursts of 100"),
        "{out}"
    );
    let (_, json_out, _) = cli(&a.base, &["recurring", "get", "expiry-reminders", "--json"]);
    let before: Value = serde_json::from_str(&json_out).unwrap();
    // 09:00 in Shanghai is 01:00 UTC.
    let next = before["next_fire_ms"].as_i64().unwrap();
    assert_eq!(next % 86_400_000, 3_600_000, "{before}");

    // A restart with the same file keeps the schedule's ticks as they are.
    a.terminate();
    let a = DelayqProcess::start(&redis, &["--config", conf]);
    let (_, json_out, _) = cli(&a.base, &["recurring", "get", "expiry-reminders", "--json"]);
    let after: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(after["last_tick_ms"], before["last_tick_ms"]);

    // The CLI puts, lists and deletes; bad input is refused with the reason.
    let (ok, _, err) = cli(
        &a.base,
        &[
            "recurring",
            "put",
            "bad",
            "--topic",
            "t",
            "--cron",
            "0 9 * *",
        ],
    );
    assert!(!ok && err.contains("4 fields"), "{err}");
    let (ok, _, err) = cli(
        &a.base,
        &[
            "recurring",
            "put",
            "bad",
            "--topic",
            "t",
            "--cron",
            "0 9 * * *",
            "--timezone",
            "Asia/Nowhere",
        ],
    );
    assert!(!ok && err.contains("unknown"), "{err}");
    let (ok, _, err) = cli(
        &a.base,
        &[
            "recurring",
            "put",
            "hourly",
            "--topic",
            "t",
            "--cron",
            "0 0 * * * *",
            "--missed",
            "skip",
        ],
    );
    assert!(ok, "{err}");
    let (_, out, _) = cli(&a.base, &["recurring", "list"]);
    assert!(out.contains("hourly"), "{out}");
    let (ok, _, _) = cli(&a.base, &["recurring", "delete", "hourly"]);
    assert!(ok);
    let (ok, _, err) = cli(&a.base, &["recurring", "get", "hourly"]);
    assert!(!ok && err.contains("404"), "{err}");
    let (ok, _, _) = cli(&a.base, &["rate", "clear", "sms"]);
    assert!(ok);
    let (ok, _, err) = cli(&a.base, &["rate", "set", "sms", "0"]);
    assert!(!ok && err.contains("per_second"), "{err}");
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_push_cannot_take_a_tick_id_through_the_library_or_either_api() {
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), delayq::http::ServerConfig::default()).await;
    let q = server.queue.clone();
    q.put_recurring(
        "minutely",
        &delayq::Recurring {
            topic: "beat".into(),
            cron: "0 * * * * *".into(),
            body: "from the schedule".into(),
            ..delayq::Recurring::default()
        },
    )
    .await
    .unwrap();
    let next = q
        .recurring("minutely")
        .await
        .unwrap()
        .unwrap()
        .next_fire_ms
        .unwrap();
    let tick = delayq::recurring::tick_id("minutely", next);
    let later = delayq::recurring::tick_id("minutely", next + 60_000);
    let reserved = |msg: &str| msg.contains("reserved") && msg.contains("recurring/{");

    for id in [&tick, &later] {
        let user = job(id, "beat", 0, 60_000);
        match q.push(&user).await {
            Err(delayq::Error::Invalid(m)) => assert!(reserved(&m), "{m}"),
            other => panic!("library push of {id} was not refused: {other:?}"),
        }
        let r = q.push_many(std::slice::from_ref(&user)).await.unwrap();
        assert!(
            matches!(&r[0], Err(delayq::Error::Invalid(m)) if reserved(m)),
            "{r:?}"
        );
        let native = reqwest::Client::new()
            .post(format!("{}/v1/jobs", server.base))
            .json(&json!({"id": id, "topic": "beat", "body": "mine"}))
            .send()
            .await
            .unwrap();
        let status = native.status().as_u16();
        let text = native.text().await.unwrap();
        assert!(
            (400..500).contains(&status) && reserved(&text),
            "{status} {text}"
        );
        let compat = post(
            &server.base,
            "/push",
            &json!({"id": id, "topic": "beat", "body": "mine", "delay": 1, "ttr": 10}).to_string(),
        )
        .await;
        assert!(
            compat["code"] == 1 && reserved(compat["message"].as_str().unwrap()),
            "{compat}"
        );
    }
    // Ids that only look alike are the user's.
    q.push(&job("recurring/minutely/x", "beat", 60_000, 60_000))
        .await
        .unwrap();
    // The tick is still the schedule's, and fires as such.
    eventually(Duration::from_secs(5), "the tick's job", || async {
        q.get(&tick).await.unwrap()
    })
    .await;
    let j = q.get(&tick).await.unwrap().unwrap();
    assert_eq!(j.body, "from the schedule");
    server.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_put_with_the_files_ttr_name_is_refused_naming_ttr_ms() {
    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), delayq::http::ServerConfig::default()).await;
    let r = reqwest::Client::new()
        .put(format!("{}/v1/recurring/daily", server.base))
        .json(&json!({"topic": "t", "cron": "0 0 9 * * *", "ttr": "10m"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());
    let v: Value = r.json().await.unwrap();
    let msg = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(msg.contains("ttr_ms") && msg.contains("600000"), "{v}");
    assert!(server.queue.recurring("daily").await.unwrap().is_none());
    let ok = put(
        &server.base,
        "daily",
        json!({"topic": "t", "cron": "0 0 9 * * *", "ttr_ms": 600_000}),
    )
    .await;
    assert_eq!(ok["ttr_ms"], 600_000);
    server.stop().await;
}

/// The Recurring jobs block of docs/recurring.md: its HTTP PUT and the CLI line it calls
/// "the same from the command line" store the same schedule, and `recurring
/// get` shows its retry policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_recurring_cli_line_stores_what_its_put_stores() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/recurring.md")).unwrap();
    let put_at = readme
        .find("curl -s -X PUT localhost:9277/v1/recurring/expiry-reminders -d '")
        .expect("docs/recurring.md's PUT");
    let json_text = readme[put_at..].split('\'').nth(1).unwrap();
    let cli = readme[put_at..]
        .lines()
        .find(|l| l.starts_with("delayq recurring put "))
        .expect("docs/recurring.md's CLI line");
    let args = shell_words(cli);
    assert_eq!(&args[..3], ["delayq", "recurring", "put"]);
    let name = args[3].clone();

    let redis = RedisServer::start();
    let server = TestServer::start(queue(&redis), delayq::http::ServerConfig::default()).await;
    put(
        &server.base,
        &name,
        serde_json::from_str(json_text).unwrap(),
    )
    .await;
    let by_http = server
        .queue
        .recurring(&name)
        .await
        .unwrap()
        .unwrap()
        .schedule;
    assert!(server.queue.delete_recurring(&name).await.unwrap());
    let (ok, out, err) = delayq_cli(
        &server.base,
        &args[1..].iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("retry: 1m, 5m, 30m; 4 attempts in all, then dead"),
        "{out}"
    );
    let by_cli = server
        .queue
        .recurring(&name)
        .await
        .unwrap()
        .unwrap()
        .schedule;
    assert_eq!(by_cli, by_http);
    let (ok, out, err) = delayq_cli(&server.base, &["recurring", "get", &name]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("retry: 1m, 5m, 30m; 4 attempts in all, then dead"),
        "{out}"
    );
    server.stop().await;
}
