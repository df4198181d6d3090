//! The dashboard at `/ui/`, driven in a real headless browser (Debian's
//! chromium through chromedriver, spoken to over the W3C WebDriver
//! protocol): it signs in, shows the API's counts, finds a job by id and
//! deletes it, requeues a dead job, shows a body with markup as text, and
//! does nothing in read-only mode. With DELAYQ_SCREENSHOTS=docs the run
//! leaves a screenshot in docs/dashboard.png, which README shows.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use delayq::http::ui::UiMode;
use delayq::http::ServerConfig;
use delayq::{JobState, NewJob, RetryPolicy};
use serde_json::{json, Value};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// chromedriver and one browser session; both stopped when dropped.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// None when there is no browser here (allowed outside CI only).
    async fn start() -> Option<Browser> {
        let found = ["/usr/bin/chromedriver", "/usr/bin/chromium"]
            .iter()
            .all(|p| std::path::Path::new(p).exists());
        if !found {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI needs chromium and chromedriver (apt-get install -y chromium chromium-driver)"
            );
            eprintln!(
                "dashboard test skipped: no chromium/chromedriver here (./dev test installs them)"
            );
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        use std::os::unix::process::CommandExt;
        let driver = Command::new("/usr/bin/chromedriver")
            .arg(format!("--port={port}"))
            // A group of its own, so that drop can stop it and its browser.
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while http.get(format!("{base}/status")).send().await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--disable-quic", "--no-first-run", "--disable-background-networking",
                         "--disable-component-update", "--disable-sync", "--window-size=1280,900",
                         format!("--user-data-dir={}", profile.path().display())]
            }
        }}});
        let mut b = Browser {
            driver,
            base,
            session: String::new(),
            http,
            _profile: profile,
        };
        let v = b.call("POST", "/session", Some(caps)).await;
        b.session = v["sessionId"].as_str().expect("a session").to_owned();
        Some(b)
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = if path == "/session" {
            format!("{}{path}", self.base)
        } else {
            format!("{}/session/{}{path}", self.base, self.session)
        };
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(m, url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req.send().await.unwrap().json().await.unwrap();
        v["value"].clone()
    }

    async fn go(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url }))).await;
    }

    /// Waits for an element matching `css` (long enough for a browser
    /// sharing two cores with the rest of the suite, and builds).
    async fn find(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(id) = self.try_find(css).await {
                return id;
            }
            assert!(Instant::now() < deadline, "no element {css} on the page");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn try_find(&self, css: &str) -> Option<String> {
        let v = self
            .call(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT].as_str().map(str::to_owned)
    }

    async fn text(&self, css: &str) -> String {
        let id = self.find(css).await;
        self.call("GET", &format!("/element/{id}/text"), None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits until the element's text contains `needle` (pages render
    /// asynchronously).
    /// Opens `url` until it shows `css`: a page whose API calls failed on
    /// a machine busy with the rest of the suite shows the error and is
    /// opened again (three times at most).
    async fn open_until(&self, url: &str, css: &str) {
        for _ in 0..3 {
            self.go(url).await;
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if self.try_find(css).await.is_some() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            println!("{url} did not show {css}: {:?}", self.text("body").await);
            self.go("about:blank").await;
        }
        panic!("{url} never showed {css}");
    }

    async fn wait_text(&self, css: &str, needle: &str) {
        // Generous: a browser on a busy machine renders slowly.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self.text(css).await;
            if text.contains(needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{css} never showed {needle:?}: {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn click(&self, css: &str) {
        let id = self.find(css).await;
        self.call("POST", &format!("/element/{id}/click"), Some(json!({})))
            .await;
    }

    async fn type_in(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    async fn run(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Accepts the confirm() the page opened.
    async fn accept(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.call("POST", "/alert/accept", Some(json!({}))).await;
            if v.is_null() {
                return;
            }
            assert!(Instant::now() < deadline, "no dialog to accept: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn screenshot(&self, path: &std::path::Path) {
        let v = self.call("GET", "/screenshot", None).await;
        std::fs::write(path, base64_decode(v.as_str().unwrap())).unwrap();
    }
}

impl Drop for Browser {
    /// Ends the session (chromedriver then closes the browser), then
    /// stops chromedriver and anything left in its process group: a test
    /// that fails must not leave browsers behind either. Plain blocking
    /// HTTP, as drop cannot wait on the runtime.
    fn drop(&mut self) {
        use std::io::{Read, Write};
        let addr = self.base.trim_start_matches("http://").to_owned();
        if let Ok(mut c) = std::net::TcpStream::connect(&addr) {
            let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                c,
                "DELETE /session/{} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                self.session
            );
            // The reply comes once the browser is closed.
            let _ = c.read(&mut [0u8; 1024]);
        }
        // SAFETY: signals to our own child's process group.
        unsafe {
            libc::kill(-(self.driver.id() as i32), libc::SIGKILL);
        }
        let _ = self.driver.wait();
    }
}

/// Standard base64, as WebDriver sends screenshots.
fn base64_decode(text: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let clean: Vec<u8> = text.bytes().filter(|c| !b"=\n\r".contains(c)).collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= (val(c) as u32) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

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
    // README's picture is regenerated only when asked
    // (DELAYQ_SCREENSHOTS=docs): a test run changes no tracked file.
    let shots = tempfile::tempdir().unwrap();
    let shot = if std::env::var("DELAYQ_SCREENSHOTS").as_deref() == Ok("docs") {
        std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/dashboard.png"))
    } else {
        shots.path().join("dashboard.png")
    };
    b.screenshot(&shot).await;
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 0,
        "an empty screenshot"
    );

    // A body with markup is shown as text, and runs nothing.
    b.type_in("#find-id", "markup").await;
    b.click("#find button").await;
    b.wait_text("#job-id", "markup").await;
    assert_eq!(b.text("#body").await, nasty);
    assert_eq!(
        b.run("return document.querySelectorAll('script').length")
            .await,
        json!(1)
    );
    assert_eq!(
        b.run("return document.getElementById('bold')").await,
        Value::Null
    );
    assert_ne!(b.run("return document.title").await, json!("pwned"));

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
    let due_ms = api["due_at_ms"].as_i64().unwrap();
    let due = b
        .run(&format!(
            "const d = new Date({due_ms}); return d.toLocaleString(undefined, {{ hour12: false }}) + '.' + String(d.getMilliseconds()).padStart(3, '0');"
        ))
        .await;
    let shown_due = b.text("#job dd[data-field=due]").await;
    assert!(
        shown_due.starts_with(due.as_str().unwrap()) && shown_due.contains("(in "),
        "{shown_due:?} is not {due}"
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
        for r in q.push_many(chunk).await.unwrap() {
            r.unwrap();
        }
    }
    q.push(&job("late-1", "late", 7_200_000, 60_000))
        .await
        .unwrap();
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
    // "late" has a delayed job: its next due is not "none".
    let next = b.text("#topics tr[data-topic=late] td:nth-child(6)").await;
    assert_ne!(next, "none", "a topic with a delayed job shows none");
    assert!(next.starts_with("after "), "{next:?}");
    // The first topic's next due is the first job's.
    let first = b.text("#topics tr[data-topic=t00] td:nth-child(6)").await;
    assert!(
        first.contains("(in 60 min)") || first.contains("(in 1 h)"),
        "{first:?}"
    );
    drop(b);
    s.stop().await;
    q.close().await;
}
