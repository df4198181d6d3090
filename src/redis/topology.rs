//! What the client asks of a cluster: its masters and who owns each slot
//! (CLUSTER SLOTS), and a client for one node.

use super::cluster::{masters_of, owners_of};
use super::Client;
use crate::error::{Error, Result};

impl Client {
    /// The cluster's masters now (asked of any node); on a single Redis,
    /// nothing.
    pub(crate) async fn masters(&self) -> Result<Vec<(String, u16)>> {
        if self.cluster.is_none() {
            return Ok(Vec::new());
        }
        let reply = self.cluster_slots().await?;
        let masters = masters_of(&reply);
        if masters.is_empty() {
            return Err(Error::protocol(
                "list masters",
                "CLUSTER SLOTS names no master: is the cluster set up?".into(),
            ));
        }
        Ok(masters)
    }

    /// CLUSTER SLOTS, asked of any node (its reply as long as the cluster
    /// has slot ranges).
    async fn cluster_slots(&self) -> Result<redis::Value> {
        self.call(
            "list masters",
            redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async(&mut self.conn()),
        )
        .await
    }

    /// Each slot range with its master (one CLUSTER SLOTS, its reply as
    /// long as the cluster has ranges).
    pub(crate) async fn slot_owners(&self) -> Result<Vec<(u16, u16, (String, u16))>> {
        let reply = self.cluster_slots().await?;
        Ok(owners_of(&reply))
    }

    /// A client for one node of the cluster.
    pub(crate) fn node_client(&self, host: &str, port: u16) -> Result<redis::Client> {
        match &self.cluster {
            Some(c) => c.node_client(host, port),
            None => Ok(self.client()),
        }
    }
}
