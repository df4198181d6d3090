//! Waiting consumers, per topic, inside one delayq process.
//!
//! A long-poll does not hold a Redis connection while it waits: it parks on
//! its topics' [`Notify`]s here and only runs the pop script when woken.
//! Wake-ups come from the `{p}:ready` channel, which every dispatch publishes
//! to, so consumers in every instance hear about jobs any instance moved.
//!
//! A wake for `n` new jobs wakes `n` waiters (`notify_one` each), not all of
//! them: ten thousand waiters on one topic do not stampede Redis for one job.
//!
//! Local first: the instance that dispatches jobs wakes its own parked
//! waiters for them and announces only the rest (see
//! [`Waiters::available`] and [`Waiters::wake_local`]), so with many
//! instances on one Redis a job that an idle consumer here can take costs
//! one pop, not one per instance. For that, each topic counts the waiters
//! parked on it alone (a pop of several topics is not counted: it may be
//! woken by another topic first) and the wake-ups sent to them not yet
//! taken; the counts may be short, never over, so a job is never left
//! with a wake-up that nobody receives.
//! Tokio passes a `notify_one` on to another waiter when the woken future is
//! dropped before it completes, so a consumer that goes away does not swallow
//! a wake-up.
//!
//! Shared looks: a waiting pop looks at Redis again now and then on its own,
//! a backstop for a ready notice whose publish failed. Every pop waiting
//! on the same topics would find the same thing, so one look stands for
//! all of them: a waiter whose backstop comes due after another's empty
//! look, or while another looks for all ([`WaitGuard::claim_look`]), waits
//! on from that look instead of making its own. Eight waiting pops cost
//! one look.
//!
//! A std mutex guards each map: it is held for a hash lookup only, never
//! across an await.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

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

/// One topic's waiters.
struct Topic {
    notify: Arc<Notify>,
    /// Waiters parked on this topic alone, now.
    parked: usize,
    /// Wake-ups sent to them that they have not taken yet.
    pending: usize,
}

impl Topic {
    /// Waiters a wake-up would reach now.
    fn available(&self) -> usize {
        self.parked.saturating_sub(self.pending)
    }
}

/// The pops waiting on one set of topics (in their order).
struct Set {
    waiters: usize,
    /// The last look by any of them that found nothing ready, or the
    /// backstop look one of them makes for all now.
    look: Option<Instant>,
}

#[derive(Default)]
pub struct Waiters {
    topics: Mutex<HashMap<String, Topic>>,
    sets: Mutex<HashMap<Vec<String>, Set>>,
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
        map.entry(topic.to_owned())
            .or_insert_with(|| Topic {
                notify: Arc::default(),
                parked: 0,
                pending: 0,
            })
            .notify
            .clone()
    }

    /// Takes the handles for one waiting pop's topics; they are given back
    /// when the returned guard drops (also when the pop is cancelled).
    pub fn enter<'a>(&'a self, topics: &'a [String]) -> WaitGuard<'a> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let own = OWN.try_with(|_| ()).is_ok();
        if own {
            self.own.fetch_add(1, Ordering::Relaxed);
        }
        self.sets
            .lock()
            .unwrap()
            .entry(topics.to_vec())
            .or_insert(Set {
                waiters: 0,
                look: None,
            })
            .waiters += 1;
        WaitGuard {
            waiters: self,
            for_all: AtomicBool::new(false),
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
        {
            let mut sets = self.sets.lock().unwrap();
            if let Some(set) = sets.get_mut(topics) {
                set.waiters -= 1;
                if set.waiters == 0 {
                    sets.remove(topics);
                }
            }
        }
        let mut map = self.topics.lock().unwrap();
        for t in topics {
            if map
                .get(t)
                .is_some_and(|n| Arc::strong_count(&n.notify) == 1)
            {
                map.remove(t);
            }
        }
    }

    /// `count` jobs became ready on `topic`.
    pub fn wake(&self, topic: &str, count: usize) {
        let mut map = self.topics.lock().unwrap();
        if let Some(t) = map.get_mut(topic) {
            let count = count.max(1);
            t.pending += count.min(t.available());
            for _ in 0..count {
                t.notify.notify_one();
            }
        }
    }

    /// Per topic, the waiters here that a wake-up would reach now (topics
    /// with none left out; at most `max` topics).
    pub fn available(&self, max: usize) -> Vec<(String, usize)> {
        let map = self.topics.lock().unwrap();
        map.iter()
            .filter(|(_, t)| t.available() > 0)
            .take(max)
            .map(|(name, t)| (name.clone(), t.available()))
            .collect()
    }

    /// Wakes up to `count` of the waiters parked on `topic` alone, for jobs
    /// this instance made ready and did not announce; returns how many it
    /// woke (fewer if some left meanwhile: the caller announces the rest).
    pub fn wake_local(&self, topic: &str, count: usize) -> usize {
        let mut map = self.topics.lock().unwrap();
        let Some(t) = map.get_mut(topic) else {
            return 0;
        };
        let woken = count.min(t.available());
        t.pending += woken;
        for _ in 0..woken {
            t.notify.notify_one();
        }
        woken
    }

    /// Wake every waiter: after a gap in wake-ups (subscriber reconnect) or at
    /// shutdown, everyone looks again.
    pub fn wake_all(&self) {
        let mut map = self.topics.lock().unwrap();
        for t in map.values_mut() {
            t.pending = t.parked;
            t.notify.notify_waiters();
        }
    }

    /// A waiter on `topics` parks (`true`) or stops waiting (`false`);
    /// `woken`: it was woken by the wake-up of `topics[i]`.
    fn park(&self, topics: &[String], parked: bool, woken: Option<usize>) {
        let mut map = self.topics.lock().unwrap();
        if let [one] = topics {
            if let Some(t) = map.get_mut(one) {
                if parked {
                    t.parked += 1;
                } else {
                    t.parked = t.parked.saturating_sub(1);
                }
            }
        }
        if let Some(t) = woken.and_then(|i| map.get_mut(&topics[i])) {
            t.pending = t.pending.saturating_sub(1);
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
    /// It claimed the backstop look of every pop waiting on its topics
    /// and has not made it yet.
    for_all: AtomicBool,
    own: bool,
    topics: &'a [String],
    handles: Vec<Arc<Notify>>,
}

impl WaitGuard<'_> {
    pub fn handles(&self) -> &[Arc<Notify>] {
        &self.handles
    }

    /// Counts this waiter as parked (its wake-ups enabled) until
    /// [`unpark`](Self::unpark).
    pub fn park(&self) {
        self.waiters.park(self.topics, true, None);
    }

    /// No longer parked; `woken`: by the wake-up of `topics[i]`.
    pub fn unpark(&self, woken: Option<usize>) {
        self.waiters.park(self.topics, false, woken);
    }

    /// A look at Redis for these topics, sent at `sent`, found nothing
    /// ready (not held by a rate limit, no stale entries left to skip): it
    /// stands for every pop waiting on them.
    pub fn looked_empty(&self, sent: Instant) {
        if let Some(set) = self.waiters.sets.lock().unwrap().get_mut(self.topics) {
            set.look = Some(set.look.map_or(sent, |at| at.max(sent)));
        }
    }

    /// This waiter's backstop came due, its last look made at `since`: if
    /// another waiter on these topics looked since (or is looking now),
    /// the time of that look (this one waits on from it); else `None`,
    /// and this waiter looks for all of them now. A look made for all that
    /// does not come back empty wakes them (see [`looked`](Self::looked)).
    pub fn claim_look(&self, since: Instant) -> Option<Instant> {
        let mut sets = self.waiters.sets.lock().unwrap();
        let set = sets.get_mut(self.topics)?;
        match set.look {
            Some(at) if at > since => Some(at),
            _ => {
                set.look = Some(Instant::now());
                self.for_all.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// This waiter's look is done, `empty` if it found nothing ready. One
    /// made for all that found something (or failed) wakes the others:
    /// they waited on it and look for themselves now.
    pub fn looked(&self, empty: bool) {
        if self.for_all.swap(false, Ordering::Relaxed) && !empty {
            self.wake_others();
        }
    }

    /// Every waiter on these topics looks again, counted as
    /// [`Waiters::wake_all`] counts it (each parked waiter has a wake-up
    /// pending), so that local wake-ups are never promised to them.
    fn wake_others(&self) {
        let mut map = self.waiters.topics.lock().unwrap();
        for topic in self.topics {
            if let Some(t) = map.get_mut(topic) {
                t.pending = t.parked;
                t.notify.notify_waiters();
            }
        }
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        // Gone before its look for all came back: the others look.
        if *self.for_all.get_mut() {
            self.wake_others();
        }
        let handles = std::mem::take(&mut self.handles);
        self.waiters.release(self.topics, handles, self.own);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn woken(n: &Arc<Notify>) {
        tokio::time::timeout(std::time::Duration::from_secs(5), n.notified())
            .await
            .expect("woken")
    }

    #[tokio::test]
    async fn one_backstop_look_stands_for_every_waiter_on_the_same_topics() {
        let w = Waiters::default();
        let t = vec!["t".to_owned()];
        let other = vec!["t".to_owned(), "u".to_owned()];
        let (a, b, c) = (w.enter(&t), w.enter(&t), w.enter(&other));
        let since = Instant::now();
        assert_eq!(a.claim_look(since), None, "the first looks for all");
        let claimed = b.claim_look(since).expect("the second waits on it");
        assert!(claimed >= since);
        assert_eq!(c.claim_look(since), None, "another topic set looks itself");
        // Empty: nobody is woken, and the next backstop waits on it.
        a.looked(true);
        assert!(
            b.claim_look(claimed).is_none(),
            "a look after it is due again"
        );
        // A look for all that found something wakes the others.
        let notified = b.handles()[0].clone();
        let wait = woken(&notified);
        tokio::pin!(wait);
        assert!(futures::poll!(wait.as_mut()).is_pending());
        a.park();
        assert_eq!(w.available(10), vec![("t".to_owned(), 1)]);
        b.looked(false);
        wait.await;
        // Its wake-up is counted: no local wake-up is promised to it.
        assert!(w.available(10).is_empty());
        a.unpark(Some(0));
        // So does a waiter gone before its look for all came back.
        let since = Instant::now();
        let d = w.enter(&t);
        assert_eq!(d.claim_look(since), None);
        let wait = woken(&notified);
        tokio::pin!(wait);
        assert!(futures::poll!(wait.as_mut()).is_pending());
        drop(d);
        wait.await;
        drop((a, b, c));
        assert!(
            w.sets.lock().unwrap().is_empty(),
            "sets are dropped with their waiters"
        );
    }
}
