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
use delayq::{JobState, NewJob, Queue, RetryPolicy};
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

/// How the browser is set up: its window's width, its language and its
/// time zone (the `TZ` chromedriver and so the browser run with).
struct Setup {
    width: u32,
    lang: &'static str,
    tz: &'static str,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            width: 1280,
            lang: "en-US",
            tz: "Asia/Shanghai",
        }
    }
}

impl Browser {
    /// None when there is no browser here (allowed outside CI only).
    async fn start() -> Option<Browser> {
        Browser::start_with(Setup::default()).await
    }

    async fn start_with(setup: Setup) -> Option<Browser> {
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
            .env("TZ", setup.tz)
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
                         "--disable-component-update", "--disable-sync",
                         format!("--window-size={},900", setup.width), format!("--lang={}", setup.lang),
                         format!("--user-data-dir={}", profile.path().display())],
                "prefs": {"intl.accept_languages": setup.lang}
            }
        }}});
        let mut caps = caps;
        if setup.width < 500 {
            // Below the smallest window the browser makes: the page is
            // laid out at that width, as on a phone.
            caps["capabilities"]["alwaysMatch"]["goog:chromeOptions"]["mobileEmulation"] =
                json!({"deviceMetrics": {"width": setup.width, "height": 900, "pixelRatio": 1.0}});
        }
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

    /// The element's text. An element replaced by a re-render between
    /// finding and reading ("stale element reference") is found again: its
    /// text is not "".
    async fn text(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let id = self.find(css).await;
            let v = self.call("GET", &format!("/element/{id}/text"), None).await;
            if let Some(text) = v.as_str() {
                return text.to_owned();
            }
            assert!(Instant::now() < deadline, "no text from {css}: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
        self.act(css, "click", json!({})).await;
    }

    async fn type_in(&self, css: &str, text: &str) {
        self.act(css, "value", json!({ "text": text })).await;
    }

    /// Clicks or types into the element matching `css`. Views re-render
    /// (after an action, and every few seconds): an element found just
    /// before is then gone, and the driver answers "stale element
    /// reference" without acting. Found again and retried, as a user
    /// would click the new button.
    async fn act(&self, css: &str, what: &str, body: Value) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let id = self.find(css).await;
            let v = self
                .call("POST", &format!("/element/{id}/{what}"), Some(body.clone()))
                .await;
            let Some(error) = v.get("error").and_then(Value::as_str) else {
                return;
            };
            assert!(Instant::now() < deadline, "{what} on {css} failed: {v}");
            println!("{what} on {css} retried: {error}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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

    /// Opens a view (`hash` after `#/`) and waits until it has been drawn
    /// (`page` is what the page says it shows).
    async fn view(&self, base: &str, hash: &str, page: &str) {
        let url = format!("{base}/ui/#/{hash}");
        let same = self
            .run(&format!("return location.href === {url:?};"))
            .await;
        self.run(
            "const m = document.getElementById('main'); if (m) m.removeAttribute('data-page');",
        )
        .await;
        let drawn = format!("main[data-page={page}]");
        if same == json!(true) {
            // The same address again: no navigation, so draw it anew.
            self.run("route();").await;
            self.find(&drawn).await;
        } else {
            self.open_until(&url, &drawn).await;
        }
    }

    /// The page's text holds no stray "null", "undefined" or the like.
    async fn no_stray_words(&self, view: &str) {
        let text = self.text("body").await;
        for w in ["null", "undefined", "NaN", "[object", "Invalid Date"] {
            assert!(!text.contains(w), "#/{view} shows {w:?}: {text}");
        }
    }

    /// The texts of the elements matching `css`, in page order.
    async fn texts(&self, css: &str) -> Vec<String> {
        let v = self
            .run(&format!(
                "return Array.from(document.querySelectorAll({css:?})).map((e) => e.textContent);"
            ))
            .await;
        serde_json::from_value(v).unwrap()
    }

    /// The values of an attribute of the elements matching `css`.
    async fn attrs(&self, css: &str, attr: &str) -> Vec<String> {
        let v = self
            .run(&format!(
                "return Array.from(document.querySelectorAll({css:?})).map((e) => e.getAttribute({attr:?}));"
            ))
            .await;
        serde_json::from_value(v).unwrap()
    }

    /// A screenshot of the view shown, into docs/ only when asked
    /// (DELAYQ_SCREENSHOTS=docs): a test run changes no tracked file.
    async fn shot(&self, name: &str) {
        let shots = tempfile::tempdir().unwrap();
        let path = if std::env::var("DELAYQ_SCREENSHOTS").as_deref() == Ok("docs") {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("docs")
                .join(name)
        } else {
            shots.path().join(name)
        };
        self.screenshot(&path).await;
        assert!(
            std::fs::metadata(&path).unwrap().len() > 0,
            "an empty screenshot"
        );
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
    let next = b
        .text("#topics tr[data-topic=late] td[data-col=next_due]")
        .await;
    assert_ne!(next, "none", "a topic with a delayed job shows none");
    assert!(next.starts_with("after "), "{next:?}");
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

/// A time as the dashboard shows it in a browser whose zone is
/// Asia/Shanghai: ISO date, milliseconds, the zone's offset.
fn shanghai(ms: i64) -> String {
    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap() + chrono::Duration::hours(8);
    format!("{} UTC+8", t.format("%Y-%m-%d %H:%M:%S%.3f"))
}

/// The API's status and reply for `GET path`.
async fn api(base: &str, path: &str) -> (u16, Value) {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A queue with a bit of everything: delayed, ready, reserved and dead
/// jobs, a rate limit, a recurring schedule; and a server for it (a webhook
/// topic configured).
async fn sample(redis: &RedisServer, server: ServerConfig) -> (Queue, TestServer) {
    let q = Queue::connect(delayq::Config {
        keep_finished: Some(Duration::from_secs(3600)),
        ..config(redis)
    })
    .unwrap();
    // A finished job whose record is kept.
    q.push(&job("done-1", "orders", 0, 60_000)).await.unwrap();
    let d = q
        .pop(&["orders".to_string()], Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    q.finish(&d.id, &d.token).await.unwrap();
    for i in 1..=3 {
        q.push(&NewJob {
            body: format!("order {i}"),
            ..job(&format!("order-{i}"), "orders", 3_600_000 * i, 60_000)
        })
        .await
        .unwrap();
    }
    q.push(&job("mail-1", "mail", 0, 600_000)).await.unwrap();
    let _held = q
        .pop(&["mail".to_string()], Duration::from_secs(5))
        .await
        .unwrap()
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
            webhooks: [("hooks".to_owned(), "127.0.0.1:9".to_owned())].into(),
            ..server
        },
    )
    .await;
    let http = reqwest::Client::new();
    for (path, body) in [
        ("/v1/topics/mail/rate", json!({"per_second": 5})),
        (
            "/v1/recurring/daily-report",
            json!({"topic": "reports", "cron": "0 0 9 * * *", "timezone": "Asia/Shanghai", "body": "report"}),
        ),
    ] {
        let r = http
            .put(format!("{}{path}", s.base))
            .bearer_auth("s3cret")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
    }
    (q, s)
}

/// The views of a server with no auth, with the element each is drawn by.
const VIEWS: &[(&str, &str)] = &[
    ("", "overview"),
    ("topic/orders", "topic"),
    ("topic/mail/reserved", "topic"),
    ("topic/orders/finished", "topic"),
    ("job/sms-9", "job"),
    ("job/order-1", "job"),
    ("job/done-1", "job"),
    ("schedule", "schedule"),
    ("recurring", "recurring"),
    ("webhooks", "webhooks"),
    ("instances", "instances"),
    ("dead/sms", "dead"),
];

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
    assert_eq!(
        b.text("#refresh-note").await,
        "",
        "the job page does not refresh"
    );
    assert!(!b.text("body").await.contains("Refreshes every"));
    b.view(&base, "job/order-1", "job").await;
    assert_eq!(b.text("#body").await, "order 1");
    b.shot("dashboard-job.png").await;
    // A finished job's kept record: when, by which attempt.
    b.view(&base, "job/done-1", "job").await;
    let (_, j) = api(&base, "/v1/jobs/done-1").await;
    assert_eq!(b.text("#job dd[data-field=state]").await, "finished");
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
        b.click("#recurring tr[data-name=daily-report] button[data-act=run]")
            .await;
        b.wait_text("#flash", "Pushed job").await;
        // The view re-renders after run now (and every 5 s): a click that
        // met the old button is lost, as a user's would be; click again.
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
