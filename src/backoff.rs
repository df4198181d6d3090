//! The wait between a failing loop's tries, shared by the dispatch loops,
//! the consumer and the store's own retries.

use std::time::Duration;

/// How long a loop that cannot reach Redis waits before it tries again:
/// from its first wait (20 ms for the dispatch loops), doubling up to
/// [`Backoff::MAX`], and back to the first once it gets through.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    first: Duration,
    next: Duration,
}

impl Backoff {
    /// The longest wait: whatever failed is tried again at least once a
    /// second.
    pub const MAX: Duration = Duration::from_secs(1);

    pub const fn starting_at(first: Duration) -> Backoff {
        Backoff { first, next: first }
    }
    /// The wait to take now; the next one is twice as long, up to the cap.
    pub fn wait(&mut self) -> Duration {
        let now = self.next;
        self.next = (now * 2).min(Self::MAX);
        now
    }
    /// Got through: the next failure waits the first wait again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::starting_at(Duration::from_millis(20))
    }
}
