//! The commands a queue sends to Redis (its scripts' own included: a
//! script runs with its caller's permissions), as probes of its user's
//! ACL: `serve` asks them at start and `delayq doctor` reports them
//! (docs/acl.md's least-privilege line grants them). Asking is the Redis
//! layer's ([`permissions`](crate::acl::permissions), which also has the probes
//! of the script path, FCALL or EVALSHA, and of CLUSTER SLOTS); which
//! commands a queue needs is the store's knowledge, kept here beside its
//! scripts. TIME, INFO and WAIT are sent by the Redis layer on the queue's
//! behalf (the clock, health, replica acks) and listed here too: this is
//! the queue's whole list, in the order doctor reports it.

use crate::redis::acl::{Need::*, Probe};

/// The commands delayq sends besides the script path's.
pub const PROBES: &[Probe] = &[
    Probe::new("set", "@string", "+@string", Needed),
    Probe::new("hset", "@hash", "+@hash", Needed),
    Probe::new("zadd", "@sortedset", "+@sortedset", Needed),
    Probe::new("lpush", "@list", "+@list", Needed),
    Probe::new("sadd", "@set", "+@set", Needed),
    Probe::new("xadd", "@stream", "+@stream", Needed),
    Probe::new("del", "@keyspace", "+del", Needed),
    Probe::new("pexpire", "@keyspace", "+pexpire", Needed),
    // A new earliest job shortens an idle leader's term to its due time.
    Probe::new("pexpireat", "@keyspace", "+pexpireat", Needed),
    Probe::new("scan", "@keyspace", "+scan", Rewrite),
    Probe::new("publish", "@pubsub", "+@pubsub", Needed),
    Probe::new("psubscribe", "@pubsub", "+@pubsub", Events),
    Probe::new("time", "@fast", "+time", Needed),
    Probe::new("info", "@dangerous", "+info", Needed),
    Probe::new("wait", "@connection", "+wait", Optional),
    Probe::new("config|get", "@admin", "+config|get", Optional),
];

/// Commands the scripts run that `delayq doctor` does not ask about.
pub const SCRIPT_READS: &[Probe] = &[
    Probe::new("exists", "@keyspace", "+exists", Needed),
    Probe::new("pttl", "@keyspace", "+pttl", Needed),
];
