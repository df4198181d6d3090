//! Prometheus metrics: counters and histograms kept in process, rendered in
//! the text exposition format at `/metrics`.
//!
//! Typed: every series is a field of [`Metrics`], declared once with its
//! name, help and label names, and callers reach it by field
//! (`metrics.pushed.inc([topic], 1)`), so a name cannot drift from its
//! registration and a label cannot be forgotten (the label count is part of
//! the type).
//!
//! Why not `prometheus-client` (weighed for issue 25): it would replace
//! the series types (`series.rs`, about 200 lines) and nothing else. What
//! is delayq's own stays: the bound on `topic` label values, where a quiet
//! topic is forgotten in every series at once (`topics.rs`), and the
//! gauges read from Redis at scrape time (a custom collector there). And
//! it writes OpenMetrics, not the text format `/metrics` serves now: `#
//! TYPE` lines name counters without `_total`, a `# EOF` line ends the
//! page, help texts get a period added, bucket bounds are formatted its
//! way; scrapers, the docs and tests would see a different page. A dozen
//! series known here do not need a registry.
//!
//! Files: `topics.rs` (which topics have series of their own),
//! `series.rs` (counters, histograms, rendering), this one (the series
//! delayq exports and the page).
//!
//! A std mutex guards each series: updates hold it for a map lookup, never
//! across an await.

mod groups;
mod series;
mod topics;

pub use crate::figures::GroupGauges;

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use crate::job::JobState;
use crate::store::TopicCounts;

use crate::stats::{Kind, Recorder};
use series::{escape, Meta};
pub use series::{Counter, Histogram};
use topics::{has_jobs, Topics};

/// Most distinct topics that have series of their own at once. Topics come
/// and go (an id per topic is a pattern we see): when a new one arrives and
/// this many have series, the one longest quiet that had no jobs at the
/// last scrape and saw nothing for [`TOPIC_IDLE`] is forgotten (its series
/// leave `/metrics`, as a gone topic's should) and the new one takes its
/// place. Only when none can go does the new topic share the label value
/// [`OTHER_TOPICS`], so `/metrics` stays bounded.
pub const MAX_TOPIC_SERIES: usize = 1000;
/// The `topic` label of topics beyond [`MAX_TOPIC_SERIES`].
pub const OTHER_TOPICS: &str = "_other";
/// How long a topic without jobs must see no activity before its series
/// may be forgotten for a new topic's.
pub const TOPIC_IDLE: Duration = Duration::from_secs(600);

/// What `/metrics` reads at scrape time.
#[derive(Default)]
pub struct Gauges {
    /// Queue depths per topic, from Redis (absent while Redis is away).
    pub jobs: Option<BTreeMap<String, TopicCounts>>,
    pub subscriber_connected: bool,
    /// Expired events heard, as the canary found (None: not known).
    pub expired_events: Option<bool>,
    /// Clients' pops waiting (delayq's own webhook deliveries apart).
    pub waiting_pops: usize,
    pub webhook_pops: usize,
    /// Each shard's state (watched with replica acks or on a cluster).
    pub shards: Vec<crate::redis::health::Shard>,
    /// Groups per topic (topics that have some).
    pub groups: BTreeMap<String, GroupGauges>,
}

/// Every series delayq exports.
pub struct Metrics {
    topics: Arc<Topics>,
    /// Throughput and lateness on their way to Redis (`crate::stats`).
    pub stats: Arc<Recorder>,
    pub pushed: Counter<1>,
    pub dispatched: Counter<2>,
    pub popped: Counter<1>,
    pub rate_held: Counter<1>,
    pub finished: Counter<1>,
    pub deleted: Counter<1>,
    pub retried: Counter<1>,
    pub dead: Counter<1>,
    pub webhook_deliveries: Counter<2>,
    pub webhook_duration: Histogram<1>,
    pub fire_lateness: Histogram<0>,
    pub redis_errors: Counter<0>,
    pub subscriber_connects: Counter<0>,
}

impl crate::redis::Observer for Metrics {
    fn redis_error(&self) {
        self.redis_errors.inc([], 1);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::with_topic_limits(MAX_TOPIC_SERIES, TOPIC_IDLE)
    }
}

impl Metrics {
    /// Series of their own for at most `max` topics at once; a topic
    /// without jobs quiet for `idle` may be forgotten for a new one.
    pub fn with_topic_limits(max: usize, idle: Duration) -> Self {
        let t = Arc::new(Topics::new(max, idle));
        let stats = Arc::new(Recorder::default());
        Metrics {
            pushed: Counter::new(
                &t,
                "delayq_jobs_pushed_total",
                "Jobs pushed (created or replaced).",
                ["topic"],
            )
            .tapped(&stats, Kind::Pushed),
            dispatched: Counter::new(
                &t,
                "delayq_jobs_dispatched_total",
                "Jobs handed over because they fell due, by the path that did it (event or sweep).",
                ["path", "topic"],
            ),
            popped: Counter::new(
                &t,
                "delayq_jobs_popped_total",
                "Jobs handed to consumers.",
                ["topic"],
            )
            .tapped(&stats, Kind::Delivered),
            rate_held: Counter::new(
                &t,
                "delayq_jobs_rate_held_total",
                "Ready jobs a pop left waiting because of the topic's rate limit (counted once per pop that met the limit).",
                ["topic"],
            ),
            finished: Counter::new(
                &t,
                "delayq_jobs_finished_total",
                "Jobs finished by their consumer.",
                ["topic"],
            )
            .tapped(&stats, Kind::Finished),
            deleted: Counter::new(&t, "delayq_jobs_deleted_total", "Jobs deleted.", ["topic"]),
            retried: Counter::new(
                &t,
                "delayq_jobs_retried_total",
                "Failed attempts (nack or lease expiry) followed by another attempt.",
                ["topic"],
            )
            .tapped(&stats, Kind::Failed),
            dead: Counter::new(
                &t,
                "delayq_jobs_dead_total",
                "Jobs that used up their attempts.",
                ["topic"],
            )
            .tapped(&stats, Kind::Dead),
            webhook_deliveries: Counter::new(
                &t,
                "delayq_webhook_deliveries_total",
                "Webhook deliveries by outcome: success, http_error, timeout, connection_error.",
                ["topic", "outcome"],
            ),
            webhook_duration: Histogram::new(
                &t,
                "delayq_webhook_duration_seconds",
                "Webhook request duration.",
                ["topic"],
            ),
            fire_lateness: Histogram::new(
                &t,
                "delayq_fire_lateness_seconds",
                "Hand-over (dispatch) time minus due time, Redis clock.",
                [],
            ),
            redis_errors: Counter::new(
                &t,
                "delayq_redis_errors_total",
                "Redis calls that failed or timed out.",
                [],
            ),
            subscriber_connects: Counter::new(
                &t,
                "delayq_subscriber_connects_total",
                "Times the expired-event subscriber (re)connected.",
                [],
            ),
            topics: t,
            stats,
        }
    }
}

impl Metrics {
    /// Renders everything, with the gauges read at scrape time.
    pub fn render(&self, g: &Gauges) -> String {
        let mut out = String::new();
        for c in [
            &self.pushed,
            &self.popped,
            &self.rate_held,
            &self.finished,
            &self.deleted,
            &self.retried,
            &self.dead,
        ] {
            c.render(&mut out);
        }
        self.dispatched.render(&mut out);
        self.webhook_deliveries.render(&mut out);
        self.webhook_duration.render(&mut out);
        self.fire_lateness.render(&mut out);
        self.redis_errors.render(&mut out);
        self.subscriber_connects.render(&mut out);
        let _ = writeln!(
            out,
            "# HELP delayq_build_info The running build: its version as `delayq --version` prints it.\n# TYPE delayq_build_info gauge\ndelayq_build_info{{version=\"{}\"}} 1",
            crate::VERSION
        );
        // Only with OTLP export on (--otlp-endpoint).
        #[cfg(feature = "server")]
        if crate::trace::exporting() {
            let _ = writeln!(
                out,
                "# HELP delayq_otlp_spans_dropped_total Spans not exported: the export buffer was full (the collector slow or down).\n# TYPE delayq_otlp_spans_dropped_total counter\ndelayq_otlp_spans_dropped_total {}",
                crate::trace::otlp::dropped()
            );
        }

        let jobs = Meta::new(
            &self.topics,
            "delayq_jobs",
            "Jobs by topic and state, read from Redis at scrape time.",
            ["topic", "state"],
        );
        jobs.header(&mut out, "gauge");
        if let Some(jobs) = &g.jobs {
            self.topics.saw_jobs(jobs);
        }
        // Topics beyond the series limit are summed under one label. A
        // topic without jobs does not count as active for being listed.
        let label = |topic: &str, c: &TopicCounts| {
            if has_jobs(c) {
                self.topics.label(topic)
            } else {
                self.topics.peek(topic)
            }
        };
        let mut depths: BTreeMap<String, TopicCounts> = BTreeMap::new();
        for (topic, c) in g.jobs.iter().flatten() {
            let d = depths.entry(label(topic, c)).or_default();
            d.delayed += c.delayed;
            d.ready += c.ready;
            d.reserved += c.reserved;
            d.dead += c.dead;
            d.finished += c.finished;
        }
        for (topic, c) in depths {
            // Finished records exist only with --keep-finished: their series
            // only where some are kept.
            let finished = (c.finished > 0).then_some((JobState::Finished, c.finished));
            for (st, n) in [
                (JobState::Delayed, c.delayed),
                (JobState::Ready, c.ready),
                (JobState::Reserved, c.reserved),
                (JobState::Dead, c.dead),
            ]
            .into_iter()
            .chain(finished)
            {
                let l = jobs.labels(&[topic.clone(), st.as_str().to_owned()], None);
                let _ = writeln!(out, "delayq_jobs{l} {n}");
            }
        }
        let paused = Meta::new(
            &self.topics,
            "delayq_topic_paused",
            "1 while the topic is paused (its jobs fall due but are not handed out).",
            ["topic"],
        );
        paused.header(&mut out, "gauge");
        for (topic, c) in g.jobs.iter().flatten().filter(|(_, c)| c.paused) {
            let l = paused.labels(&[label(topic, c)], None);
            let _ = writeln!(out, "delayq_topic_paused{l} 1");
        }
        groups::render(&self.topics, &g.groups, &mut out);
        for (name, help, age) in [
            (
                "delayq_topic_oldest_ready_seconds",
                "How long the topic's oldest ready job has waited since it fell due (absent: none ready).",
                (|c: &TopicCounts| c.oldest_ready_ms) as fn(&TopicCounts) -> Option<u64>,
            ),
            (
                "delayq_topic_oldest_overdue_seconds",
                "How long the topic's oldest due delayed job not yet moved to ready is overdue (absent: none among the earliest due entries).",
                |c: &TopicCounts| c.oldest_overdue_ms,
            ),
        ] {
            let meta = Meta::new(&self.topics, name, help, ["topic"]);
            meta.header(&mut out, "gauge");
            let mut by_label: BTreeMap<String, u64> = BTreeMap::new();
            for (topic, c) in g.jobs.iter().flatten() {
                if let Some(ms) = age(c) {
                    let v = by_label.entry(label(topic, c)).or_default();
                    *v = (*v).max(ms);
                }
            }
            for (l, ms) in by_label {
                let l = meta.labels(&[l], None);
                let _ = writeln!(out, "{name}{l} {}", ms as f64 / 1000.0);
            }
        }
        for (name, help, v) in [
            (
                "delayq_subscriber_connected",
                "1 while the expired-event subscriber is connected.",
                g.subscriber_connected as u64,
            ),
            (
                "delayq_waiting_pops",
                "Clients' pops waiting for a job in this process.",
                g.waiting_pops as u64,
            ),
            (
                "delayq_webhook_pops",
                "This process's webhook deliveries waiting for a job.",
                g.webhook_pops as u64,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        // Absent while not known (before the first canary, on a standby).
        if let Some(heard) = g.expired_events {
            let _ = writeln!(
                out,
                "# HELP delayq_expired_events_heard 1 when this instance's canary key's expired event was heard in the last check, 0 when not (only the sweep fires jobs then).\n# TYPE delayq_expired_events_heard gauge\ndelayq_expired_events_heard {}",
                heard as u64
            );
        }
        if !g.shards.is_empty() {
            let _ = writeln!(
                out,
                "# HELP delayq_shard_partitions Partitions by the state of their shard (ok, degraded: fewer replicas than --replica-acks, down: its master does not answer).\n# TYPE delayq_shard_partitions gauge"
            );
            for sh in &g.shards {
                let _ = writeln!(
                    out,
                    "delayq_shard_partitions{{shard=\"{}\",state=\"{}\"}} {}",
                    escape(&sh.node),
                    sh.state,
                    sh.partitions.len()
                );
            }
            let _ = writeln!(
                out,
                "# HELP delayq_shard_replicas Online replicas of each shard's master, as last seen.\n# TYPE delayq_shard_replicas gauge"
            );
            for sh in g.shards.iter().filter(|s| s.replicas.is_some()) {
                let _ = writeln!(
                    out,
                    "delayq_shard_replicas{{shard=\"{}\"}} {}",
                    escape(&sh.node),
                    sh.replicas.unwrap_or(0)
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_text_format() {
        let m = Metrics::default();
        m.pushed.inc(["a\"b"], 2);
        m.fire_lateness.observe([], 0.003);
        let text = m.render(&Gauges {
            waiting_pops: 3,
            ..Gauges::default()
        });
        assert!(
            text.contains("delayq_jobs_pushed_total{topic=\"a\\\"b\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("delayq_fire_lateness_seconds_bucket{le=\"0.002\"} 0\n"));
        assert!(text.contains("delayq_fire_lateness_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("delayq_fire_lateness_seconds_count 1\n"));
        assert!(text.contains("delayq_waiting_pops 3\n"));
        assert_eq!(m.pushed.get(["a\"b"]), 2);
    }

    #[test]
    fn topics_gone_quiet_and_empty_give_their_series_to_new_topics() {
        let m = Metrics::with_topic_limits(MAX_TOPIC_SERIES, std::time::Duration::ZERO);
        let old: Vec<String> = (0..MAX_TOPIC_SERIES).map(|i| format!("old{i}")).collect();
        for t in &old {
            m.pushed.inc([t], 1);
            m.webhook_duration.observe([t], 0.01);
        }
        // The last scrape saw jobs in old0 only.
        let mut jobs = BTreeMap::new();
        jobs.insert(
            "old0".to_owned(),
            TopicCounts {
                delayed: 1,
                ..TopicCounts::default()
            },
        );
        m.render(&Gauges {
            jobs: Some(jobs),
            ..Gauges::default()
        });
        for i in 0..10 {
            m.pushed.inc([&format!("new{i}")], 2);
        }
        for i in 0..10 {
            assert_eq!(m.pushed.get([&format!("new{i}")]), 2, "new{i}");
        }
        assert_eq!(m.pushed.get([OTHER_TOPICS]), 0);
        let text = m.render(&Gauges::default());
        assert!(
            text.contains("delayq_jobs_pushed_total{topic=\"new9\"} 2\n"),
            "{text}"
        );
        assert!(!text.contains("topic=\"_other\""));
        // The least recently active went first; the one with jobs stayed.
        assert!(text.contains("delayq_jobs_pushed_total{topic=\"old0\"} 1\n"));
        assert!(!text.contains("topic=\"old1\""), "old1's series remain");
        assert!(text.contains("delayq_jobs_pushed_total{topic=\"old11\"} 1\n"));
        let series = text
            .lines()
            .filter(|l| l.starts_with("delayq_jobs_pushed_total{"))
            .count();
        assert_eq!(series, MAX_TOPIC_SERIES);
    }

    #[test]
    fn recently_active_topics_keep_their_series() {
        let m = Metrics::default();
        for i in 0..MAX_TOPIC_SERIES {
            m.pushed.inc([&format!("t{i}")], 1);
        }
        m.pushed.inc(["late"], 1);
        assert_eq!(m.pushed.get([OTHER_TOPICS]), 1);
        assert_eq!(m.pushed.get(["t0"]), 1);
    }

    #[test]
    fn topics_past_the_limit_share_one_label() {
        let m = Metrics::default();
        for i in 0..MAX_TOPIC_SERIES + 10 {
            m.popped.inc([&format!("t{i}")], 1);
        }
        assert_eq!(m.popped.get([OTHER_TOPICS]), 10);
        assert_eq!(m.popped.total(), MAX_TOPIC_SERIES as u64 + 10);
    }
}
