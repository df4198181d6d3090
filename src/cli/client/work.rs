//! `delayq work TOPIC -- CMD ARGS...`: a consumer with no code to write.
//! Each job runs CMD once: the body on its stdin, the job's id, topic and
//! attempt in `DELAYQ_JOB_ID`, `DELAYQ_JOB_TOPIC`, `DELAYQ_JOB_ATTEMPT`,
//! its lease token and the server in `DELAYQ_JOB_LEASE` and
//! `DELAYQ_SERVER` (for `delayq progress` and `delayq log`), and a traced
//! job's W3C context in `TRACEPARENT` (and `TRACESTATE`).
//! Exit status 0 finishes the job (with `--result-stdout`, its standard
//! output is the job's result; with `--result-file`, what it wrote to the
//! file `DELAYQ_RESULT_FILE` names, a fresh one per job, removed after:
//! JSON as it is, other text as a JSON string, at most 64 KiB); anything
//! else nacks it with the last
//! lines of the command's stderr as the error, and the job's retry policy
//! decides what comes next (a job with none backs off: the nack gives no
//! delay, so the server's built-in backoff applies).
//!
//! While a command runs, its lease is extended (touch): first a third of
//! the ttr in, then every third of the lease each touch asks for (the ttr,
//! at least 3 s), so a command may run longer than the job's ttr and two
//! touches may be late before the lease ends; if `work` itself dies, the
//! lease ends and the job is delivered again. One `work` never runs two commands for the
//! same job id at once: a job delivered again (or pushed again) while its
//! id's command runs here waits for that command to end, its lease kept.
//!
//! `--concurrency N` runs up to N commands at once. SIGTERM or Ctrl-C stops
//! taking jobs; commands already running finish and their jobs are settled
//! before `work` exits. Commands run in process groups of their own, so the
//! terminal's Ctrl-C reaches `work` only; if `work` dies, its commands get
//! SIGTERM (Linux). A long-poll cut off by the stop takes no job (the
//! server gives back a job whose pop's client left).

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use delayq::defaults::MAX_RESULT_BYTES;
use delayq::wire::{
    DeliveryBody, FinishJobSpec, NackSpec, NackedBody, NoContent, PopSpec, Popped, TokenSpec,
    TouchSpec, Touched,
};
use delayq::JobState;
use delayq::Shutdown;
use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::result::{head_of, result_of, ResultFile, ResultFrom};
use super::{job_path, Client, ClientArgs, JobCancelled};

#[derive(Args, Debug)]
pub struct Work {
    topic: String,
    /// Commands running at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// A command's standard output is its job's result (JSON as it is,
    /// other text as a JSON string; at most 64 KiB, else the job finishes
    /// without one, said on stderr). Without it, the output is `work`'s.
    #[arg(long)]
    result_stdout: bool,
    /// The job's result is what the command writes to the file
    /// DELAYQ_RESULT_FILE names: a fresh empty file per job, read after
    /// the command exits 0 (same terms as --result-stdout), removed however
    /// it ended.
    #[arg(long, conflicts_with = "result_stdout")]
    result_file: bool,
    /// The command and its arguments, after --.
    #[arg(last = true, required = true)]
    command: Vec<String>,
    #[command(flatten)]
    client: ClientArgs,
}

impl Work {
    pub async fn run(self) -> Result<()> {
        if self.client.json {
            bail!("work prints no replies: --json does not apply to it");
        }
        let c = Client::new(&self.client);
        let command = JobCommand {
            argv: self.command,
            result: ResultFrom::of(self.result_stdout, self.result_file),
        };
        run(c, &self.topic, self.concurrency, &command).await
    }
}

/// How long one pop waits on the server for a job.
const POLL: Duration = Duration::from_secs(30);
/// The shortest lease a touch asks for while a command runs.
const EXTENSION: Duration = Duration::from_secs(3);
/// How long a cancelled job's command has to end after SIGTERM before it
/// gets SIGKILL.
const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// The longest error a job's history keeps (the library cuts the rest):
/// a failed attempt's error is its exit status and the end of its stderr
/// within this.
const ERROR_MAX: usize = 1000;
/// The end of a command's stderr kept while it runs (room for trailing
/// white space before the error's part).
const STDERR_KEPT: usize = 4 * ERROR_MAX;

/// The command each job runs, and where its job's result comes from.
#[derive(Clone)]
struct JobCommand {
    argv: Vec<String>,
    result: ResultFrom,
}

async fn run(c: Client, topic: &str, concurrency: usize, command: &JobCommand) -> Result<()> {
    if concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    // A command that cannot start would fail every job until it died.
    check_program(&command.argv[0])?;
    // Likewise a temporary directory where no result file can be made.
    ResultFile::check(command.result)?;
    let stop = Shutdown::new();
    tokio::spawn(crate::cli::signals::Signals::install()?.stop(
        stop.clone(),
        "taking no more jobs; running commands finish and their jobs are settled",
    ));
    let c = Arc::new(c);
    let running = Running::default();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (c, stop, running) = (c.clone(), stop.clone(), running.clone());
            let (topic, command) = (topic.to_owned(), command.clone());
            tokio::spawn(async move { worker(&c, &topic, &command, &stop, &running).await })
        })
        .collect();
    errln!("delayq work: taking jobs of {topic} ({concurrency} at a time); Ctrl-C stops");
    for w in workers {
        w.await??;
    }
    Ok(())
}

/// The job ids whose commands run (or wait to run) in this `work`, each
/// with the lock its runs take in turn.
#[derive(Clone, Default)]
struct Running(Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>>);

impl Running {
    /// Runs `f` once no other command of job `id` runs here.
    async fn one_at_a_time<T>(&self, id: &str, f: impl std::future::Future<Output = T>) -> T {
        let lock = {
            let mut ids = self.0.lock().expect("not poisoned");
            ids.entry(id.to_owned()).or_default().clone()
        };
        let out = {
            let _turn = lock.lock().await;
            f.await
        };
        let mut ids = self.0.lock().expect("not poisoned");
        // Only the map's and our handle left: nobody else waits on this id.
        if Arc::strong_count(&lock) == 2 {
            ids.remove(id);
        }
        out
    }
}

async fn worker(
    c: &Client,
    topic: &str,
    command: &JobCommand,
    stop: &Shutdown,
    running: &Running,
) -> Result<()> {
    let mut backoff = Duration::from_millis(100);
    loop {
        let spec = PopSpec {
            topics: vec![topic.to_owned()],
            max: 1,
            wait_ms: POLL.as_millis() as u64,
        };
        let pop = c.call::<Popped>(Method::POST, "/v1/pop", Some(&spec));
        let reply = tokio::select! {
            r = pop => r,
            _ = stop.wait() => return Ok(()),
        };
        let job = match reply {
            Ok(reply) => {
                backoff = Duration::from_millis(100);
                match reply.value.jobs.into_iter().next() {
                    Some(j) => j,
                    None => continue,
                }
            }
            Err(e) => {
                errln!("delayq work: {e:#}; trying again");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stop.wait() => return Ok(()),
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        // Once taken, a job is run and settled even if a stop comes.
        if let Err(e) = handle(c, &job, command, running).await {
            // The command cannot start: no job can run here; stop all.
            stop.trigger();
            return Err(e);
        }
        if stop.is_triggered() {
            return Ok(());
        }
    }
}

/// Runs and settles one job. Err (the job given back) when the command
/// could not be started: that is not a failed attempt of the job.
async fn handle(
    c: &Client,
    job: &DeliveryBody,
    command: &JobCommand,
    running: &Running,
) -> Result<()> {
    let (id, token) = (&job.id, &job.token);
    // The pop's lease is the job's ttr: the first touch comes a third of
    // it in. Each touch asks for the ttr again, at least EXTENSION, and
    // the next comes a third of that later: two touches in a row may be
    // late or lost before the lease runs out, and a tiny ttr does not
    // have `work` touch hundreds of times a second.
    let ttr_ms = (job.lease_until_ms - job.popped_at_ms).max(1) as u64;
    let extension_ms = ttr_ms.max(EXTENSION.as_millis() as u64);
    // A touch answered "cancelled" stops the command.
    let cancelled = tokio::sync::Notify::new();
    let touch = async {
        let mut wait = Duration::from_millis((ttr_ms / 3).max(1));
        loop {
            tokio::time::sleep(wait).await;
            wait = Duration::from_millis(extension_ms / 3);
            let path = format!("{}/touch", job_path(id));
            let spec = TouchSpec {
                token: token.clone(),
                ttr_ms: Some(extension_ms),
            };
            match c.call::<Touched>(Method::POST, &path, Some(&spec)).await {
                Err(e) if e.downcast_ref::<JobCancelled>().is_some() => {
                    cancelled.notify_one();
                    return std::future::pending().await;
                }
                Err(e) => errln!("delayq work: {id}: extending the lease failed: {e:#}"),
                Ok(_) => {}
            }
        }
    };
    let run = run_command(command, job, c.base(), cancelled.notified());
    let outcome = tokio::select! {
        o = running.one_at_a_time(id, run) => o,
        _ = touch => unreachable!("the touch loop never ends"),
    };
    let outcome = match outcome {
        Err(Failure::Cancelled) => {
            errln!("delayq work: {id} was cancelled while it ran; its command was stopped");
            return Ok(());
        }
        Err(Failure::NotStarted(why)) => {
            let path = format!("{}/release", job_path(id));
            let spec = TokenSpec {
                token: token.clone(),
            };
            let given_back = c.call::<NoContent>(Method::POST, &path, Some(&spec)).await;
            let job_went = match given_back {
                Ok(_) => "the job was given back".to_owned(),
                Err(e) => format!("giving the job back failed ({e:#}); it returns after its ttr"),
            };
            bail!("{why}; {id}: {job_went}");
        }
        Err(Failure::Failed(e)) => Err(e),
        Ok(out) => Ok(out.and_then(|out| result_of(id, command.result, &out))),
    };
    let (settled, what) = match &outcome {
        Ok(result) => {
            let path = format!("{}/finish", job_path(id));
            let spec = FinishJobSpec {
                token: token.clone(),
                result: result.clone(),
            };
            let done = c.call::<NoContent>(Method::POST, &path, Some(&spec)).await;
            (done.map(|_| None), "finished".to_owned())
        }
        Err(error) => {
            let path = format!("{}/nack", job_path(id));
            let spec = NackSpec {
                token: token.clone(),
                delay_ms: None,
                error: error.clone(),
            };
            let done = c.call::<NackedBody>(Method::POST, &path, Some(&spec)).await;
            (
                done.map(|r| Some(r.value.state)),
                format!("failed ({error})"),
            )
        }
    };
    match settled {
        // Its retries used up: say so here, not only in the server's log.
        Ok(Some(JobState::Dead)) => errln!(
            "delayq work: {id} {what}; it is dead (no attempts left): see `delayq dead list {}`",
            job.topic
        ),
        Ok(_) => errln!("delayq work: {id} {what}"),
        Err(e) => errln!("delayq work: {id} {what}, but settling it failed: {e:#}"),
    }
    Ok(())
}

/// Why a job's command did not succeed.
enum Failure {
    /// It could not be started (not found, not executable): not the job's
    /// fault, so not an attempt.
    NotStarted(String),
    /// It ran and failed: the error a nack records.
    Failed(String),
    /// The job was cancelled while it ran, and the command stopped: there
    /// is nothing to settle.
    Cancelled,
}

/// Checks that `program` can be started: a path to an executable file, or
/// a name found as one on `PATH`.
fn check_program(program: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        if executable(std::path::Path::new(program)) {
            return Ok(());
        }
        bail!("cannot run {program}: no such executable file");
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).any(|d| executable(&d.join(program))) {
        return Ok(());
    }
    bail!("cannot run {program}: not found on PATH")
}

/// Runs the command for one job: Ok on exit 0 (with what it left as its
/// result, if it leaves one), else the error to record.
async fn run_command(
    command: &JobCommand,
    job: &DeliveryBody,
    server: &str,
    cancel: impl std::future::Future<Output = ()>,
) -> std::result::Result<Option<Vec<u8>>, Failure> {
    let argv = &command.argv;
    let result_stdout = command.result == ResultFrom::Stdout;
    let mut cmd = tokio::process::Command::new(&argv[0]);
    // Held until the command is over, whichever way: dropped, it is gone.
    let result_file = ResultFile::for_command(command.result, &mut cmd)
        .map_err(|e| Failure::NotStarted(e.to_string()))?;
    // Not in the terminal's foreground group: Ctrl-C stops `work` taking
    // jobs, and the command it runs finishes.
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    {
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: prctl, getppid and raise are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                // A command outliving `work` would run beside the job's
                // next delivery: it goes when `work` goes (the signal comes
                // when the spawning thread ends; tokio's workers live as
                // long as the runtime).
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    libc::raise(libc::SIGTERM);
                }
                Ok(())
            });
        }
    }
    // A traced job's context, for the command to carry on its trace; none
    // inherited from `work`'s own environment.
    for (name, value) in [
        ("TRACEPARENT", &job.traceparent),
        ("TRACESTATE", &job.tracestate),
    ] {
        match value {
            Some(v) => cmd.env(name, v),
            None => cmd.env_remove(name),
        };
    }
    let mut child = cmd
        .args(&argv[1..])
        .env("DELAYQ_JOB_ID", &job.id)
        .env("DELAYQ_JOB_TOPIC", &job.topic)
        .env("DELAYQ_JOB_ATTEMPT", job.attempts.to_string())
        // What `delayq progress` and `delayq log` need to report for it.
        .env("DELAYQ_JOB_LEASE", &job.token)
        .env("DELAYQ_SERVER", server)
        .stdin(Stdio::piped())
        .stdout(if result_stdout {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::NotStarted(format!("cannot run {}: {e}", argv[0])))?;
    let body = job.body.as_bytes().to_vec();
    let stdin = child.stdin.take();
    let write = async move {
        if let Some(mut stdin) = stdin {
            // A command that does not read its input may close it early.
            let _ = stdin.write_all(&body).await;
        } // Dropped: the command sees the end of its input.
    };
    // Its input written, its stderr read and its exit awaited together: a
    // command may write stderr before it reads stdin.
    let stderr = child.stderr.take().expect("stderr is piped");
    let stdout = child.stdout.take();
    let output = async move {
        match stdout {
            // One byte over the limit is enough to know it is over.
            Some(out) => Some(head_of(out, MAX_RESULT_BYTES + 1).await),
            None => None,
        }
    };
    let group = child.id();
    let waited = async { tokio::join!(write, tail_of(stderr), output, child.wait()) };
    tokio::pin!(waited);
    let (_, stderr, output, status) = tokio::select! {
        done = &mut waited => done,
        _ = cancel => {
            // Its group: what the command started goes with it.
            signal_group(group, libc::SIGTERM);
            if tokio::time::timeout(CANCEL_GRACE, &mut waited).await.is_err() {
                signal_group(group, libc::SIGKILL);
                let _ = waited.await;
            }
            return Err(Failure::Cancelled);
        }
    };
    let status = status.map_err(|e| Failure::Failed(format!("waiting for {}: {e}", argv[0])))?;
    if status.success() {
        return Ok(match &result_file {
            Some(f) => Some(f.read(&job.id)),
            None => output,
        });
    }
    let what = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "killed by a signal".to_owned(),
    };
    let stderr = String::from_utf8_lossy(&stderr);
    let stderr = stderr.trim();
    if stderr.is_empty() {
        return Err(Failure::Failed(what));
    }
    // The whole error within what a job's history keeps.
    let room = ERROR_MAX.saturating_sub(what.len() + 2);
    let start = stderr.len().saturating_sub(room);
    let start = (start..=stderr.len())
        .find(|&i| stderr.is_char_boundary(i))
        .unwrap_or(stderr.len());
    Err(Failure::Failed(format!("{what}: {}", &stderr[start..])))
}

/// Sends `signal` to the process group a command leads (it runs in one of
/// its own, see run_command).
fn signal_group(leader: Option<u32>, signal: libc::c_int) {
    if let Some(pid) = leader {
        // SAFETY: kill has no memory effects; a group already gone is ESRCH.
        unsafe {
            libc::kill(-(pid as libc::pid_t), signal);
        }
    }
}

/// The last [`STDERR_KEPT`] bytes of `r`, read to its end: a command's
/// stderr costs `work` that much memory however much it writes.
async fn tail_of(mut r: impl tokio::io::AsyncRead + Unpin) -> Vec<u8> {
    let mut tail = Vec::with_capacity(2 * STDERR_KEPT);
    let mut buf = vec![0; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return tail,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > STDERR_KEPT {
                    tail.drain(..tail.len() - STDERR_KEPT);
                }
            }
        }
    }
}
