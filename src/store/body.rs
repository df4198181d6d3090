//! Reading a job's body in either form (see lib/body.lua): whole in
//! [`field::BODY`], or in pieces of at most [`layout::PIECE_BYTES`].

use std::collections::HashMap;

use super::layout::{self, field};
use super::{Keys, Store};
use crate::error::{Error, Result};

/// The names of a pieced body's fields, for `size` bytes: "1", "2", ...
/// (see lib/body.lua).
pub(crate) fn piece_names(size: u64) -> Vec<String> {
    (1..=size.div_ceil(layout::PIECE_BYTES as u64))
        .map(|i| i.to_string())
        .collect()
}

/// Bytes read from Redis as text; a body is joined from its pieces first,
/// so a character cut between two pieces is whole again here.
fn text(op: &'static str, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| Error::protocol(op, e.to_string()))
}

/// A hash as HGETALL reads it, values as bytes.
pub(super) type RawHash = HashMap<String, Vec<u8>>;

/// A job hash read whole (HGETALL): its fields but the body's, as text,
/// and the body, whole or joined from its pieces.
pub(super) fn split_body(mut raw: RawHash) -> Result<(HashMap<String, String>, Option<String>)> {
    let body = match raw.remove(field::BODY) {
        Some(b) => Some(b),
        None => match raw.get(field::BODY_SIZE) {
            Some(size) => {
                let size: u64 = std::str::from_utf8(size)
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let mut joined = Vec::with_capacity(size as usize);
                for name in piece_names(size) {
                    joined.extend(raw.remove(&name).unwrap_or_default());
                }
                Some(joined)
            }
            None => None,
        },
    };
    let body = body.map(|b| text("get", b)).transpose()?;
    let fields = raw
        .into_iter()
        .map(|(k, v)| Ok((k, text("get", v)?)))
        .collect::<Result<_>>()?;
    Ok((fields, body))
}

impl Store {
    /// A listing's bodies of one partition: for each id, its body's
    /// length if it is in pieces (None: whole). Ids whose body is gone
    /// (the job changed since its head was read) are left out.
    pub(super) async fn bodies_in(
        &self,
        part: &Keys,
        ids: &[(&String, Option<u64>)],
    ) -> Result<Vec<(String, Option<String>)>> {
        let mut pipe = redis::pipe();
        for (id, pieces) in ids {
            let job = part.job(id);
            match pieces {
                Some(size) => pipe.cmd("HMGET").arg(job).arg(piece_names(*size)),
                None => pipe.cmd("HGET").arg(job).arg(field::BODY),
            };
        }
        let replies: Vec<redis::Value> = self
            .redis
            .call("list", pipe.query_async(&mut self.redis.conn()))
            .await?;
        let mut bodies = Vec::with_capacity(ids.len());
        for ((id, pieces), reply) in ids.iter().zip(replies) {
            let bytes: Option<Vec<u8>> = if pieces.is_some() {
                let got: Vec<Option<Vec<u8>>> = redis::from_redis_value(reply)
                    .map_err(|e| Error::protocol("list", e.to_string()))?;
                // All gone: the job changed since its head was read.
                (got.iter().any(Option::is_some))
                    .then(|| got.into_iter().flatten().flatten().collect())
            } else {
                redis::from_redis_value(reply)
                    .map_err(|e| Error::protocol("list", e.to_string()))?
            };
            if let Some(b) = bytes {
                bodies.push(((*id).clone(), Some(text("list", b)?)));
            }
        }
        Ok(bodies)
    }
}
