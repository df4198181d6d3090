//! The library's error type.
//!
//! Three kinds of failure matter to callers: the request was wrong (nothing
//! was changed, fix the input), Redis could not be used (nothing was
//! changed, try again), and a change reached Redis but its reply did not
//! come in time ([`Error::Unknown`]: it may or may not have been applied;
//! read before trying again). Everything else is a bug or a broken
//! invariant.

use std::time::Duration;

/// What went wrong in a [`Queue`](crate::Queue) call.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// The input breaks a documented limit; nothing was written.
    #[error("{0}")]
    Invalid(String),

    /// This instance holds as much of something as it takes (e.g. jobs
    /// waited on for their outcomes); nothing was changed, try later or
    /// elsewhere.
    #[error("{0}")]
    Busy(String),

    /// No job with this id.
    #[error("no job with id {0:?}")]
    NotFound(String),

    /// No batch with this id (or one whose retention ran out).
    #[error("no batch with id {0:?}")]
    NoBatch(String),

    /// No flow whose parent has this id (or one whose retention ran out).
    #[error("no flow with parent id {0:?}")]
    NoFlow(String),

    /// The request names something whose state refuses it (a batch that
    /// fired or was cancelled; an id in use pushed into a batch): nothing
    /// changed.
    #[error("{0}")]
    Conflict(String),

    /// The lease token is not the job's current one: the job was delivered
    /// again (to someone else), replaced, or finished. Nothing changed.
    #[error("the lease on job {0:?} is no longer yours (stale token)")]
    StaleLease(String),

    /// The job was cancelled while this lease held it: stop its work; the
    /// call changed nothing (a finish finishes nothing, a nack retries
    /// nothing).
    #[error("job {0:?} was cancelled while it ran")]
    Cancelled(String),

    /// Redis did not answer `op` within the configured time (down,
    /// restarting, paused) and nothing was changed: the call never left
    /// this process (no connection to Redis), or it only reads. A change
    /// that was sent and got no reply in time is [`Error::Unknown`].
    #[error(
        "redis unavailable: {op}: no answer within {after:?}{}",
        .cause.as_deref().map(|c| format!(" (last connection error: {c})")).unwrap_or_default()
    )]
    Timeout {
        op: &'static str,
        after: Duration,
        /// Why the last attempt to connect failed, when one did.
        cause: Option<String>,
    },

    /// A change was sent to Redis and its reply did not come in time (a
    /// slow script, Redis paused or overloaded, or the master replaced
    /// mid-call): it may have been applied or not. Its deadline only stops
    /// a script that had not started by then; one that started ran to the
    /// end. Read the job (or the tag's listing) to find out before trying
    /// again: a repeated relative change (a reschedule's `shift_ms`) would
    /// apply twice.
    #[error(
        "outcome unknown: {op}: sent to redis, but no reply came within {after:?}; the change may or may not have been applied: read the job (or the tag's jobs) before trying again"
    )]
    Unknown { op: &'static str, after: Duration },

    /// The call reached Redis after this process had stopped waiting for it
    /// (Redis paused, stopped or overloaded), and Redis refused it: nothing
    /// was changed.
    #[error(
        "redis unavailable: {op}: the call reached redis after its deadline; nothing was changed"
    )]
    Late { op: &'static str },

    /// The master `op` was sent to was replaced (a failover) before it
    /// answered: the call was abandoned, and its deadline makes it change
    /// nothing if it arrives after all. The next call goes to the new
    /// master.
    #[error(
        "redis unavailable: {op}: the master changed (failover) before it answered; try again"
    )]
    Moved { op: &'static str },

    /// Redis is at `maxmemory` and refused a call that would grow it.
    /// Finishing and deleting jobs still works and makes room.
    #[error("redis is out of memory (OOM: maxmemory reached): nothing was changed; finish or delete jobs, or give redis more memory")]
    Full,

    /// Redis is set to evict keys it needs (`maxmemory-policy` {0}): it
    /// could silently delete accepted jobs, so delayq accepts none.
    #[error("redis maxmemory-policy is {0}, which lets redis silently delete jobs; set it to noeviction (or a volatile-* policy)")]
    Evicting(String),

    /// A push reached the master but fewer replicas than asked for have it
    /// yet: a failover now could lose it. Pushing it again (same id) is
    /// safe.
    #[error("redis unavailable: the job was written but only {acked} of {wanted} replicas acknowledged it in time; push it again (same id) to be sure")]
    Unreplicated { acked: usize, wanted: usize },

    /// A change (a finish, nack, cancel, delete, reschedule, ...) was
    /// written on the master, but fewer replicas than `replica_acks` asks
    /// for confirmed it within `after` (Redis WAIT): a failover now (the
    /// master cut off from its replicas, one of them promoted) could undo
    /// it, so it is not acknowledged. Its outcome is unknown: read the job
    /// before trying again.
    #[error(
        "outcome unknown: {op}: written on the master, not confirmed by {wanted} replica(s) within {after:?} (only {acked} did): a failover could undo it; read the job (or the tag's jobs) before trying again"
    )]
    Unconfirmed {
        op: &'static str,
        acked: usize,
        wanted: usize,
        after: Duration,
    },

    /// A pop leased jobs on the master, but fewer replicas than
    /// `replica_acks` asks for confirmed the leases within `after`: nothing
    /// was handed out, and the leases are given back (or, if that cannot
    /// reach Redis, end by themselves), so the jobs come again.
    #[error("redis unavailable: pop: its leases were written on the master but not confirmed by {wanted} replica(s) within {after:?} (only {acked} did): nothing was handed out, the jobs are given back")]
    LeaseUnconfirmed {
        acked: usize,
        wanted: usize,
        after: Duration,
    },

    /// The call's partition is on a master with fewer connected replicas
    /// than `replica_acks` asks for (its replica died or is cut off, or it
    /// was promoted and has none yet), and acknowledged writes there are
    /// refused (the default `DegradedPushes::Refuse`, as Redis's
    /// `min-replicas-to-write`): such a master may be the losing side of a
    /// split, whose writes a failover discards. Nothing was written (and a
    /// pop handed nothing out).
    #[error("redis unavailable: {op}: shard {shard} has {replicas} of the {wanted} replicas --replica-acks asks for: pushes, pops, finishes, nacks and cancels on its partitions are refused until a replica is back (nothing was written; --degraded-pushes accept takes them unreplicated)")]
    Degraded {
        op: &'static str,
        shard: String,
        replicas: usize,
        wanted: usize,
    },

    /// Redis's ACL refused delayq's user a command, key or channel: that
    /// call changed nothing. `add` is what the user's ACL needs (docs/acl.md,
    /// "Least privilege", has the whole line).
    #[error("redis refused {op} to delayq's user ({detail}): add {add} to its ACL (docs/acl.md: Least privilege)")]
    Refused {
        op: &'static str,
        detail: String,
        add: String,
    },

    /// The server runs none of delayq's scripts: neither FCALL nor EVALSHA
    /// (no Lua scripting, the commands renamed away, or an ACL that
    /// refuses both to delayq's user). Nothing ran. `why` names the
    /// server, both answers and the fix; `refused`: an ACL refusal.
    #[error("redis runs no scripts for delayq: {op}: {why}")]
    NoScripts {
        op: &'static str,
        why: String,
        refused: bool,
    },

    /// Redis answered `op` with an error, or the connection failed.
    #[error("redis error: {op}: {source}")]
    Redis {
        op: &'static str,
        #[source]
        source: redis::RedisError,
    },

    /// A script returned something delayq's scripts never return.
    #[error("unexpected reply from redis: {op}: {detail}")]
    Protocol { op: &'static str, detail: String },
}

impl Error {
    /// True when the failure is about Redis, not about the request.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. }
                | Error::Unknown { .. }
                | Error::Late { .. }
                | Error::Moved { .. }
                | Error::Degraded { .. }
                | Error::Full
                | Error::Evicting(_)
                | Error::Unreplicated { .. }
                | Error::Unconfirmed { .. }
                | Error::LeaseUnconfirmed { .. }
                | Error::Refused { .. }
                | Error::NoScripts { .. }
                | Error::Redis { .. }
        )
    }

    /// True when the call may have run in Redis though its reply never
    /// came: no answer in time, the master replaced before it answered, or
    /// the connection broke (not an error reply, which Redis gives instead
    /// of running it); or it ran on a master whose replicas did not confirm
    /// it.
    pub(crate) fn may_have_run(&self) -> bool {
        match self {
            Error::Timeout { .. }
            | Error::Unknown { .. }
            | Error::Moved { .. }
            | Error::Unconfirmed { .. }
            | Error::LeaseUnconfirmed { .. } => true,
            Error::Redis { source, .. } => source.code().is_none(),
            _ => false,
        }
    }

    /// True if the call failed for want of a Redis that answers in time
    /// (no reply, too late, a failover, a broken connection, Redis loading
    /// or busy): the same call may work later. Not a refusal that stays
    /// (ACL, no scripting, a script's error).
    pub(crate) fn may_pass(&self) -> bool {
        match self {
            Error::Timeout { .. }
            | Error::Unknown { .. }
            | Error::Late { .. }
            | Error::Moved { .. }
            | Error::Unconfirmed { .. }
            | Error::LeaseUnconfirmed { .. } => true,
            Error::Redis { source, .. } => source.code().is_none_or(|code| {
                matches!(
                    code,
                    "LOADING" | "BUSY" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "READONLY"
                )
            }),
            _ => false,
        }
    }

    pub(crate) fn redis(op: &'static str, source: redis::RedisError) -> Error {
        Error::Redis { op, source }
    }

    pub(crate) fn protocol(op: &'static str, detail: String) -> Error {
        Error::Protocol { op, detail }
    }
}

/// Shorthand used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
