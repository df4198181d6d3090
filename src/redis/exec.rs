//! Plain calls to Redis ([`Client::call`]): each waits at most its limit
//! (the Redis timeout unless told), and is abandoned at once when its link
//! is replaced. Redis's refusals that delayq's scripts and settings produce
//! become errors of their own ([`Client::error`]). Script calls are in
//! [`super::script`].

use std::time::Duration;

use super::Client;
use crate::error::{Error, Result};

/// The code and detail of the (first) error Redis answered with, also from
/// inside a pipeline.
pub(super) fn server_error(e: &redis::RedisError) -> Option<(String, String)> {
    let errors = e.clone().into_server_errors()?;
    let (_, first) = errors.first()?;
    Some((
        first.code().to_owned(),
        first.details().unwrap_or_default().to_owned(),
    ))
}

impl Client {
    /// Runs one Redis call for at most the timeout.
    pub async fn call<T>(
        &self,
        op: &'static str,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        self.call_within(op, self.timeout, f).await
    }

    /// Runs one Redis call for at most `limit`, or until the link it went
    /// on is replaced (a failover: nothing comes back on the old master's
    /// connection). Redis's refusals that delayq's scripts and settings
    /// produce become errors of their own.
    pub(super) async fn call_within<T>(
        &self,
        op: &'static str,
        limit: Duration,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let gone = self.route.link.read().unwrap().gone.clone();
        tokio::select! {
            r = tokio::time::timeout(limit, f) => match r {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(self.error(op, e)),
                Err(_) => Err(self.timed_out(op)),
            },
            _ = gone.cancelled() => {
                self.observer.redis_error();
                self.health.suspect();
                Err(Error::Moved { op })
            }
        }
    }

    /// Redis's refusals that delayq's scripts and settings produce become
    /// errors of their own; failures to reach Redis are counted. A reply
    /// that did not come in time (the connection's response timeout, an
    /// acknowledged batch's deadline) is a timeout, said the one way.
    pub(crate) fn error(&self, op: &'static str, e: redis::RedisError) -> Error {
        if e.is_timeout() {
            return self.timed_out(op);
        }
        let error = match server_error(&e) {
            Some((code, _)) if code == "DQLATE" => Error::Late { op },
            Some((code, _)) if code == "OOM" => Error::Full,
            // Redis 6.2 refuses a script's first write at maxmemory inside
            // the script, and gives the refusal as its error's text.
            Some((_, detail)) if detail.contains("-OOM command not allowed") => Error::Full,
            Some((code, detail)) if code == "DQINVALID" => Error::Invalid(detail),
            Some((code, detail)) if code == "NOPERM" || super::acl::refused_in_script(&detail) => {
                Error::Refused {
                    op,
                    add: super::acl::what_to_add(&detail),
                    detail,
                }
            }
            _ => Error::redis(op, e),
        };
        if error.is_unavailable() {
            self.observer.redis_error();
            // The cluster's topology, or a shard's health, may have changed.
            self.health.suspect();
        }
        error
    }

    /// A change that got no reply in time (a timeout, or the master
    /// replaced mid-call) after it may have been sent: its outcome is
    /// unknown, not "nothing changed". The script's deadline only stops
    /// one that had not started by then.
    pub(super) fn unknown(
        &self,
        op: &'static str,
        late_unknown: bool,
        e: Error,
        may_have_sent: impl Fn() -> bool,
    ) -> Error {
        match e {
            Error::Timeout { .. } | Error::Moved { .. } if late_unknown && may_have_sent() => {
                Error::Unknown {
                    op,
                    after: self.timeout,
                }
            }
            e => e,
        }
    }

    /// The timeout error of `op`, with the last connection error if any.
    pub fn timed_out(&self, op: &'static str) -> Error {
        self.observer.redis_error();
        Error::Timeout {
            op,
            after: self.timeout,
            cause: self.route.connect_error.lock().unwrap().clone(),
        }
    }
}
