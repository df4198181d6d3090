//! The health watch's look at the shards: each partition's master and its
//! online replicas (`INFO replication` of each master), and on a cluster
//! the slot owners it reads once per look and hands on; what it finds goes
//! to [`Health`](super::health::Health).

use super::health::ShardView;
use super::Client;

/// Connected replicas in an `INFO replication` reply (those online).
fn online_replicas(info: &str) -> usize {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .count()
}

impl Client {
    /// Each partition's shard now: its master and its online replicas.
    async fn look_at_shards(&self, conns: &mut NodeConns) -> Vec<ShardView> {
        let n = self.slots.len();
        if self.cluster.is_none() {
            let node = match &self.route.link.read().unwrap().master {
                Some((h, p)) => format!("{h}:{p}"),
                None => self.client().get_connection_info().addr().to_string(),
            };
            let info = self
                .call(
                    "read replication",
                    redis::cmd("INFO")
                        .arg("replication")
                        .query_async::<String>(&mut self.conn()),
                )
                .await;
            let replicas = info.ok().map(|i| online_replicas(&i));
            return vec![ShardView { node, replicas }; n];
        }
        let Ok(mut owners) = self.slot_owners().await else {
            return vec![ShardView::default(); n];
        };
        // Nodes list the ranges in orders of their own.
        owners.sort();
        let mut moved = false;
        self.health.topology.send_if_modified(|known| {
            let changed = !owners.is_empty() && *known != owners;
            if changed {
                // The first read is no change: nothing to look out for.
                moved = !known.is_empty();
                known.clone_from(&owners);
            }
            changed
        });
        if moved {
            self.health.heat();
        }
        let mut by_node: std::collections::HashMap<(String, u16), Option<usize>> =
            Default::default();
        for (_, _, addr) in &owners {
            if by_node.contains_key(addr) {
                continue;
            }
            let replicas = conns.replicas(self, addr).await;
            by_node.insert(addr.clone(), replicas);
        }
        self.slots
            .iter()
            .map(|&slot| {
                owners
                    .iter()
                    .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
                    .map(|(_, _, addr)| ShardView {
                        node: format!("{}:{}", addr.0, addr.1),
                        replicas: by_node[addr],
                    })
                    .unwrap_or_default()
            })
            .collect()
    }
}

/// A connection per master, kept between looks.
#[derive(Default)]
pub(crate) struct NodeConns(
    std::collections::HashMap<(String, u16), redis::aio::MultiplexedConnection>,
);

impl NodeConns {
    async fn replicas(&mut self, redis: &Client, addr: &(String, u16)) -> Option<usize> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(redis.timeout()))
            .set_response_timeout(Some(redis.timeout()));
        let conn = match self.0.get(addr) {
            Some(c) => c.clone(),
            None => {
                let client = redis.node_client(&addr.0, addr.1).ok()?;
                let c = tokio::time::timeout(
                    redis.timeout(),
                    client.get_multiplexed_async_connection_with_config(&config),
                )
                .await
                .ok()?
                .ok()?;
                self.0.insert(addr.clone(), c.clone());
                c
            }
        };
        let mut conn = conn;
        let info = tokio::time::timeout(
            redis.timeout(),
            redis::cmd("INFO")
                .arg("replication")
                .query_async::<String>(&mut conn),
        )
        .await;
        match info {
            Ok(Ok(i)) => Some(online_replicas(&i)),
            _ => {
                self.0.remove(addr);
                None
            }
        }
    }
}

impl Client {
    /// One look at the shards; true when a partition that was down
    /// answers again.
    pub(crate) async fn check_shards(&self, conns: &mut NodeConns) -> bool {
        let seen = self.look_at_shards(conns).await;
        self.health.update(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn online_replicas_are_counted_from_info() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
            slave0:ip=127.0.0.1,port=7001,state=online,offset=10,lag=0\r\n\
            slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n";
        assert_eq!(online_replicas(info), 1);
        assert_eq!(online_replicas("role:master\r\nconnected_slaves:0\r\n"), 0);
    }
}
