//! Waiting consumers, per topic, inside one delayq process.
//!
//! A long-poll does not hold a Redis connection while it waits: it parks on
//! its topics' [`Notify`]s here and only runs the pop script when woken.
//! Wake-ups come from the `{p}:ready` channel, which every dispatch publishes
//! to, so consumers in every instance hear about jobs any instance moved.
//!
//! A wake for `n` new jobs wakes `n` waiters (`notify_one` each), not all of
//! them: ten thousand waiters on one topic do not stampede Redis for one job.
//! Tokio passes a `notify_one` on to another waiter when the woken future is
//! dropped before it completes, so a consumer that goes away does not swallow
//! a wake-up.
//!
//! A std mutex guards the map: it is held for a hash lookup only, never across
//! an await.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

tokio::task_local! {
    /// Set around delayq's own consumers (webhook deliveries), whose pops
    /// are counted apart from the clients'.
    static OWN: ();
}

/// Runs `f` with the pops it waits in counted as delayq's own
/// ([`Waiters::own`]), not a client's.
pub async fn as_own<F: std::future::Future>(f: F) -> F::Output {
    OWN.scope((), f).await
}

#[derive(Default)]
pub struct Waiters {
    topics: Mutex<HashMap<String, Arc<Notify>>>,
    /// Pops waiting right now.
    waiting: AtomicUsize,
    /// Of those, delayq's own (see [`as_own`]).
    own: AtomicUsize,
}

impl Waiters {
    /// The wake-up handle for `topic`. Entries are dropped once no waiter
    /// holds them, so polling many topic names leaves nothing behind.
    fn handle(&self, topic: &str) -> Arc<Notify> {
        let mut map = self.topics.lock().unwrap();
        map.entry(topic.to_owned()).or_default().clone()
    }

    /// Takes the handles for one waiting pop's topics; they are given back
    /// when the returned guard drops (also when the pop is cancelled).
    pub fn enter<'a>(&'a self, topics: &'a [String]) -> WaitGuard<'a> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let own = OWN.try_with(|_| ()).is_ok();
        if own {
            self.own.fetch_add(1, Ordering::Relaxed);
        }
        WaitGuard {
            waiters: self,
            own,
            topics,
            handles: topics.iter().map(|t| self.handle(t)).collect(),
        }
    }

    fn release(&self, topics: &[String], handles: Vec<Arc<Notify>>, own: bool) {
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        if own {
            self.own.fetch_sub(1, Ordering::Relaxed);
        }
        drop(handles);
        let mut map = self.topics.lock().unwrap();
        for t in topics {
            if map.get(t).is_some_and(|n| Arc::strong_count(n) == 1) {
                map.remove(t);
            }
        }
    }

    /// `count` jobs became ready on `topic`.
    pub fn wake(&self, topic: &str, count: usize) {
        let notify = self.topics.lock().unwrap().get(topic).cloned();
        if let Some(n) = notify {
            for _ in 0..count.max(1) {
                n.notify_one();
            }
        }
    }

    /// Wake every waiter: after a gap in wake-ups (subscriber reconnect) or at
    /// shutdown, everyone looks again.
    pub fn wake_all(&self) {
        let all: Vec<_> = self.topics.lock().unwrap().values().cloned().collect();
        for n in all {
            n.notify_waiters();
        }
    }

    /// Pops waiting right now, in this process.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Of [`waiting`](Self::waiting), delayq's own (webhook deliveries).
    pub fn own(&self) -> usize {
        self.own.load(Ordering::Relaxed)
    }
}

/// One waiting pop's registration; see [`Waiters::enter`].
pub struct WaitGuard<'a> {
    waiters: &'a Waiters,
    own: bool,
    topics: &'a [String],
    handles: Vec<Arc<Notify>>,
}

impl WaitGuard<'_> {
    pub fn handles(&self) -> &[Arc<Notify>] {
        &self.handles
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        let handles = std::mem::take(&mut self.handles);
        self.waiters.release(self.topics, handles, self.own);
    }
}
