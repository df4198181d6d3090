//! The dashboard at `/ui/`, driven in a real headless browser (Debian's
//! chromium through chromedriver, spoken to over the W3C WebDriver
//! protocol): it signs in, shows the API's counts, finds a job by id and
//! deletes it, requeues a dead job, shows a body with markup as text, and
//! does nothing in read-only mode. With DELAYQ_SCREENSHOTS=docs the run
//! leaves a screenshot in docs/dashboard.png, which docs/dashboard.md shows.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use delayq::http::ui::UiMode;
use delayq::http::ServerConfig;
use delayq::{JobState, NewJob, Queue, RetryPolicy};
use serde_json::{json, Value};

mod actions;
mod batches;
mod flows;
mod groups;
mod layout;
mod views;

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

    /// Waits until the element's text contains `needle` (pages render
    /// asynchronously).
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

    /// Clicks `css` until the flash message says `needle`. A view
    /// re-renders after an action and every 5 s: a click that met the old
    /// button is lost, as a user's would be, and is made again (five
    /// tries, 20 s each for the answer).
    async fn click_until_flash(&self, css: &str, needle: &str) {
        for _ in 0..5 {
            self.click(css).await;
            let until = Instant::now() + Duration::from_secs(20);
            while Instant::now() < until {
                if self.try_find("#flash").await.is_some()
                    && self.text("#flash").await.contains(needle)
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            println!("{css}: no {needle:?} after a click; clicking again");
        }
        panic!("clicks on {css} never flashed {needle:?}");
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
    q.finish_with_result(&d.id, &d.token, &serde_json::json!({"refunded": "r-991"}))
        .await
        .unwrap();
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
    q.progress(&d.id, &d.token, &serde_json::json!({"sent": 2}))
        .await
        .unwrap();
    q.log(&d.id, &d.token, "<b>calling</b> the provider")
        .await
        .unwrap();
    q.nack(&d.id, &d.token, None, "provider said 503")
        .await
        .unwrap();
    // An open batch, waiting for its jobs.
    q.create_batch(&delayq::NewBatch {
        id: "sale-1".into(),
        on: delayq::BatchOn::Settled,
        callback: delayq::BatchCallback {
            topic: "settle".into(),
            body: String::new(),
            ttr: Duration::from_secs(60),
            retry: None,
        },
    })
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
    ("batch/sale-1", "batch"),
];
