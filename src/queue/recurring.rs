//! Recurring schedules: defined, deleted and read through the queue (the
//! loop that pushes their ticks is [`crate::dispatch::recurring`]).

use std::time::Duration;

use super::Queue;
use crate::error::{Error, Result};
use crate::recurring::{Recurring, RecurringState};

impl Queue {
    /// Creates or replaces the recurring schedule `name`. Its ticks count
    /// from now: the tick already pushed under an older definition is
    /// dropped if it has not been handed over.
    pub async fn put_recurring(&self, name: &str, schedule: &Recurring) -> Result<()> {
        crate::recurring::check_name(name).map_err(Error::Invalid)?;
        let l = self.limits();
        l.check_topic(&schedule.topic).map_err(Error::Invalid)?;
        l.check_body(&schedule.body).map_err(Error::Invalid)?;
        l.check_ttr(Duration::from_millis(schedule.ttr_ms))
            .map_err(Error::Invalid)?;
        schedule.check().map_err(Error::Invalid)?;
        self.check_policy().await?;
        self.store().recur_put(name, &schedule.to_json()).await?;
        self.inner.h.recurring_changed.notify_one();
        Ok(())
    }

    /// Deletes the recurring schedule `name` and its next tick's job (if not
    /// yet handed over). False if there was none.
    pub async fn delete_recurring(&self, name: &str) -> Result<bool> {
        crate::recurring::check_name(name).map_err(Error::Invalid)?;
        self.store().recur_delete(name).await
    }

    /// The recurring schedule `name`, with its next fire time.
    pub async fn recurring(&self, name: &str) -> Result<Option<RecurringState>> {
        crate::recurring::check_name(name).map_err(Error::Invalid)?;
        Ok(self.recurring_states(Some(name)).await?.pop())
    }

    /// Every recurring schedule, by name, with its next fire time.
    pub async fn list_recurring(&self) -> Result<Vec<RecurringState>> {
        self.recurring_states(None).await
    }

    async fn recurring_states(&self, only: Option<&str>) -> Result<Vec<RecurringState>> {
        let now = self.store().redis_time_us().await? / 1000;
        Ok(self
            .store()
            .recur_all(only)
            .await?
            .into_iter()
            .filter_map(|s| {
                let schedule = Recurring::from_json(&s.def)?;
                let next_fire_ms = if s.last_ms > now && !s.pending.is_empty() {
                    Some(s.last_ms)
                } else {
                    schedule
                        .rule()
                        .ok()
                        .and_then(|r| r.next_after(s.last_ms.max(now)))
                };
                Some(RecurringState {
                    name: s.name,
                    schedule,
                    last_tick_ms: s.last_ms,
                    next_fire_ms,
                })
            })
            .collect())
    }
}
