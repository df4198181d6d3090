//! `Keys`: the name of every key and channel of a queue's partitions, and
//! the slots and partitions they fall in; the check of a prefix.

use super::kind;
use crate::defaults::MAX_PREFIX_LEN;

/// Names every key and channel for one prefix (one partition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// `{tag}:`, passed to scripts so they can name per-id keys.
    base: String,
}

impl Keys {
    /// Key names for `prefix`, which [`validate_prefix`] has accepted: the
    /// keys of an unpartitioned queue.
    pub fn new(prefix: &str) -> Self {
        Keys {
            base: format!("{{{prefix}}}:"),
        }
    }

    /// The keys of each of `n` partitions. One partition is today's keys,
    /// [`Keys::new`]. For more, partition `i`'s hash tag is `prefix:i:k`
    /// with the smallest `k` whose slot lies in the `i`-th of `n` equal
    /// ranges of the 16384 slots: a cluster whose masters own equal ranges
    /// (what `redis-cli --cluster create` makes) gets the partitions spread
    /// evenly, where tags picked by hash alone would often pile up on one
    /// master. A prefix holds no `:`, so no tag can be another queue's.
    pub fn partitions(prefix: &str, n: usize) -> Vec<Keys> {
        if n <= 1 {
            return vec![Keys::new(prefix)];
        }
        (0..n)
            .map(|i| {
                let range = (i * SLOTS / n)..((i + 1) * SLOTS / n);
                let tag = (0u64..)
                    .map(|k| format!("{prefix}:{i}:{k}"))
                    .find(|t| range.contains(&(slot(t.as_bytes()) as usize)))
                    .expect("every range holds slots");
                Keys {
                    base: format!("{{{tag}}}:"),
                }
            })
            .collect()
    }

    /// Where the partition count of a queue is kept (in the first
    /// partition's slot).
    pub fn partition_count(prefix: &str) -> String {
        format!("{{{prefix}}}:{}", kind::PARTITIONS)
    }

    /// The index of recurring schedules (in the first partition's slot).
    pub fn recurring_index(prefix: &str) -> String {
        format!("{{{prefix}}}:{}", kind::RECURRING)
    }
    /// Every topic's rate limit (in the first partition's slot).
    pub fn rates_index(prefix: &str) -> String {
        format!("{{{prefix}}}:{}", kind::RATES)
    }
    /// A signed-out dashboard session.
    pub fn signed_out(prefix: &str, session: &str) -> String {
        format!("{{{prefix}}}:{}{session}", kind::SIGNED_OUT)
    }
    /// Throughput counts of one second (Unix seconds).
    pub fn throughput_second(prefix: &str, second: i64) -> String {
        format!("{{{prefix}}}:{}{second}", kind::THROUGHPUT_SECOND)
    }
    /// Throughput counts of one minute (Unix seconds / 60).
    pub fn throughput_minute(prefix: &str, minute: i64) -> String {
        format!("{{{prefix}}}:{}{minute}", kind::THROUGHPUT_MINUTE)
    }
    /// Fire-lateness bucket counts of one minute (Unix seconds / 60).
    pub fn lateness_minute(prefix: &str, minute: i64) -> String {
        format!("{{{prefix}}}:{}{minute}", kind::LATENESS_MINUTE)
    }
    /// A running instance's heartbeat (in the first partition's slot).
    pub fn instance(prefix: &str, id: &str) -> String {
        format!("{{{prefix}}}:{}{id}", kind::INSTANCE)
    }
    /// The live instances' ids, by expiry (in the first partition's slot).
    pub fn instances(prefix: &str) -> String {
        format!("{{{prefix}}}:{}", kind::INSTANCES)
    }
    /// A webhook topic's last delivery.
    pub fn webhook(prefix: &str, topic: &str) -> String {
        format!("{{{prefix}}}:{}{topic}", kind::WEBHOOK)
    }
    /// A webhook topic's deliveries and failures in one minute (Unix
    /// minutes).
    pub fn webhook_counts(prefix: &str, topic: &str, minute: i64) -> String {
        format!("{{{prefix}}}:{}{minute}:{topic}", kind::WEBHOOK_COUNTS)
    }
    /// When the recurring loop last looked (in the first partition's slot).
    pub fn recurring_seen(prefix: &str) -> String {
        format!("{{{prefix}}}:{}", kind::RECURRING_SEEN)
    }
    /// This partition's schedules by last tick.
    pub fn recur_due(&self) -> String {
        format!("{}{}", self.base, kind::RECUR_DUE)
    }
    pub fn recur(&self, name: &str) -> String {
        format!("{}{}{name}", self.base, kind::RECUR)
    }
    pub fn paused(&self) -> String {
        format!("{}{}", self.base, kind::PAUSED)
    }
    pub fn ready_list(&self, topic: &str) -> String {
        format!("{}{}{topic}", self.base, kind::READY)
    }
    /// The ready list of `topic`'s priority `level` (0: the default list).
    pub fn ready_level(&self, topic: &str, level: u8) -> String {
        if level == 0 {
            return self.ready_list(topic);
        }
        format!("{}{}{level}:{topic}", self.base, kind::READY_LEVEL)
    }
    /// `topic`'s index of priority levels with ready jobs.
    pub fn levels(&self, topic: &str) -> String {
        format!("{}{}{topic}", self.base, kind::LEVELS)
    }
    pub fn rate(&self, topic: &str) -> String {
        format!("{}{}{topic}", self.base, kind::RATE)
    }
    /// A topic's key of group `kind` (its groups' index, rotation, or
    /// waiting set).
    pub fn groups_of(&self, kind: &str, topic: &str) -> String {
        format!("{}{kind}{topic}", self.base)
    }

    /// A key of this partition's slot that never exists (see the table).
    pub fn moving(&self) -> String {
        format!("{}{}", self.base, kind::MOVING)
    }

    pub fn base(&self) -> &str {
        &self.base
    }
    pub fn job(&self, id: &str) -> String {
        format!("{}{}{id}", self.base, kind::JOB)
    }
    pub fn log(&self, id: &str) -> String {
        format!("{}{}{id}", self.base, kind::LOG)
    }
    pub fn trigger(&self, id: &str) -> String {
        format!("{}{}{id}", self.base, kind::TRIGGER)
    }
    /// The start of every trigger key: expired events for other keys are
    /// none of delayq's business.
    pub fn trigger_prefix(&self) -> String {
        format!("{}{}", self.base, kind::TRIGGER)
    }
    pub fn schedule(&self) -> String {
        format!("{}{}", self.base, kind::SCHEDULE)
    }
    pub fn dead(&self, topic: &str) -> String {
        format!("{}{}{topic}", self.base, kind::DEAD)
    }
    /// A topic's index of kept finished records.
    pub fn finished(&self, topic: &str) -> String {
        format!("{}{}{topic}", self.base, kind::FINISHED)
    }
    pub fn counts(&self) -> String {
        format!("{}{}", self.base, kind::COUNT)
    }
    pub fn ready_channel(&self) -> String {
        format!("{}{}", self.base, kind::READY_CHANNEL)
    }
    pub fn dispatcher(&self) -> String {
        format!("{}{}", self.base, kind::DISPATCHER)
    }
    /// This partition's event stream.
    pub fn events(&self) -> String {
        format!("{}{}", self.base, kind::EVENTS)
    }
    /// Instance `instance`'s expired-events canary in this partition's slot.
    pub fn canary(&self, instance: &str) -> String {
        format!("{}{}{instance}", self.base, kind::CANARY)
    }
    pub fn wake_channel(&self) -> String {
        format!("{}{}", self.base, kind::WAKE_CHANNEL)
    }
    /// `topic`'s own schedule: its delayed jobs only, by due time.
    pub fn topic_schedule(&self, topic: &str) -> String {
        format!("{}{}{topic}", self.base, kind::TOPIC_SCHEDULE)
    }
    /// Each topic's earliest delayed due time (topic -> ms).
    pub fn heads(&self) -> String {
        format!("{}{}", self.base, kind::HEADS)
    }
    /// Where the topic schedules' backfill stands.
    pub fn indexed(&self) -> String {
        format!("{}{}", self.base, kind::INDEXED)
    }
    /// The layout writers write in this partition.
    pub fn layout(&self) -> String {
        format!("{}{}", self.base, kind::LAYOUT)
    }
    /// Batch `id`'s hash (in its home partition).
    pub fn batch(&self, id: &str) -> String {
        format!("{}{}{id}", self.base, super::batch_kind::BATCH)
    }
    /// Batch `id`'s members and their outcomes (in its home partition).
    pub fn batch_members(&self, id: &str) -> String {
        format!("{}{}{id}", self.base, super::batch_kind::MEMBERS)
    }
    /// This partition's reservations of batches homed here.
    pub fn batch_reserved(&self) -> String {
        format!("{}{}", self.base, super::batch_kind::RESERVED)
    }
    /// This partition's notes for batches' homes.
    pub fn notes(&self) -> String {
        format!("{}{}", self.base, super::batch_kind::NOTES)
    }
}

/// Hash slots in a Redis Cluster.
pub const SLOTS: usize = 16384;

/// What of `key` counts for its slot, as Redis reads hash tags: the part
/// between the first `{` and the next `}` when that is not empty, else all
/// of it.
pub(crate) fn hash_tag(key: &[u8]) -> &[u8] {
    key.iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key)
}

/// The cluster slot of `key` (CRC16/XMODEM of its hash tag, mod 16384).
pub fn slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) % SLOTS as u16
}

/// The partition of job `id` in a queue of `n` partitions. Stable for ever:
/// a job is found where it was written. As with Redis hash tags, only the
/// part between the first `{` and the next `}` counts when there is one, so
/// related jobs can share a partition (a recurring schedule's ticks do).
pub fn partition_of(id: &str, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    // FNV-1a: cheap, and independent of the slot hash, so ids spread over
    // partitions however the tags fell.
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in hash_tag(id.as_bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    (h % n as u64) as usize
}

/// A prefix is 1 to [`MAX_PREFIX_LEN`] characters of `[A-Za-z0-9_.-]`: no
/// braces (it is the hash tag) and nothing that needs quoting in logs or
/// config files.
pub fn validate_prefix(prefix: &str) -> Result<(), String> {
    let ok = !prefix.is_empty()
        && prefix.len() <= MAX_PREFIX_LEN
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid key prefix {prefix:?}: use 1 to {MAX_PREFIX_LEN} characters from A-Z a-z 0-9 _ . -"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids_cannot_reach_delayq_keys() {
        let k = Keys::new("dq");
        assert_eq!(k.schedule(), "{dq}:schedule");
        // An id that looks like a delayq key still lands under j:/t:.
        assert_eq!(k.job("{dq}:schedule"), "{dq}:j:{dq}:schedule");
        assert_ne!(k.trigger("x"), k.job("x"));
        assert!(k.trigger("a").starts_with(&k.trigger_prefix()));
    }

    #[test]
    fn no_topic_names_another_topics_ready_list_of_any_priority() {
        let k = Keys::new("dq");
        let topics = ["a", "a:1", "1:a", "p:1:a", "readyp:1:a", "levels:a", ":"];
        let mut seen = std::collections::HashSet::new();
        for t in topics {
            for level in 0..=crate::job::MAX_PRIORITY {
                assert!(seen.insert(k.ready_level(t, level)), "{t} {level}");
            }
            assert!(seen.insert(k.levels(t)), "{t}");
        }
        assert_eq!(k.ready_level("a", 0), k.ready_list("a"));
        assert_eq!(k.ready_level("a", 3), "{dq}:readyp:3:a");
    }

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on Redis 7.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"{}x"), slot(b"{}x"));
    }

    #[test]
    fn partitions_spread_over_the_slot_ranges_and_one_is_today() {
        assert_eq!(Keys::partitions("dq", 1), vec![Keys::new("dq")]);
        let parts = Keys::partitions("dq", 6);
        for (i, k) in parts.iter().enumerate() {
            let s = slot(k.schedule().as_bytes()) as usize;
            assert_eq!(s * 6 / SLOTS, i, "{}", k.schedule());
            assert_eq!(slot(k.job("any id").as_bytes()) as usize, s);
            assert_eq!(slot(k.moving().as_bytes()) as usize, s);
        }
        let mut seen = [0; 6];
        for i in 0..6000 {
            seen[partition_of(&format!("order-{i}"), 6)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
    }

    #[test]
    fn prefixes_are_checked() {
        assert!(validate_prefix("dq").is_ok());
        assert!(validate_prefix("my-app.dq_1").is_ok());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("a{b}").is_err());
        assert!(validate_prefix(&"x".repeat(65)).is_err());
    }
}
