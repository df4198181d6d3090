//! Acknowledged writes: with `replica_acks` N, a write is answered only
//! once N replicas have it (Redis WAIT), so a failover cannot lose it.
//!
//! WAIT blocks the connection it is sent on until the replicas answer, so
//! acknowledged writes have a connection of their own, and they are batched
//! per partition (group commit): the writes that arrive while one batch is
//! waiting go together in the next pipeline, followed by one WAIT. One slow
//! replica slows that partition's acknowledged writes, nothing else.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use redis::{Cmd, RedisResult, Value};
use tokio::sync::oneshot;

use super::conn::Conn;

/// Most writes in one batch.
const MAX_BATCH: usize = 256;

type Reply = RedisResult<(Vec<Value>, usize)>;

struct Pending {
    cmds: Vec<Cmd>,
    /// Where this write goes (on a cluster, the partition's master as last
    /// seen); a batch goes where its first write says.
    conn: Option<Conn>,
    reply: oneshot::Sender<Reply>,
}

#[derive(Default)]
struct Lane {
    queue: Mutex<Vec<Pending>>,
    /// A task is sending this lane's batches.
    busy: AtomicBool,
}

pub(crate) struct Acks {
    /// The connection and a lane per partition; both replaced when the
    /// master moves (Sentinel), so that new writes do not queue behind a
    /// batch still waiting on the old master.
    route: std::sync::RwLock<(Option<Conn>, Vec<Arc<Lane>>)>,
}

impl Acks {
    /// `conn`: the connection for acknowledged writes (None: no acks).
    pub fn new(conn: Option<Conn>, partitions: usize) -> Acks {
        Acks {
            route: std::sync::RwLock::new((conn, lanes(partitions))),
        }
    }

    /// Sends later batches to another master.
    pub fn relink(&self, conn: Conn) {
        let mut route = self.route.write().unwrap();
        let partitions = route.1.len();
        *route = (Some(conn), lanes(partitions));
    }

    /// Sends `cmds` (all of partition `part`) in the partition's next
    /// batch, with a WAIT for `wanted` replicas of at most `wait_ms`. The
    /// reply: each command's own value (errors as `Value::ServerError`),
    /// and how many replicas acknowledged the batch.
    /// A batch that gets no reply within `limit` is given up (its writes
    /// carry deadlines: if they reach Redis later they change nothing), so
    /// a master that went silent holds up the lane no longer than that.
    pub async fn submit(
        &self,
        part: usize,
        to: Option<Conn>,
        cmds: Vec<Cmd>,
        wanted: usize,
        wait_ms: u64,
        limit: std::time::Duration,
    ) -> Reply {
        let (conn, lane) = {
            let route = self.route.read().unwrap();
            (route.0.clone().expect("acks are on"), route.1[part].clone())
        };
        let (tx, rx) = oneshot::channel();
        lane.queue.lock().unwrap().push(Pending {
            cmds,
            conn: to,
            reply: tx,
        });
        if !lane.busy.swap(true, Ordering::AcqRel) {
            // The sender runs in a task of its own, so a caller that goes
            // away does not strand the writes queued behind its own.
            tokio::spawn(send_batches(lane, conn, wanted, wait_ms, limit));
        }
        rx.await.unwrap_or_else(|_| {
            Err(redis::RedisError::from(std::io::Error::other(
                "the acknowledged-write batch was dropped",
            )))
        })
    }
}

fn lanes(partitions: usize) -> Vec<Arc<Lane>> {
    (0..partitions).map(|_| Arc::default()).collect()
}

async fn send_batches(
    lane: Arc<Lane>,
    lane_conn: Conn,
    wanted: usize,
    wait_ms: u64,
    limit: std::time::Duration,
) {
    loop {
        let batch: Vec<Pending> = {
            let mut q = lane.queue.lock().unwrap();
            let n = q.len().min(MAX_BATCH);
            q.drain(..n).collect()
        };
        if batch.is_empty() {
            lane.busy.store(false, Ordering::Release);
            // A write queued between the drain and the store above saw the
            // lane busy and left the sending to this task.
            if lane.queue.lock().unwrap().is_empty() || lane.busy.swap(true, Ordering::AcqRel) {
                return;
            }
            continue;
        }
        let mut conn = batch[0].conn.clone().unwrap_or_else(|| lane_conn.clone());
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for p in &batch {
            for c in &p.cmds {
                pipe.add_command(c.clone());
            }
        }
        pipe.cmd("WAIT").arg(wanted).arg(wait_ms);
        let result: RedisResult<Vec<Value>> =
            match tokio::time::timeout(limit, pipe.query_async(&mut conn)).await {
                Ok(r) => r,
                Err(_) => Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no reply to the acknowledged-write batch",
                ))),
            };
        match result {
            Ok(mut values) => {
                let acked = match values.pop() {
                    Some(Value::Int(n)) => n.max(0) as usize,
                    _ => 0,
                };
                let mut values = values.into_iter();
                for p in batch {
                    let mine: Vec<Value> = values.by_ref().take(p.cmds.len()).collect();
                    let _ = p.reply.send(Ok((mine, acked)));
                }
            }
            Err(e) => {
                for p in batch {
                    let _ = p.reply.send(Err(e.clone()));
                }
            }
        }
    }
}
