//! A request body with a deadline for the whole of it.
//!
//! An idle timeout between chunks lets a client that sends one byte every
//! few seconds hold a connection (and a slot of `--max-connections`) for
//! as long as it likes. Here the clock starts when the headers are in, and
//! the body fails once the deadline passes, however the bytes trickle in.
//! The handler then answers "cannot read the request body" and the
//! connection is closed, since its body was not read to the end.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use http_body::{Frame, SizeHint};

pub(super) async fn with_deadline(req: Request, limit: Duration) -> Request {
    req.map(|inner| {
        Body::new(DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(limit)),
            limit,
        })
    })
}

struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            let message = format!("the body was not sent within {:?}", self.limit);
            return Poll::Ready(Some(Err(axum::Error::new(message))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why a request body could not be read, for both APIs to word their own
/// way.
pub(crate) enum BodyError {
    /// Over `max_request_bytes`.
    TooLarge(String),
    /// Cut off, too slow, or otherwise unreadable.
    Unreadable(String),
}

/// The body a handler extracted, or what went wrong reading it.
pub(crate) fn read_body(
    state: &super::AppState,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Bytes, BodyError> {
    body.map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            BodyError::TooLarge(format!(
                "request body is larger than the limit of {} bytes",
                state.server.max_request_bytes
            ))
        } else {
            BodyError::Unreadable(format!("cannot read the request body: {e}"))
        }
    })
}
