//! Signed-out dashboard sessions. A session is a signed (id, expiry)
//! cookie that any instance can check without Redis; signing out records
//! its id here until the cookie would have expired anyway, so the number
//! of keys is bounded by the sign-outs within one session lifetime.

use std::time::Duration;

use super::{Keys, Store};
use crate::error::Result;

impl Store {
    /// Records that session `id` has ended, for `ttl` (one SET: O(1)).
    pub(crate) async fn end_session(&self, id: &str, ttl: Duration) -> Result<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(Keys::signed_out(self.prefix(), id))
            .arg(1)
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64);
        self.redis
            .call("sign out", cmd.query_async::<()>(&mut self.redis.conn()))
            .await
    }

    /// Whether session `id` has been signed out (one EXISTS: O(1)).
    pub(crate) async fn session_ended(&self, id: &str) -> Result<bool> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(Keys::signed_out(self.prefix(), id));
        let n: i64 = self
            .redis
            .call("check session", cmd.query_async(&mut self.redis.conn()))
            .await?;
        Ok(n > 0)
    }
}
