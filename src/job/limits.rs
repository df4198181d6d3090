//! The limits on what a producer may send, and the checks that apply them
//! before anything is written.

use std::time::Duration;

use super::NewJob;

/// How every recurring tick's job id starts. Pushes refuse such ids
/// ([`crate::job::Limits::check_job`]), so no user job can take a tick's
/// place.
pub const TICK_ID_PREFIX: &str = "recurring/{";

/// Most tags one job may carry.
pub const MAX_TAGS: usize = 8;
/// Longest tag, bytes.
pub const MAX_TAG_BYTES: usize = 128;

/// Checks one tag: 1 to [`MAX_TAG_BYTES`] bytes, no control characters
/// (tags are stored one per line), not blank.
pub fn check_tag(tag: &str) -> Result<(), String> {
    if tag.trim().is_empty() {
        return Err("tags: a tag is empty or blank".into());
    }
    if tag.len() > MAX_TAG_BYTES {
        return Err(format!(
            "tags: a tag is {} bytes; the limit is {MAX_TAG_BYTES}",
            tag.len()
        ));
    }
    if let Some(c) = tag.chars().find(|c| c.is_control()) {
        return Err(format!(
            "tags: tag {tag:?} contains {c:?}; control characters are not allowed"
        ));
    }
    check_not_dot_segment("tags: tag", tag)
}

/// Longest group key, bytes.
pub const MAX_GROUP_BYTES: usize = 128;

/// Checks a group key: 1 to [`MAX_GROUP_BYTES`] bytes, no control
/// characters (a newline separates topic and group in the group's keys),
/// not blank, not `.` or `..`.
pub fn check_group(group: &str) -> Result<(), String> {
    if group.trim().is_empty() {
        return Err("group: the group key is empty or blank".into());
    }
    if group.len() > MAX_GROUP_BYTES {
        return Err(format!(
            "group: the group key is {} bytes; the limit is {MAX_GROUP_BYTES}",
            group.len()
        ));
    }
    if let Some(c) = group.chars().find(|c| c.is_control()) {
        return Err(format!(
            "group: group {group:?} contains {c:?}; control characters are not allowed"
        ));
    }
    // `/v1/topics/{topic}/groups/{group}` must be able to name it.
    check_not_dot_segment("group: group", group)
}

/// Checks a job's tags: at most [`MAX_TAGS`] different ones (a tag given
/// twice counts once), each as [`check_tag`] wants.
pub fn check_tags(tags: &[String]) -> Result<(), String> {
    for t in tags {
        check_tag(t)?;
    }
    let distinct = tags.iter().collect::<std::collections::BTreeSet<_>>().len();
    if distinct > MAX_TAGS {
        return Err(format!(
            "tags: {distinct} tags; the limit is {MAX_TAGS} per job"
        ));
    }
    Ok(())
}

/// The latest absolute time a job may be due (or a lease end), Unix ms:
/// 9999-12-31T23:59:59.999Z. The scripts enforce it too.
pub const MAX_DUE_AT_MS: i64 = 253_402_300_799_999;

/// The largest priority a job may have: 0 (the default) is handed out
/// first, then 1, 2, ... up to this. Each level is a ready list of its own,
/// so the range stays small.
pub const MAX_PRIORITY: u8 = 9;

/// Checks a priority as sent (any integer) and gives it as stored.
pub fn check_priority(priority: i64) -> Result<u8, String> {
    u8::try_from(priority)
        .ok()
        .filter(|&p| p <= MAX_PRIORITY)
        .ok_or_else(|| {
            format!(
                "priority {priority} is out of range: 0 (the default, handed out first) to {MAX_PRIORITY} (last)"
            )
        })
}

/// Explicit bounds on what a producer may send. Every one is checked before
/// anything is written.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_id_bytes: usize,
    pub max_topic_bytes: usize,
    pub max_body_bytes: usize,
    pub max_delay: Duration,
    pub max_ttr: Duration,
    /// Most topics one pop may name.
    pub max_pop_topics: usize,
    /// Most jobs one batch push may carry.
    pub max_batch: usize,
    /// Most jobs one pop may ask for.
    pub max_pop_jobs: usize,
    /// Longest a pop may ask to wait.
    pub max_pop_wait: Duration,
    /// Most body bytes one pop returns (it always returns at least one job
    /// when one is ready): a pop's reply must reach its caller well within
    /// the Redis timeout, however many jobs it asked for.
    pub max_pop_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_id_bytes: 256,
            max_topic_bytes: 128,
            max_body_bytes: 1024 * 1024,
            // 2^31-1 seconds: the compatible API's bound, about 68 years.
            max_delay: Duration::from_secs((1 << 31) - 1),
            max_ttr: Duration::from_secs(7 * 24 * 3600),
            max_pop_topics: 32,
            max_pop_bytes: 4 * 1024 * 1024,
            max_batch: 1000,
            max_pop_jobs: 100,
            max_pop_wait: Duration::from_secs(600),
        }
    }
}

impl Limits {
    /// Checks an id: not empty, not too long.
    pub fn check_id(&self, id: &str) -> Result<(), String> {
        if id.trim().is_empty() {
            return Err("job id is empty or blank".into());
        }
        if id.len() > self.max_id_bytes {
            return Err(format!(
                "job id is {} bytes; the limit is {}",
                id.len(),
                self.max_id_bytes
            ));
        }
        // Ids end up in logs and key names: no line breaks or escapes.
        if let Some(c) = id.chars().find(|c| c.is_control()) {
            return Err(format!(
                "job id {id:?} contains {c:?}; control characters are not allowed"
            ));
        }
        Ok(())
    }

    /// Checks the id of a job pushed now: [`check_id`](Self::check_id),
    /// and neither a tick's id nor one a URL or a trim would change.
    pub fn check_new_id(&self, id: &str) -> Result<(), String> {
        self.check_id(id)?;
        // Lookups take any id, so jobs pushed before this rule stay
        // reachable; new ids follow the rule topics follow.
        check_untrimmed("job id", id)?;
        check_not_dot_segment("job id", id)?;
        check_not_a_tick(id)
    }

    /// Checks a topic name: not empty, not too long, no control characters
    /// and no comma (pops name several topics separated by commas).
    pub fn check_topic(&self, topic: &str) -> Result<(), String> {
        if topic.trim().is_empty() {
            return Err("topic is empty or blank".into());
        }
        check_untrimmed("topic", topic)?;
        if topic.len() > self.max_topic_bytes {
            return Err(format!(
                "topic is {} bytes; the limit is {}",
                topic.len(),
                self.max_topic_bytes
            ));
        }
        if let Some(c) = topic.chars().find(|c| c.is_control() || *c == ',') {
            return Err(format!(
                "topic {topic:?} contains {c:?}; commas and control characters are not allowed"
            ));
        }
        Ok(())
    }

    /// Checks a whole job before it is pushed.
    pub fn check_job(&self, job: &NewJob) -> Result<(), String> {
        self.check_new_id(&job.id)?;
        self.check_topic(&job.topic)?;
        self.check_body(&job.body)?;
        self.check_delay("delay", job.delay)?;
        if let Some(at) = job.due_at_ms {
            check_due_at(at)?;
        }
        self.check_ttr(job.ttr)?;
        check_priority(job.priority.into())?;
        if let Some(p) = &job.retry {
            p.check()?;
        }
        if let Some(d) = &job.dedup {
            check_dedup(d)?;
        }
        check_trace(job)?;
        check_tags(&job.tags)?;
        if let Some(g) = &job.group {
            check_group(g)?;
        }
        if let Some(b) = &job.batch {
            crate::batch::check_batch_id(b)?;
            if job.dedup.is_some() {
                return Err("a job of a batch takes no dedup key".into());
            }
        }
        Ok(())
    }

    /// Checks a job body's size.
    pub fn check_body(&self, body: &str) -> Result<(), String> {
        if body.len() > self.max_body_bytes {
            return Err(format!(
                "body is {} bytes; the limit is {}",
                body.len(),
                self.max_body_bytes
            ));
        }
        Ok(())
    }

    /// Checks a batch push's size.
    pub fn check_batch(&self, jobs: usize) -> Result<(), String> {
        if jobs > self.max_batch {
            return Err(format!(
                "{jobs} jobs in one request; the limit is {}",
                self.max_batch
            ));
        }
        Ok(())
    }

    /// Checks what a pop asks for: how many jobs, how long to wait.
    pub fn check_pop(&self, max: usize, wait: Duration) -> Result<(), String> {
        if !(1..=self.max_pop_jobs).contains(&max) {
            return Err(format!(
                "max {max} is out of range 1 to {}",
                self.max_pop_jobs
            ));
        }
        if wait > self.max_pop_wait {
            return Err(format!(
                "wait_ms {} is over the limit of {}",
                wait.as_millis(),
                self.max_pop_wait.as_millis()
            ));
        }
        Ok(())
    }

    /// Checks a delay from now (a push's, a nack's, a reschedule's).
    pub fn check_delay(&self, what: &str, delay: Duration) -> Result<(), String> {
        if delay > self.max_delay {
            return Err(crate::duration::over_limit(what, delay, self.max_delay));
        }
        Ok(())
    }

    /// Checks a lease token: finish, nack and touch need the one pop gave.
    pub fn check_token(&self, token: &str) -> Result<(), String> {
        if token.is_empty() {
            return Err("lease token is empty; give the token the pop returned".into());
        }
        Ok(())
    }

    pub fn check_ttr(&self, ttr: Duration) -> Result<(), String> {
        if ttr.is_zero() || ttr > self.max_ttr {
            return Err(format!(
                "ttr {} ms is out of range: 1 ms to {} ({} ms)",
                ttr.as_millis(),
                crate::duration::in_words(self.max_ttr),
                self.max_ttr.as_millis()
            ));
        }
        Ok(())
    }

    /// Checks the topic list of a pop.
    pub fn check_topics(&self, topics: &[String]) -> Result<(), String> {
        if topics.is_empty() {
            return Err("no topic given".into());
        }
        if topics.len() > self.max_pop_topics {
            return Err(format!(
                "{} topics given; one pop may name at most {}",
                topics.len(),
                self.max_pop_topics
            ));
        }
        topics.iter().try_for_each(|t| self.check_topic(t))
    }
}

/// Checks an absolute due time (Unix ms).
pub fn check_due_at(at_ms: i64) -> Result<(), String> {
    if !(0..=MAX_DUE_AT_MS).contains(&at_ms) {
        return Err(format!(
            "due time {at_ms} ms is out of range: 0 to {MAX_DUE_AT_MS} (year 9999)"
        ));
    }
    Ok(())
}

/// The longest a finished job's record may be kept (`keep_finished`): a
/// year. Records cost memory for as long as they are kept.
pub const MAX_KEEP_FINISHED: Duration = Duration::from_secs(365 * 86_400);

/// Checks how long finished jobs' records are kept: above 0 (leave it out
/// to keep none) and at most [`MAX_KEEP_FINISHED`].
pub fn check_keep_finished(keep: Duration) -> Result<(), String> {
    if keep.as_millis() == 0 {
        return Err(
            "keep_finished must be at least 1ms (leave it out to keep no finished jobs)".into(),
        );
    }
    if keep > MAX_KEEP_FINISHED {
        return Err(format!(
            "keep_finished {} ms is too long: at most 365d ({} ms)",
            keep.as_millis(),
            MAX_KEEP_FINISHED.as_millis()
        ));
    }
    Ok(())
}

/// Tick ids are the recurring schedules' own: a user job with one would be
/// taken for the tick (or dropped as one).
/// The longest dedup key, in bytes.
pub const MAX_DEDUP_KEY_BYTES: usize = 256;
/// The longest dedup window or debounce max_wait: 30 days.
pub const MAX_DEDUP_WINDOW: Duration = Duration::from_secs(30 * 86_400);

/// Checks a push's dedup settings; each message names the field.
fn check_dedup(d: &super::Dedup) -> Result<(), String> {
    use super::DedupMode;
    if d.key.is_empty() || d.key.len() > MAX_DEDUP_KEY_BYTES {
        return Err(format!(
            "dedup.key is {} bytes; it must be 1 to {MAX_DEDUP_KEY_BYTES}",
            d.key.len()
        ));
    }
    if let Some(c) = d.key.chars().find(|c| c.is_control()) {
        return Err(format!(
            "dedup.key contains {c:?}; control characters are not allowed"
        ));
    }
    let mode = d.mode.as_str();
    for (name, v) in [("window_ms", d.window), ("max_wait_ms", d.max_wait)] {
        if let Some(v) = v {
            if v.is_zero() || v > MAX_DEDUP_WINDOW {
                return Err(format!(
                    "dedup.{name} {} is out of range: 1 to {} (30 days)",
                    v.as_millis(),
                    MAX_DEDUP_WINDOW.as_millis()
                ));
            }
        }
    }
    match d.mode {
        DedupMode::Simple if d.window.is_some() => Err(
            "dedup.window_ms is not taken by mode simple (it lasts until the job ends); use throttle for a window".into(),
        ),
        DedupMode::Throttle | DedupMode::Debounce if d.window.is_none() => {
            Err(format!("dedup.window_ms is required with mode {mode}"))
        }
        DedupMode::Simple | DedupMode::Throttle if d.max_wait.is_some() => Err(format!(
            "dedup.max_wait_ms is taken only with mode debounce, not {mode}"
        )),
        _ => Ok(()),
    }
}

fn check_not_a_tick(id: &str) -> Result<(), String> {
    let reserved = TICK_ID_PREFIX;
    if id.starts_with(reserved) {
        return Err(format!(
            "job id {id:?} is reserved: ids starting with {reserved:?} are recurring schedules' ticks"
        ));
    }
    Ok(())
}

/// Ids and topics are taken as given, so one with spaces around it would be
/// a different name from the one a consumer types: refuse it instead.
/// Checks the id of a batch created now: [`crate::batch::check_batch_id`],
/// and, as a new job id, no white space at its ends and not `.` or `..`
/// (no URL could name it).
pub fn check_new_batch_id(id: &str) -> Result<(), String> {
    crate::batch::check_batch_id(id)?;
    check_untrimmed("batch id", id)?;
    check_not_dot_segment("batch id", id)
}

fn check_untrimmed(what: &str, name: &str) -> Result<(), String> {
    if name.trim() != name {
        return Err(format!(
            "{what} {name:?} starts or ends with white space; names are used exactly as given"
        ));
    }
    Ok(())
}

/// `.` and `..` are path segments of their own: URLs drop them
/// (`/v1/jobs/..` is `/v1/`, encoded or not), so no client could reach
/// such a job (or tag). `what` names the value: "job id", "tags: tag".
fn check_not_dot_segment(what: &str, name: &str) -> Result<(), String> {
    if name == "." || name == ".." {
        return Err(format!(
            "{what} {name:?} is a path segment of its own, which URLs drop: \
             \".\" and \"..\" are not allowed"
        ));
    }
    Ok(())
}

/// A job's trace context: a W3C `traceparent` in the form delayq stores
/// (version 00), a bounded `tracestate`, and no `tracestate` alone.
fn check_trace(job: &NewJob) -> Result<(), String> {
    if let Some(tp) = &job.traceparent {
        if crate::trace::check_traceparent(tp)? != *tp {
            return Err(format!(
                "traceparent {tp:?}: delayq keeps version 00 (00-<trace id>-<parent id>-<flags>)"
            ));
        }
    }
    if let Some(ts) = &job.tracestate {
        if job.traceparent.is_none() {
            return Err("tracestate needs a traceparent".into());
        }
        crate::trace::check_tracestate(ts)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
