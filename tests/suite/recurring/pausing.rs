//! Pausing and resuming a schedule, running it now, and its last tick.

use super::*;

async fn post_status(base: &str, path: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn get_schedule(base: &str, name: &str) -> Value {
    let r = reqwest::get(format!("{base}/v1/recurring/{name}"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

fn ms_list(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_schedule_makes_no_ticks_and_resumes_from_now_without_a_burst() {
    let redis = RedisServer::start();
    let a = DelayqProcess::start(&redis, &[]);
    let q = consumer_queue(&redis);
    let stop = Arc::new(AtomicBool::new(false));
    let (task, seen) = consume(q.clone(), "pulse", stop.clone());
    let put_reply = put(
        &a.base,
        "pulse",
        json!({"topic": "pulse", "cron": "* * * * * *"}),
    )
    .await;
    assert_eq!(put_reply["paused"], false);
    let runs = ms_list(&put_reply["next_runs_ms"]);
    assert_eq!(runs.len(), 5, "{put_reply}");
    assert_eq!(Some(runs[0]), put_reply["next_fire_ms"].as_i64());
    assert!(runs.windows(2).all(|w| w[1] - w[0] == 1000), "{runs:?}");
    eventually(Duration::from_secs(15), "a first tick", || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;

    let (status, paused) = post_status(&a.base, "/v1/recurring/pulse/pause").await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["next_fire_ms"], Value::Null);
    assert_eq!(paused["next_runs_ms"], json!([]));
    let paused_at = paused["paused_at_ms"].as_i64().unwrap();
    // Pausing twice changes nothing.
    let (_, again) = post_status(&a.base, "/v1/recurring/pulse/pause").await;
    assert_eq!(again["paused_at_ms"].as_i64(), Some(paused_at));
    // Three of its seconds go by: no tick of them is pushed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let listed: Value = reqwest::get(format!("{}/v1/recurring", a.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["schedules"][0]["paused"], true, "{listed}");

    let (status, resumed) = post_status(&a.base, "/v1/recurring/pulse/resume").await;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["paused"], false);
    assert_eq!(resumed["paused_at_ms"], Value::Null);
    // Its ticks count from the resume: the first is after the pause's
    // three seconds.
    let resumed_next = resumed["next_fire_ms"].as_i64().unwrap();
    assert!(resumed_next > paused_at + 3000, "{resumed}");
    // The last whole second at or before the resume.
    let before_resume = resumed_next - 1000;
    assert_eq!(ms_list(&resumed["next_runs_ms"]).len(), 5);
    // Resuming a running schedule leaves its ticks alone.
    let (_, again) = post_status(&a.base, "/v1/recurring/pulse/resume").await;
    assert!(again["next_fire_ms"].as_i64().unwrap() >= resumed_next);
    eventually(
        Duration::from_secs(15),
        "a tick after the resume",
        || async {
            let s = seen.lock().unwrap();
            s.iter()
                .any(|(id, _)| tick_of(id) > before_resume)
                .then_some(())
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    task.await.unwrap();
    let seen = seen.lock().unwrap().clone();
    let during: Vec<&String> = seen
        .iter()
        .map(|(id, _)| id)
        .filter(|id| tick_of(id) > paused_at && tick_of(id) <= before_resume)
        .collect();
    assert!(
        during.is_empty(),
        "ticks of the paused time fired: {during:?}"
    );
    drop(a);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_schedule_of_the_config_file_stays_paused_across_restarts_and_redefinitions() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("topics.toml");
    let write_conf = |body: &str| {
        std::fs::write(
            &conf,
            format!(
                "[recurring.nightly]\ntopic = \"reports\"\ncron = \"0 0 3 * * *\"\nbody = \"{body}\"\n"
            ),
        )
        .unwrap();
    };
    write_conf("v1");
    let conf_path = conf.to_str().unwrap().to_owned();
    let a = DelayqProcess::start(&redis, &["--config", &conf_path]);
    let (ok, out, err) = cli(&a.base, &["recurring", "pause", "nightly"]);
    assert!(ok && out.contains("paused"), "{out}{err}");

    // Same file: still paused.
    a.terminate();
    let a = DelayqProcess::start(&redis, &["--config", &conf_path]);
    let s = get_schedule(&a.base, "nightly").await;
    assert_eq!(s["paused"], true, "{s}");
    assert_eq!(s["next_runs_ms"], json!([]));

    // A changed definition is put again, and the pause stays.
    a.terminate();
    write_conf("v2");
    let a = DelayqProcess::start(&redis, &["--config", &conf_path]);
    let s = get_schedule(&a.base, "nightly").await;
    assert_eq!(
        (s["body"].as_str(), s["paused"].as_bool()),
        (Some("v2"), Some(true)),
        "{s}"
    );

    let (ok, _, err) = cli(&a.base, &["recurring", "resume", "nightly"]);
    assert!(ok, "{err}");
    let s = get_schedule(&a.base, "nightly").await;
    assert_eq!(s["paused"], false, "{s}");
    assert_eq!(ms_list(&s["next_runs_ms"]).len(), 5, "{s}");
    // 03:00 UTC each day.
    assert!(ms_list(&s["next_runs_ms"])
        .windows(2)
        .all(|w| w[1] - w[0] == 86_400_000));
    drop(a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_pushes_one_job_like_a_tick_and_leaves_the_schedules_ticks() {
    let redis = RedisServer::start();
    let a = DelayqProcess::start(&redis, &[]);
    let q = consumer_queue(&redis);
    let created = put(
        &a.base,
        "yearly",
        json!({"topic": "annual", "cron": "0 0 9 1 1 *", "body": "happy new year", "ttr_ms": 5000}),
    )
    .await;
    // Once its first tick's job is pushed (due next New Year).
    let first = created["next_fire_ms"].as_i64().unwrap();
    let before = eventually(Duration::from_secs(15), "the first tick pushed", || async {
        let pushed = q
            .get(&delayq::recurring::tick_id("yearly", first))
            .await
            .unwrap()
            .is_some();
        match pushed {
            true => Some(get_schedule(&a.base, "yearly").await),
            false => None,
        }
    })
    .await;
    assert_eq!(before["last_tick_ms"], Value::Null, "{before}");

    let (status, run) = post_status(&a.base, "/v1/recurring/yearly/run").await;
    assert_eq!(status, 201, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("recurring/{yearly}/run-"), "{run}");
    assert_eq!(run["topic"], "annual");
    let d = q
        .pop(&topics(&["annual"]), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the job run now is ready");
    assert_eq!(
        (d.id.as_str(), d.body.as_str()),
        (id.as_str(), "happy new year")
    );
    let lease = d.lease_until_ms - d.popped_at_us / 1000;
    assert!(
        (1000..=5001).contains(&lease),
        "the schedule's ttr: {lease}"
    );
    q.finish(&d.id, &d.token).await.unwrap();

    let after = get_schedule(&a.base, "yearly").await;
    for f in ["last_tick_ms", "next_fire_ms", "next_runs_ms"] {
        assert_eq!(after[f], before[f], "{f}");
    }
    // A paused schedule runs on demand too, and stays paused.
    post_status(&a.base, "/v1/recurring/yearly/pause").await;
    let (ok, out, err) = cli(&a.base, &["recurring", "run", "yearly"]);
    assert!(
        ok && out.contains("pushed recurring/{yearly}/run-"),
        "{out}{err}"
    );
    assert_eq!(get_schedule(&a.base, "yearly").await["paused"], true);

    // Unknown and malformed names: refused, naming them; nothing made.
    for action in ["run", "pause", "resume"] {
        let (status, e) = post_status(&a.base, &format!("/v1/recurring/nope/{action}")).await;
        assert_eq!(status, 404, "{action}: {e}");
        assert!(
            e["error"]["message"].as_str().unwrap().contains("\"nope\""),
            "{e}"
        );
        let (status, e) = post_status(&a.base, &format!("/v1/recurring/a%7Bb/{action}")).await;
        assert_eq!(status, 422, "{action}: {e}");
        let (ok, _, err) = cli(&a.base, &["recurring", action, "nope"]);
        assert!(!ok && err.contains("404") && err.contains("nope"), "{err}");
    }
    let listed: Value = reqwest::get(format!("{}/v1/recurring", a.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 1, "{listed}");
    drop(a);
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_tick_is_the_last_one_that_fired_none_before_and_the_next_apart() {
    let redis = RedisServer::start();
    let s = TestServer::start(queue(&redis), Default::default()).await;
    let b = &s.base;
    // A yearly schedule has fired nothing yet: no last tick (not its
    // creation time), and its next tick ahead.
    let yearly = put(b, "yearly", json!({"topic": "y", "cron": "0 0 0 1 1 *"})).await;
    assert_eq!(yearly["last_tick_ms"], Value::Null, "{yearly}");
    assert!(yearly["next_fire_ms"].as_i64().is_some(), "{yearly}");
    let listed = get_schedule(b, "yearly").await;
    assert_eq!(listed["last_tick_ms"], Value::Null, "{listed}");
    let state = s.queue.recurring("yearly").await.unwrap().unwrap();
    assert_eq!(state.last_tick_ms, None);

    // Every second: once a tick fired, the last tick is it, and the next
    // tick lies after it.
    put(b, "pulse", json!({"topic": "p", "cron": "* * * * * *"})).await;
    let v = eventually(Duration::from_secs(20), "a tick that fired", || async {
        let v = get_schedule(b, "pulse").await;
        v["last_tick_ms"].as_i64().is_some().then_some(v)
    })
    .await;
    let (last, next) = (
        v["last_tick_ms"].as_i64().unwrap(),
        v["next_fire_ms"].as_i64().unwrap(),
    );
    assert!(last < next, "{v}");
    assert_eq!(last % 1000, 0, "{v}");
    // It is a tick whose job was pushed.
    let id = delayq::recurring::tick_id("pulse", last);
    let j = s.queue.get(&id).await.unwrap().unwrap();
    assert_eq!(j.due_ms, last);
    s.stop().await;
}
