//! Graceful shutdown: one token, cloned into every task.
//!
//! Cancelling it tells the HTTP server to stop accepting, waiting pops to
//! answer "nothing" at once, and the engine's tasks to stop after the step
//! they are in. Nothing is lost by stopping at any point: every state change
//! is one script, so Redis is consistent between any two steps.

use tokio_util::sync::CancellationToken;

/// A cheap, cloneable shutdown signal.
#[derive(Clone, Debug, Default)]
pub struct Shutdown(CancellationToken);

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }
    /// Ask everything holding a clone to stop.
    pub fn trigger(&self) {
        self.0.cancel();
    }
    pub fn is_triggered(&self) -> bool {
        self.0.is_cancelled()
    }
    /// A signal that fires with this one, and can also fire alone: a
    /// queue's own stop, under the caller's shutdown.
    pub fn child(&self) -> Shutdown {
        Shutdown(self.0.child_token())
    }
    /// Resolves once [`trigger`](Self::trigger) has been called.
    pub async fn wait(&self) {
        self.0.cancelled().await
    }
}
