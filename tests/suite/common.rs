//! Test harness: delayq servers in process or as child processes, and
//! small helpers. Real redis-server processes come from
//! [`crate::redis_server`].

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::http::{AppState, ServerConfig};
use delayq::{Config, Queue, Shutdown};

pub use crate::redis_server::{RedisServer, Stopped};
pub use crate::shell_words::shell_words;
pub use crate::slowlog::{
    arm_slowlog, command_calls, script_call_times, script_calls, slowlog_entries,
};

pub fn config(redis: &RedisServer) -> Config {
    Config {
        redis: delayq::Redis::Url(redis.url()),
        ..Config::default()
    }
}

pub fn queue(redis: &RedisServer) -> Queue {
    Queue::connect(config(redis)).unwrap()
}

/// A queue that reaches its Redis at `url` (a proxy in front of it).
pub fn queue_at(url: String) -> Queue {
    Queue::connect(Config {
        redis: delayq::Redis::Url(url),
        ..Config::default()
    })
    .unwrap()
}

/// A delayq HTTP server running inside the test process.
pub struct TestServer {
    pub base: String,
    pub queue: Queue,
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl TestServer {
    pub async fn start(queue: Queue, server: ServerConfig) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = Shutdown::new();
        let state = AppState {
            queue: queue.clone(),
            server,
        };
        let task = tokio::spawn(delayq::http::serve(listener, state, shutdown.clone()));
        TestServer {
            base,
            queue,
            shutdown,
            task,
        }
    }

    pub async fn stop(self) {
        self.shutdown.trigger();
        self.task.await.unwrap().unwrap();
    }
}

/// A delayq binary running as a child process (for kill -9).
pub struct DelayqProcess {
    pub base: String,
    child: Child,
}

impl DelayqProcess {
    /// `delayq serve` on `redis`, with `extra` flags.
    pub fn start(redis: &RedisServer, extra: &[&str]) -> DelayqProcess {
        let url = redis.url();
        let mut args = vec!["--redis", url.as_str()];
        args.extend_from_slice(extra);
        Self::spawn(&args)
    }

    /// `delayq serve --listen 127.0.0.1:0 ARGS`; returns once it listens.
    pub fn spawn(args: &[&str]) -> DelayqProcess {
        Self::spawn_from(
            Command::new(env!("CARGO_BIN_EXE_delayq"))
                .args(["serve", "--listen", "127.0.0.1:0"])
                .args(args)
                .env("DELAYQ_LOG", "warn")
                .stderr(Stdio::inherit()),
        )
    }

    /// Like [`spawn`](Self::spawn), logging at info; its log lines (stderr)
    /// arrive on the channel returned.
    pub fn spawn_logged(args: &[&str]) -> (DelayqProcess, std::sync::mpsc::Receiver<String>) {
        Self::spawn_logged_at(args, "info")
    }

    /// Like [`spawn_logged`](Self::spawn_logged), with `filter` as
    /// DELAYQ_LOG (e.g. "warn,delayq::loops::recurring=debug").
    pub fn spawn_logged_at(
        args: &[&str],
        filter: &str,
    ) -> (DelayqProcess, std::sync::mpsc::Receiver<String>) {
        Self::spawn_logged_from(
            Command::new(env!("CARGO_BIN_EXE_delayq"))
                .args(["serve", "--listen", "127.0.0.1:0"])
                .args(args)
                .env("DELAYQ_LOG", filter),
        )
    }

    /// Like [`spawn_from`](Self::spawn_from); its log lines (stderr) arrive
    /// on the channel returned.
    pub fn spawn_logged_from(
        cmd: &mut Command,
    ) -> (DelayqProcess, std::sync::mpsc::Receiver<String>) {
        use std::io::BufRead;
        let mut p = Self::spawn_from(cmd.stderr(Stdio::piped()));
        let stderr = p.child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        (p, rx)
    }

    /// Starts `cmd` (a `delayq serve --listen 127.0.0.1:0 ...`); returns
    /// once it listens.
    pub fn spawn_from(cmd: &mut Command) -> DelayqProcess {
        use std::io::BufRead;
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("delayq listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        DelayqProcess {
            base: format!("http://{addr}"),
            child,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn terminate(mut self) {
        // SAFETY: a plain kill(2) on our own child.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "delayq exited with {status}");
    }

    pub fn kill9(mut self) {
        self.kill9_in_place();
    }

    /// SIGKILL, keeping the handle (to be replaced by a new start).
    pub fn kill9_in_place(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for DelayqProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// POSTs a JSON body to a compatible endpoint and returns the reply.
pub async fn post(base: &str, path: &str, body: &str) -> serde_json::Value {
    let text = post_raw(base, path, body).await;
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

pub async fn post_raw(base: &str, path: &str, body: &str) -> String {
    let resp = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "every compatible reply is HTTP 200");
    resp.text().await.unwrap()
}

/// Waits up to `limit` for a log line that contains `text`; returns it.
pub fn log_line(logs: &std::sync::mpsc::Receiver<String>, text: &str, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match logs.recv_timeout(left) {
            Ok(line) if line.contains(text) => return line,
            Ok(_) => {}
            Err(_) => panic!("no log line with {text:?} within {limit:?}"),
        }
    }
}

/// Waits for the partition leader's first upkeep pass on `redis` (prefix
/// `dq`) to have ended: the storage layout's flag, then the topic
/// schedules' backfill, which ends with an HSET. A test that counts
/// Redis's writes or memory starts after it, so they are not its own.
pub async fn upkeep_pass_done(redis: &RedisServer) {
    eventually(
        Duration::from_secs(60),
        "the upkeep's first pass",
        || async {
            let done: Option<String> = redis.cmd(&["HGET", "{dq}:indexed", "done"]).await;
            done.map(|_| ())
        },
    )
    .await;
}

/// `call`'s result, made again (at most five times in all) while it fails
/// for want of a reply in time: none came (`Timeout`, `Unknown`), or the
/// call reached Redis after its deadline and changed nothing (`Late`). A
/// busy machine's Redis misses a short timeout now and then; a call made
/// again must be safe to repeat (a read, an idempotent write). Any other
/// error fails the test with its own message.
pub async fn retried<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = delayq::Result<T>>,
{
    for _ in 1..5 {
        match call().await {
            Err(
                delayq::Error::Timeout { .. }
                | delayq::Error::Unknown { .. }
                | delayq::Error::Late { .. },
            ) => continue,
            r => return r.unwrap_or_else(|e| panic!("{what}: {e}")),
        }
    }
    call().await.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Pushes `jobs`, a thousand a call, each of which must be taken. A call
/// a busy machine's Redis did not answer within the queue's timeout is
/// made again (see [`retried`]): the jobs carry their ids, so a second push
/// of one replaces it with the same job.
pub async fn push_all(q: &Queue, jobs: &[delayq::NewJob]) {
    for chunk in jobs.chunks(1000) {
        for r in retried("a push of many jobs", || q.push_many(chunk)).await {
            r.unwrap();
        }
    }
}

/// Polls `check` every few ms until it returns Some, or panics after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls `read` every few ms until it returns `target`; panics only when
/// the value has not moved for `stall` (a busy machine is slow, not stuck),
/// or when `read` keeps failing that long.
pub async fn until_value<F, Fut>(target: u64, stall: Duration, what: &str, mut read: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<u64>>,
{
    let mut last = None;
    let mut moved_at = Instant::now();
    loop {
        let now = read().await;
        if now == Some(target) {
            return;
        }
        if now.is_some() && now != last {
            last = now;
            moved_at = Instant::now();
        }
        assert!(
            moved_at.elapsed() < stall,
            "no progress towards {what} for {stall:?}: still at {last:?} of {target}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The queue's fire lateness so far (dispatch time minus due time, Redis
/// clock, from its `delayq_fire_lateness_seconds` histogram): how many
/// dispatches came within `le` seconds (a bucket bound, e.g. "0.5"), of
/// how many. What consumers take to pop a job is not in it.
pub fn fire_lateness_within(q: &Queue, le: &str) -> (u64, u64) {
    let text = q.metrics().render(&delayq::metrics::Gauges::default());
    let read = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        read(&format!(
            "delayq_fire_lateness_seconds_bucket{{le=\"{le}\"}} "
        )),
        read("delayq_fire_lateness_seconds_count "),
    )
}

pub fn topics(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

pub fn job(id: &str, topic: &str, delay_ms: u64, ttr_ms: u64) -> delayq::NewJob {
    delayq::NewJob {
        id: id.into(),
        topic: topic.into(),
        body: format!("body-{id}"),
        delay: Duration::from_millis(delay_ms),
        ttr: Duration::from_millis(ttr_ms),
        ..Default::default()
    }
}

/// GET base+path: the status and the JSON reply (null if none).
pub async fn get_json(base: &str, path: &str) -> (u16, serde_json::Value) {
    let r = reqwest::get(format!("{base}{path}")).await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

/// Runs `delayq ARGS --server BASE`: whether it succeeded, its stdout and
/// its stderr.
pub async fn delayq_cli(base: &str, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_delayq"));
    cmd.args(args).args(["--server", base]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A TCP proxy in front of a redis-server's socket that can swallow
/// Redis's replies, or the calls sent to it, and then cut every connection:
/// a master that ran a call and died before its reply got out (with the
/// call's write on the replica that takes over: here the same server,
/// reached again through the proxy), or a connection that died before the
/// call got to Redis. Stops with everything it started when dropped.
pub struct CutProxy {
    port: u16,
    swallow: Arc<AtomicBool>,
    drop_calls: Arc<AtomicBool>,
    dropped: Arc<AtomicUsize>,
    cut: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    pub async fn start(redis: &RedisServer) -> CutProxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let swallow = Arc::new(AtomicBool::new(false));
        let drop_calls = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicUsize::new(0));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let socket = redis.socket();
        let (shared, dropping, counted, cuts) = (
            swallow.clone(),
            drop_calls.clone(),
            dropped.clone(),
            cut.clone(),
        );
        let task = tokio::spawn(async move {
            // Dropping the set (the task aborted) ends every connection.
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                // Subscribed first: a cut made while Redis is being reached
                // ends this connection too.
                let mut cut = cuts.subscribe();
                let Ok(upstream) = tokio::net::UnixStream::connect(&socket).await else {
                    continue;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_redis, mut to_redis) = upstream.into_split();
                let (swallow, dropping, counted) =
                    (shared.clone(), dropping.clone(), counted.clone());
                conns.spawn(async move {
                    let (mut up, mut down) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
                    // Both directions end (and both sockets close) at a cut;
                    // bytes read once it was made pass neither way, though
                    // this task may see the cut only after reading them.
                    // The flag is read before the cut is looked for: `cut`
                    // clears the flags after making the cut, so a flag
                    // found cleared means the cut is seen.
                    loop {
                        tokio::select! {
                            _ = cut.changed() => return,
                            n = from_client.read(&mut up) => {
                                let dropped = dropping.load(Ordering::SeqCst);
                                match n {
                                    _ if cut.has_changed().unwrap_or(true) => return,
                                    Ok(n @ 1..) if dropped => {
                                        counted.fetch_add(n, Ordering::SeqCst);
                                    }
                                    Ok(n @ 1..) => if to_redis.write_all(&up[..n]).await.is_err() { return },
                                    _ => return,
                                }
                            }
                            n = from_redis.read(&mut down) => {
                                let swallowed = swallow.load(Ordering::SeqCst);
                                match n {
                                    _ if cut.has_changed().unwrap_or(true) => return,
                                    Ok(1..) if swallowed => {}
                                    Ok(n @ 1..) => if to_client.write_all(&down[..n]).await.is_err() { return },
                                    _ => return,
                                }
                            }
                        }
                    }
                });
            }
        });
        CutProxy {
            port,
            swallow,
            drop_calls,
            dropped,
            cut,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn swallow_replies(&self, on: bool) {
        self.swallow.store(on, Ordering::SeqCst);
    }

    /// Calls sent from now on never reach Redis (until the cut).
    pub fn drop_calls(&self, on: bool) {
        self.drop_calls.store(on, Ordering::SeqCst);
    }

    /// Bytes of calls dropped so far.
    pub fn dropped(&self) -> usize {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Closes every connection made so far; new ones pass calls and
    /// replies again. The cut comes first: a connection's task that has not
    /// yet read a swallowed reply must not pass it on once swallowing ends.
    pub fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
        self.swallow_replies(false);
        self.drop_calls(false);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether the server runs delayq's scripts as functions (FCALL); if not,
/// delayq sends them by EVALSHA (Redis 6.2).
pub async fn has_functions(redis: &RedisServer) -> bool {
    let listed: redis::RedisResult<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut redis.conn().await)
        .await;
    listed.is_ok()
}

/// Empties the server's scripts as FUNCTION FLUSH (or, without FUNCTION,
/// SCRIPT FLUSH) does: as on a fresh server.
pub async fn flush_scripts(redis: &RedisServer) {
    let what = if has_functions(redis).await {
        "FUNCTION"
    } else {
        "SCRIPT"
    };
    let _: String = redis.cmd(&[what, "FLUSH"]).await;
}

/// The path delayq calls `script` by on this server (FCALL, or EVALSHA of
/// the script, loaded here), decided and loaded once so that the calls
/// after it run nothing else.
pub async fn script_path(
    redis: &RedisServer,
    script: &delayq::testing::ScriptDef,
) -> delayq::testing::Path {
    use delayq::testing::{eval_script_of, Path};
    if has_functions(redis).await {
        return Path::Function;
    }
    let (_, text) = eval_script_of(script.name).unwrap();
    let _: String = redis.cmd(&["SCRIPT", "LOAD", text]).await;
    Path::Eval
}

/// A TCP proxy in front of a redis-server's socket that holds every reply
/// for `delay` (settable) before passing it on, in order: a far-away Redis.
/// Or holds them all until told ([`SlowProxy::hold`]): a reply that must
/// still be on its way at some step of a test, however slow the machine.
/// Stops with everything it started when dropped.
pub struct SlowProxy {
    pub port: u16,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    held: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowProxy {
    pub async fn start(redis: &RedisServer, delay: Duration) -> SlowProxy {
        use std::sync::atomic::{AtomicU64, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let delay_ms = std::sync::Arc::new(AtomicU64::new(delay.as_millis() as u64));
        let socket = redis.socket();
        let shared = delay_ms.clone();
        let (held, _) = tokio::sync::watch::channel(false);
        let holding = held.clone();
        let task = tokio::spawn(async move {
            // Dropping the set (the task aborted) ends every connection.
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = tokio::net::UnixStream::connect(&socket).await else {
                    continue;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_redis, mut to_redis) = upstream.into_split();
                conns.spawn(async move {
                    let _ = tokio::io::copy(&mut from_client, &mut to_redis).await;
                });
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let delay = shared.clone();
                conns.spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = from_redis.read(&mut buf).await {
                        let due = tokio::time::Instant::now()
                            + Duration::from_millis(delay.load(Ordering::Relaxed));
                        if tx.send((due, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                });
                let mut hold = holding.subscribe();
                conns.spawn(async move {
                    while let Some((due, bytes)) = rx.recv().await {
                        tokio::time::sleep_until(due).await;
                        if hold.wait_for(|held| !held).await.is_err() {
                            break;
                        }
                        if to_client.write_all(&bytes).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        SlowProxy {
            port,
            delay_ms,
            held,
            task,
        }
    }

    /// Its address, as a Redis URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Holds every reply from now on (those on their way too) until
    /// called with false; then they go on, in order.
    pub fn hold(&self, on: bool) {
        self.held.send_replace(on);
    }

    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(
            delay.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A retry policy of one attempt: a failed attempt makes the job dead.
pub fn one_attempt() -> Option<delayq::RetryPolicy> {
    Some(delayq::RetryPolicy {
        intervals: vec![],
        max_attempts: Some(1),
    })
}

/// Sends `method url` with an optional JSON body: the status and the JSON
/// reply (null if none).
pub async fn request_json(
    method: reqwest::Method,
    url: String,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut req = reqwest::Client::new().request(method, url);
    if let Some(b) = body {
        req = req.body(b.to_string());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// Runs `delayq ARGS` with `env` added (and without the test's own
/// DELAYQ_AUTH_TOKEN), blocking until it exits.
pub fn delayq_run(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_delayq"));
    cmd.args(args).env_remove("DELAYQ_AUTH_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// What Redis holds for data, once it holds still: `used_memory` less the
/// clients' buffers (they swing by 100 KB between reads with what each
/// connection last did), read every 200 ms until ten reads in a row (two
/// seconds) agree within 2 KB. Read straight after a burst of writes,
/// 10,000 jobs' cost moved by up to 20 B a job from run to run while every
/// key's own size repeated to the byte (tables that had just grown, and
/// their rehash, are the likely part: a rehash holds both tables until it
/// ends, so a still stretch must outlast the server's few ticks of it).
pub async fn memory_at_rest(redis: &RedisServer) -> f64 {
    // Both from one INFO: the buffers move between two.
    let data = || {
        let mut c = redis.client().get_connection().unwrap();
        let info: String = redis::cmd("INFO").arg("memory").query(&mut c).unwrap();
        let field = |name: &str| -> f64 {
            (info.lines())
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("INFO memory lacks {name}"))
        };
        field("used_memory") - field("mem_clients_normal")
    };
    let mut still = vec![data()];
    for _ in 0..150 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = data();
        if still.iter().any(|r| (r - now).abs() > 2048.0) {
            still.clear();
        }
        still.push(now);
        if still.len() >= 10 {
            return now;
        }
    }
    panic!("Redis's memory did not hold still for two seconds in 30 s");
}

/// Polls `ok` every 50 ms until it holds, or panics after `limit` (for
/// blocking checks: a sentinel's view, a replica's link).
pub fn wait_until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until every replica of `master` has what the master held when
/// this was called (writes not acknowledged by a replica, too: settings,
/// dispatches). (Not its offset at each look:
/// with consumers running the master writes all the time, and chasing a
/// moving offset on a busy machine put the kill off until the jobs were
/// all delivered, leaving no outage to measure.)
pub fn replicas_caught_up(master: &RedisServer) {
    let info = || -> String {
        let mut c = master.client().get_connection().unwrap();
        redis::cmd("INFO").arg("replication").query(&mut c).unwrap()
    };
    let target: i64 = info()
        .lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("the master's replication offset");
    wait_until(Duration::from_secs(20), "replicas in step", || {
        info().lines().filter(|l| l.starts_with("slave")).all(|l| {
            l.split(',')
                .find_map(|f| f.strip_prefix("offset="))
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|o| o >= target)
        })
    });
}

/// Job `id`'s due time (queue prefix `dq`, one partition) wherever its
/// layout keeps it: the shared schedule (layouts 1 and 2, and a lease's
/// end), else its topic's schedule (layout 3 keeps a delayed job there
/// only). None when neither has it.
pub async fn scheduled_due(redis: &RedisServer, id: &str) -> Option<i64> {
    let shared: Option<i64> = redis.cmd(&["ZSCORE", "{dq}:schedule", id]).await;
    if shared.is_some() {
        return shared;
    }
    let topic: Option<String> = redis.cmd(&["HGET", &format!("{{dq}}:j:{id}"), "q"]).await;
    redis
        .cmd(&["ZSCORE", &format!("{{dq}}:s:{}", topic?), id])
        .await
}
