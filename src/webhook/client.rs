//! The HTTP client a webhook sends with. A plain `http://` URL goes over
//! hyper's HTTP/1 connections kept by the webhook itself, with what every
//! request shares (the path, the fixed headers) made once (`plain.rs`):
//! reqwest's layers re-parsed the URL and copied the headers of every
//! request. https, credentials in the URL and a proxy from the environment
//! go through reqwest, as before.

use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{HeaderValue, LOCATION};
use hyper::StatusCode;
use tokio::time::Instant;

use super::plain::{chain, Plain, PlainAnswer};
use super::Webhook;

/// How one webhook sends its requests.
pub(super) enum Sender {
    Plain(Box<Plain>),
    Reqwest {
        client: reqwest::Client,
        /// The URL parsed once (None: it does not parse, and each request
        /// says so).
        url: Option<Arc<reqwest::Url>>,
    },
}

/// Environment variables that send reqwest's plain http through a proxy:
/// with any set, requests go through reqwest so they keep doing so.
const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

impl Sender {
    pub(super) fn new(hook: &Webhook) -> Sender {
        let proxied = PROXY_VARS
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
        match plain_url(&hook.url).and_then(|u| Plain::new(&u)) {
            Some(plain) if !proxied => Sender::Plain(Box::new(plain)),
            _ => {
                // A redirect is not followed: only a 2xx to the POST itself
                // finishes a job (a 302 followed by a GET without body
                // answered 200 by whatever is there is no delivery).
                let client = crate::https::client_builder()
                    .timeout(hook.timeout)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .expect("an HTTP client with a timeout");
                let url = reqwest::Url::parse(&hook.url).ok().map(Arc::new);
                Sender::Reqwest { client, url }
            }
        }
    }

    /// POSTs `body` with `headers` (besides the content type); the answer
    /// once its head came, within `hook.timeout` of `started`.
    pub(super) async fn post(
        &self,
        hook: &Webhook,
        started: Instant,
        headers: Vec<(&'static str, HeaderValue)>,
        body: Vec<u8>,
    ) -> Result<Answer<'_>, SendError> {
        match self {
            Sender::Plain(plain) => {
                match tokio::time::timeout_at(started + hook.timeout, plain.post(headers, body))
                    .await
                {
                    Ok(Ok(answer)) => Ok(Answer::Plain(answer)),
                    Ok(Err(why)) => Err(SendError::Other(why)),
                    Err(_) => Err(SendError::Timeout),
                }
            }
            Sender::Reqwest { client, url } => {
                let req = match url {
                    Some(url) => client.post(url.as_ref().clone()),
                    None => client.post(&hook.url),
                };
                let mut req = req.header("content-type", "application/json");
                for (name, value) in headers {
                    req = req.header(name, value);
                }
                match req.body(body).send().await {
                    Ok(resp) => Ok(Answer::Reqwest(resp)),
                    Err(e) if e.is_timeout() => Err(SendError::Timeout),
                    // The URL as shown, not reqwest's: the error is kept
                    // with the job and in the webhook status, and the
                    // URL's query may hold a secret.
                    Err(e) => {
                        let e = e.without_url();
                        Err(SendError::Other(chain(&e.to_string(), &e)))
                    }
                }
            }
        }
    }
}

/// A plain http URL that needs nothing of reqwest's (no credentials to
/// turn into a header); None otherwise. Without its fragment, as reqwest
/// sends it.
fn plain_url(url: &str) -> Option<reqwest::Url> {
    let mut url = reqwest::Url::parse(url).ok()?;
    if url.scheme() != "http" || !url.username().is_empty() || url.password().is_some() {
        return None;
    }
    url.set_fragment(None);
    Some(url)
}

/// Why a request got no answer.
pub(super) enum SendError {
    Timeout,
    /// What kept it from one, with its causes.
    Other(String),
}

/// A receiver's answer, its body not read yet.
pub(super) enum Answer<'a> {
    Plain(PlainAnswer<'a>),
    Reqwest(reqwest::Response),
}

/// Why a reply's body was not read to its end.
pub(super) struct BodyError {
    pub(super) timeout: bool,
    pub(super) why: String,
}

impl Answer<'_> {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Answer::Plain(r) => r.response().status(),
            Answer::Reqwest(r) => r.status(),
        }
    }

    pub(super) fn location(&self) -> Option<&HeaderValue> {
        match self {
            Answer::Plain(r) => r.response().headers().get(LOCATION),
            Answer::Reqwest(r) => r.headers().get(LOCATION),
        }
    }

    /// The body's next piece; None at its end.
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        match self {
            Answer::Plain(r) => loop {
                match r.frame().await {
                    None => return Ok(None),
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Ok(Some(data));
                        }
                        // Trailers: no data, read on.
                    }
                    Some(Err(e)) => {
                        return Err(BodyError {
                            timeout: e.is_timeout(),
                            why: e.to_string(),
                        })
                    }
                }
            },
            Answer::Reqwest(r) => r.chunk().await.map_err(|e| BodyError {
                timeout: e.is_timeout(),
                why: e.without_url().to_string(),
            }),
        }
    }

    /// Done with a 2xx whose body no one reads: a plain connection reads
    /// what is left of it by `deadline` (a little) to carry the next
    /// request; reqwest's pool sees to its own.
    pub(super) async fn done(self, deadline: Instant) {
        if let Answer::Plain(r) = self {
            r.drain(deadline).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_without_credentials_skips_reqwest() {
        assert_eq!(
            plain_url("http://h:8080/in?a=b#frag").unwrap().as_str(),
            "http://h:8080/in?a=b"
        );
        assert_eq!(plain_url("http://h").unwrap().as_str(), "http://h/");
        for url in [
            "https://h/in",
            "http://user:pw@h/in",
            "http://user@h/in",
            "not a url",
        ] {
            assert!(plain_url(url).is_none(), "{url}");
        }
    }
}
