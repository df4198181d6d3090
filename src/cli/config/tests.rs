//! The topic configuration's loading, flags over the file.

use super::*;

fn no_flags() -> Flags<'static> {
    Flags {
        default_retry: "",
        default_max_attempts: None,
        topic_retry: &[],
        webhooks: &[],
        webhook_secret: None,
    }
}

#[test]
fn file_and_flags_merge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("delayq.toml");
    std::fs::write(
        &path,
        r#"
[defaults]
max_attempts = 4
[topics.hook]
webhook = "http://127.0.0.1:9/x"
timeout = "2s"
concurrency = 3
secret = "s3"
result = true
retry = ["1m"]
[topics.pull]
retry = ["2m", "10m"]
"#,
    )
    .unwrap();
    let t = load(Some(&path), &no_flags()).unwrap();
    assert_eq!(t.default_retry.max_attempts, Some(4));
    assert_eq!(t.topic_retry.len(), 2);
    let h = &t.webhooks[0];
    assert_eq!(
        (h.topic.as_str(), h.concurrency, h.timeout.as_secs()),
        ("hook", 3, 2)
    );
    assert_eq!(h.secret, Some(Secret("s3".into())));
    assert!(h.result, "result = true: the reply's body is the result");

    let hooks = vec!["hook=http://127.0.0.1:9/y".to_string()];
    let flags = Flags {
        webhooks: &hooks,
        webhook_secret: Some("global"),
        ..no_flags()
    };
    let t = load(Some(&path), &flags).unwrap();
    assert_eq!(t.webhooks[0].url, "http://127.0.0.1:9/y");
    assert_eq!(t.webhooks[0].secret, Some(Secret("global".into())));

    let hooks = vec!["bare=http://127.0.0.1:9/z".to_string()];
    let flags = Flags {
        webhooks: &hooks,
        ..no_flags()
    };
    let t = load(None, &flags).unwrap();
    assert_eq!(t.topic_retry["bare"], Webhook::default_retry());

    std::fs::write(&path, "[topics.x]\nwebhok = \"http://a\"\n").unwrap();
    let e = format!("{:#}", load(Some(&path), &no_flags()).unwrap_err());
    assert!(e.contains("webhok"), "{e}");
    std::fs::write(&path, "[topics.x]\ntimeout = \"1s\"\n").unwrap();
    let e = format!("{:#}", load(Some(&path), &no_flags()).unwrap_err());
    assert!(e.contains("need a webhook"), "{e}");
}

/// A webhook setting that could not work is refused, named with its
/// value and limit: a timeout its lease cannot outlast (every delivery
/// failed before a request was sent), an empty secret.
#[test]
fn webhook_settings_that_could_not_work_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("delayq.toml");
    let hook = "[topics.h]\nwebhook = \"http://127.0.0.1:9/x\"\n";
    // SAFETY: no other test reads this variable.
    unsafe { std::env::set_var("DELAYQ_UNIT_EMPTY_HOOK_SECRET", "") };
    for (extra, says) in [
        (
            "timeout = \"8d\"",
            "timeout 8d is too long: at most 604799s",
        ),
        ("timeout = \"7d\"", "timeout 7d is too long"),
        ("secret = \"\"", "[topics.h]: secret is empty"),
        (
            "secret_env = \"DELAYQ_UNIT_EMPTY_HOOK_SECRET\"",
            "DELAYQ_UNIT_EMPTY_HOOK_SECRET (secret_env) is empty",
        ),
        (
            "secret_env = \"DELAYQ_UNIT_UNSET_HOOK_SECRET\"",
            "DELAYQ_UNIT_UNSET_HOOK_SECRET is not set",
        ),
    ] {
        std::fs::write(&path, format!("{hook}{extra}\n")).unwrap();
        let e = format!("{:#}", load(Some(&path), &no_flags()).unwrap_err());
        assert!(e.contains(says), "{extra}: {e}");
    }
    std::fs::write(&path, format!("{hook}timeout = \"604799s\"\n")).unwrap();
    assert!(load(Some(&path), &no_flags()).is_ok());
    let flags = Flags {
        webhook_secret: Some(""),
        ..no_flags()
    };
    let e = format!("{:#}", load(Some(&path), &flags).unwrap_err());
    assert!(
        e.contains("--webhook-secret (DELAYQ_WEBHOOK_SECRET) is empty"),
        "{e}"
    );
}

#[test]
fn a_result_setting_needs_a_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("delayq.toml");
    std::fs::write(&path, "[topics.pull]\nresult = true\n").unwrap();
    let e = load(Some(&path), &no_flags()).unwrap_err().to_string();
    assert!(e.contains("result need a webhook"), "{e}");
    std::fs::write(&path, "[topics.hook]\nwebhook = \"http://127.0.0.1:9/x\"\n").unwrap();
    assert!(!load(Some(&path), &no_flags()).unwrap().webhooks[0].result);
}

#[test]
fn keep_finished_is_read_from_defaults_and_topics_and_bad_ones_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("delayq.toml");
    std::fs::write(
        &path,
        "[defaults]\nkeep_finished = \"7d\"\nmax_attempts = 2\n[topics.a]\nkeep_finished = \"10m\"\n",
    )
    .unwrap();
    let t = load(Some(&path), &no_flags()).unwrap();
    assert_eq!(
        t.keep_finished,
        Some(std::time::Duration::from_secs(7 * 86400))
    );
    assert_eq!(t.topic_keep_finished["a"].as_secs(), 600);
    assert_eq!(t.default_retry.max_attempts, Some(2));
    for (file, says) in [
        ("[defaults]\nkeep_finished = \"0\"\n", "at least 1ms"),
        ("[topics.a]\nkeep_finished = \"-1s\"\n", "invalid duration"),
        ("[topics.a]\nkeep_finished = \"400d\"\n", "at most 365d"),
        ("[defaults]\nkeep_finishd = \"1d\"\n", "keep_finishd"),
    ] {
        std::fs::write(&path, file).unwrap();
        let e = format!("{:#}", load(Some(&path), &no_flags()).unwrap_err());
        assert!(e.contains(says), "{file}: {e}");
    }
}

#[test]
fn a_recurring_ttr_under_the_http_name_is_refused_naming_the_file_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("delayq.toml");
    let file = |ttr: &str| format!("[recurring.r]\ntopic = \"t\"\ncron = \"0 0 9 * * *\"\n{ttr}\n");
    std::fs::write(&path, file("ttr = \"10m\"")).unwrap();
    let t = load(Some(&path), &no_flags()).unwrap();
    assert_eq!(t.recurring[0].1.ttr_ms, 600_000);
    std::fs::write(&path, file("ttr_ms = 600000")).unwrap();
    let e = format!("{:#}", load(Some(&path), &no_flags()).unwrap_err());
    assert!(e.contains("ttr = \"600000ms\""), "{e}");
}

/// The book's reference of the file (docs/configuration.md) is real and
/// whole: it loads, and every key it shows took effect (a key left out of
/// it fails here).
#[test]
fn the_configuration_pages_reference_sets_every_key() {
    let page = include_str!("../../../docs/configuration.md");
    let at = page.find("## The config file").unwrap();
    let text = page[at..].split("```toml\n").nth(1).unwrap();
    let text = text.split("```").next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("delayq.toml");
    std::fs::write(&path, text).unwrap();
    // SAFETY: no other test reads this variable.
    unsafe { std::env::set_var("ORDER_HOOK_SECRET", "from-env") };
    let t = load(Some(&path), &no_flags()).unwrap();
    assert_eq!(t.default_retry.max_attempts, Some(5));
    assert_eq!(t.default_retry.intervals.len(), 3);
    assert_eq!(t.keep_finished.unwrap().as_secs(), 86400);
    assert_eq!(t.topic_keep_finished["order-timeout"].as_secs(), 7 * 86400);
    let hook = t
        .webhooks
        .iter()
        .find(|h| h.topic == "order-timeout")
        .unwrap();
    assert_eq!((hook.timeout.as_secs(), hook.concurrency), (10, 8));
    assert_eq!(hook.secret, Some(Secret("from-env".into())));
    assert_eq!(t.topic_retry["order-timeout"].max_attempts, Some(4));
    let sms = t
        .webhooks
        .iter()
        .find(|h| h.topic == "member-reminder")
        .unwrap();
    assert_eq!(sms.secret, Some(Secret("change-me".into())));
    assert_eq!(t.rates[0].0, "sms");
    assert_eq!((t.rates[0].1.per_second, t.rates[0].1.burst), (50.0, 100));
    let (name, r) = &t.recurring[0];
    assert_eq!(name, "expiry-reminders");
    assert_eq!(
        (r.topic.as_str(), r.cron.as_str(), r.timezone.as_str()),
        ("member-expiry", "0 0 9 * * *", "Asia/Shanghai")
    );
    assert_eq!(
        (r.body.as_str(), r.ttr_ms),
        ("{\"within_days\": 7}", 600_000)
    );
    assert_eq!(r.missed, delayq::Missed::Fire);
    assert_eq!(r.retry.as_ref().unwrap().max_attempts, Some(3));
    assert_eq!((t.events, t.events_kept), (Some(true), Some(100_000)));
    assert_eq!(
        otlp_endpoint(Some(&path)).unwrap().as_deref(),
        Some("http://127.0.0.1:4318")
    );
}
