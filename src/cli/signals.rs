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

    /// Triggers `shutdown` at the first signal.
    pub async fn stop(mut self, shutdown: Shutdown) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
        tracing::info!("stopping: answering waiting pops, finishing requests in flight");
        shutdown.trigger();
    }
}
