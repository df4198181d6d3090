//! Redis's memory: `INFO memory` of each master, and the one worst off.

use super::super::Store;
use crate::error::{Error, Result};
use crate::figures::Memory;

/// Redis's memory from the text of `INFO memory`.
pub(super) fn parse(info: &str) -> Option<Memory> {
    let value = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    Some(Memory {
        used_bytes: value("used_memory")?.parse().ok()?,
        max_bytes: value("maxmemory")?.parse().ok()?,
        policy: value("maxmemory_policy")?.to_owned(),
    })
}

impl Store {
    /// The memory of each master (on a single Redis, one entry, named
    /// ""), read now.
    pub(crate) async fn memories(&self) -> Result<Vec<(String, Memory)>> {
        // On a cluster the crate sends INFO to every master and answers
        // with a map of node -> text.
        let reply: redis::Value = self
            .redis
            .call(
                "read memory",
                redis::cmd("INFO")
                    .arg("memory")
                    .query_async(&mut self.redis.conn()),
            )
            .await?;
        let texts: Vec<(String, String)> = match reply {
            redis::Value::Map(pairs) => pairs
                .into_iter()
                .map(|(k, v)| {
                    let k: String = redis::from_redis_value(k).unwrap_or_default();
                    let v: String = redis::from_redis_value(v).unwrap_or_default();
                    (k, v)
                })
                .collect(),
            other => vec![(
                String::new(),
                redis::from_redis_value(other)
                    .map_err(|e| Error::protocol("read memory", e.to_string()))?,
            )],
        };
        let mut out: Vec<(String, Memory)> = texts
            .into_iter()
            .map(|(node, info)| {
                parse(&info).map(|m| (node, m)).ok_or_else(|| {
                    Error::protocol("read memory", "INFO memory without maxmemory fields".into())
                })
            })
            .collect::<Result<_>>()?;
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The memory of the master that is worst off: one set to evict, or
    /// else the fullest (a push to it would be refused first).
    pub(crate) async fn memory(&self) -> Result<Memory> {
        let all = self.memories().await?;
        all.into_iter()
            .map(|(_, m)| m)
            .max_by(|a, b| {
                let fill = |m: &Memory| match m.max_bytes {
                    0 => 0.0,
                    max => m.used_bytes as f64 / max as f64,
                };
                (a.evicting(), a.full())
                    .cmp(&(b.evicting(), b.full()))
                    .then(fill(a).total_cmp(&fill(b)))
            })
            .ok_or_else(|| Error::protocol("read memory", "no node answered".into()))
    }
}
