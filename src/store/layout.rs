//! Where delayq keeps things in Redis: key kinds, job-hash fields, states and
//! channels, each named once, here. The scripts get the same names as a Lua
//! prelude made from these tables ([`lua_prelude`]), and a test checks that
//! no script writes one of the values as a literal.
//!
//! Why this file is long: the table of every key below is the one place a
//! reader finds what delayq keeps in Redis, beside the names it documents.
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
//! | `{p}:schedule`           | zset   | id -> lease end (ms); below layout 3 also id  |
//! |                          |        | -> due time of each delayed job               |
//! | `{p}:armed`              | string | the trigger keys' watermark (lib/arming.lua)  |
//! | `{p}:ready:<topic>`      | list   | ids ready to pop, oldest at the right         |
//! |                          |        | (priority 0, the default)                     |
//! | `{p}:readyp:<n>:<topic>` | list   | the same for priority n (1 to 9): the number  |
//! |                          |        | before the topic, so no topic names another's |
//! | `{p}:levels:<topic>`     | zset   | priority n -> n of each non-empty readyp list |
//! | `{p}:dead:<topic>`       | zset   | dead job ids -> time of death (ms)            |
//! | `{p}:count`              | hash   | `<state>:<topic>` -> number of jobs           |
//! | channel `{p}:ready`      | pubsub | `<count> <topic>` when jobs become ready      |
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
//! | `{prefix}:tps:<second>`  | hash   | throughput of one second (Unix s): `<kind>`   |
//! |                          |        | (all topics) and `<kind>:<topic>` -> count;   |
//! |                          |        | TTL a little over 5 minutes                   |
//! | `{prefix}:tpm:<minute>`  | hash   | the same per minute (Unix s / 60); TTL a      |
//! |                          |        | little over an hour                           |
//! | `{prefix}:latm:<minute>` | hash   | fire lateness of one minute: `<bucket>` (all  |
//! |                          |        | topics) and `<bucket>:<topic>` -> count; TTL  |
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
//! | `{p}:dedup:<key>`        | string | `T<n> <id>`, `D<n> <id>` or `0 <id>`: the job |
//! |                          |        | a dedup key names; n is its due time          |
//! |                          |        | (throttle), the series' first push (debounce) |
//! |                          |        | or 0 (simple); PX the window                  |
//! |                          |        | (simple: none, deleted when the job ends)     |
//! | `{p}:tag:<tag>`          | zset   | ids of the partition's jobs with the tag -> 0 |
//! |                          |        | (paged by id, ZRANGEBYLEX); entry goes with   |
//! |                          |        | the job                                       |
//! | `{p}:canary:<instance>`  | string | "1", PX 50 ms: the expired-events canary      |
//! |                          |        | (dispatch::canary), gone once it expired      |
//! | `{p}:log:<id>`           | list   | a job's log, `<ms> TAB <line>`, oldest first, |
//! |                          |        | the last [`LOG_LINES_KEPT`]; goes with the    |
//! |                          |        | job, expires with its kept record             |
//! | `{p}:s:<topic>`          | zset   | the topic's delayed jobs only: id -> due time |
//! |                          |        | (ms), beside the schedule; a topic's listing  |
//! |                          |        | and next due time read it                     |
//! | `{p}:seq`                | string | the last push order given to a job that ties  |
//! |                          |        | (field `i`; see lib/order.lua, H.tie_seq)     |
//! | `{p}:heads`              | zset   | topic -> the due time (ms) of its topic       |
//! |                          |        | schedule's head, the way to due topics in     |
//! |                          |        | O(log T); `heads:again`: see H.mark_passed    |
//! | `{p}:indexed`            | hash   | the topic schedules' backfill (index.lua):    |
//! |                          |        | `phase`, `after`, `topic`, `rank` (where the  |
//! |                          |        | pass under way is), `done` (a pass ended),    |
//! |                          |        | `headed` (a pass read every topic's head),    |
//! |                          |        | `split`, `out` (layout 3's delayed jobs out   |
//! |                          |        | of the shared schedule)                       |
//! | `{p}:layout`             | string | the layout writers write: absent = 1 (bodies  |
//! |                          |        | whole), "2" (long bodies in pieces, see       |
//! |                          |        | [`PIECE_BYTES`]), "3" (besides, delayed jobs  |
//! |                          |        | in their topic schedules only); " held" after |
//! |                          |        | it: the operator's, the upkeep leaves it alone|
//! | `{p}:gready:`, `grp:`,   | ...    | a topic's groups: their ready jobs, settings, |
//! | `gturns:`, `groups:`,    |        | rotation, listing and rate waits (the kinds   |
//! | `gwait:`                 |        | `GROUP_*` in [`kind`], a group's fields in    |
//! |                          |        | `layout/group.rs`; docs/DESIGN.md's key table |
//! |                          |        | has a row each)                               |

use crate::defaults::{
    LOG_LINES_KEPT, MAX_LOG_LINE_BYTES, MAX_PROGRESS_BYTES, MAX_RESULT_BYTES, MAX_TAG_PAGE,
};

mod batch;
mod body;
mod group;
mod keys;
mod order;

pub use batch::{batch_field, batch_kind};
pub use body::{LAYOUT_READ, PIECE_BYTES};
pub(crate) use keys::hash_tag;
pub use keys::{partition_of, slot, validate_prefix, Keys};

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
    pub const CANARY: &str = "canary:";
    /// The trigger keys' watermark (see `H.arm_ahead` in lib/arming.lua).
    pub const ARMED: &str = "armed";
    /// A job's log lines (`log:<id>`).
    pub const LOG: &str = "log:";
    /// A topic's own schedule of delayed jobs (`s:<topic>`).
    pub const TOPIC_SCHEDULE: &str = "s:";
    /// The topic schedules' backfill (see `index.lua`).
    pub const INDEXED: &str = "indexed";
    /// Each topic's earliest delayed due time (`H.add`); `heads:again`: `H.mark_passed`.
    pub const HEADS: &str = "heads";
    /// The last push order given to a job that ties (`H.tie_seq`).
    pub const SEQ: &str = "seq";
    /// The layout writers write (see [`super::LAYOUT_READ`]).
    pub const LAYOUT: &str = "layout";
    /// A group's line of ready jobs (a zset, `gready:<topic>\n<group>`: no
    /// topic holds a control character, so the pairs stay apart).
    pub const GROUP_READY: &str = "gready:";
    /// A group's hash (`grp:<topic>\n<group>`): settings, slots in use.
    pub const GROUP: &str = "grp:";
    /// A topic's rotation of groups that may hand out a job (a list).
    pub const GROUP_TURNS: &str = "gturns:";
    /// A topic's index of its groups (a zset, group -> 0).
    pub const GROUPS: &str = "groups:";
    /// A topic's groups waiting for a rate-limit token (zset, group -> when).
    pub const GROUP_WAIT: &str = "gwait:";
}

/// How many of the latest pops `{p}:pops` remembers. A pop whose reply was
/// lost (the connection broke, or a failover came between the script and
/// its reply) is undone only while it is among them: at 10k pops a second
/// that is the last 0.4 s, at 100 a second the last 40 s; beyond that its
/// jobs come back after their ttr, the attempt counted, as before. A few
/// hundred kB per partition at most. (The list is trimmed to this once it
/// holds 64 more, so it keeps up to 64 more.)
pub const POPS_KEPT: usize = 4096;

/// Job hash fields. One letter each: millions of pending jobs each carry
/// these names.
pub mod field {
    pub const TOPIC: &str = "q";
    /// The body, whole (every body in layout 1; in layout 2 those of at
    /// most [`super::PIECE_BYTES`] or over [`super::PIECED_MAX_BYTES`]).
    pub const BODY: &str = "b";
    /// A pieced body's length in bytes; its pieces are in the fields "1",
    /// "2", ... ([`super::PIECE_BYTES`] each, the last what is left).
    pub const BODY_SIZE: &str = "z";
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
    /// When a job was cancelled while it ran, Unix ms: what is left of it
    /// (state finished, its lease token, no body) answers its holder's
    /// touch, nack and finish "cancelled" until its lease would have ended.
    pub const CANCELLED: &str = "c";
    /// The progress its holder last reported (JSON); stays across
    /// attempts and in a finished job's record.
    pub const PROGRESS: &str = "n";
    /// Groups: the job's group key; absent without a group.
    pub const GROUP: &str = "o";
    /// A finished job's result (JSON), in its record; absent without one.
    pub const RESULT: &str = "w";
    /// Its push order among its topic's jobs due in the same ms; absent on
    /// a job alone at its due time when scheduled (it goes first).
    pub const SEQ: &str = "i";
    /// The batch the job belongs to; absent on other jobs.
    pub const BATCH: &str = "y";
    /// A flow's parent (see [`crate::flow`]): its children's outcomes and
    /// results (a JSON object by child id), written when its children are
    /// done; absent on other jobs. Read by a pop and a job's own read, as
    /// a result is, never by a listing.
    pub const CHILDREN: &str = "j";

    /// Every field but BODY and RESULT: what a listing reads first (a body
    /// is read only if it fits the page, see `store::read`; a result, up to
    /// 64 KiB, only by a job's own read).
    pub const ALL_BUT_BODY: &[&str] = &[
        TOPIC,
        BODY_SIZE,
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
        CANCELLED,
        PROGRESS,
        GROUP,
        SEQ,
        BATCH,
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
    /// Cancelled (whatever its state; a running job's holder hears it at
    /// its next touch, nack or finish).
    pub const CANCELLED: &str = "cancelled";
    /// A running job's holder reported progress: `e` is the value (JSON).
    pub const PROGRESS: &str = "progress";
    /// Batches: a batch (`i` its id, `q` its callback's topic) was closed,
    /// fired its callback (`e` the report, JSON), or was cancelled. In its
    /// home partition's stream.
    pub const BATCH_CLOSED: &str = "batch_closed";
    pub const BATCH_FIRED: &str = "batch_fired";
    pub const BATCH_CANCELLED: &str = "batch_cancelled";
    /// Flows: a parent was taken in and waits for its children (`i` its
    /// id, `q` its topic). When they are done it is pushed (pushed, fired)
    /// or, a child having died under `fail`, it dies (pushed, dead).
    pub const WAITING: &str = "waiting";
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
    ("EV_CANCELLED", event::CANCELLED),
    ("CANCELLED_AT", field::CANCELLED),
    ("DEDUP_KEY", kind::DEDUP),
    ("DEDUP", field::DEDUP),
    ("TAG_KEY", kind::TAG),
    ("TAGS", field::TAGS),
    ("ARMED_KEY", kind::ARMED),
    ("LOG_KEY", kind::LOG),
    ("PROGRESS", field::PROGRESS),
    ("EV_PROGRESS", event::PROGRESS),
    ("TOPIC_SCHEDULE_KEY", kind::TOPIC_SCHEDULE),
    ("INDEXED_KEY", kind::INDEXED),
    ("HEADS_KEY", kind::HEADS),
    ("GROUP", field::GROUP),
    ("RESULT", field::RESULT),
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
    out.push_str(&body::lua_table());
    out.push_str(&group::lua_table());
    out.push_str(&batch::lua_table());
    out.push_str(&order::lua_table());
    out.push_str(&format!("local LOG_LINES_KEPT = {LOG_LINES_KEPT}\n"));
    out.push_str(&format!(
        "local MAX_PROGRESS_BYTES = {MAX_PROGRESS_BYTES}\n"
    ));
    out.push_str(&format!(
        "local MAX_LOG_LINE_BYTES = {MAX_LOG_LINE_BYTES}\n"
    ));
    out.push_str(&format!("local MAX_RESULT_BYTES = {MAX_RESULT_BYTES}\n"));
    out.push_str(&format!(
        "local TERM_FLOOR_MS = {}\n",
        crate::defaults::LEADER_TERM_MIN.as_millis()
    ));
    out
}

/// Every value the scripts must name through the prelude.
#[cfg(test)]
pub(crate) fn values() -> impl Iterator<Item = &'static str> {
    (LUA_NAMES
        .iter()
        .chain(group::LUA_NAMES)
        .chain(batch::LUA_NAMES)
        .chain(order::LUA_NAMES))
    .map(|(_, v)| *v)
    .chain([kind::SCHEDULE, kind::LAYOUT, field::BODY_SIZE])
}

/// A ready notice on `{p}:ready`: "`n` jobs of `topic` became ready".
/// `LISTS.notify` in lib/ready.lua writes the same.
pub fn ready_notice(n: u64, topic: &str) -> String {
    format!("{n} {topic}")
}

/// A ready notice's count and topic.
pub fn read_ready_notice(payload: &str) -> Option<(usize, &str)> {
    let (n, topic) = payload.split_once(' ')?;
    Some((n.parse().unwrap_or(1), topic))
}

#[cfg(test)]
mod tests;
