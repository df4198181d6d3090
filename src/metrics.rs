//! Prometheus metrics: counters and histograms kept in process, rendered in
//! the text exposition format at `/metrics`.
//!
//! A small registry of our own rather than a metrics crate: delayq has a
//! dozen series, all known here, and this keeps their names, help texts and
//! buckets in one readable table. A std mutex guards each map: updates hold
//! it for a map lookup, never across an await.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::Mutex;

/// (name, kind, help) of every series delayq exports.
pub const SERIES: &[(&str, &str, &str)] = &[
    (
        "delayq_jobs_pushed_total",
        "counter",
        "Jobs pushed (created or replaced).",
    ),
    (
        "delayq_jobs_dispatched_total",
        "counter",
        "Jobs handed over because they fell due, by the path that did it (event or sweep).",
    ),
    (
        "delayq_jobs_popped_total",
        "counter",
        "Jobs handed to consumers.",
    ),
    (
        "delayq_jobs_finished_total",
        "counter",
        "Jobs finished by their consumer.",
    ),
    ("delayq_jobs_deleted_total", "counter", "Jobs deleted."),
    (
        "delayq_jobs_retried_total",
        "counter",
        "Failed attempts (nack or lease expiry) followed by another attempt.",
    ),
    (
        "delayq_jobs_dead_total",
        "counter",
        "Jobs that used up their attempts.",
    ),
    (
        "delayq_webhook_deliveries_total",
        "counter",
        "Webhook deliveries by outcome: success, http_error, timeout, connection_error.",
    ),
    (
        "delayq_webhook_duration_seconds",
        "histogram",
        "Webhook request duration.",
    ),
    (
        "delayq_fire_lateness_seconds",
        "histogram",
        "Hand-over (dispatch) time minus due time, Redis clock.",
    ),
    (
        "delayq_redis_errors_total",
        "counter",
        "Redis calls that failed or timed out.",
    ),
    (
        "delayq_jobs",
        "gauge",
        "Jobs by topic and state, read from Redis at scrape time.",
    ),
    (
        "delayq_subscriber_connected",
        "gauge",
        "1 while the expired-event subscriber is connected.",
    ),
    (
        "delayq_waiting_pops",
        "gauge",
        "Pops waiting for a job in this process.",
    ),
];

/// Histogram bucket bounds, seconds: fine below 20 ms, where the lateness
/// promise lives; coarse above.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

type Labels = Vec<(&'static str, String)>;

/// Most distinct topics that get series of their own. Topics come and go
/// (an id per topic is a pattern we see), and every series lives as long as
/// the process: past this many, further topics share the label value
/// [`OTHER_TOPICS`], so `/metrics` stays bounded.
pub const MAX_TOPIC_SERIES: usize = 1000;
/// The `topic` label of topics beyond [`MAX_TOPIC_SERIES`].
pub const OTHER_TOPICS: &str = "_other";

#[derive(Default)]
struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

#[derive(Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<(&'static str, Labels), u64>>,
    histograms: Mutex<BTreeMap<(&'static str, Labels), Histogram>>,
    /// Topics that have series of their own.
    topics: Mutex<BTreeSet<String>>,
}

impl Metrics {
    /// The label value a topic is counted under.
    pub fn topic_label<'a>(&self, topic: &'a str) -> &'a str {
        let mut known = self.topics.lock().unwrap();
        if known.contains(topic) {
            return topic;
        }
        if known.len() < MAX_TOPIC_SERIES {
            known.insert(topic.to_owned());
            return topic;
        }
        OTHER_TOPICS
    }

    fn labels(&self, l: &[(&'static str, &str)]) -> Labels {
        l.iter()
            .map(|(k, v)| {
                let v = if *k == "topic" {
                    self.topic_label(v)
                } else {
                    v
                };
                (*k, v.to_string())
            })
            .collect()
    }

    pub fn inc(&self, name: &'static str, l: &[(&'static str, &str)], by: u64) {
        if by > 0 {
            *self
                .counters
                .lock()
                .unwrap()
                .entry((name, self.labels(l)))
                .or_default() += by;
        }
    }

    pub fn observe(&self, name: &'static str, l: &[(&'static str, &str)], seconds: f64) {
        let mut map = self.histograms.lock().unwrap();
        let h = map.entry((name, self.labels(l))).or_default();
        if h.buckets.is_empty() {
            h.buckets = vec![0; BUCKETS.len()];
        }
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                h.buckets[i] += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    /// Current value of one counter (for tests and stats).
    pub fn counter(&self, name: &'static str, l: &[(&'static str, &str)]) -> u64 {
        let key = (name, self.labels(l));
        self.counters
            .lock()
            .unwrap()
            .get(&key)
            .copied()
            .unwrap_or(0)
    }

    /// Renders everything, with `gauges` (name, labels, value) read by the
    /// caller at scrape time.
    pub fn render(&self, gauges: &[(&'static str, Labels, f64)]) -> String {
        let counters = self.counters.lock().unwrap();
        let histograms = self.histograms.lock().unwrap();
        let mut out = String::new();
        for (name, kind, help) in SERIES {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for ((n, l), v) in counters.iter().filter(|((n, _), _)| n == name) {
                let _ = writeln!(out, "{n}{} {v}", render_labels(l, None));
            }
            for ((n, l), h) in histograms.iter().filter(|((n, _), _)| n == name) {
                for (bound, c) in BUCKETS.iter().zip(&h.buckets) {
                    let le = format!("{bound}");
                    let _ = writeln!(out, "{n}_bucket{} {c}", render_labels(l, Some(&le)));
                }
                let _ = writeln!(
                    out,
                    "{n}_bucket{} {}",
                    render_labels(l, Some("+Inf")),
                    h.count
                );
                let _ = writeln!(out, "{n}_sum{} {}", render_labels(l, None), h.sum);
                let _ = writeln!(out, "{n}_count{} {}", render_labels(l, None), h.count);
            }
            for (n, l, v) in gauges.iter().filter(|(n, _, _)| n == name) {
                let _ = writeln!(out, "{n}{} {v}", render_labels(l, None));
            }
        }
        out
    }
}

fn render_labels(l: &Labels, le: Option<&str>) -> String {
    let mut parts: Vec<String> = l
        .iter()
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
        m.inc("delayq_jobs_pushed_total", &[("topic", "a\"b")], 2);
        m.observe("delayq_fire_lateness_seconds", &[], 0.003);
        let text = m.render(&[("delayq_waiting_pops", vec![], 3.0)]);
        assert!(
            text.contains("delayq_jobs_pushed_total{topic=\"a\\\"b\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("delayq_fire_lateness_seconds_bucket{le=\"0.002\"} 0\n"));
        assert!(text.contains("delayq_fire_lateness_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("delayq_fire_lateness_seconds_count 1\n"));
        assert!(text.contains("delayq_waiting_pops 3\n"));
    }
}
