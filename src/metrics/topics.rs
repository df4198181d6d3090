//! Which topics have series of their own: at most
//! [`MAX_TOPIC_SERIES`](super::MAX_TOPIC_SERIES) at once, a quiet topic
//! without jobs forgotten (in every series) for a new one, the rest under
//! [`OTHER_TOPICS`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::OTHER_TOPICS;
use crate::store::TopicCounts;

/// A topic with series of its own.
struct Known {
    /// Last counted event or scrape with jobs.
    active: Instant,
    /// The same as a sequence number (Instants may tie): the least
    /// recently active goes first.
    order: u64,
    /// It had jobs at the last scrape that read them.
    has_jobs: bool,
}

/// Series that can drop a forgotten topic's values.
pub(super) trait Forget: Send + Sync {
    fn forget(&self, topic: &str);
}

/// The topics that have series of their own, and every series with a
/// `topic` label (to forget a topic in all of them at once).
pub(super) struct Topics {
    max: usize,
    idle: Duration,
    known: Mutex<(HashMap<String, Known>, u64)>,
    pub(super) series: Mutex<Vec<Arc<dyn Forget>>>,
}

impl Topics {
    pub(super) fn new(max: usize, idle: Duration) -> Self {
        Topics {
            max,
            idle,
            known: Mutex::default(),
            series: Mutex::default(),
        }
    }

    /// The label for `topic`, now active: its own, unless every place is
    /// taken by topics that may not be forgotten yet.
    ///
    /// Lock order: this lock, then a series' map; callers must not hold a
    /// series' map while calling it.
    pub(super) fn label(&self, topic: &str) -> String {
        if topic == OTHER_TOPICS {
            return topic.to_owned();
        }
        let mut guard = self.known.lock().unwrap();
        let (known, tick) = &mut *guard;
        *tick += 1;
        let now = Instant::now();
        if let Some(k) = known.get_mut(topic) {
            k.active = now;
            k.order = *tick;
            return topic.to_owned();
        }
        if known.len() >= self.max {
            // O(topics with series), at most MAX_TOPIC_SERIES, and only
            // when a new topic comes while all places are taken.
            let gone = known
                .iter()
                .filter(|(_, k)| !k.has_jobs && now.duration_since(k.active) >= self.idle)
                .min_by_key(|(_, k)| k.order)
                .map(|(t, _)| t.clone());
            let Some(gone) = gone else {
                return OTHER_TOPICS.to_owned();
            };
            known.remove(&gone);
            for s in self.series.lock().unwrap().iter() {
                s.forget(&gone);
            }
        }
        known.insert(
            topic.to_owned(),
            Known {
                active: now,
                order: *tick,
                has_jobs: false,
            },
        );
        topic.to_owned()
    }

    /// The label `topic` has now, changing nothing.
    pub(super) fn peek(&self, topic: &str) -> String {
        let known = &self.known.lock().unwrap().0;
        if known.contains_key(topic) || known.len() < self.max {
            topic.to_owned()
        } else {
            OTHER_TOPICS.to_owned()
        }
    }

    /// Records which topics have jobs, as a scrape read them.
    pub(super) fn saw_jobs(&self, jobs: &BTreeMap<String, TopicCounts>) {
        let now = Instant::now();
        let mut guard = self.known.lock().unwrap();
        let (known, tick) = &mut *guard;
        for (topic, k) in known.iter_mut() {
            k.has_jobs = jobs.get(topic).is_some_and(has_jobs);
            if k.has_jobs {
                *tick += 1;
                k.active = now;
                k.order = *tick;
            }
        }
    }
}

pub(super) fn has_jobs(c: &TopicCounts) -> bool {
    c.delayed + c.ready + c.reserved + c.dead > 0
}
