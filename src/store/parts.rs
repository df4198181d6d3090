//! A queue's partitions: which one a job lives in, where a pop starts,
//! and the check of the partition count stored in Redis.

use tokio::sync::OnceCell;

use super::{layout, Keys, Store};
use crate::error::{Error, Result};

/// The queue's partitions, one set of keys each (one unless the queue is
/// split over a cluster), and where the next pop looks first.
pub(crate) struct Partitions {
    prefix: String,
    keys: Vec<Keys>,
    /// Set once the partition count stored in Redis was found to match.
    checked: OnceCell<()>,
    /// Where pops start looking: it moves on at each reply from it, so
    /// partitions take turns by call while the pops that arrive meanwhile
    /// meet at one partition, one call for all of them.
    next_pop: std::sync::atomic::AtomicUsize,
    /// Per topic, the partition whose ready notice came last: a pop woken
    /// by it looks there first, one round trip instead of up to one per
    /// partition.
    ready_hint: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

impl Partitions {
    pub(crate) fn new(prefix: &str, keys: Vec<Keys>) -> Partitions {
        Partitions {
            prefix: prefix.to_owned(),
            keys,
            checked: OnceCell::new(),
            next_pop: Default::default(),
            ready_hint: Default::default(),
        }
    }
}

impl Store {
    /// The queue's partitions.
    pub fn parts(&self) -> &[Keys] {
        &self.parts.keys
    }

    /// The queue's key prefix.
    pub(crate) fn prefix(&self) -> &str {
        &self.parts.prefix
    }

    /// The partition job `id` lives in.
    pub fn part_of(&self, id: &str) -> usize {
        layout::partition_of(id, self.parts().len())
    }

    /// `ids` by the partition each lives in, in their order.
    pub(super) fn by_partition<'a>(
        &self,
        ids: &'a [String],
    ) -> std::collections::BTreeMap<usize, Vec<&'a String>> {
        let mut groups = std::collections::BTreeMap::<usize, Vec<&String>>::new();
        for id in ids {
            groups.entry(self.part_of(id)).or_default().push(id);
        }
        groups
    }

    /// The partition `group` lives in (its home): every job of the group,
    /// its line, slots, rate bucket and turn are there, so its limits are
    /// counted in one place however many partitions the queue has.
    pub fn group_home(&self, group: &str) -> usize {
        layout::partition_of(group, self.parts().len())
    }

    /// Where a pop for `topics` starts: for a pop `woken` by a ready
    /// notice, the partition that last said it has ready jobs of one of
    /// them; else the partition whose turn it is (see [`Self::popped_at`]).
    /// Only a woken pop follows the notice: it found every partition empty
    /// before it waited, while a pop that did not wait would take from the
    /// noticed partition (its groups) call after call, and the other
    /// partitions' ready jobs would wait until that one ran dry.
    pub(crate) fn pop_start(&self, topics: &[String], woken: bool) -> usize {
        if woken && self.parts().len() > 1 {
            let hints = self.parts.ready_hint.lock().unwrap();
            if let Some(&p) = topics.iter().find_map(|t| hints.get(t)) {
                return p;
            }
        }
        self.parts
            .next_pop
            .load(std::sync::atomic::Ordering::Relaxed)
            % self.parts().len()
    }

    /// A pop call at partition `part` ended (or passed it by): if it was its
    /// turn, the turn passes to the next. Pops that start meanwhile meet
    /// at one partition and go to it as one call (the group commit), where
    /// a turn per pop would spread them one call each over the partitions;
    /// the turn still passes at every reply, so no partition's ready jobs
    /// wait behind another's.
    pub(crate) fn popped_at(&self, part: usize) {
        let n = self.parts().len();
        if n == 1 {
            return;
        }
        let _ = self.parts.next_pop.compare_exchange(
            part,
            (part + 1) % n,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Partition `part` had nothing ready for `topics`: later pops take
    /// turns again.
    pub(crate) fn drop_ready_hint(&self, topics: &[String], part: usize) {
        if self.parts().len() == 1 {
            return;
        }
        let mut hints = self.parts.ready_hint.lock().unwrap();
        for t in topics {
            if hints.get(t) == Some(&part) {
                hints.remove(t);
            }
        }
    }

    /// Partition `part` made jobs of `topic` ready (a ready notice).
    pub(crate) fn note_ready(&self, topic: &str, part: usize) {
        if self.parts().len() == 1 {
            return;
        }
        let mut hints = self.parts.ready_hint.lock().unwrap();
        // Bounded however many topics come and go.
        if hints.len() >= 10_000 && !hints.contains_key(topic) {
            hints.clear();
        }
        hints.insert(topic.to_owned(), part);
    }

    /// Connects once and PINGs (each master, on a cluster), for the real
    /// cause when that fails ([`Client::probe`](crate::redis::Client::probe)),
    /// then checks the partition count.
    pub async fn probe(&self) -> Result<()> {
        self.redis.probe().await?;
        self.check_partitions().await
    }

    /// Checks the queue's partition count against the one stored in Redis
    /// when it was first split, and refuses to go on with another: jobs
    /// would be looked for in the wrong partition. A queue of one partition
    /// stores nothing (its keys are those of a queue that never had
    /// partitions); a split queue stores its count on first use, and is
    /// refused while the unsplit queue of the same prefix holds jobs.
    pub(crate) async fn check_partitions(&self) -> Result<()> {
        self.parts.checked
            .get_or_try_init(|| async {
                let key = Keys::partition_count(self.prefix());
                let n = self.parts().len();
                let mut pipe = redis::pipe();
                if n > 1 {
                    pipe.cmd("SET").arg(&key).arg(n).arg("NX").ignore();
                }
                pipe.cmd("GET")
                    .arg(&key)
                    .cmd("EXISTS")
                    .arg(Keys::new(self.prefix()).counts());
                let (stored, unsplit_jobs): (Option<String>, bool) = self
                    .redis.call("read the partition count", pipe.query_async(&mut self.redis.conn()))
                    .await?;
                let stored_n = match stored.as_deref().map(str::parse::<usize>) {
                    None => 1,
                    Some(Ok(m)) => m,
                    Some(Err(_)) => 0,
                };
                if stored_n != n {
                    let m = stored.unwrap_or_else(|| "1".into());
                    return Err(Error::Invalid(format!(
                        "queue {:?} has {m} partitions in Redis, not {n}: start with --partitions {m}, or use another --prefix",
                        self.prefix()
                    )));
                }
                if n > 1 && unsplit_jobs {
                    return Err(Error::Invalid(format!(
                        "queue {:?} holds jobs stored without partitions: start with --partitions 1 until they are done, or use another --prefix",
                        self.prefix()
                    )));
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }
}
