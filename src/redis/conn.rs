//! One connection type for the store's calls, whichever Redis it talks to:
//! a single server (reconnecting for ever) or a cluster (routing each call
//! to the master of its first key's slot, following MOVED and ASK, and
//! retrying TRYAGAIN).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, Value};

#[derive(Clone)]
pub(crate) enum Conn {
    Single(Manager),
    Cluster(ClusterConnection),
    /// One node of a cluster, for calls that must not share the fate of
    /// the others: the cluster connection holds every call while it
    /// recovers from one node's failure.
    Node(MultiplexedConnection),
}

/// A connection being made: retried for ever, shared by every call that
/// waits for it.
type Connecting = Shared<BoxFuture<'static, MultiplexedConnection>>;

/// A single server's shared connection, made again after it breaks. Calls
/// wait for a connection while it is being made, and are sent only once
/// there is one: a call still waiting for it when its caller gives up was
/// never sent ([`Conn::waiting`]), which is what tells "Redis never had
/// it" from "Redis may have run it".
#[derive(Clone)]
pub(crate) struct Manager(Arc<Inner>);

struct Inner {
    client: redis::Client,
    config: AsyncConnectionConfig,
    current: Mutex<Connecting>,
}

/// The connection being made (or made) that a call found when it began.
pub(crate) struct Waiting(Option<Connecting>);

impl Manager {
    pub fn new(client: redis::Client, config: AsyncConnectionConfig) -> Manager {
        let current = Mutex::new(connect(client.clone(), config.clone()));
        Manager(Arc::new(Inner {
            client,
            config,
            current,
        }))
    }

    fn current(&self) -> Connecting {
        self.0.current.lock().unwrap().clone()
    }

    /// Makes the connection again, unless someone already did since `seen`.
    fn reconnect(&self, seen: &Connecting) {
        let mut current = self.0.current.lock().unwrap();
        if current.ptr_eq(seen) {
            *current = connect(self.0.client.clone(), self.0.config.clone());
            // Made now, not by the next call: an outage ends as soon as
            // Redis is back.
            tokio::spawn(current.clone());
        }
    }

    async fn command(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        let connecting = self.current();
        let r = connecting.clone().await.send_packed_command(cmd).await;
        self.after(&connecting, &r);
        r
    }

    async fn commands(
        &self,
        pipe: &Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        let connecting = self.current();
        let r = connecting
            .clone()
            .await
            .send_packed_commands(pipe, offset, count)
            .await;
        self.after(&connecting, &r);
        r
    }

    /// A connection that broke is made again.
    fn after<T>(&self, connecting: &Connecting, r: &redis::RedisResult<T>) {
        if let Err(e) = r {
            if e.is_unrecoverable_error() || e.is_io_error() {
                self.reconnect(connecting);
            }
        }
    }
}

/// Connects, retrying at most a second apart until it works.
fn connect(client: redis::Client, config: AsyncConnectionConfig) -> Connecting {
    async move {
        let mut pause = Duration::from_millis(10);
        loop {
            match client
                .get_multiplexed_async_connection_with_config(&config)
                .await
            {
                Ok(c) => return c,
                Err(e) => tracing::debug!(error = %e, "connecting to redis"),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
    .boxed()
    .shared()
}

impl Conn {
    /// What a call about to be made on this connection would wait for:
    /// on a single server, the connection while it is being made.
    pub fn waiting(&self) -> Waiting {
        match self {
            Conn::Single(m) => {
                let c = m.current();
                Waiting(c.peek().is_none().then_some(c))
            }
            _ => Waiting(None),
        }
    }

    /// True when a call that began at `before` can have been sent: no
    /// connection was being made then, or one has been made since. Only a
    /// single server's connection knows; elsewhere any call may have been.
    pub fn may_have_sent(&self, before: &Waiting) -> bool {
        let (Conn::Single(m), Some(was)) = (self, &before.0) else {
            return true;
        };
        !(m.current().ptr_eq(was) && was.peek().is_none())
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(m) => Box::pin(m.command(cmd)),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Node(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipe: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(m) => Box::pin(m.commands(pipe, offset, count)),
            Conn::Cluster(c) => c.req_packed_commands(pipe, offset, count),
            Conn::Node(c) => c.req_packed_commands(pipe, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(m) => m.0.client.get_connection_info().redis_settings().db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Node(c) => c.get_db(),
        }
    }
}
