//! Recurring put: create, replace, delete, pause or resume a schedule. The
//! script is `recur_put.lua`.

use super::script::script;
use super::{Keys, Status, Store};
use crate::error::Result;
use crate::redis::Fields;

script! {
    /// Does `action` ("put", "delete", "pause" or "resume") to schedule
    /// `name`; a put writes `def` (JSON) under `version`. Runs when Redis
    /// is full: delete must work then.
    RecurPut = "recur_put", when_full: true, acked: true, late_unknown: true,
        (name: &'a str, action: &'a str, def: &'a str, version: &'a str) -> bool = decode;
}

/// The reply: DONE, or MISSING (nothing changed).
fn decode((status, _): (Status, Fields)) -> Result<bool> {
    Ok(status == Status::Done)
}

impl Store {
    /// Creates or replaces schedule `name` with `def` (JSON) under a new
    /// version; ticks count from now.
    pub(crate) async fn recur_put(&self, name: &str, def: &str) -> Result<()> {
        let part = self.recur_part(name);
        let version = uuid::Uuid::new_v4().simple().to_string();
        // The name goes into the index first: the script's wake notice
        // sends idle recurring loops to look, and a loop that finds the
        // index empty sleeps on (a minute). A put that fails after this
        // leaves a name without a schedule, which readers skip.
        let mut sadd = redis::cmd("SADD");
        sadd.arg(Keys::recurring_index(self.prefix())).arg(name);
        self.redis
            .call(
                "recurring put",
                sadd.query_async::<i64>(&mut self.redis.conn()),
            )
            .await?;
        self.run::<RecurPut>(part, (name, "put", def, version.as_str()))
            .await?;
        Ok(())
    }

    /// Deletes schedule `name` and its next tick's job if not yet handed
    /// over. False if there was none.
    pub(crate) async fn recur_delete(&self, name: &str) -> Result<bool> {
        let part = self.recur_part(name);
        let done = self.run::<RecurPut>(part, (name, "delete", "", "")).await?;
        let mut srem = redis::cmd("SREM");
        srem.arg(Keys::recurring_index(self.prefix())).arg(name);
        self.redis
            .call(
                "recurring delete",
                srem.query_async::<i64>(&mut self.redis.conn()),
            )
            .await?;
        Ok(done)
    }
}

impl Store {
    /// Pauses (`true`) or resumes schedule `name`; resuming counts its
    /// ticks from now. False if there is no such schedule. One script call
    /// on one schedule's keys.
    pub(crate) async fn recur_pause(&self, name: &str, pause: bool) -> Result<bool> {
        let part = self.recur_part(name);
        let action = if pause { "pause" } else { "resume" };
        self.run::<RecurPut>(part, (name, action, "", "")).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_whether_it_was_done() {
        let d =
            |r: &[&str]| decode(Fields::parse::<Status>("recur_put", sample(r)).unwrap()).unwrap();
        assert!(d(&["0"]));
        assert!(!d(&["1"]));
        assert!(Fields::parse::<Status>("recur_put", sample(&["9"])).is_err());
    }
}
