//! Plain `http://` requests over kept HTTP/1 connections, each connection
//! driven by the delivery using it: no task per connection and no pool
//! keyed by host (a webhook has one). hyper's pooled client woke a
//! connection task and back for every request, and hashed its pool key.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A connection idle this long is closed rather than used (as reqwest's
/// pool did).
const IDLE: Duration = Duration::from_secs(90);

/// Most bytes of a 2xx reply's body read (and dropped) so its connection
/// can be used again; a longer one closes it.
const DRAINED_BYTES: usize = 64 * 1024;

type Driven = Pin<Box<Connection<TokioIo<TcpStream>, Full<Bytes>>>>;

/// One connection: the handle requests go in by, and the connection
/// itself, which makes progress only while its holder polls it.
struct Kept {
    send: SendRequest<Full<Bytes>>,
    /// None once it ended (closed, or failed).
    conn: Option<Driven>,
    idle_since: Instant,
}

impl Kept {
    /// Polls `fut` and the connection together until `fut` is done.
    async fn drive<F: Future>(&mut self, fut: F) -> F::Output {
        tokio::pin!(fut);
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return fut.await;
            };
            tokio::select! {
                biased;
                out = &mut fut => return out,
                // Ended: what it ended with reaches `fut` too.
                _ = conn => self.conn = None,
            }
        }
    }

    /// Ready for a request (false: it ended).
    async fn ready(&mut self) -> bool {
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        let send = &mut self.send;
        // The connection first: one closed while idle ends here, before a
        // request is given to it.
        let ready = tokio::select! {
            biased;
            _ = conn => false,
            r = std::future::poll_fn(|cx| send.poll_ready(cx)) => r.is_ok(),
        };
        if !ready {
            self.conn = None;
        }
        ready
    }
}

/// A plain http webhook's connections and what every request shares.
pub(super) struct Plain {
    /// Where to connect: host (no brackets) and port.
    host: String,
    port: u16,
    /// The path and query a request names (origin form).
    path: Uri,
    /// Host, Accept and Content-Type, the same for every request.
    head: HeaderMap,
    idle: Mutex<Vec<Kept>>,
}

/// A plain request's answer, its body not read yet; its connection goes
/// back for the next request once the body was read to its end.
pub(super) struct PlainAnswer<'a> {
    resp: Response<Incoming>,
    kept: Option<Kept>,
    ended: bool,
    from: &'a Plain,
}

impl Plain {
    /// For `url`, an http URL without credentials or fragment; None if it
    /// has no host or its URI does not parse.
    pub(super) fn new(url: &reqwest::Url) -> Option<Plain> {
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let uri: Uri = url.as_str().parse().ok()?;
        let path: Uri = uri.path_and_query()?.as_str().parse().ok()?;
        // As hyper's pooled client: the port only when not the default.
        let host_header = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        };
        let mut head = HeaderMap::with_capacity(8);
        head.insert(HOST, HeaderValue::from_str(&host_header).ok()?);
        head.insert(ACCEPT, HeaderValue::from_static("*/*"));
        head.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Some(Plain {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            path,
            head,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// POSTs `body` with `headers` besides the shared ones; the answer once
    /// its head came. Errors say what kept it from one, with causes.
    pub(super) async fn post(
        &self,
        headers: Vec<(&'static str, HeaderValue)>,
        body: Vec<u8>,
    ) -> Result<PlainAnswer<'_>, String> {
        let mut req = Request::new(Full::new(Bytes::from(body)));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.path.clone();
        let h = req.headers_mut();
        *h = self.head.clone();
        for (name, value) in headers {
            h.insert(HeaderName::from_static(name), value);
        }
        loop {
            let (mut kept, reused) = match self.take() {
                Some(k) => (k, true),
                None => (self.connect().await?, false),
            };
            if !kept.ready().await {
                if reused {
                    continue; // closed while idle: the next one
                }
                return Err("error sending request: the connection closed at once".into());
            }
            let sending = kept.send.try_send_request(req);
            match kept.drive(sending).await {
                Ok(resp) => {
                    let ended = resp.body().is_end_stream();
                    return Ok(PlainAnswer {
                        resp,
                        kept: Some(kept),
                        ended,
                        from: self,
                    });
                }
                Err(mut e) => match e.take_message() {
                    // Not written: a kept connection closed meanwhile.
                    Some(r) if reused => req = r,
                    _ => return Err(chain("error sending request", e.error())),
                },
            }
        }
    }

    /// The connection used last, if it has not been idle too long.
    fn take(&self) -> Option<Kept> {
        let mut idle = self.idle.lock().unwrap();
        let now = Instant::now();
        idle.retain(|k| k.idle_since + IDLE > now);
        idle.pop()
    }

    fn put(&self, mut kept: Kept) {
        kept.idle_since = Instant::now();
        self.idle.lock().unwrap().push(kept);
    }

    async fn connect(&self) -> Result<Kept, String> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("error sending request: tcp connect error: {e}"))?;
        // As reqwest's: no delay on small writes.
        let _ = tcp.set_nodelay(true);
        let (send, conn) = http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| chain("error sending request", &e))?;
        Ok(Kept {
            send,
            conn: Some(Box::pin(conn)),
            idle_since: Instant::now(),
        })
    }
}

impl PlainAnswer<'_> {
    pub(super) fn response(&self) -> &Response<Incoming> {
        &self.resp
    }

    /// The body's next frame; None at its end.
    pub(super) async fn frame(
        &mut self,
    ) -> Option<Result<hyper::body::Frame<Bytes>, hyper::Error>> {
        if self.ended {
            return None;
        }
        let next = self.resp.body_mut().frame();
        let got = match self.kept.as_mut() {
            Some(kept) => kept.drive(next).await,
            None => next.await,
        };
        if got.is_none() {
            self.ended = true;
        }
        got
    }

    /// Reads the rest of a body no one wants (at most [`DRAINED_BYTES`],
    /// none after `deadline`), so the connection can be used again.
    pub(super) async fn drain(mut self, deadline: Instant) {
        let mut read = 0;
        while !self.ended && read <= DRAINED_BYTES {
            match tokio::time::timeout_at(deadline, self.frame()).await {
                Ok(Some(Ok(frame))) => {
                    read += frame.data_ref().map_or(0, |d| d.len());
                }
                Ok(None) => {}
                Ok(Some(Err(_))) | Err(_) => return,
            }
        }
    }
}

impl Drop for PlainAnswer<'_> {
    fn drop(&mut self) {
        // Only a connection whose reply was read whole can carry the next
        // request; any other is closed.
        if let Some(kept) = self.kept.take() {
            if self.ended && kept.conn.is_some() {
                self.from.put(kept);
            }
        }
    }
}

/// `first`, then the causes of `e`: "invalid peer certificate:
/// UnknownIssuer" is what tells a user to set SSL_CERT_FILE.
pub(super) fn chain(first: &str, e: &(dyn std::error::Error + 'static)) -> String {
    let mut why = first.to_owned();
    let mut cause = e.source();
    while let Some(c) = cause {
        why = format!("{why}: {c}");
        cause = c.source();
    }
    why
}
