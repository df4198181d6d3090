//! Redis Cluster: the seeds, the client, and the masters.
//!
//! On a cluster a queue is split into partitions (see
//! [`Keys::partitions`](super::Keys::partitions)), each in one slot; every
//! call is routed by the crate to the master of its first key. What the
//! crate does not do, delayq does here: list the masters (keyspace events
//! are per node, so the subscriber keeps a connection to each), and reach
//! one master by address with the seeds' credentials.

use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;

use super::url::{client, url_at, Tls};
use crate::error::{Error, Result};

/// How a store reaches a cluster.
pub(crate) struct Cluster {
    seeds: Vec<String>,
    tls: Tls,
    client: redis::cluster::ClusterClient,
}

impl Cluster {
    pub fn new(seeds: Vec<String>, tls: &Tls, response_timeout: Duration) -> Result<Cluster> {
        if seeds.is_empty() {
            return Err(Error::Invalid(
                "a cluster needs at least one seed URL".into(),
            ));
        }
        let secure = seeds[0].starts_with("rediss://");
        if seeds.iter().any(|s| s.starts_with("rediss://") != secure) {
            return Err(Error::Invalid(
                "cluster seeds must all be rediss:// or all redis://".into(),
            ));
        }
        if !secure && tls.is_set() {
            return Err(Error::Invalid(
                "TLS options (CA, client certificate, insecure) need rediss:// seeds".into(),
            ));
        }
        let mut builder = ClusterClientBuilder::new(seeds.clone())
            // TRYAGAIN (a slot being migrated) is retried soon and often:
            // every call is bounded by the store's timeout anyway, and a
            // retry that comes after it changes nothing (the deadline).
            .retries(16)
            .min_retry_wait(10)
            .max_retry_wait(200)
            .response_timeout(response_timeout);
        if secure {
            builder = builder.certs(tls.certificates()?);
            if tls.insecure {
                builder = builder.tls(redis::TlsMode::Insecure);
            }
        }
        let client = builder
            .build()
            .map_err(|e| Error::Invalid(format!("redis cluster seeds: {e}")))?;
        Ok(Cluster {
            seeds,
            tls: tls.clone(),
            client,
        })
    }

    /// A connection to the whole cluster, made in the background: Redis
    /// need not be up yet.
    pub fn connection(&self) -> ClusterConnection {
        self.client
            .get_pending_async_connection_with_config(redis::cluster::ClusterConfig::new())
    }

    pub fn seed_client(&self) -> Result<redis::Client> {
        client(&self.seeds[0], &self.tls)
    }

    /// A client for the node at `host:port`, with the seeds' scheme,
    /// credentials and TLS settings.
    pub fn node_client(&self, host: &str, port: u16) -> Result<redis::Client> {
        client(&url_at(&self.seeds[0], host, port, 0), &self.tls)
    }
}

/// The masters in a CLUSTER SLOTS reply, each once, in slot order.
pub(super) fn masters_of(reply: &redis::Value) -> Vec<(String, u16)> {
    masters_in(&owners_of(reply))
}

/// The masters of slot ranges, each once, in slot order.
pub(crate) fn masters_in(owners: &super::health::Owners) -> Vec<(String, u16)> {
    let mut out: Vec<(String, u16)> = Vec::new();
    for (_, _, addr) in owners.iter().cloned() {
        if !out.contains(&addr) {
            out.push(addr);
        }
    }
    out
}

/// Each slot range of a CLUSTER SLOTS reply with its master.
pub fn owners_of(reply: &redis::Value) -> Vec<(u16, u16, (String, u16))> {
    use redis::Value::{Array, BulkString, Int, SimpleString};
    let mut out = Vec::new();
    let Array(ranges) = reply else {
        return out;
    };
    for range in ranges {
        let Array(fields) = range else { continue };
        let (Some(Int(lo)), Some(Int(hi))) = (fields.first(), fields.get(1)) else {
            continue;
        };
        let Some(Array(node)) = fields.get(2) else {
            continue;
        };
        let host = match node.first() {
            Some(BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(SimpleString(s)) => s.clone(),
            _ => continue,
        };
        let Some(Int(port)) = node.get(1) else {
            continue;
        };
        out.push((*lo as u16, *hi as u16, (host, *port as u16)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value::{Array, BulkString, Int};

    #[test]
    fn masters_are_read_from_cluster_slots() {
        let node = |host: &str, port: i64| Array(vec![BulkString(host.into()), Int(port)]);
        let reply = Array(vec![
            Array(vec![
                Int(0),
                Int(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Array(vec![Int(5461), Int(6000), node("127.0.0.1", 7001)]),
            Array(vec![Int(6001), Int(6001), node("127.0.0.1", 7000)]),
        ]);
        assert_eq!(
            masters_of(&reply),
            vec![("127.0.0.1".into(), 7000), ("127.0.0.1".into(), 7001)]
        );
        assert!(masters_of(&Int(1)).is_empty());
    }
}
