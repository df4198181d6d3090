//! The native `/v1` API: every status code it promises, batch pushes,
//! leases, dead letters, HTTP details, and the OpenAPI document matching
//! the routes.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use delayq::http::v1::{openapi, ROUTES};
use delayq::http::ServerConfig;
use serde_json::{json, Value};

pub(crate) mod document;
mod requests;

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    fn new(s: &TestServer) -> Api {
        Api {
            base: s.base.clone(),
            http: reqwest::Client::new(),
        }
    }
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let mut req = self.http.request(m, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        self.send(req).await
    }
    async fn raw(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let req = self
            .http
            .request(m, format!("{}{path}", self.base))
            .body(body.to_owned());
        self.send(req).await
    }
    async fn send(&self, req: reqwest::RequestBuilder) -> (u16, Value) {
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let v = if text.is_empty() {
            Value::Null
        } else {
            // /metrics is text; everything else must be JSON.
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, v)
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

async fn server(redis: &RedisServer) -> TestServer {
    // Long enough for a busy machine's Redis (a 500 ms bound timed out a
    // heartbeat beside other tests' clusters), short enough that the 503
    // of a dead Redis comes quickly.
    let q = delayq::Queue::connect(delayq::Config {
        redis_timeout: Duration::from_secs(2),
        ..config(redis)
    })
    .unwrap();
    TestServer::start(
        q,
        ServerConfig {
            max_request_bytes: 64 * 1024,
            ..ServerConfig::default()
        },
    )
    .await
}
