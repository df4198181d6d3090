//! Script calls ([`Client::send`]): by FCALL of the library's function, or
//! by EVALSHA where the server has no FCALL for delayq, loading the library
//! when Redis lacks it. Each call carries a deadline in Redis time past
//! which the script refuses to act, so a call this process gave up on
//! never takes effect later; an acknowledged function's calls wait for
//! replicas (WAIT) in their partition's batch.

use std::time::Duration;

use redis::{Cmd, Value};
use tokio::time::Instant;

use super::library::{command, engine, is_missing, lacks, load_cmds, Function, Path};
use super::reply::{Code, Fields};
use super::{coalesce, health, Client};
use crate::error::{Error, Result};

/// What one script call met of the two paths: each one's refusal.
#[derive(Default)]
struct Refusals {
    fcall: Option<redis::RedisError>,
    evalsha: Option<redis::RedisError>,
}

/// One call of a library's function on one partition: its keys, its
/// arguments before the deadline and after it, until when Redis may act on
/// it and how long its reply is waited for.
pub(crate) struct ScriptCall<'a> {
    pub function: &'a Function,
    pub part: usize,
    pub keys: Vec<String>,
    pub args: &'a [&'a Cmd],
    pub tail: &'a Cmd,
    pub until: Instant,
    /// Waits for the reply at most this long (None: until `until`).
    pub within: Option<Duration>,
}

impl ScriptCall<'_> {
    /// The FCALL (or EVALSHA, on `path`), with the deadline in Redis time
    /// (microseconds).
    fn cmd(&self, path: Path, deadline_us: i64) -> Cmd {
        command(
            path,
            self.function,
            &self.keys,
            self.args,
            deadline_us,
            self.tail,
        )
    }
}

impl Client {
    /// The function `name` of the library this client was given.
    pub(crate) fn function(&self, name: &str) -> &'static Function {
        self.library
            .get(name)
            .unwrap_or_else(|| panic!("no function {name} in the library"))
    }

    /// Why the server runs none of delayq's scripts, as the last script
    /// call found (None: it ran, or none was made yet).
    pub(crate) fn no_scripts(&self) -> Option<String> {
        self.route
            .no_scripts
            .lock()
            .unwrap()
            .as_ref()
            .map(|(_, why)| why.clone())
    }

    /// A script call ran: the server runs scripts (again).
    pub(super) fn scripts_ran(&self) {
        if self.route.no_scripts.lock().unwrap().take().is_some() {
            tracing::info!("redis runs delayq's scripts again");
        }
    }

    /// How the scripts are called on this server now.
    pub(crate) fn path(&self) -> Path {
        if self.route.eval.load(std::sync::atomic::Ordering::Relaxed) {
            Path::Eval
        } else {
            Path::Function
        }
    }

    /// Makes every script callable on `path` ([`load_cmds`]):
    /// the function library, or every script, in one pipeline (on a
    /// cluster each SCRIPT LOAD goes to every master on its own, a
    /// pipeline routes by key and these have none); loads that race all
    /// succeed.
    pub(crate) async fn load_scripts(&self, path: Path) -> Result<()> {
        let cmds = load_cmds(self.library, path);
        let loaded: redis::RedisResult<()> = if self.cluster.is_some() {
            futures::future::try_join_all(cmds.iter().map(|c| {
                let mut conn = self.conn();
                async move { c.query_async::<redis::Value>(&mut conn).await }
            }))
            .await
            .map(drop)
        } else {
            let mut pipe = redis::pipe();
            for c in cmds {
                pipe.add_command(c).ignore();
            }
            pipe.query_async(&mut self.conn()).await
        };
        match loaded {
            Ok(()) => {
                tracing::info!(path = ?path, "loaded delayq's scripts into redis");
                Ok(())
            }
            Err(e) => Err(Error::redis("load scripts", e)),
        }
    }

    /// Sends a script call: its reply's status and values. The first call
    /// reads Redis's clock first, so that every call carries its deadline;
    /// the function library is loaded when Redis lacks it (a new or flushed
    /// server). An acknowledged script ([`Script::acked`]) waits for
    /// `replica_acks` replicas when they are asked for.
    ///
    /// With the degraded-push policy `refuse` (the default), a call is
    /// acknowledged only once its WAIT is met: a master that cannot confirm
    /// its writes may be the losing side of a split. So on a shard with
    /// fewer replicas than acks ask for ([`health`]) every acknowledged
    /// call is refused before it is sent, and one whose WAIT comes back
    /// short fails ([`health::unconfirmed`]; a pop's caller gives its
    /// leases back). With `accept`, the older, weaker promise: a degraded
    /// shard goes on without waiting, a short WAIT keeps its result.
    pub(crate) async fn send<S: Code>(
        &self,
        call: &ScriptCall<'_>,
        ready: impl std::future::Future<Output = Result<()>>,
    ) -> Result<(S, Fields)> {
        let op = call.function.name;
        let wanted = if call.function.acked {
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
        ready.await?;
        if self.clock().estimate_us().is_none() {
            // Without a reading the call could carry no deadline.
            self.clock().read(op).await?;
        }
        let deadline_us = self.clock().at(call.until).unwrap_or(0);
        let limit = call
            .within
            .unwrap_or_else(|| call.until.saturating_duration_since(Instant::now()));
        if wanted == 0 || degraded.is_some() {
            return self.send_plain(call, deadline_us, limit).await;
        }
        let (reply, acked) = self.send_acked(call, deadline_us, wanted, limit).await?;
        if acked >= wanted {
            return Ok(reply);
        }
        self.health.short_of_replicas(call.part, acked);
        if !strict {
            return Ok(reply);
        }
        Err(health::unconfirmed(
            call.function,
            acked,
            wanted,
            self.ack_wait(),
        ))
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
        path: Path,
        refusals: &mut Refusals,
        op: &'static str,
    ) -> Result<bool> {
        if is_missing(e) {
            self.load_scripts(path).await?;
            return Ok(true);
        }
        if !lacks(path, e) {
            return Ok(false);
        }
        let other_untried = match path {
            Path::Function => {
                refusals.fcall.replace(e.clone()).is_none() && refusals.evalsha.is_none()
            }
            Path::Eval => refusals.evalsha.replace(e.clone()).is_none() && refusals.fcall.is_none(),
        };
        if !other_untried {
            return Err(self.scripts_refused(op, refusals).await);
        }
        let to_eval = path == Path::Function;
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
                    Ok(Ok(text)) => engine(&text).unwrap_or_else(|| "the server".into()),
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
                 (docs/acl.md: Least privilege)"
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
    async fn send_plain<S: Code>(
        &self,
        call: &ScriptCall<'_>,
        deadline_us: i64,
        limit: Duration,
    ) -> Result<(S, Fields)> {
        let op = call.function.name;
        // A first call may meet both refusals: FCALL unknown, then the
        // script not loaded.
        let mut tries = 0;
        let mut refusals = Refusals::default();
        loop {
            let path = self.path();
            let cmd = call.cmd(path, deadline_us);
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
            return Err(self.unknown(op, call.function.late_unknown, error, may_have_sent));
        }
    }

    /// A script call in its partition's next acknowledged batch
    /// ([`coalesce::Acked`]): its reply, and how many replicas have it.
    async fn send_acked<S: Code>(
        &self,
        call: &ScriptCall<'_>,
        deadline_us: i64,
        wanted: usize,
        limit: Duration,
    ) -> Result<((S, Fields), usize)> {
        let (op, part) = (call.function.name, call.part);
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
                cmd: call.cmd(path, deadline_us),
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
                    self.unknown(op, call.function.late_unknown, e, || {
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
