//! Batches (issue 53): jobs pushed into a batch, and one callback job
//! pushed when every job of it has its outcome. The order closer settles
//! once a sale's 3,000 closes are done; the reminder service reports once
//! the 09:00 reminders are sent or dead.
//!
//! A batch is created (open) with its callback (a job to a topic of the
//! user's choice, so also a webhook), then jobs are pushed into it
//! (`NewJob::batch`), then it is closed: the callback is pushed once every job it took in has
//! finished (`on` [`BatchOn::Finished`]) or finished or died
//! ([`BatchOn::Settled`]); a job deleted (or cancelled, or replaced) leaves
//! the count of jobs waited for. A running job of the batch may add jobs to
//! it after it is closed: they are counted before the adder's own finish
//! can be. The callback's body is a JSON report:
//! `{"batch","jobs","finished","dead","deleted","body"}` (`body` the one
//! given at creation, if any). Cancelling a batch deletes its jobs not
//! handed out yet, and it never fires.

use std::time::Duration;

use crate::retry::RetryPolicy;

/// Longest batch id, in bytes (its keys and every job of it carry it).
pub const MAX_BATCH_ID_BYTES: usize = 200;

/// When a batch's callback fires.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BatchOn {
    /// Once every job of it has finished (a dead job holds it back until
    /// it is requeued and finishes, or deleted).
    Finished,
    /// Once every job of it has finished or died.
    #[default]
    Settled,
}

impl BatchOn {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchOn::Finished => "finished",
            BatchOn::Settled => "settled",
        }
    }

    pub fn parse(s: &str) -> Option<BatchOn> {
        match s {
            "finished" => Some(BatchOn::Finished),
            "settled" => Some(BatchOn::Settled),
            _ => None,
        }
    }
}

/// The job a batch pushes when it is done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchCallback {
    pub topic: String,
    /// Given back in the report's `body` ("" for none).
    pub body: String,
    pub ttr: Duration,
    /// `None`: the topic's default, then the queue's.
    pub retry: Option<RetryPolicy>,
}

/// A batch to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewBatch {
    /// Empty: delayq picks one (a UUID).
    pub id: String,
    pub callback: BatchCallback,
    pub on: BatchOn,
}

/// A batch's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchState {
    /// Its pusher adds jobs; it does not fire yet.
    Open,
    /// It fires when its jobs have their outcomes.
    Closed,
    /// Its callback was pushed.
    Fired,
    /// Cancelled: it never fires.
    Cancelled,
}

impl BatchState {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Open => "open",
            BatchState::Closed => "closed",
            BatchState::Fired => "fired",
            BatchState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<BatchState> {
        match s {
            "open" => Some(BatchState::Open),
            "closed" => Some(BatchState::Closed),
            "fired" => Some(BatchState::Fired),
            "cancelled" => Some(BatchState::Cancelled),
            _ => None,
        }
    }
}

/// A batch as read: its state and counts. Kept after it fires or is
/// cancelled for the result retention (24 h unless configured).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub id: String,
    pub state: BatchState,
    pub on: BatchOn,
    /// The callback job's id and topic.
    pub callback_id: String,
    pub callback_topic: String,
    /// Jobs taken in, and of them: finished, dead, deleted; the rest
    /// (`pending`) have no outcome yet.
    pub jobs: u64,
    pub finished: u64,
    pub dead: u64,
    pub deleted: u64,
    pub pending: u64,
    /// When it was created; when it fired or was cancelled (Unix ms).
    pub created_ms: i64,
    pub ended_ms: Option<i64>,
}

/// Checks a batch id: 1 to [`MAX_BATCH_ID_BYTES`] bytes, not blank, no
/// control character.
pub fn check_batch_id(id: &str) -> Result<(), String> {
    if id.trim().is_empty() {
        return Err("batch id is empty or blank".into());
    }
    if id.len() > MAX_BATCH_ID_BYTES {
        return Err(format!(
            "batch id is {} bytes; the limit is {MAX_BATCH_ID_BYTES}",
            id.len()
        ));
    }
    if let Some(c) = id.chars().find(|c| c.is_control()) {
        return Err(format!(
            "batch id {id:?} contains {c:?}; control characters are not allowed"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_ids_are_bounded_and_printable() {
        assert!(check_batch_id("sale-2026-12").is_ok());
        assert!(check_batch_id(&"b".repeat(MAX_BATCH_ID_BYTES)).is_ok());
        let long = check_batch_id(&"b".repeat(MAX_BATCH_ID_BYTES + 1)).unwrap_err();
        assert!(long.contains("201 bytes"), "{long}");
        assert!(check_batch_id(" ").unwrap_err().contains("blank"));
        assert!(check_batch_id("a\nb").unwrap_err().contains("control"));
    }

    #[test]
    fn states_and_triggers_read_back() {
        for s in [
            BatchState::Open,
            BatchState::Closed,
            BatchState::Fired,
            BatchState::Cancelled,
        ] {
            assert_eq!(BatchState::parse(s.as_str()), Some(s));
        }
        for o in [BatchOn::Finished, BatchOn::Settled] {
            assert_eq!(BatchOn::parse(o.as_str()), Some(o));
        }
        assert_eq!(BatchOn::parse("done"), None);
    }
}
