//! The `delayq` binary.

mod cli;

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
    #[command(flatten)]
    client: cli::client::ClientArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the HTTP server (native /v1 API and ouqiang/delay-queue endpoints).
    Serve(cli::serve::ServeArgs),
    #[command(flatten)]
    Client(cli::client::ClientCommand),
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let json_logs = matches!(
        &cli.command,
        Command::Serve(args) if matches!(args.log_format, cli::serve::LogFormat::Json)
    );
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("DELAYQ_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr);
    if json_logs {
        logs.json().init();
    } else {
        logs.init();
    }
    match cli.command {
        Command::Serve(args) => cli::serve::run(args).await,
        Command::Client(command) => cli::client::run(cli.client, command).await,
    }
}
