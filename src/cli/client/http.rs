//! Sending a request to the server and reading its reply.

use anyhow::{Context, Result};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::ClientArgs;

#[derive(Clone)]
pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
    /// `--json`: print the server's JSON as it came.
    pub(super) json: bool,
}

/// A reply: the server's JSON as it came (what `--json` prints) and read
/// as its wire type.
pub(crate) struct Reply<T> {
    pub(crate) raw: Value,
    pub(crate) value: T,
}

impl Client {
    pub(super) fn new(args: &ClientArgs) -> Client {
        Client {
            http: delayq::https::client_builder()
                .build()
                .expect("an HTTP client"),
            base: server_base(&args.server),
            token: args.token.clone(),
            json: args.json,
        }
    }

    /// The server's base URL.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request and reads the reply as `T` (a wire type).
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<Reply<T>> {
        let body = body
            .map(serde_json::to_value)
            .transpose()
            .context("encoding the request")?;
        let raw = self.send(method, path, body).await?;
        let value = T::deserialize(&raw)
            .with_context(|| format!("unexpected reply from {}{path}: {raw}", self.base))?;
        Ok(Reply { raw, value })
    }

    /// [`Client::call`] without a request body.
    pub(crate) async fn fetch<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
    ) -> Result<Reply<T>> {
        self.call(method, path, None::<&()>).await
    }

    /// Sends a request; a non-2xx reply becomes an error with the server's
    /// message. An empty reply (204) reads as `{}`.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut req = self.request(method, path);
        if let Some(b) = body {
            req = req.body(b.to_string());
        }
        let resp = self.reach(req).await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            return Err(self.refusal(status, &text));
        }
        if text.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_str(&text)
            .with_context(|| format!("not JSON from {}{path}: {text}", self.base))
    }

    /// Opens a long GET (the event stream): its reply, read as it comes;
    /// a non-2xx reply becomes an error with the server's message.
    pub(super) async fn open(
        &self,
        path: &str,
        last_event_id: Option<&str>,
    ) -> Result<reqwest::Response> {
        let mut req = self.request(Method::GET, path);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = self.reach(req).await?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        Err(self.refusal(status, &text))
    }

    /// A request to `path`, with the token if one was given.
    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// Sends `req`; not reaching the server says where it was looked for.
    async fn reach(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        req.send().await.with_context(|| {
            format!(
                "cannot reach delayq at {} (is it running? --server)",
                self.base
            )
        })
    }

    /// A non-2xx reply as an error: the server's message (its body when
    /// that is not an error reply), with a hint when the token is wrong.
    fn refusal(&self, status: reqwest::StatusCode, text: &str) -> anyhow::Error {
        let error: Option<delayq::wire::ErrorReply> = serde_json::from_str(text).ok();
        let msg = error.as_ref().map_or(text, |e| e.error.message.as_str());
        if status == reqwest::StatusCode::UNAUTHORIZED {
            let given = if self.token.is_some() {
                "the token given is not the server's"
            } else {
                "no token was given"
            };
            return anyhow::anyhow!("{status}: {msg}\nhint: {given}; pass the server's --auth-token with --token or DELAYQ_CLIENT_TOKEN");
        }
        match error.as_ref().map(|e| e.error.code.as_str()) {
            Some("outcome_unknown") => {
                return anyhow::Error::new(OutcomeUnknown(format!("{status}: {msg}")))
            }
            Some("cancelled") => {
                return anyhow::Error::new(JobCancelled(format!("{status}: {msg}")))
            }
            _ => {}
        }
        anyhow::anyhow!("{status}: {msg}")
    }
}

/// A change the server sent to Redis without getting its reply in time:
/// it may or may not have been applied. It is not sent again (a relative
/// change would apply twice); `delayq` exits with [`OutcomeUnknown::EXIT`].
#[derive(Debug)]
pub(crate) struct OutcomeUnknown(String);

impl OutcomeUnknown {
    /// The exit status that says "outcome unknown", apart from failures (1).
    pub(crate) const EXIT: u8 = 3;
}

impl std::fmt::Display for OutcomeUnknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\nnote: outcome unknown, not sent again: look at the job (delayq get ID, \
             delayq tags list TAG) before running the command again",
            self.0
        )
    }
}

impl std::error::Error for OutcomeUnknown {}

/// The job was cancelled while this client held its lease (409
/// `cancelled`): the call changed nothing, and the job's work should stop.
#[derive(Debug)]
pub(crate) struct JobCancelled(String);

impl std::fmt::Display for JobCancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for JobCancelled {}

/// What a path segment keeps unescaped: RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A job id, topic or name as one path segment (a `/` in it stays in it).
pub(super) fn encode(segment: &str) -> String {
    percent_encoding::utf8_percent_encode(segment, SEGMENT).to_string()
}

pub(crate) fn job_path(id: &str) -> String {
    format!("/v1/jobs/{}", encode(id))
}

pub(super) fn topic_path(topic: &str) -> String {
    format!("/v1/topics/{}", encode(topic))
}

pub(super) fn group_path(topic: &str, group: &str) -> String {
    format!("{}/groups/{}", topic_path(topic), encode(group))
}

pub(super) fn recurring_path(name: &str) -> String {
    format!("/v1/recurring/{}", encode(name))
}

pub(super) fn batch_path(id: &str) -> String {
    format!("/v1/batches/{}", encode(id))
}

pub(super) fn flow_path(id: &str) -> String {
    format!("/v1/flows/{}", encode(id))
}

/// The server's base URL: `HOST:PORT` is taken as `http://HOST:PORT`.
fn server_base(server: &str) -> String {
    let base = server.trim().trim_end_matches('/');
    if base.contains("://") {
        base.to_owned()
    } else {
        format!("http://{base}")
    }
}
