//! The series types: counters and histograms with typed labels, and their
//! text rendering.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use super::topics::{Forget, Topics};
use crate::stats::{Kind, Recorder};
use crate::store::counts::BUCKETS;

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
pub(super) struct Meta<const N: usize> {
    name: &'static str,
    help: &'static str,
    labels: [&'static str; N],
    topics: Arc<Topics>,
}

impl<const N: usize> Meta<N> {
    pub(super) fn new(
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

    pub(super) fn key(&self, values: [&str; N]) -> [String; N] {
        std::array::from_fn(|i| {
            if self.labels[i] == "topic" {
                self.topics.label(values[i])
            } else {
                values[i].to_owned()
            }
        })
    }

    /// [`key`](Self::key) without making the topic active or known.
    pub(super) fn peek_key(&self, values: [&str; N]) -> [String; N] {
        std::array::from_fn(|i| {
            if self.labels[i] == "topic" {
                self.topics.peek(values[i])
            } else {
                values[i].to_owned()
            }
        })
    }

    pub(super) fn header(&self, out: &mut String, kind: &str) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
    }

    pub(super) fn labels(&self, values: &[String; N], le: Option<&str>) -> String {
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
    /// Also counted into the shared throughput (by raw topic).
    tap: Option<(Arc<Recorder>, Kind)>,
}

impl<const N: usize> Counter<N> {
    pub fn inc(&self, labels: [&str; N], by: u64) {
        if by > 0 {
            if let (Some((r, kind)), Some(i)) = (&self.tap, self.values.topic_at) {
                r.count(*kind, labels[i], by);
            }
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

    pub(super) fn render(&self, out: &mut String) {
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

    pub(super) fn render(&self, out: &mut String) {
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

impl<const N: usize> Counter<N> {
    pub(super) fn new(
        t: &Arc<Topics>,
        name: &'static str,
        help: &'static str,
        labels: [&'static str; N],
    ) -> Self {
        Counter {
            meta: Meta::new(t, name, help, labels),
            values: Values::registered(t, labels),
            tap: None,
        }
    }

    /// Counts into `r` as `kind` too (throughput in Redis, every instance).
    pub(super) fn tapped(mut self, r: &Arc<Recorder>, kind: Kind) -> Self {
        self.tap = Some((r.clone(), kind));
        self
    }
}

impl<const N: usize> Histogram<N> {
    pub(super) fn new(
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

/// Label values escape backslash, double quote and newline.
pub(super) fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
