//! The `delayq` binary.

/// `eprintln!` that never panics: a closed stderr (its reader has exited)
/// drops the line instead of killing the task that wanted to say it.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod cli;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

#[derive(Parser, Debug)]
#[command(
    name = "delayq",
    version,
    about = "A delay queue on Redis: on time, never early, never lost"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the HTTP server (native /v1 API and ouqiang/delay-queue endpoints).
    Serve(Box<cli::serve::ServeArgs>),
    /// Move the pending jobs of an ouqiang/delay-queue server into delayq.
    ImportOuqiang(cli::import_ouqiang::ImportArgs),
    /// Check a Redis server before trusting it with jobs.
    Doctor(cli::doctor::DoctorArgs),
    /// Show the storage layout; hold it (`--hold 1` before starting an
    /// older build) or release it.
    Layout(cli::layout::LayoutArgs),
    #[command(flatten)]
    Client(Box<cli::client::ClientCommand>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // reqwest's https takes the process's rustls provider when it is not
    // handed a config (delayq::https hands one): ring, the one delayq has.
    let _ = delayq::https::ring_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The cause chain on one line; no backtrace, whatever
            // RUST_BACKTRACE says: these are errors for users, not bugs.
            errln!("delayq: {e:#}");
            match e.downcast_ref::<cli::client::OutcomeUnknown>() {
                Some(_) => ExitCode::from(cli::client::OutcomeUnknown::EXIT),
                None => ExitCode::FAILURE,
            }
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let json_logs = matches!(
        &cli.command,
        Command::Serve(args) if matches!(args.log_format, cli::serve::LogFormat::Json)
    );
    // Spans of traced jobs go to an OTLP collector when asked: a layer of
    // their own, whatever DELAYQ_LOG lets into the log.
    let otlp = match &cli.command {
        Command::Serve(args) => args
            .otlp_endpoint()?
            .as_deref()
            .map(delayq::trace::otlp::start)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--otlp-endpoint: {e}"))?,
        _ => None,
    };
    let filter = EnvFilter::try_from_env("DELAYQ_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info"))
        // The cluster client logs each reconnect attempt (hundreds
        // a second while a master is down); delayq logs what it
        // means for jobs instead.
        .add_directive(
            "redis::cluster_handling=error"
                .parse()
                .expect("a valid directive"),
        );
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(|| LogOut)
        // Its own report of a failed write is an eprintln!, which panics on
        // the same closed stderr.
        .log_internal_errors(false)
        // Colours only for a person at a terminal, never into log files.
        .with_ansi(std::io::stderr().is_terminal());
    let logs = if json_logs {
        logs.json().boxed()
    } else {
        logs.boxed()
    };
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(otlp.map(|l| {
            l.with_filter(tracing_subscriber::filter::filter_fn(|m| {
                m.target() == delayq::trace::otlp::TARGET
            }))
        }))
        .init();
    match cli.command {
        Command::Serve(args) => {
            let served = cli::serve::run(*args).await;
            // The last spans of a stopping delayq still reach the collector
            // (if it answers soon).
            delayq::trace::otlp::flush(std::time::Duration::from_secs(3)).await;
            served
        }
        Command::ImportOuqiang(args) => cli::import_ouqiang::run(args).await,
        Command::Doctor(args) => cli::doctor::run(args).await,
        Command::Layout(args) => cli::layout::run(args).await,
        Command::Client(command) => cli::client::run(*command).await,
    }
}

/// stderr for log lines. A line that cannot be written (a closed pipe: the
/// reader has exited) is dropped. Logging happens in every task, the one
/// that answers SIGTERM included: a failed write must never fail (or panic)
/// the work that logged.
struct LogOut;

impl Write for LogOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}
