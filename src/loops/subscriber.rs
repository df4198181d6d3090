//! The subscriber: pub/sub connections that listen to
//!
//! - `__keyevent@*__:expired`: a trigger key expired, so its job is
//!   (probably) due; dispatch it straight away. This is the low-cost path.
//! - `{p}:ready`: some instance made jobs ready; wake that many waiters.
//! - `{p}:wake`: a new earliest job; re-arm that partition's sweep (and a
//!   standby asks about the term, which may have been shortened or given
//!   up). With [`RECUR_NOTICE`]: a schedule was put; the recurring loop,
//!   idle while none is due, looks.
//!
//! Expired events go only to the instance that dispatches (the holder of a
//! partition's term, see [`super::leader`]): on a single Redis it opens a
//! connection of its own for them while it holds a term and closes it when
//! it holds none, so Redis sends each event to one instance, not to every
//! one. Standbys hear the ready and wake notices only. On a cluster, keyspace
//! events stay on the node whose key expired, so a dispatching process keeps
//! one connection per master for them, and follows the masters as they
//! change (failover, new masters); the ready and wake notices are plain
//! PUBLISHes, which a cluster passes to every node, so one connection to any
//! master hears them all.
//!
//! Pub/sub is fire-and-forget: whatever was published while a connection
//! was down is gone. So every (re)connect is followed by a catch-up: the
//! sweeps run at once and every waiting pop looks again. Reconnects retry
//! for ever, at most a second apart; correctness never rests on events.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use tracing::{debug, info, warn};

/// The wake notice recur_put.lua publishes when a schedule is put or
/// resumed (other wake notices carry a due time in ms).
pub const RECUR_NOTICE: &str = "recur";

use super::{DispatchPath, Handles};
use crate::backoff::Backoff;
use crate::shutdown::Shutdown;

const EXPIRED_PATTERN: &str = "__keyevent@*__:expired";

/// The notices connection (and, on a single Redis, the events), for the
/// life of the queue.
pub(crate) async fn run(h: Handles) {
    let mut backoff = Backoff::default();
    loop {
        let ended = tokio::select! {
            r = session(&h) => r,
            _ = h.stop.wait() => return,
        };
        let was_up = h.subscriber_up.swap(false, Ordering::Relaxed);
        // Its node may have gone: the health watch looks at the topology.
        h.store.redis.health.suspect();
        if let Err(e) = &ended {
            h.store.redis.note_connect_error(Some(e.clone()));
        }
        if was_up {
            warn!(reason = %reason(&ended), "subscriber disconnected; reconnecting");
            backoff.reset();
            // Notices go unheard until it is back: sleeping sweeps and
            // standbys shorten their waits (see subscriber_up).
            h.wake.all();
            h.leader.ask_all();
        } else {
            debug!(reason = %reason(&ended), "subscriber cannot connect yet");
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.wait()) => {}
            _ = h.stop.wait() => return,
        }
    }
}

/// Why a session ended, for the log.
fn reason(ended: &Result<(), String>) -> String {
    match ended {
        Ok(()) => "connection closed".into(),
        Err(e) => e.clone(),
    }
}

/// Most ids of expired trigger keys one dispatch call is given: a call
/// reads each id's job before it moves any, and stops moving after about a
/// millisecond (dispatch.lua): a slow machine moves 40 to 60 jobs in it, so
/// ids beyond that would be read for nothing.
const EVENT_IDS: usize = 64;

/// Partition of each expired trigger key, by the partitions' prefixes.
struct Triggers(Vec<String>);

impl Triggers {
    fn new(h: &Handles) -> Triggers {
        Triggers(h.store.parts().iter().map(|p| p.trigger_prefix()).collect())
    }

    /// Adds the id of `key` to its partition's list, if it is a trigger.
    fn sort(&self, key: &str, due: &mut HashMap<usize, Vec<String>>) {
        for (part, prefix) in self.0.iter().enumerate() {
            if let Some(id) = key.strip_prefix(prefix.as_str()) {
                due.entry(part).or_default().push(id.to_owned());
                return;
            }
        }
    }
}

/// Ids of expired trigger keys heard and not yet given to a dispatch
/// call, per partition. One call per partition at a time: a burst's events
/// come faster than calls end, and calls sent side by side (a task per
/// chunk of messages, as before) each read the head of the same topic for
/// its ties and queued ahead of the sweep's and the pops' calls. At ten
/// million pending, a burst of 100,000 ran hundreds of event calls for
/// each of the sweep's, every one out of time after moving about a fifth
/// of its ids.
pub(crate) struct Expired(Vec<std::sync::Mutex<Heard>>);

#[derive(Default)]
struct Heard {
    ids: Vec<String>,
    /// A task is calling for this partition: it takes what is heard meanwhile.
    calling: bool,
}

impl Expired {
    pub fn new(partitions: usize) -> Expired {
        Expired((0..partitions).map(|_| Default::default()).collect())
    }

    /// Adds `ids`; true if no task calls for `part` now (the caller starts one).
    fn add(&self, part: usize, ids: Vec<String>) -> bool {
        let mut heard = self.0[part].lock().expect("not poisoned");
        heard.ids.extend(ids);
        !std::mem::replace(&mut heard.calling, true)
    }

    /// The next call's ids, or None (the task ends) when there are none or
    /// `drop_all`: then every id heard goes, left to the sweep.
    fn next(&self, part: usize, drop_all: bool) -> Option<Vec<String>> {
        let mut heard = self.0[part].lock().expect("not poisoned");
        if heard.ids.is_empty() || drop_all {
            heard.ids.clear();
            heard.calling = false;
            return None;
        }
        let n = heard.ids.len().min(EVENT_IDS);
        Some(heard.ids.drain(..n).collect())
    }
}

/// Dispatches what expired events named, in a task of its own per
/// partition (reading events must not wait on it), one call at a time.
/// Only partitions whose term this instance holds: the others are their
/// holders' business.
fn dispatch_due(h: &Handles, due: HashMap<usize, Vec<String>>) {
    for (part, ids) in due {
        if h.leader.holds(part) && h.expired.add(part, ids) {
            tokio::spawn(call_expired(h.clone(), part));
        }
    }
}

/// Calls dispatch for partition `part`'s expired ids, EVENT_IDS a call,
/// until none are left. Events only bring a job's move forward: its
/// schedule entry stays until it moves, and the sweep moves every due
/// entry (it sleeps until the earliest). So the ids heard while the sweep
/// catches up go to it unread (it reads them once, in due order; a call for
/// them now would read them again), and a call that fails drops the rest.
async fn call_expired(h: Handles, part: usize) {
    let mut failed = false;
    loop {
        let leave = failed || h.wake.catching_up(part) || !h.leader.holds(part);
        let Some(ids) = h.expired.next(part, leave) else {
            return;
        };
        match h.dispatch(part, &ids, DispatchPath::Event, h.batch).await {
            // The call ran out of time with jobs due whose trigger keys
            // are gone: the sweep moves them now, not at its next look.
            Ok(d) if d.next_due_ms.is_some() => h.wake.one(part),
            Ok(_) => {}
            // The sweep will fire these; nothing is lost.
            Err(e) => {
                debug!(error = %e, "event dispatch failed");
                failed = true;
            }
        }
    }
}

async fn pubsub(h: &Handles, client: redis::Client) -> Result<redis::aio::PubSub, String> {
    tokio::time::timeout(h.store.redis.timeout(), client.get_async_pubsub())
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| e.to_string())
}

/// One connection's life: subscribe, catch up, then serve messages until the
/// connection ends.
async fn session(h: &Handles) -> Result<(), String> {
    let on_cluster = h.store.redis.cluster.is_some();
    let mut listened_to = None;
    let client = if on_cluster {
        // Any master hears every notice; the first one listed will do.
        let masters = h.store.redis.masters().await.map_err(|e| e.to_string())?;
        let (host, port) = &masters[0];
        listened_to = Some(masters[0].clone());
        h.store
            .redis
            .node_client(host, *port)
            .map_err(|e| e.to_string())?
    } else {
        h.store.redis.client()
    };
    let mut pubsub = pubsub(h, client).await?;
    let ready: HashMap<String, usize> = (h.store.parts().iter().enumerate())
        .map(|(i, p)| (p.ready_channel(), i))
        .collect();
    let wake: HashMap<String, usize> = (h.store.parts().iter().enumerate())
        .map(|(i, p)| (p.wake_channel(), i))
        .collect();
    pubsub
        .subscribe(ready.keys().collect::<Vec<_>>())
        .await
        .map_err(|e| e.to_string())?;
    pubsub
        .subscribe(wake.keys().collect::<Vec<_>>())
        .await
        .map_err(|e| e.to_string())?;

    h.subscriber_up.store(true, Ordering::Relaxed);
    h.store.redis.note_connect_error(None);
    h.metrics.subscriber_connects.inc([], 1);
    info!("subscriber connected");
    // Wake notices may have gone by unheard: sweeps look, standbys ask
    // whether a term was shortened or given up, and the recurring loop
    // (asleep while no schedule is due) looks for a schedule put meanwhile.
    h.wake.all();
    h.leader.ask_all();
    h.recurring_changed.notify_one();
    h.waiters.wake_all();

    // The topology as the health watch reads it (the one reader).
    let mut topology = h.store.redis.health.topology();
    let first_master =
        |t: &crate::redis::health::Owners| crate::redis::cluster::masters_in(t).into_iter().next();
    topology.borrow_and_update();
    let mut messages = pubsub.into_on_message().ready_chunks(512);
    loop {
        let batch = tokio::select! {
            batch = messages.next() => match batch {
                Some(batch) => batch,
                None => break,
            },
            // The master moved (Sentinel): listen to the new one.
            _ = h.store.redis.relinked.notified() => {
                info!("redis master moved; the subscriber follows it");
                break;
            }
            // On a cluster: the master listened to may have become a
            // replica, which still hears notices, but may be the next to go.
            r = topology.changed(), if on_cluster => {
                if r.is_err() {
                    break;
                }
                let now = first_master(&topology.borrow_and_update());
                if now.is_some() && now != listened_to {
                    info!("cluster masters changed; the subscriber reconnects");
                    break;
                }
                continue;
            }
        };
        for msg in batch {
            let Ok(payload) = msg.get_payload::<String>() else {
                continue;
            };
            let channel = msg.get_channel_name();
            if let Some(&part) = wake.get(channel) {
                if payload == RECUR_NOTICE {
                    h.recurring_changed.notify_one();
                    continue;
                }
                if payload == crate::store::layout::batch_kind::NOTES_NOTICE {
                    h.notes.notify_one();
                    continue;
                }
                h.wake.one(part);
                // A holder's sweep looks and shortens the term if need
                // be; a standby asks when the term ends now.
                if !h.leader.holds(part) {
                    h.leader.ask(part);
                }
            } else if let Some(&part) = ready.get(channel) {
                if let Some((count, topic)) = crate::store::layout::read_ready_notice(&payload) {
                    h.store.note_ready(topic, part);
                    h.waiters.wake(topic, count);
                }
            }
        }
    }
    Ok(())
}

/// On a single Redis, in a dispatching process: the expired-events
/// connection, open while this instance holds a partition's term.
pub(crate) async fn events(h: Handles) {
    let mut any = h.leader.any();
    let client = h.store.redis.client();
    let mut backoff = Backoff::default();
    let mut refused = Refused::default();
    loop {
        // Wait for a term.
        tokio::select! {
            r = any.wait_for(|held| *held) => if r.is_err() { return },
            _ = h.stop.wait() => return,
        }
        let ended = tokio::select! {
            r = listen(&h, client.clone()) => r,
            // No term left: the connection closes with the session.
            _ = any.wait_for(|held| !*held) => {
                debug!("no partition led here: expired events no longer heard here");
                backoff.reset();
                continue;
            }
            _ = h.stop.wait() => return,
        };
        debug!(reason = %reason(&ended), "expired events connection ended");
        tokio::select! {
            _ = tokio::time::sleep(refused.wait(&h, &mut backoff)) => {}
            _ = h.stop.wait() => return,
        }
    }
}

/// The wait before the expired events' subscription is tried again: a
/// connection's [`Backoff`], and while the ACL refuses the subscription
/// (which only an operator changes) from [`Refused::FIRST`] doubling to
/// [`Refused::MAX`], so the ACL LOG is not filled with it.
#[derive(Default)]
struct Refused(Option<std::time::Duration>);

impl Refused {
    const FIRST: std::time::Duration = std::time::Duration::from_secs(2);
    const MAX: std::time::Duration = std::time::Duration::from_secs(60);

    fn wait(&mut self, h: &Handles, backoff: &mut Backoff) -> std::time::Duration {
        if h.canary.refused().is_none() {
            self.0 = None;
            return backoff.wait();
        }
        let now = self.0.unwrap_or(Self::FIRST);
        self.0 = Some((now * 2).min(Self::MAX));
        now
    }
}

/// Subscribes to expired events on one connection and dispatches what they
/// name, until the connection ends.
async fn listen(h: &Handles, client: redis::Client) -> Result<(), String> {
    let mut pubsub = pubsub(h, client).await?;
    if let Err(e) = pubsub.psubscribe(EXPIRED_PATTERN).await {
        if crate::redis::acl::is_noperm(&e) {
            let why = format!(
                "the ACL refuses delayq's user the expired events' channel ({e}): \
                 add &{EXPIRED_PATTERN} to its ACL (docs/acl.md: Least privilege)"
            );
            if h.canary.refuse(why.clone()) {
                warn!(
                    "{why}; the expired-events subscription is tried again, less and less often; \
                     only the sweep fires jobs meanwhile (still on time)"
                );
            }
        }
        return Err(e.to_string());
    }
    let _listening = super::canary::Listening::new(&h.canary);
    // Jobs may have fallen due while no connection heard them.
    h.wake.all();
    let triggers = Triggers::new(h);
    let mut messages = pubsub.into_on_message().ready_chunks(512);
    while let Some(batch) = messages.next().await {
        let mut due = HashMap::new();
        for msg in batch {
            if let Ok(key) = msg.get_payload::<String>() {
                if h.canary.heard(&key) {
                    continue;
                }
                triggers.sort(&key, &mut due);
            }
        }
        dispatch_due(h, due);
    }
    Ok(())
}

/// On a cluster, in a dispatching process: one expired-events connection
/// per master, started and stopped as masters come and go.
/// The masters are those of the health watch's topology reads.
pub(crate) async fn follow_masters(h: Handles) {
    let mut running: HashMap<(String, u16), Shutdown> = HashMap::new();
    let mut topology = h.store.redis.health.topology();
    loop {
        let masters = crate::redis::cluster::masters_in(&topology.borrow_and_update());
        if masters.is_empty() {
            // Not read yet (or no slot assigned): wait for a read.
            tokio::select! {
                r = topology.changed() => if r.is_err() { return },
                _ = h.stop.wait() => return,
            }
            continue;
        }
        let before = running.len();
        running.retain(|addr, stop| {
            let keep = masters.contains(addr);
            if !keep {
                info!(master = %format!("{}:{}", addr.0, addr.1), "no longer a master: its events connection stops");
                stop.trigger();
            }
            keep
        });
        let mut changed = running.len() != before;
        for addr in masters {
            if running.contains_key(&addr) {
                continue;
            }
            let stop = h.stop.child();
            running.insert(addr.clone(), stop.clone());
            tokio::spawn(events_of(h.clone(), addr, stop));
            changed = true;
        }
        if changed {
            // Jobs may have fallen due while no connection heard them.
            h.wake.all();
        }
        tokio::select! {
            r = topology.changed() => if r.is_err() { return },
            _ = h.stop.wait() => return,
        }
    }
}

/// Expired events of one master, reconnecting until `stop`.
async fn events_of(h: Handles, (host, port): (String, u16), stop: Shutdown) {
    let mut backoff = Backoff::default();
    let mut refused = Refused::default();
    loop {
        let session = async {
            let client = h
                .store
                .redis
                .node_client(&host, port)
                .map_err(|e| e.to_string())?;
            debug!(master = %format!("{host}:{port}"), "listening to expired events");
            listen(&h, client).await
        };
        let ended = tokio::select! {
            r = session => r,
            _ = stop.wait() => return,
        };
        debug!(master = %format!("{host}:{port}"), reason = %reason(&ended), "expired events connection ended");
        // The master may have gone: the health watch looks at once.
        h.store.redis.health.suspect();
        tokio::select! {
            _ = tokio::time::sleep(refused.wait(&h, &mut backoff)) => {}
            _ = stop.wait() => return,
        }
    }
}
