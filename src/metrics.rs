//! Prometheus metrics: counters and histograms kept in process, rendered in
//! the text exposition format at `/metrics`.
//!
//! Typed: every series is a field of [`Metrics`], declared once with its
//! name, help and label names, and callers reach it by field
//! (`metrics.pushed.inc([topic], 1)`), so a name cannot drift from its
//! registration and a label cannot be forgotten (the label count is part of
//! the type). A small registry of our own rather than a metrics crate:
//! delayq has a dozen series, all known here.
//!
//! A std mutex guards each series: updates hold it for a map lookup, never
//! across an await.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use crate::store::TopicCounts;

/// Most distinct topics that get series of their own. Topics come and go
/// (an id per topic is a pattern we see), and every series lives as long as
/// the process: past this many, further topics share the label value
/// [`OTHER_TOPICS`], so `/metrics` stays bounded.
pub const MAX_TOPIC_SERIES: usize = 1000;
/// The `topic` label of topics beyond [`MAX_TOPIC_SERIES`].
pub const OTHER_TOPICS: &str = "_other";

/// Histogram bucket bounds, seconds: fine below 20 ms, where the lateness
/// promise lives; coarse above.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The topics that have series of their own.
#[derive(Default)]
struct Topics(Mutex<BTreeSet<String>>);

impl Topics {
    fn label(&self, topic: &str) -> String {
        let mut known = self.0.lock().unwrap();
        if known.contains(topic) || known.len() < MAX_TOPIC_SERIES {
            known.insert(topic.to_owned());
            topic.to_owned()
        } else {
            OTHER_TOPICS.to_owned()
        }
    }
}

/// What a series is called and what its labels are.
struct Meta<const N: usize> {
    name: &'static str,
    help: &'static str,
    labels: [&'static str; N],
    topics: Arc<Topics>,
}

impl<const N: usize> Meta<N> {
    fn new(
        t: &Arc<Topics>,
        name: &'static str,
        help: &'static str,
        labels: [&'static str; N],
    ) -> Self {
        Meta {
            name,
            help,
            labels,
            topics: t.clone(),
        }
    }

    fn key(&self, values: [&str; N]) -> [String; N] {
        std::array::from_fn(|i| {
            if self.labels[i] == "topic" {
                self.topics.label(values[i])
            } else {
                values[i].to_owned()
            }
        })
    }

    fn header(&self, out: &mut String, kind: &str) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
    }

    fn labels(&self, values: &[String; N], le: Option<&str>) -> String {
        let mut parts: Vec<String> = self
            .labels
            .iter()
            .zip(values)
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        if let Some(le) = le {
            parts.push(format!("le=\"{le}\""));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", parts.join(","))
        }
    }
}

/// A counter with `N` labels.
pub struct Counter<const N: usize> {
    meta: Meta<N>,
    values: Mutex<BTreeMap<[String; N], u64>>,
}

impl<const N: usize> Counter<N> {
    pub fn inc(&self, labels: [&str; N], by: u64) {
        if by > 0 {
            *self
                .values
                .lock()
                .unwrap()
                .entry(self.meta.key(labels))
                .or_default() += by;
        }
    }

    /// One series' value.
    pub fn get(&self, labels: [&str; N]) -> u64 {
        let key = self.meta.key(labels);
        self.values.lock().unwrap().get(&key).copied().unwrap_or(0)
    }

    /// All series added up.
    pub fn total(&self) -> u64 {
        self.values.lock().unwrap().values().sum()
    }

    fn render(&self, out: &mut String) {
        self.meta.header(out, "counter");
        for (l, v) in self.values.lock().unwrap().iter() {
            let _ = writeln!(out, "{}{} {v}", self.meta.name, self.meta.labels(l, None));
        }
    }
}

#[derive(Default)]
struct Buckets {
    counts: Vec<u64>,
    count: u64,
    sum: f64,
}

/// A histogram with `N` labels.
pub struct Histogram<const N: usize> {
    meta: Meta<N>,
    values: Mutex<BTreeMap<[String; N], Buckets>>,
}

impl<const N: usize> Histogram<N> {
    pub fn observe(&self, labels: [&str; N], seconds: f64) {
        let mut map = self.values.lock().unwrap();
        let h = map.entry(self.meta.key(labels)).or_default();
        if h.counts.is_empty() {
            h.counts = vec![0; BUCKETS.len()];
        }
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    fn render(&self, out: &mut String) {
        self.meta.header(out, "histogram");
        let name = self.meta.name;
        for (l, h) in self.values.lock().unwrap().iter() {
            for (bound, c) in BUCKETS.iter().zip(&h.counts) {
                let le = format!("{bound}");
                let _ = writeln!(out, "{name}_bucket{} {c}", self.meta.labels(l, Some(&le)));
            }
            let inf = self.meta.labels(l, Some("+Inf"));
            let _ = writeln!(out, "{name}_bucket{inf} {}", h.count);
            let _ = writeln!(out, "{name}_sum{} {}", self.meta.labels(l, None), h.sum);
            let _ = writeln!(out, "{name}_count{} {}", self.meta.labels(l, None), h.count);
        }
    }
}

/// What `/metrics` reads at scrape time.
#[derive(Default)]
pub struct Gauges {
    /// Queue depths per topic, from Redis (absent while Redis is away).
    pub jobs: Option<BTreeMap<String, TopicCounts>>,
    pub subscriber_connected: bool,
    pub waiting_pops: usize,
}

/// Every series delayq exports.
pub struct Metrics {
    topics: Arc<Topics>,
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

impl<const N: usize> Counter<N> {
    fn new(
        t: &Arc<Topics>,
        name: &'static str,
        help: &'static str,
        labels: [&'static str; N],
    ) -> Self {
        Counter {
            meta: Meta::new(t, name, help, labels),
            values: Mutex::default(),
        }
    }
}

impl<const N: usize> Histogram<N> {
    fn new(
        t: &Arc<Topics>,
        name: &'static str,
        help: &'static str,
        labels: [&'static str; N],
    ) -> Self {
        Histogram {
            meta: Meta::new(t, name, help, labels),
            values: Mutex::default(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let t = Arc::new(Topics::default());
        Metrics {
            pushed: Counter::new(
                &t,
                "delayq_jobs_pushed_total",
                "Jobs pushed (created or replaced).",
                ["topic"],
            ),
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
            ),
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
            ),
            deleted: Counter::new(&t, "delayq_jobs_deleted_total", "Jobs deleted.", ["topic"]),
            retried: Counter::new(
                &t,
                "delayq_jobs_retried_total",
                "Failed attempts (nack or lease expiry) followed by another attempt.",
                ["topic"],
            ),
            dead: Counter::new(
                &t,
                "delayq_jobs_dead_total",
                "Jobs that used up their attempts.",
                ["topic"],
            ),
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

        let jobs = Meta::new(
            &self.topics,
            "delayq_jobs",
            "Jobs by topic and state, read from Redis at scrape time.",
            ["topic", "state"],
        );
        jobs.header(&mut out, "gauge");
        // Topics beyond the series limit are summed under one label.
        let mut depths: BTreeMap<String, TopicCounts> = BTreeMap::new();
        for (topic, c) in g.jobs.iter().flatten() {
            let d = depths.entry(self.topics.label(topic)).or_default();
            d.delayed += c.delayed;
            d.ready += c.ready;
            d.reserved += c.reserved;
            d.dead += c.dead;
        }
        for (topic, c) in depths {
            for (st, n) in [
                ("delayed", c.delayed),
                ("ready", c.ready),
                ("reserved", c.reserved),
                ("dead", c.dead),
            ] {
                let l = jobs.labels(&[topic.clone(), st.to_owned()], None);
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
        for (topic, _) in g.jobs.iter().flatten().filter(|(_, c)| c.paused) {
            let l = paused.labels(&[self.topics.label(topic)], None);
            let _ = writeln!(out, "delayq_topic_paused{l} 1");
        }
        for (name, help, v) in [
            (
                "delayq_subscriber_connected",
                "1 while the expired-event subscriber is connected.",
                g.subscriber_connected as u64,
            ),
            (
                "delayq_waiting_pops",
                "Pops waiting for a job in this process.",
                g.waiting_pops as u64,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        out
    }
}

/// Label values escape backslash, double quote and newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
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
    fn topics_past_the_limit_share_one_label() {
        let m = Metrics::default();
        for i in 0..MAX_TOPIC_SERIES + 10 {
            m.popped.inc([&format!("t{i}")], 1);
        }
        assert_eq!(m.popped.get([OTHER_TOPICS]), 10);
        assert_eq!(m.popped.total(), MAX_TOPIC_SERIES as u64 + 10);
    }
}
