//! A script call on one partition ([`Store::script`], sent with
//! [`Store::send`]): the partition's keys and prefix, the script's own
//! arguments and the events setting around them, sent through the Redis
//! client, which adds the deadline in Redis time and waits for replicas
//! when the script's calls are acknowledged.

use std::time::Duration;

use redis::{Cmd, ToRedisArgs};
use tokio::time::Instant;

use super::{ScriptDef, Status, Store};
use crate::error::Result;
use crate::redis::{Fields, ScriptCall};

/// One call of a script on one partition: its own arguments are added
/// like a [`Cmd`]'s, then [`Store::send`] sends it.
pub(crate) struct Call {
    script: &'static ScriptDef,
    part: usize,
    args: Cmd,
    until: Instant,
    within: Option<Duration>,
}

impl Call {
    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Call {
        self.args.arg(arg);
        self
    }

    /// A call with no store, to count the arguments a script's Rust side
    /// writes.
    #[cfg(test)]
    pub(crate) fn bare(script: &'static ScriptDef) -> Call {
        Call {
            script,
            part: 0,
            args: Cmd::new(),
            until: Instant::now(),
            within: None,
        }
    }

    /// How many arguments the call has so far.
    #[cfg(test)]
    pub(crate) fn arg_count(&self) -> usize {
        self.args.args_iter().count()
    }

    /// The arguments `write` gives a call of `script`, as text.
    #[cfg(test)]
    pub(crate) fn written(script: &'static ScriptDef, write: &dyn Fn(&mut Call)) -> Vec<String> {
        let mut call = Call::bare(script);
        write(&mut call);
        call.arg_texts()
    }

    /// The call's arguments so far, as text.
    #[cfg(test)]
    pub(crate) fn arg_texts(&self) -> Vec<String> {
        (self.args.args_iter())
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<cursor>".to_owned(),
            })
            .collect()
    }

    /// Redis changes nothing for this call after `until` (default: the
    /// Redis timeout from when the call was made).
    pub fn until(mut self, until: Instant) -> Call {
        self.until = until;
        self
    }

    /// Waits for the reply at most `limit` (default: until `until`).
    pub fn within(mut self, limit: Duration) -> Call {
        self.within = Some(limit);
        self
    }
}

impl Store {
    /// A call of `script` on partition `part`, to send with [`send`](Self::send).
    pub(crate) fn script(&self, script: &'static ScriptDef, part: usize) -> Call {
        Call {
            script,
            part,
            args: Cmd::new(),
            until: Instant::now() + self.redis.timeout(),
            within: None,
        }
    }

    /// Sends a script call: its reply's status and values. The partition's
    /// count is checked first (once); the client then sends it by FCALL or
    /// EVALSHA with its deadline (see [`crate::redis::script`]).
    ///
    /// On a cluster the call also declares the partition's `moving` key,
    /// which never exists: while the partition's slot is being migrated,
    /// Redis answers TRYAGAIN (or ASK, then TRYAGAIN) instead of running
    /// the script on half of its keys, and the client retries.
    pub(crate) async fn send(&self, call: Call) -> Result<(Status, Fields)> {
        let keys = &self.parts()[call.part];
        let mut names = vec![keys.schedule()];
        if self.redis.cluster.is_some() {
            names.push(keys.moving());
        }
        let mut head = Cmd::new();
        head.arg(keys.base());
        let mut tail = Cmd::new();
        tail.arg(self.events);
        let call = ScriptCall {
            function: self.redis.function(call.script.name),
            part: call.part,
            keys: names,
            args: &[&head, &call.args],
            tail: &tail,
            until: call.until,
            within: call.within,
        };
        self.redis.send(&call, self.check_partitions()).await
    }
}
