//! The library's error type.
//!
//! Two kinds of failure matter to callers: the request was wrong (nothing was
//! changed, fix the input) and Redis could not be used (nothing is known to
//! have changed, try again). Everything else is a bug or a broken invariant.

use std::time::Duration;

/// What went wrong in a [`Queue`](crate::Queue) call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input breaks a documented limit; nothing was written.
    #[error("{0}")]
    Invalid(String),

    /// No job with this id.
    #[error("no job with id {0:?}")]
    NotFound(String),

    /// The lease token is not the job's current one: the job was delivered
    /// again (to someone else), replaced, or finished. Nothing changed.
    #[error("the lease on job {0:?} is no longer yours (stale token)")]
    StaleLease(String),

    /// Redis did not answer within the configured time (down, restarting,
    /// paused). The request may or may not have been applied.
    #[error("redis unavailable: no answer within {0:?}")]
    Timeout(Duration),

    /// The call reached Redis after this process had stopped waiting for it
    /// (Redis paused, stopped or overloaded), and Redis refused it: nothing
    /// was changed.
    #[error("redis unavailable: the call reached redis after {0:?}; nothing was changed")]
    Late(Duration),

    /// Redis is at `maxmemory` and refused a call that would grow it.
    /// Finishing and deleting jobs still works and makes room.
    #[error("redis is out of memory (OOM: maxmemory reached): nothing was changed; finish or delete jobs, or give redis more memory")]
    Full,

    /// Redis is set to evict keys it needs (`maxmemory-policy` {0}): it
    /// could silently delete accepted jobs, so delayq accepts none.
    #[error("redis maxmemory-policy is {0}, which lets redis silently delete jobs; set it to noeviction (or a volatile-* policy)")]
    Evicting(String),

    /// Redis answered with an error or the connection failed.
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),

    /// A script returned something delayq's scripts never return.
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),
}

impl Error {
    /// True when the failure is about Redis, not about the request.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Timeout(_) | Error::Late(_) | Error::Full | Error::Evicting(_) | Error::Redis(_)
        )
    }
}

/// Shorthand used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
