//! SIGTERM and SIGINT for the long-running commands (`serve`, `work`).

use anyhow::{Context, Result};
use delayq::Shutdown;

/// SIGTERM and SIGINT, taken over when created (a signal that comes
/// before anyone waits is kept, not lost).
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("SIGINT handler")?,
        })
    }

    /// Triggers `shutdown` at the first signal and logs "stopping: " and
    /// `what` (what the stopping command does then); exits at once at the
    /// second (whatever holds up the graceful stop, a second SIGTERM ends
    /// it without SIGKILL).
    pub async fn stop(mut self, shutdown: Shutdown, what: &'static str) {
        self.next().await;
        // Triggered before anything else: nothing (a log line included)
        // stands between the signal and the stop.
        shutdown.trigger();
        tracing::info!("stopping: {what} (a second SIGTERM or SIGINT stops at once)");
        self.next().await;
        tracing::warn!("second signal: stopping at once");
        std::process::exit(1);
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
