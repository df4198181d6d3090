//! Where delayq keeps things in Redis: key kinds, job-hash fields, states and
//! channels, each named once, here. The scripts get the same names as a Lua
//! prelude made from these tables ([`lua_prelude`]), and a test checks that
//! no script writes one of the values as a literal.
//!
//! Every key starts with `{prefix}:`. The braces make the prefix a hash tag,
//! so every key a script touches lives in one Redis Cluster slot. A queue
//! split into N > 1 partitions (Redis Cluster) has N such sets of keys, one
//! per partition, each under a hash tag of its own (`{prefix:i:k}`, see
//! [`Keys::partitions`]); a job lives in the partition its id hashes to. After the
//! prefix comes a fixed kind and only then the user's id or topic, so no id
//! or topic can ever name one of delayq's own keys or another application's.
//!
//! | key                      | type   | holds                                         |
//! |--------------------------|--------|-----------------------------------------------|
//! | `{p}:j:<id>`             | hash   | the job; fields in [`field`]                  |
//! | `{p}:t:<id>`             | string | trigger: expires when the job is due          |
//! | `{p}:schedule`           | zset   | id -> due time (ms): delayed and leased jobs  |
//! | `{p}:ready:<topic>`      | list   | ids ready to pop, oldest at the right         |
//! |                          |        | (priority 0, the default)                     |
//! | `{p}:readyp:<n>:<topic>` | list   | the same for priority n (1 to 9): the number  |
//! |                          |        | before the topic, so no topic names another's |
//! | `{p}:levels:<topic>`     | zset   | priority n -> n of each readyp list that may  |
//! |                          |        | hold jobs (absent while none does)            |
//! | `{p}:dead:<topic>`       | zset   | dead job ids -> time of death (ms)            |
//! | `{p}:count`              | hash   | "<state>:<topic>" -> number of jobs           |
//! | channel `{p}:ready`      | pubsub | "<count> <topic>" when jobs become ready      |
//! | channel `{p}:wake`       | pubsub | due time of a job that became the earliest    |
//! | `{p}:recur:<name>`       | hash   | a recurring schedule: definition, version,    |
//! |                          |        | last tick, that tick's job id                 |
//! | `{p}:recur_due`          | zset   | schedule name -> its last tick (ms): when it  |
//! |                          |        | falls due, the next tick is pushed            |
//! | `{prefix}:recurring`     | set    | names of the recurring schedules              |
//! | `{prefix}:recurring_seen`| string | Redis time (ms) of the last look at the       |
//! |                          |        | schedules by any process: a gap is an outage  |
//! | `{p}:rate:<topic>`       | hash   | a topic's rate limit; its token bucket only in |
//! |                          |        | the topic's home partition                    |
//! | `{prefix}:rates`         | hash   | topic -> "per_second burst" of every limit    |
//! | `{p}:paused`             | set    | topics whose jobs are not handed out now      |
//! | `{p}:moving`             | none   | never written: declared by every script call  |
//! |                          |        | on a cluster so that a call on a slot that is |
//! |                          |        | being migrated is refused whole (TRYAGAIN)     |
//! | `{prefix}:partitions`    | string | a split queue's partition count, fixed at     |
//! |                          |        | first use (absent: one partition)             |
//! | `{prefix}:signedout:<s>` | string | a dashboard session signed out, until it      |
//! |                          |        | would have expired anyway                     |
//! | `{p}:pops`               | list   | nonce and ids (one per line) of the latest    |
//! |                          |        | pops that took jobs (at most [`POPS_KEPT`]):  |
//! |                          |        | a pop whose reply was lost is undone from it  |
//! | `{p}:finished:<topic>`   | zset   | finished jobs' kept records (keep_finished):  |
//! |                          |        | id -> MAX_TIME_MS - finished time (ms), so    |
//! |                          |        | score order is newest first                   |
//! | `{prefix}:tps:<second>`  | hash   | throughput of one second (Unix s): "<kind>"   |
//! |                          |        | (all topics) and "<kind>:<topic>" -> count;   |
//! |                          |        | TTL a little over 5 minutes                   |
//! | `{prefix}:tpm:<minute>`  | hash   | the same per minute (Unix s / 60); TTL a      |
//! |                          |        | little over an hour                           |
//! | `{prefix}:latm:<minute>` | hash   | fire lateness of one minute: "<bucket>" (all  |
//! |                          |        | topics) and "<bucket>:<topic>" -> count; TTL  |
//! |                          |        | a little over an hour                         |
//! | `{prefix}:instance:<id>` | string | a running delayq's heartbeat (JSON), expiring |
//! | `{prefix}:instances`     | zset   | instance id -> when its heartbeat expires     |
//! | `{prefix}:webhook:<t>`   | hash   | topic t's last webhook delivery: status, time |
//! | `{prefix}:webhook_n:<m>:<t>` | hash | topic t's deliveries and failures in Unix |
//! |                          |        | minute m (expires after the hour)             |
//! | `{p}:dispatcher`         | string | id of the instance that dispatches the        |
//! |                          |        | partition now (a lease with a TTL)            |
//! | `{p}:events`             | stream | the event stream (only with events on): one   |
//! |                          |        | entry per transition, fields in [`event`],    |
//! |                          |        | capped near `events_kept` (XADD MAXLEN ~)     |
//! | `{p}:dedup:<key>`        | string | "T<n> <id>", "D<n> <id>" or "0 <id>": the job |
//! |                          |        | a dedup key names; n is its due time          |
//! |                          |        | (throttle), the series' first push (debounce) |
//! |                          |        | or 0 (simple); PX the window                  |
//! |                          |        | (simple: none, deleted when the job ends)     |
//! | `{p}:tag:<tag>`          | zset   | ids of the partition's jobs with the tag -> 0 |
//! |                          |        | (paged by id, ZRANGEBYLEX); entry goes with   |
//! |                          |        | the job                                       |

use crate::defaults::{MAX_PREFIX_LEN, MAX_TAG_PAGE};

/// Key kinds and channel names, after the prefix.
pub mod kind {
    pub const JOB: &str = "j:";
    pub const TRIGGER: &str = "t:";
    pub const SCHEDULE: &str = "schedule";
    pub const READY: &str = "ready:";
    /// Ready lists of priorities 1 to 9 (`readyp:<n>:<topic>`).
    pub const READY_LEVEL: &str = "readyp:";
    /// A topic's index of non-empty priority levels.
    pub const LEVELS: &str = "levels:";
    pub const DEAD: &str = "dead:";
    pub const COUNT: &str = "count";
    pub const READY_CHANNEL: &str = "ready";
    pub const WAKE_CHANNEL: &str = "wake";
    pub const MOVING: &str = "moving";
    pub const RECUR: &str = "recur:";
    pub const RECURRING: &str = "recurring";
    pub const RECUR_DUE: &str = "recur_due";
    pub const RECURRING_SEEN: &str = "recurring_seen";
    pub const RATE: &str = "rate:";
    pub const RATES: &str = "rates";
    pub const PAUSED: &str = "paused";
    pub const PARTITIONS: &str = "partitions";
    pub const SIGNED_OUT: &str = "signedout:";
    pub const POPS: &str = "pops";
    pub const FINISHED: &str = "finished:";
    pub const THROUGHPUT_SECOND: &str = "tps:";
    pub const THROUGHPUT_MINUTE: &str = "tpm:";
    pub const LATENESS_MINUTE: &str = "latm:";
    pub const INSTANCE: &str = "instance:";
    pub const INSTANCES: &str = "instances";
    pub const WEBHOOK: &str = "webhook:";
    pub const WEBHOOK_COUNTS: &str = "webhook_n:";
    pub const DISPATCHER: &str = "dispatcher";
    pub const EVENTS: &str = "events";
    pub const DEDUP: &str = "dedup:";
    pub const TAG: &str = "tag:";
}

/// How many of the latest pops `{p}:pops` remembers. A pop whose reply was
/// lost (the connection broke, or a failover came between the script and
/// its reply) is undone only while it is among them: at 10k pops a second
/// that is the last 0.4 s, at 100 a second the last 40 s; beyond that its
/// jobs come back after their ttr, the attempt counted, as before. A few
/// hundred kB per partition at most.
pub const POPS_KEPT: usize = 4096;

/// Job hash fields. One letter each: millions of pending jobs each carry
/// these names.
pub mod field {
    pub const TOPIC: &str = "q";
    pub const BODY: &str = "b";
    /// Time to run, ms.
    pub const TTR: &str = "r";
    /// Due time, Unix ms; absent while delayed, when the schedule holds it.
    pub const DUE: &str = "d";
    /// Absent while delayed (most jobs, so it costs nothing); otherwise one
    /// of [`super::state`]'s other values.
    pub const STATE: &str = "s";
    /// Deliveries so far; absent means 0.
    pub const ATTEMPTS: &str = "a";
    /// The current lease's token ("" when not reserved).
    pub const TOKEN: &str = "k";
    /// End of the current lease, Unix ms.
    pub const LEASE: &str = "l";
    /// Retry intervals, ms, comma-separated.
    pub const RETRY: &str = "p";
    /// Most attempts.
    pub const MAX: &str = "m";
    /// The last failed attempt's error.
    pub const ERROR: &str = "e";
    /// One "attempt TAB ms TAB error" line per failure, the last 20.
    pub const HISTORY: &str = "h";
    /// Time of death, Unix ms.
    pub const DEAD_AT: &str = "x";
    /// When a finished job's kept record was written, Unix ms.
    pub const FINISHED_AT: &str = "f";
    /// The job's tags, one per line (a tag holds no control character);
    /// absent without tags.
    pub const TAGS: &str = "g";
    /// The push's W3C `traceparent`; only on traced jobs.
    pub const TRACEPARENT: &str = "tp";
    /// The push's W3C `tracestate`; only when it came with one.
    pub const TRACESTATE: &str = "ts";
    /// Priority (1 to 9); absent means 0, the default.
    pub const PRIORITY: &str = "pr";
    /// A simple-dedup job's key: its end deletes the key's record.
    pub const DEDUP: &str = "u";

    /// Every field but BODY: what a listing reads first (a body is read
    /// only if it fits the page, see `store::read`).
    pub const ALL_BUT_BODY: &[&str] = &[
        TOPIC,
        TTR,
        DUE,
        STATE,
        ATTEMPTS,
        TOKEN,
        LEASE,
        RETRY,
        MAX,
        ERROR,
        HISTORY,
        DEAD_AT,
        FINISHED_AT,
        TAGS,
        TRACEPARENT,
        TRACESTATE,
        PRIORITY,
        DEDUP,
    ];
}

/// The event stream's entries (`{p}:events`): every entry has all six
/// fields in this order ("" where none applies), so Redis stores their
/// names once per stream node, not per entry. An entry's time (Redis time,
/// ms) is its stream id's.
pub mod event {
    pub const KIND: &str = "k";
    pub const ID: &str = "i";
    pub const TOPIC: &str = "q";
    pub const ATTEMPT: &str = "a";
    /// Due time, Unix ms, where one applies ("" otherwise).
    pub const DUE: &str = "d";
    /// The failed attempt's error ("" otherwise).
    pub const ERROR: &str = "e";
    /// The kinds (an entry's `k`).
    pub const PUSHED: &str = "pushed";
    pub const FIRED: &str = "fired";
    pub const DELIVERED: &str = "delivered";
    pub const FINISHED: &str = "finished";
    pub const FAILED: &str = "failed";
    pub const RETRIED: &str = "retried";
    pub const DEAD: &str = "dead";
    /// Deleted for good: DELETE, a tag cancel, a dead-letter purge or
    /// dead-letter retention.
    pub const DELETED: &str = "deleted";
    /// Moved to a new due time (reschedule, tag reschedule): `d` is it.
    pub const RESCHEDULED: &str = "rescheduled";
    /// A dead job back to ready, attempts from 0.
    pub const REQUEUED: &str = "requeued";
    /// A reservation that never reached its consumer given back to ready,
    /// the attempt uncounted (`a` is the count after).
    pub const RELEASED: &str = "released";
}

/// Fields of a recurring schedule's hash (`{p}:recur:<name>`).
pub mod recur_field {
    /// The definition, JSON.
    pub const DEF: &str = "def";
    /// Changes with every PUT: ticks of an older version are refused.
    pub const VERSION: &str = "v";
    /// The last tick done, Unix ms (at creation: the creation time).
    pub const LAST: &str = "last";
    /// The id of the last tick's job.
    pub const PENDING: &str = "pending";
    /// Present while paused: when it was paused, Unix ms.
    pub const PAUSED: &str = "paused_at";
    /// The last tick that fired (its job fell due), Unix ms; absent until
    /// one has.
    pub const FIRED: &str = "fired";
}

/// Fields of a topic's rate limit (`{p}:rate:<topic>`).
pub mod rate_field {
    pub const PER_S: &str = "r";
    pub const BURST: &str = "b";
    /// Tokens left, in thousandths, when last taken.
    pub const TOKENS: &str = "t";
    /// When tokens were last taken, Unix ms.
    pub const AT: &str = "at";
}

/// Job states as stored (field `s`) and counted (`{p}:count`).
/// The state names (written once, by [`JobState::as_str`](crate::JobState::as_str)).
pub mod state {
    use crate::JobState;
    pub const DELAYED: &str = JobState::Delayed.as_str();
    pub const READY: &str = JobState::Ready.as_str();
    pub const RESERVED: &str = JobState::Reserved.as_str();
    pub const DEAD: &str = JobState::Dead.as_str();
    pub const FINISHED: &str = JobState::Finished.as_str();
}

/// The Lua names of everything above: (name in the scripts, value).
const LUA_NAMES: &[(&str, &str)] = &[
    ("JOB_KEY", kind::JOB),
    ("TRIGGER_KEY", kind::TRIGGER),
    ("READY_KEY", kind::READY),
    ("DEAD_KEY", kind::DEAD),
    ("COUNT_KEY", kind::COUNT),
    ("READY_CHANNEL", kind::READY_CHANNEL),
    ("WAKE_CHANNEL", kind::WAKE_CHANNEL),
    ("TOPIC", field::TOPIC),
    ("BODY", field::BODY),
    ("TTR", field::TTR),
    ("DUE", field::DUE),
    ("STATE", field::STATE),
    ("ATTEMPTS", field::ATTEMPTS),
    ("TOKEN", field::TOKEN),
    ("LEASE", field::LEASE),
    ("RETRY", field::RETRY),
    ("MAX", field::MAX),
    ("ERR", field::ERROR),
    ("HIST", field::HISTORY),
    ("DEAD_AT", field::DEAD_AT),
    ("DELAYED", state::DELAYED),
    ("READY", state::READY),
    ("RESERVED", state::RESERVED),
    ("DEAD", state::DEAD),
    ("RECUR_KEY", kind::RECUR),
    ("RECUR_DUE_KEY", kind::RECUR_DUE),
    ("RECUR_DEF", recur_field::DEF),
    ("RECUR_VERSION", recur_field::VERSION),
    ("RECUR_LAST", recur_field::LAST),
    ("RECUR_PENDING", recur_field::PENDING),
    ("RECUR_PAUSED", recur_field::PAUSED),
    ("RECUR_FIRED", recur_field::FIRED),
    ("RATE_KEY", kind::RATE),
    ("PAUSED_KEY", kind::PAUSED),
    ("RATE_PER_S", rate_field::PER_S),
    ("RATE_BURST", rate_field::BURST),
    ("RATE_TOKENS", rate_field::TOKENS),
    ("RATE_AT", rate_field::AT),
    ("POPS_KEY", kind::POPS),
    ("FINISHED_KEY", kind::FINISHED),
    ("FINISHED_AT", field::FINISHED_AT),
    ("FINISHED", state::FINISHED),
    ("DISPATCHER_KEY", kind::DISPATCHER),
    ("TRACEPARENT", field::TRACEPARENT),
    ("TRACESTATE", field::TRACESTATE),
    ("READY_LEVEL_KEY", kind::READY_LEVEL),
    ("LEVELS_KEY", kind::LEVELS),
    ("PRIORITY", field::PRIORITY),
    ("EVENTS_KEY", kind::EVENTS),
    ("EV_KIND", event::KIND),
    ("EV_ID", event::ID),
    ("EV_TOPIC", event::TOPIC),
    ("EV_ATTEMPT", event::ATTEMPT),
    ("EV_DUE", event::DUE),
    ("EV_ERROR", event::ERROR),
    ("EV_PUSHED", event::PUSHED),
    ("EV_FIRED", event::FIRED),
    ("EV_DELIVERED", event::DELIVERED),
    ("EV_FINISHED", event::FINISHED),
    ("EV_FAILED", event::FAILED),
    ("EV_RETRIED", event::RETRIED),
    ("EV_DEAD", event::DEAD),
    ("EV_DELETED", event::DELETED),
    ("EV_RESCHEDULED", event::RESCHEDULED),
    ("EV_REQUEUED", event::REQUEUED),
    ("EV_RELEASED", event::RELEASED),
    ("DEDUP_KEY", kind::DEDUP),
    ("DEDUP", field::DEDUP),
    ("TAG_KEY", kind::TAG),
    ("TAGS", field::TAGS),
];

/// `local NAME = 'value'` for every name, for the top of the function
/// library. (The schedule key comes in as KEYS[1].)
pub(crate) fn lua_prelude() -> String {
    let mut out = String::from("-- Generated from src/store/layout.rs.\n");
    for (name, value) in LUA_NAMES {
        out.push_str(&format!("local {name} = '{value}'\n"));
    }
    out.push_str(&format!(
        "local MAX_TIME_MS = {}\n",
        crate::job::MAX_DUE_AT_MS
    ));
    out.push_str(&format!("local POPS_KEPT = {POPS_KEPT}\n"));
    out.push_str(&format!(
        "local MAX_PRIORITY = {}\n",
        crate::job::MAX_PRIORITY
    ));
    out.push_str(&format!("local MAX_TAG_PAGE = {MAX_TAG_PAGE}\n"));
    // Arguments per item of the many-per-call scripts, as their Rust
    // sides write them.
    out.push_str(&format!("local PUSH_ARGS = {}\n", super::push::ARGS));
    out.push_str(&format!("local TICK_ARGS = {}\n", super::tick::ARGS));
    out
}

/// Every value the scripts must name through the prelude.
#[cfg(test)]
pub(crate) fn values() -> impl Iterator<Item = &'static str> {
    LUA_NAMES.iter().map(|(_, v)| *v).chain([kind::SCHEDULE])
}

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
    pub fn wake_channel(&self) -> String {
        format!("{}{}", self.base, kind::WAKE_CHANNEL)
    }
}

/// Hash slots in a Redis Cluster.
pub const SLOTS: usize = 16384;

/// What of `key` counts for its slot, as Redis reads hash tags: the part
/// between the first `{` and the next `}` when that is not empty, else all
/// of it.
fn hash_tag(key: &[u8]) -> &[u8] {
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

/// A ready notice on `{p}:ready`: "`n` jobs of `topic` became ready".
/// `notify_ready` in lib.lua writes the same.
pub fn ready_notice(n: u64, topic: &str) -> String {
    format!("{n} {topic}")
}

/// A ready notice's count and topic.
pub fn read_ready_notice(payload: &str) -> Option<(usize, &str)> {
    let (n, topic) = payload.split_once(' ')?;
    Some((n.parse().unwrap_or(1), topic))
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

/// A prefix is 1 to [`MAX_PREFIX_LEN`] characters of `[A-Za-z0-9_.-]`: no braces (it is
/// the hash tag) and nothing that needs quoting in logs or config files.
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
    fn all_but_body_names_every_job_field_but_the_body() {
        let src = include_str!("layout.rs");
        let block = &src[src.find("pub mod field {").unwrap()..];
        let block = &block[..block.find("    pub const ALL_BUT_BODY").unwrap()];
        let mut values: Vec<&str> = block
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub const "))
            .filter_map(|l| l.split('"').nth(1))
            .collect();
        values.retain(|v| *v != field::BODY);
        let mut listed = field::ALL_BUT_BODY.to_vec();
        values.sort_unstable();
        listed.sort_unstable();
        assert_eq!(values, listed);
    }

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
