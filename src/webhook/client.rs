//! The HTTP client a webhook sends with. A plain `http://` URL goes
//! through hyper's pooled client with what every request shares (the URI,
//! the fixed headers) made once: reqwest's layers re-parsed the URL and
//! copied the headers of every request. https, credentials in the URL and
//! a proxy from the environment go through reqwest, as before.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE, LOCATION};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::Instant;

use super::Webhook;

/// How one webhook sends its requests.
pub(super) enum Sender {
    Plain {
        client: hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>,
        uri: Uri,
    },
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
        match plain_uri(&hook.url) {
            Some(uri) if !proxied => {
                // As reqwest's: no delay on small writes, idle connections
                // kept 90 s.
                let mut http = HttpConnector::new();
                http.set_nodelay(true);
                let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .pool_timer(TokioTimer::new())
                    .pool_idle_timeout(Duration::from_secs(90))
                    .build(http);
                Sender::Plain { client, uri }
            }
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
    ) -> Result<Answer, SendError> {
        match self {
            Sender::Plain { client, uri } => {
                let mut req = Request::post(uri.clone())
                    .body(Full::new(Bytes::from(body)))
                    .expect("a request of a parsed URI and valid headers");
                let h = req.headers_mut();
                h.insert(ACCEPT, HeaderValue::from_static("*/*"));
                h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                for (name, value) in headers {
                    h.insert(HeaderName::from_static(name), value);
                }
                match tokio::time::timeout_at(started + hook.timeout, client.request(req)).await {
                    Ok(Ok(resp)) => Ok(Answer::Plain(resp)),
                    Ok(Err(e)) => Err(SendError::Other(chain("error sending request", &e))),
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

/// The URI of a plain http URL that needs nothing of reqwest's (no
/// credentials to turn into a header); None otherwise. Without its
/// fragment, as reqwest sends it.
fn plain_uri(url: &str) -> Option<Uri> {
    let mut url = reqwest::Url::parse(url).ok()?;
    if url.scheme() != "http" || !url.username().is_empty() || url.password().is_some() {
        return None;
    }
    url.set_fragment(None);
    url.as_str().parse().ok()
}

/// `first`, then the causes of `e`: "invalid peer certificate:
/// UnknownIssuer" is what tells a user to set SSL_CERT_FILE.
fn chain(first: &str, e: &(dyn std::error::Error + 'static)) -> String {
    let mut why = first.to_owned();
    let mut cause = e.source();
    while let Some(c) = cause {
        why = format!("{why}: {c}");
        cause = c.source();
    }
    why
}

/// Why a request got no answer.
pub(super) enum SendError {
    Timeout,
    /// What kept it from one, with its causes.
    Other(String),
}

/// A receiver's answer, its body not read yet.
pub(super) enum Answer {
    Plain(hyper::Response<hyper::body::Incoming>),
    Reqwest(reqwest::Response),
}

/// Why a reply's body was not read to its end.
pub(super) struct BodyError {
    pub(super) timeout: bool,
    pub(super) why: String,
}

impl Answer {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Answer::Plain(r) => r.status(),
            Answer::Reqwest(r) => r.status(),
        }
    }

    pub(super) fn location(&self) -> Option<&HeaderValue> {
        match self {
            Answer::Plain(r) => r.headers().get(LOCATION),
            Answer::Reqwest(r) => r.headers().get(LOCATION),
        }
    }

    /// The body's next piece; None at its end.
    pub(super) async fn chunk(&mut self) -> Result<Option<Bytes>, BodyError> {
        match self {
            Answer::Plain(r) => loop {
                match r.body_mut().frame().await {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_without_credentials_skips_reqwest() {
        assert_eq!(
            plain_uri("http://h:8080/in?a=b#frag").unwrap(),
            "http://h:8080/in?a=b"
        );
        assert_eq!(plain_uri("http://h").unwrap(), "http://h/");
        for url in [
            "https://h/in",
            "http://user:pw@h/in",
            "http://user@h/in",
            "not a url",
        ] {
            assert!(plain_uri(url).is_none(), "{url}");
        }
    }
}
