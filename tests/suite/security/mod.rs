//! Bearer-token auth, Redis passwords, the dashboard's sessions and
//! hosts; ACL users in `acl`.

use std::time::Duration;

use crate::common::*;
use delayq::http::ServerConfig;
use delayq::webhook::Secret;
use delayq::{Config, Queue};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_guards_every_endpoint_but_healthz() {
    let redis = RedisServer::start();
    let s = TestServer::start(
        queue(&redis),
        ServerConfig {
            auth_token: Some(Secret("t0ken".into())),
            ..ServerConfig::default()
        },
    )
    .await;
    let http = reqwest::Client::new();
    let push = r#"{"topic":"t","id":"a","delay":1,"ttr":1}"#;
    for (path, body) in [
        ("/push", push),
        ("/v1/jobs", r#"{"topic":"t"}"#),
        ("/v1/topics", ""),
        ("/metrics", ""),
        ("/readyz", ""),
    ] {
        for auth in [
            None,
            Some("Bearer wrong"),
            Some("Bearer t0ke"),
            Some("t0ken"),
        ] {
            let mut req = http.post(format!("{}{path}", s.base)).body(body);
            if path == "/v1/topics" || path == "/metrics" || path == "/readyz" {
                req = http.get(format!("{}{path}", s.base));
            }
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 401, "{path} with {auth:?}");
            let v: serde_json::Value = resp.json().await.unwrap();
            if path == "/push" {
                // The Go server's clients read {"code":1,"message":...}.
                assert_eq!(v["code"], 1, "{v}");
                assert!(v["message"].as_str().unwrap().contains("token"), "{v}");
            } else {
                assert_eq!(v["error"]["code"], "unauthorized");
            }
        }
    }
    let n: i64 = redis.data_keys().await;
    assert_eq!(n, 0, "a refused request wrote something");
    assert_eq!(
        http.get(format!("{}/healthz", s.base))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let ok = http
        .post(format!("{}/push", s.base))
        .bearer_auth("t0ken")
        .body(push)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.json::<serde_json::Value>().await.unwrap()["code"], 0);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_passwords_and_acl_users_work_and_a_wrong_one_is_a_clear_error() {
    // An ACL user limited to delayq's keys and channels.
    let redis = RedisServer::start_with_password(
        "adm1n",
        &[
            "--user",
            "delayq",
            "on",
            ">s3cret",
            "~{dq}:*",
            "&{dq}:*",
            "&__keyevent@*__:expired",
            "+@all",
        ],
    );
    for url in [redis.url(), redis.url_as("delayq", "s3cret")] {
        let q = Queue::connect(Config {
            redis: delayq::Redis::Url(url.clone()),
            ..Config::default()
        })
        .unwrap();
        q.push(&job("j", "acl", 0, 60_000)).await.unwrap();
        let d = q
            .pop(&topics(&["acl"]), Duration::from_secs(5))
            .await
            .unwrap()
            .expect("delivered through the dispatcher, logged in");
        q.finish(&d.id, &d.token).await.unwrap();
        eventually(
            Duration::from_secs(5),
            "the subscriber to log in",
            || async { q.subscriber_connected().then_some(()) },
        )
        .await;
        q.close().await;
    }
    let q = Queue::connect(Config {
        redis: delayq::Redis::Url(redis.url_as("delayq", "wrong")),
        redis_timeout: Duration::from_millis(500),
        ..Config::default()
    })
    .unwrap();
    let e = q.push(&job("x", "acl", 0, 1000)).await.unwrap_err();
    assert!(e.is_unavailable(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("WRONGPASS")
            || msg.contains("invalid username-password")
            || msg.contains("no answer"),
        "{msg}"
    );
    q.close().await;
}

/// Signs in to the dashboard as its page does; returns the cookie
/// (`name=value`).
pub async fn dashboard_cookie(base: &str, token: &str) -> String {
    let resp = reqwest::Client::new()
        .post(format!("{base}/ui/login"))
        .header("x-delayq-ui", "1")
        .json(&serde_json::json!({ "token": token }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204, "signed in");
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    set.split(';').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_dashboard_cannot_write_through_any_route_with_any_method() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("a", "t", 3_600_000, 60_000)).await.unwrap();
    q.push(&job("r", "t", 0, 60_000)).await.unwrap();
    eventually(Duration::from_secs(5), "r ready", || async {
        (q.get("r").await.unwrap().unwrap().state == delayq::JobState::Ready).then_some(())
    })
    .await;
    let s = TestServer::start(
        q.clone(),
        ServerConfig {
            auth_token: Some(Secret("t0ken".into())),
            ui: delayq::http::ui::UiMode::ReadOnly,
            pop_timeout: Duration::from_millis(200),
            ..ServerConfig::default()
        },
    )
    .await;
    let cookie = dashboard_cookie(&s.base, "t0ken").await;
    let http = reqwest::Client::new();
    let before = q.topics().await.unwrap().topics;
    let body = r#"{"id":"a","topic":"t","delay":1,"ttr":1}"#;
    let new = r#"{"id":"n","topic":"t","delay":1,"ttr":1}"#;
    for path in ["/push", "/pop", "/finish", "/delete"] {
        for method in ["GET", "HEAD", "POST", "PUT", "DELETE"] {
            for b in [body, new] {
                let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
                let resp = http
                    .request(m, format!("{}{path}", s.base))
                    .header("x-delayq-ui", "1")
                    .header("cookie", &cookie)
                    .body(b)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 403, "{method} {path} {b}");
            }
        }
    }
    for route in delayq::http::v1::ROUTES.iter().filter(|r| r.writes) {
        let path = route
            .path
            .replace("{id}", "a")
            .replace("{topic}", "t")
            .replace("{name}", "n");
        let m = reqwest::Method::from_bytes(route.method.to_uppercase().as_bytes()).unwrap();
        let resp = http
            .request(m, format!("{}{path}", s.base))
            .header("x-delayq-ui", "1")
            .header("cookie", &cookie)
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{} {path}", route.method);
    }
    // Nothing changed; reads still work.
    assert_eq!(q.topics().await.unwrap().topics, before);
    assert!(q.get("n").await.unwrap().is_none());
    assert_eq!(
        q.get("r").await.unwrap().unwrap().state,
        delayq::JobState::Ready
    );
    assert_eq!(
        q.get("a").await.unwrap().unwrap().state,
        delayq::JobState::Delayed
    );
    for path in ["/get", "/v1/jobs/a"] {
        let resp = http
            .get(format!("{}{path}", s.base))
            .header("x-delayq-ui", "1")
            .header("cookie", &cookie)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    s.stop().await;
    q.close().await;
}

/// A request as a browser or curl would send it: method, path, extra
/// headers (a `host` among them replaces the real one), body.
async fn raw(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> reqwest::StatusCode {
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = reqwest::Client::new()
        .request(m, format!("{base}{path}"))
        .body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_on_other_sites_and_rebound_host_names_cannot_use_an_open_server_but_curl_can() {
    let redis = RedisServer::start();
    let q = queue(&redis);
    q.push(&job("a", "t", 3_600_000, 60_000)).await.unwrap();
    let s = TestServer::start(q.clone(), ServerConfig::default()).await;
    let b = &s.base;
    let here = b.trim_start_matches("http://").to_owned();
    let port = here.rsplit_once(':').unwrap().1.to_owned();
    let text = ("content-type", "text/plain");
    let evil = ("origin", "http://evil.example");
    let cross = ("sec-fetch-site", "cross-site");
    // Cross-site simple requests (a form or fetch with no-cors), with and
    // without the Fetch Metadata of newer browsers.
    for headers in [
        vec![text, evil, cross],
        vec![text, evil],
        vec![text, cross],
        vec![text, ("origin", "null")],
        vec![
            text,
            (
                "origin",
                &format!("http://localhost:{}", port.parse::<u16>().unwrap() + 1),
            ),
        ],
        vec![text, ("sec-fetch-site", "same-site")],
    ] {
        for (method, path, body) in [
            ("POST", "/delete", r#"{"id":"a"}"#),
            ("POST", "/v1/topics/t/pause", ""),
            ("POST", "/v1/jobs", r#"{"topic":"t","id":"forged"}"#),
            (
                "POST",
                "/push",
                r#"{"topic":"t","id":"forged","delay":1,"ttr":1}"#,
            ),
            ("GET", "/v1/jobs/a", ""),
        ] {
            let status = raw(b, method, path, &headers, body).await;
            assert_eq!(status, 403, "{method} {path} with {headers:?}");
        }
    }
    // DNS rebinding: the browser thinks it talks to evil.example's own
    // server, so the request is "same-origin", but the Host says whose.
    let rebound = format!("rebind.example:{port}");
    let rebound_origin = format!("http://{rebound}");
    for headers in [
        vec![
            ("host", rebound.as_str()),
            ("origin", &rebound_origin),
            ("sec-fetch-site", "same-origin"),
        ],
        vec![
            ("host", rebound.as_str()),
            ("sec-fetch-site", "same-origin"),
        ],
        vec![
            ("host", rebound.as_str()),
            ("sec-fetch-mode", "navigate"),
            ("sec-fetch-site", "none"),
        ],
    ] {
        for (method, path, body) in [
            ("POST", "/delete", r#"{"id":"a"}"#),
            ("GET", "/v1/jobs/a", ""),
            ("GET", "/ui/", ""),
        ] {
            let status = raw(b, method, path, &headers, body).await;
            assert_eq!(status, 403, "{method} {path} with {headers:?}");
        }
    }
    assert!(
        q.get("a").await.unwrap().is_some(),
        "a forged /delete deleted a job"
    );
    assert!(
        q.get("forged").await.unwrap().is_none(),
        "a forged push pushed"
    );
    assert!(
        !q.topics().await.unwrap().topics["t"].paused,
        "a forged pause paused"
    );

    // The dashboard's own requests, by address or by localhost.
    let own = format!("http://{here}");
    let local = format!("localhost:{port}");
    let local_origin = format!("http://{local}");
    for headers in [
        vec![("origin", own.as_str()), ("sec-fetch-site", "same-origin")],
        vec![
            ("host", local.as_str()),
            ("origin", &local_origin),
            ("sec-fetch-site", "same-origin"),
        ],
        vec![("host", local.as_str()), ("sec-fetch-site", "none")],
    ] {
        assert_eq!(
            raw(b, "GET", "/v1/jobs/a", &headers, "").await,
            200,
            "{headers:?}"
        );
        assert_eq!(
            raw(b, "GET", "/ui/", &headers, "").await,
            200,
            "{headers:?}"
        );
    }
    // curl and the Go original's clients send no Origin and may call the
    // server by any name (a service name in a cluster, say).
    assert_eq!(
        raw(
            b,
            "GET",
            "/v1/jobs/a",
            &[("host", "delayq.svc.cluster.local:9277")],
            ""
        )
        .await,
        200
    );
    assert_eq!(raw(b, "POST", "/v1/topics/t/pause", &[], "").await, 200);
    assert_eq!(
        post(b, "/delete", r#"{"id":"a"}"#).await["code"],
        0,
        "curl's /delete works"
    );
    assert!(q.get("a").await.unwrap().is_none());
    s.stop().await;
    q.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_let_a_proxy_s_public_name_through() {
    let redis = RedisServer::start();
    let by_flag = DelayqProcess::start(
        &redis,
        &[
            "--allowed-host",
            "dq.example.com",
            "--allowed-host",
            "*.corp.example",
        ],
    );
    let url = redis.url();
    let by_env = DelayqProcess::spawn_from(
        std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
            .args(["serve", "--listen", "127.0.0.1:0", "--redis", &url])
            .env("DELAYQ_ALLOWED_HOSTS", "dq.example.com,*.corp.example")
            .env("DELAYQ_LOG", "warn"),
    );
    for p in [&by_flag, &by_env] {
        let b = &p.base;
        let public = ("origin", "https://dq.example.com");
        for (headers, want) in [
            // A proxy that keeps the Host.
            (
                vec![
                    ("host", "dq.example.com"),
                    public,
                    ("sec-fetch-site", "same-origin"),
                ],
                200,
            ),
            // A proxy that sets the Host to the upstream's address.
            (vec![public, ("sec-fetch-site", "same-origin")], 200),
            (
                vec![
                    ("host", "a.corp.example"),
                    ("origin", "http://a.corp.example"),
                ],
                200,
            ),
            (
                vec![
                    ("host", "corp.example.evil.example"),
                    ("origin", "http://corp.example.evil.example"),
                ],
                403,
            ),
            (
                vec![("host", "evil.example"), ("sec-fetch-site", "same-origin")],
                403,
            ),
            (vec![("origin", "https://evil.example")], 403),
        ] {
            let status = raw(b, "POST", "/v1/topics/t/pause", &headers, "").await;
            assert_eq!(status, want, "{headers:?}");
        }
    }
}

/// A dashboard request with `cookie`: its status.
async fn as_dashboard(base: &str, cookie: &str) -> reqwest::StatusCode {
    reqwest::Client::new()
        .get(format!("{base}/v1/topics"))
        .header("x-delayq-ui", "1")
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_sessions_differ_at_each_sign_in_expire_and_end_at_sign_out() {
    let redis = RedisServer::start();
    // Sessions long enough for every check below on a busy machine; the
    // expiry is seen on a server whose sessions are short.
    let config = |session: u64| ServerConfig {
        auth_token: Some(Secret("t0ken".into())),
        ui_session: Duration::from_secs(session),

        ..ServerConfig::default()
    };
    let s = TestServer::start(queue(&redis), config(600)).await;
    let other = TestServer::start(queue(&redis), config(600)).await;
    let one = dashboard_cookie(&s.base, "t0ken").await;
    let two = dashboard_cookie(&s.base, "t0ken").await;
    assert_ne!(one, two, "two sign-ins got the same cookie");
    for c in [&one, &two] {
        assert_eq!(as_dashboard(&s.base, c).await, 200);
        // Another instance with the same token takes it too.
        assert_eq!(as_dashboard(&other.base, c).await, 200);
    }
    // An edited expiry breaks the signature.
    let (head, mac) = two.rsplit_once('.').unwrap();
    let (head, _) = head.rsplit_once('.').unwrap();
    let forged = format!("{head}.99999999999999.{mac}");
    assert_eq!(as_dashboard(&s.base, &forged).await, 401);

    // Sign-out ends that session, on every instance, and clears the cookie.
    let out = reqwest::Client::new()
        .post(format!("{}/ui/logout", s.base))
        .header("x-delayq-ui", "1")
        .header("cookie", &one)
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    let cleared = out.headers()["set-cookie"].to_str().unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    assert_eq!(as_dashboard(&s.base, &one).await, 401);
    assert_eq!(as_dashboard(&other.base, &one).await, 401);
    assert_eq!(as_dashboard(&s.base, &two).await, 200);

    // A server with another token takes none of them.
    let foreign = TestServer::start(
        queue(&redis),
        ServerConfig {
            auth_token: Some(Secret("another".into())),
            ..ServerConfig::default()
        },
    )
    .await;
    assert_eq!(as_dashboard(&foreign.base, &two).await, 401);

    // Sessions expire.
    let short = TestServer::start(queue(&redis), config(2)).await;
    let three = dashboard_cookie(&short.base, "t0ken").await;
    eventually(Duration::from_secs(60), "the session to expire", || async {
        (as_dashboard(&short.base, &three).await == 401).then_some(())
    })
    .await;
    assert_eq!(as_dashboard(&short.base, &two).await, 200);
    short.stop().await;
    foreign.stop().await;
    other.stop().await;
    s.stop().await;
}

pub(crate) mod acl;
