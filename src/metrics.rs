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

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::job::JobState;
use crate::store::TopicCounts;

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

/// Histogram bucket bounds, seconds: fine below 20 ms, where the lateness
/// promise lives; coarse above.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A topic with series of its own.
struct Known {
    /// Last counted event or scrape with jobs.
    active: Instant,
    /// The same as a sequence number (Instants may tie): the least
    /// recently active goes first.
    order: u64,
    /// It had jobs at the last scrape that read them.
    has_jobs: bool,
}

/// Series that can drop a forgotten topic's values.
trait Forget: Send + Sync {
    fn forget(&self, topic: &str);
}

/// The topics that have series of their own, and every series with a
/// `topic` label (to forget a topic in all of them at once).
struct Topics {
    max: usize,
    idle: Duration,
    known: Mutex<(HashMap<String, Known>, u64)>,
    series: Mutex<Vec<Arc<dyn Forget>>>,
}

impl Topics {
    fn new(max: usize, idle: Duration) -> Self {
        Topics {
            max,
            idle,
            known: Mutex::default(),
            series: Mutex::default(),
        }
    }

    /// The label for `topic`, now active: its own, unless every place is
    /// taken by topics that may not be forgotten yet.
    ///
    /// Lock order: this lock, then a series' map; callers must not hold a
    /// series' map while calling it.
    fn label(&self, topic: &str) -> String {
        if topic == OTHER_TOPICS {
            return topic.to_owned();
        }
        let mut guard = self.known.lock().unwrap();
        let (known, tick) = &mut *guard;
        *tick += 1;
        let now = Instant::now();
        if let Some(k) = known.get_mut(topic) {
            k.active = now;
            k.order = *tick;
            return topic.to_owned();
        }
        if known.len() >= self.max {
            // O(topics with series), at most MAX_TOPIC_SERIES, and only
            // when a new topic comes while all places are taken.
            let gone = known
                .iter()
                .filter(|(_, k)| !k.has_jobs && now.duration_since(k.active) >= self.idle)
                .min_by_key(|(_, k)| k.order)
                .map(|(t, _)| t.clone());
            let Some(gone) = gone else {
                return OTHER_TOPICS.to_owned();
            };
            known.remove(&gone);
            for s in self.series.lock().unwrap().iter() {
                s.forget(&gone);
            }
        }
        known.insert(
            topic.to_owned(),
            Known {
                active: now,
                order: *tick,
                has_jobs: false,
            },
        );
        topic.to_owned()
    }

    /// The label `topic` has now, changing nothing.
    fn peek(&self, topic: &str) -> String {
        let known = &self.known.lock().unwrap().0;
        if known.contains_key(topic) || known.len() < self.max {
            topic.to_owned()
        } else {
            OTHER_TOPICS.to_owned()
        }
    }

    /// Records which topics have jobs, as a scrape read them.
    fn saw_jobs(&self, jobs: &BTreeMap<String, TopicCounts>) {
        let now = Instant::now();
        let mut guard = self.known.lock().unwrap();
        let (known, tick) = &mut *guard;
        for (topic, k) in known.iter_mut() {
            k.has_jobs = jobs.get(topic).is_some_and(has_jobs);
            if k.has_jobs {
                *tick += 1;
                k.active = now;
                k.order = *tick;
            }
        }
    }
}

fn has_jobs(c: &TopicCounts) -> bool {
    c.delayed + c.ready + c.reserved + c.dead > 0
}

/// The values of one series by label values; `topic_at` is the position of
/// its `topic` label, if it has one.
struct Values<V, const N: usize> {
    map: Mutex<BTreeMap<[String; N], V>>,
    topic_at: Option<usize>,
}

impl<V: Send, const N: usize> Forget for Values<V, N> {
    fn forget(&self, topic: &str) {
        if let Some(i) = self.topic_at {
            self.map.lock().unwrap().retain(|k, _| k[i] != topic);
        }
    }
}

impl<V: Send + 'static, const N: usize> Values<V, N> {
    fn registered(t: &Arc<Topics>, labels: [&'static str; N]) -> Arc<Self> {
        let v = Arc::new(Values {
            map: Mutex::default(),
            topic_at: labels.iter().position(|l| *l == "topic"),
        });
        if v.topic_at.is_some() {
            t.series.lock().unwrap().push(v.clone());
        }
        v
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

    /// [`key`](Self::key) without making the topic active or known.
    fn peek_key(&self, values: [&str; N]) -> [String; N] {
        std::array::from_fn(|i| {
            if self.labels[i] == "topic" {
                self.topics.peek(values[i])
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
    values: Arc<Values<u64, N>>,
}

impl<const N: usize> Counter<N> {
    pub fn inc(&self, labels: [&str; N], by: u64) {
        if by > 0 {
            // The key first: it may forget a topic in every series.
            let key = self.meta.key(labels);
            *self.values.map.lock().unwrap().entry(key).or_default() += by;
        }
    }

    /// One series' value.
    pub fn get(&self, labels: [&str; N]) -> u64 {
        let key = self.meta.peek_key(labels);
        self.values
            .map
            .lock()
            .unwrap()
            .get(&key)
            .copied()
            .unwrap_or(0)
    }

    /// All series added up.
    pub fn total(&self) -> u64 {
        self.values.map.lock().unwrap().values().sum()
    }

    fn render(&self, out: &mut String) {
        self.meta.header(out, "counter");
        for (l, v) in self.values.map.lock().unwrap().iter() {
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
    values: Arc<Values<Buckets, N>>,
}

impl<const N: usize> Histogram<N> {
    pub fn observe(&self, labels: [&str; N], seconds: f64) {
        let key = self.meta.key(labels);
        let mut map = self.values.map.lock().unwrap();
        let h = map.entry(key).or_default();
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
        for (l, h) in self.values.map.lock().unwrap().iter() {
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
    /// Each shard's state (watched with replica acks or on a cluster).
    pub shards: Vec<crate::store::health::Shard>,
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
            values: Values::registered(t, labels),
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
            values: Values::registered(t, labels),
        }
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
        let _ = writeln!(
            out,
            "# HELP delayq_build_info The running build: its version as `delayq --version` prints it.\n# TYPE delayq_build_info gauge\ndelayq_build_info{{version=\"{}\"}} 1",
            crate::VERSION
        );

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
        }
        for (topic, c) in depths {
            for (st, n) in [
                (JobState::Delayed, c.delayed),
                (JobState::Ready, c.ready),
                (JobState::Reserved, c.reserved),
                (JobState::Dead, c.dead),
            ] {
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
