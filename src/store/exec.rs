//! How the store's calls go to Redis: plain commands with [`Store::call`],
//! script calls with [`Store::send`]. Each waits at most its limit (the
//! Redis timeout unless told), and each script call carries a deadline in
//! Redis time past which the script refuses to act, so a call this process
//! gave up on never takes effect later. Whether a script call waits for
//! replicas is the script's own property ([`Script::acked`]).

use std::time::Duration;

use redis::{Cmd, ToRedisArgs, Value};
use tokio::time::Instant;

use super::reply::Fields;
use super::{coalesce, health, library, Client, Script, Status, Store};
use crate::error::{Error, Result};

/// The code and detail of the (first) error Redis answered with, also from
/// inside a pipeline.
fn server_error(e: &redis::RedisError) -> Option<(String, String)> {
    let errors = e.clone().into_server_errors()?;
    let (_, first) = errors.first()?;
    Some((
        first.code().to_owned(),
        first.details().unwrap_or_default().to_owned(),
    ))
}

/// What one script call met of the two paths: each one's refusal.
#[derive(Default)]
struct Refusals {
    fcall: Option<redis::RedisError>,
    evalsha: Option<redis::RedisError>,
}

/// One call of a script on one partition: its own arguments are added
/// like a [`Cmd`]'s, then [`Store::send`] sends it.
pub(crate) struct Call {
    script: &'static Script,
    part: usize,
    args: Cmd,
    until: Instant,
    within: Option<Duration>,
}

impl Call {
    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Call {
        self.args.arg(arg);
        self
    }

    /// A call with no store, to count the arguments a script's Rust side
    /// writes.
    #[cfg(test)]
    pub(crate) fn bare(script: &'static Script) -> Call {
        Call {
            script,
            part: 0,
            args: Cmd::new(),
            until: Instant::now(),
            within: None,
        }
    }

    /// How many arguments the call has so far.
    #[cfg(test)]
    pub(crate) fn arg_count(&self) -> usize {
        self.args.args_iter().count()
    }

    /// Redis changes nothing for this call after `until` (default: the
    /// Redis timeout from when the call was made).
    pub fn until(mut self, until: Instant) -> Call {
        self.until = until;
        self
    }

    /// Waits for the reply at most `limit` (default: until `until`).
    pub fn within(mut self, limit: Duration) -> Call {
        self.within = Some(limit);
        self
    }

    /// The FCALL (or EVALSHA, on `path`), with the deadline in Redis time
    /// (microseconds).
    fn cmd(&self, store: &Store, path: library::Path, deadline_us: i64) -> Cmd {
        let keys = &store.parts()[self.part];
        let guard = store.cluster.is_some();
        library::call_with(
            path,
            self.script,
            keys,
            guard,
            &self.args,
            deadline_us,
            store.events,
        )
    }
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
    async fn call_within<T>(
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
    fn unknown(
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

impl Store {
    /// A call of `script` on partition `part`, to send with [`send`](Self::send).
    ///
    /// On a cluster the call also declares the partition's `moving` key,
    /// which never exists: while the partition's slot is being migrated,
    /// Redis answers TRYAGAIN (or ASK, then TRYAGAIN) instead of running
    /// the script on half of its keys, and the client retries.
    pub(crate) fn script(&self, script: &'static Script, part: usize) -> Call {
        Call {
            script,
            part,
            args: Cmd::new(),
            until: Instant::now() + self.timeout,
            within: None,
        }
    }

    /// Sends a script call: its reply's status and values. The first call
    /// reads Redis's clock first, so that every call carries its deadline;
    /// the function library is loaded when Redis lacks it (a new or flushed
    /// server). An acknowledged script ([`Script::acked`]) waits for
    /// `replica_acks` replicas when they are asked for.
    ///
    /// With the degraded-push policy `refuse` (the default), an
    /// acknowledged call is acknowledged only once its WAIT is met: a
    /// master that cannot confirm its writes may be the losing side of a
    /// split, whose writes a failover discards. So on a shard with fewer
    /// replicas than acks ask for ([`health`]) every acknowledged call is
    /// refused before it is sent, and one whose WAIT comes back short
    /// fails: a push as [`Error::Unreplicated`] (pushing again is safe), a
    /// pop as [`Error::LeaseUnconfirmed`] (its caller gives its leases
    /// back: nothing is handed out), anything else as
    /// [`Error::Unconfirmed`] (written on the master, outcome unknown).
    /// With `accept`, the older, weaker promise: on a degraded shard calls
    /// go on without waiting for replicas, and a short WAIT keeps its
    /// result (a repeat after a second failure, never a stranded lease).
    pub(crate) async fn send(&self, call: Call) -> Result<(Status, Fields)> {
        let op = call.script.name;
        let wanted = if call.script.acked {
            self.acks.wanted
        } else {
            0
        };
        let strict = self.health.policy == health::DegradedPushes::Refuse;
        let degraded = self.health.degraded(call.part).filter(|_| wanted > 0);
        if let (Some((shard, replicas)), true) = (&degraded, strict) {
            return Err(Error::Degraded {
                op,
                shard: shard.clone(),
                replicas: *replicas,
                wanted,
            });
        }
        self.check_partitions().await?;
        if self.clock().estimate_us().is_none() {
            // Without a reading the call could carry no deadline.
            self.clock().read(op).await?;
        }
        let deadline_us = self.clock().at(call.until).unwrap_or(0);
        let limit = call
            .within
            .unwrap_or_else(|| call.until.saturating_duration_since(Instant::now()));
        if wanted == 0 || degraded.is_some() {
            return self.send_plain(&call, deadline_us, limit).await;
        }
        let (reply, acked) = self.send_acked(&call, deadline_us, wanted, limit).await?;
        if acked >= wanted {
            return Ok(reply);
        }
        self.health.short_of_replicas(call.part, acked);
        if !strict {
            return Ok(reply);
        }
        let after = self.ack_wait();
        // A push (or a recurring tick's) is safe to send again: its ids
        // make a second one change nothing.
        Err(if matches!(op, "push" | "tick") {
            Error::Unreplicated { acked, wanted }
        } else if !call.script.late_unknown {
            Error::LeaseUnconfirmed {
                acked,
                wanted,
                after,
            }
        } else {
            Error::Unconfirmed {
                op,
                acked,
                wanted,
                after,
            }
        })
    }

    /// How long an acknowledged batch's WAIT waits for its replicas.
    fn ack_wait(&self) -> Duration {
        self.timeout / 2
    }

    /// Whether a script call that Redis refused with `e` is sent again,
    /// after what: every script loaded (Redis lacked one), or the path
    /// changed (the server has no FCALL, or no EVALSHA, for delayq). Both
    /// refusals come before anything runs, so sending again is safe; any
    /// other error is final (the script may have run, even partly). Once
    /// both paths were refused in this call it fails with
    /// [`Error::NoScripts`].
    async fn again_after(
        &self,
        e: &redis::RedisError,
        path: library::Path,
        refusals: &mut Refusals,
        op: &'static str,
    ) -> Result<bool> {
        if library::is_missing(e) {
            self.load_scripts(path).await?;
            return Ok(true);
        }
        if !library::lacks(path, e) {
            return Ok(false);
        }
        let other_untried = match path {
            library::Path::Function => {
                refusals.fcall.replace(e.clone()).is_none() && refusals.evalsha.is_none()
            }
            library::Path::Eval => {
                refusals.evalsha.replace(e.clone()).is_none() && refusals.fcall.is_none()
            }
        };
        if !other_untried {
            return Err(self.scripts_refused(op, refusals).await);
        }
        let to_eval = path == library::Path::Function;
        tracing::info!(
            error = %e,
            "redis has no {} for delayq: its scripts go by {} on this server",
            if to_eval { "FCALL" } else { "EVALSHA" },
            if to_eval { "EVALSHA" } else { "FCALL" },
        );
        self.route
            .eval
            .store(to_eval, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    /// The error of a call both paths refused, remembered for readiness.
    /// The server is named by INFO once, when it stops running scripts.
    async fn scripts_refused(&self, op: &'static str, refusals: &Refusals) -> Error {
        let known = self
            .route
            .no_scripts
            .lock()
            .unwrap()
            .as_ref()
            .map(|(s, _)| s.clone());
        let server = match known {
            Some(s) => s,
            None => {
                let (mut cmd, mut conn) = (redis::cmd("INFO"), self.conn());
                let info = cmd.arg("server").query_async::<String>(&mut conn);
                match tokio::time::timeout(self.timeout, info).await {
                    Ok(Ok(text)) => library::engine(&text).unwrap_or_else(|| "the server".into()),
                    Ok(Err(e)) => format!("the server (INFO: {e})"),
                    Err(_) => "the server (INFO: no answer)".into(),
                }
            }
        };
        // An unknown command's reply echoes its arguments (a job's body):
        // only the fact is kept.
        let said = |e: &Option<redis::RedisError>| match e {
            None => "not tried".to_owned(),
            Some(e) if e.code() == Some("NOPERM") => e.to_string(),
            Some(e) if e.detail().is_some_and(|d| d.starts_with("unknown command")) => {
                "unknown command".to_owned()
            }
            Some(e) => e.to_string(),
        };
        let (fcall, evalsha) = (said(&refusals.fcall), said(&refusals.evalsha));
        let refused = [&refusals.fcall, &refusals.evalsha]
            .iter()
            .any(|e| e.as_ref().is_some_and(|e| e.code() == Some("NOPERM")));
        let why = if refused {
            format!(
                "{server} refuses delayq's user FCALL ({fcall}) and EVALSHA ({evalsha}): \
                 add +fcall +function|load, or +evalsha +script|load, to its ACL \
                 (README: Least privilege)"
            )
        } else {
            format!(
                "{server} runs neither FCALL ({fcall}) nor EVALSHA ({evalsha}): delayq needs \
                 Lua scripting (Redis 6.2 or later, or Valkey, without those commands renamed away)"
            )
        };
        let first = self
            .route
            .no_scripts
            .lock()
            .unwrap()
            .replace((server, why.clone()))
            .is_none();
        if first {
            tracing::error!("{why}");
        }
        self.observer.redis_error();
        Error::NoScripts { op, why, refused }
    }

    /// A script call on the shared connection.
    async fn send_plain(
        &self,
        call: &Call,
        deadline_us: i64,
        limit: Duration,
    ) -> Result<(Status, Fields)> {
        let op = call.script.name;
        // A first call may meet both refusals: FCALL unknown, then the
        // script not loaded.
        let mut tries = 0;
        let mut refusals = Refusals::default();
        loop {
            let path = self.path();
            let cmd = call.cmd(self, path, deadline_us);
            let conn = self.conn();
            let before = conn.waiting();
            let sent = self
                .call_within(op, limit, async {
                    Ok::<_, redis::RedisError>(cmd.query_async::<Value>(&mut conn.clone()).await)
                })
                .await;
            let error = match sent {
                Ok(Ok(reply)) => {
                    self.scripts_ran();
                    return Fields::parse(op, reply);
                }
                Ok(Err(e)) => {
                    tries += 1;
                    if tries < 3 && self.again_after(&e, path, &mut refusals, op).await? {
                        continue;
                    }
                    self.error(op, e)
                }
                Err(e) => e,
            };
            let may_have_sent = || conn.may_have_sent(&before);
            return Err(self.unknown(op, call.script.late_unknown, error, may_have_sent));
        }
    }

    /// A script call in its partition's next acknowledged batch
    /// ([`coalesce::Acked`]): its reply, and how many replicas have it.
    async fn send_acked(
        &self,
        call: &Call,
        deadline_us: i64,
        wanted: usize,
        limit: Duration,
    ) -> Result<((Status, Fields), usize)> {
        let (op, part) = (call.script.name, call.part);
        let route = coalesce::AckRoute {
            conn: self.acks.conn.read().unwrap().clone().expect("acks are on"),
            wanted,
            wait_ms: self.ack_wait().as_millis() as u64,
        };
        let before = route.conn.waiting();
        let mut tries = 0;
        let mut refusals = Refusals::default();
        loop {
            let path = self.path();
            let write = coalesce::AckedWrite {
                cmd: call.cmd(self, path, deadline_us),
                conn: self.node_conn(part).await,
                deadline: Instant::now() + limit,
            };
            let sent = self
                .call_within(op, limit, async {
                    Ok::<_, redis::RedisError>(
                        self.acks.lane.submit(&route, part, write, limit).await,
                    )
                })
                .await
                .and_then(|r| {
                    r.map_err(|e| match e {
                        Error::Redis { source, .. } => self.error(op, source),
                        e => e,
                    })
                })
                .map_err(|e| {
                    self.unknown(op, call.script.late_unknown, e, || {
                        route.conn.may_have_sent(&before)
                    })
                });
            let (value, acked) = match sent {
                Ok(r) => r,
                Err(e) => {
                    if e.is_unavailable() {
                        self.drop_node_conn(part);
                    }
                    return Err(e);
                }
            };
            match value.extract_error() {
                Ok(v) => {
                    self.scripts_ran();
                    return Ok((Fields::parse(op, v)?, acked));
                }
                Err(e) => {
                    tries += 1;
                    if tries < 3 && self.again_after(&e, path, &mut refusals, op).await? {
                        continue;
                    }
                    return Err(self.error(op, e));
                }
            }
        }
    }
}
