//! Recurring schedules: defined, deleted and read through the queue (the
//! loop that pushes their ticks is [`crate::loops::recurring`]).

use std::time::Duration;

use super::Queue;
use crate::error::{Error, Result};
use crate::recurring::{Recurring, RecurringState, RunNow, NEXT_RUNS};

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
        self.check_policy(self.store().redis.timeout()).await?;
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

    /// Pauses schedule `name`: it makes no ticks until resumed, and the
    /// job of its next tick is dropped if not yet handed over. The pause
    /// is kept in Redis: a restart, or a put of the schedule, keeps it.
    /// False if there is no such schedule.
    pub async fn pause_recurring(&self, name: &str) -> Result<bool> {
        crate::recurring::check_name(name).map_err(Error::Invalid)?;
        self.store().recur_pause(name, true).await
    }

    /// Resumes schedule `name`: its ticks count from now (none of those
    /// missed while paused fire). A schedule not paused is left as it is.
    /// False if there is no such schedule.
    pub async fn resume_recurring(&self, name: &str) -> Result<bool> {
        crate::recurring::check_name(name).map_err(Error::Invalid)?;
        let found = self.store().recur_pause(name, false).await?;
        self.inner.h.recurring_changed.notify_one();
        Ok(found)
    }

    /// Pushes one job of schedule `name` now, as a tick would (its topic,
    /// body, time to run and retries), under an id of its own; the
    /// schedule's ticks are unchanged, paused or not. None if there is no
    /// such schedule.
    pub async fn run_recurring(&self, name: &str) -> Result<Option<RunNow>> {
        let Some(state) = self.recurring(name).await? else {
            return Ok(None);
        };
        let def = state.schedule;
        self.check_policy(self.store().redis.timeout()).await?;
        let id = crate::recurring::run_id(name);
        let push = crate::loops::recurring::push_of(&self.inner.h, &def, &id);
        let p = self
            .store()
            .push(push, self.store().redis.timeout())
            .await?;
        self.inner
            .h
            .pushed(&def.topic, self.store().part_of(&id), &p);
        Ok(Some(RunNow {
            id,
            due_ms: p.due_ms,
        }))
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
        let now = self.clock().now_ms().await?;
        Ok(self
            .store()
            .recur_all(only)
            .await?
            .into_iter()
            .filter_map(|s| {
                let schedule = Recurring::from_json(&s.def)?;
                let rule = schedule.rule().ok();
                let next_fire_ms = if s.paused_at.is_some() {
                    None
                } else if s.last_ms > now && !s.pending.is_empty() {
                    Some(s.last_ms)
                } else {
                    rule.as_ref().and_then(|r| r.next_after(s.last_ms.max(now)))
                };
                // The runs after the next, from the rule (a few steps of
                // next_after each).
                let mut next_runs_ms: Vec<i64> = next_fire_ms.into_iter().collect();
                while let (Some(&last), Some(r)) = (next_runs_ms.last(), &rule) {
                    if next_runs_ms.len() >= NEXT_RUNS {
                        break;
                    }
                    match r.next_after(last).filter(|&n| n > last) {
                        Some(n) => next_runs_ms.push(n),
                        None => break,
                    }
                }
                Some(RecurringState {
                    name: s.name,
                    schedule,
                    last_tick_ms: s.fired,
                    next_fire_ms,
                    next_runs_ms,
                    paused_at_ms: s.paused_at,
                })
            })
            .collect())
    }
}
