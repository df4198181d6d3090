//! The `delayq` binary.

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

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
    #[command(flatten)]
    Client(Box<cli::client::ClientCommand>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // reqwest's https takes the process's rustls provider when it is not
    // handed a config (delayq::https hands one): ring, the one delayq has.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The cause chain on one line; no backtrace, whatever
            // RUST_BACKTRACE says: these are errors for users, not bugs.
            eprintln!("delayq: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    let json_logs = matches!(
        &cli.command,
        Command::Serve(args) if matches!(args.log_format, cli::serve::LogFormat::Json)
    );
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("DELAYQ_LOG")
                .unwrap_or_else(|_| EnvFilter::new("info"))
                // The cluster client logs each reconnect attempt (hundreds
                // a second while a master is down); delayq logs what it
                // means for jobs instead.
                .add_directive(
                    "redis::cluster_handling=error"
                        .parse()
                        .expect("a valid directive"),
                ),
        )
        .with_writer(std::io::stderr)
        // Colours only for a person at a terminal, never into log files.
        .with_ansi(std::io::stderr().is_terminal());
    if json_logs {
        logs.json().init();
    } else {
        logs.init();
    }
    match cli.command {
        Command::Serve(args) => cli::serve::run(*args).await,
        Command::ImportOuqiang(args) => cli::import_ouqiang::run(args).await,
        Command::Client(command) => cli::client::run(*command).await,
    }
}
