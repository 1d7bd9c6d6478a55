//! Prometheus metrics, kept by hand: a few atomics per request is all the hot
//! path can afford, and the text format is simple. The key one is
//! `metaclaw_overhead_seconds`: time spent in metaclaw rather than waiting
//! on the upstream (total − upstream), per request.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A counter with labels; label sets are few (routes × statuses, kinds).
pub struct LabeledCounter {
    values: Mutex<BTreeMap<Vec<String>, u64>>,
}

impl LabeledCounter {
    fn new() -> Self {
        Self {
            values: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn inc(&self, labels: &[&str]) {
        if let Ok(mut map) = self.values.lock() {
            let key: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
            *map.entry(key).or_insert(0) += 1;
        }
    }

    pub fn get(&self, labels: &[&str]) -> u64 {
        let key: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
        self.values
            .lock()
            .ok()
            .and_then(|m| m.get(&key).copied())
            .unwrap_or(0)
    }

    fn render(&self, out: &mut String, name: &str, help: &str, label_names: &[&str]) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        let Ok(map) = self.values.lock() else { return };
        for (labels, value) in map.iter() {
            let pairs: Vec<String> = label_names
                .iter()
                .zip(labels)
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = writeln!(out, "{name}{{{}}} {value}", pairs.join(","));
        }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A fixed-bucket histogram in seconds.
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, seconds: f64) {
        let seconds = seconds.max(0.0);
        if let Some(i) = self.bounds.iter().position(|b| seconds <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_nanos
            .fetch_add((seconds * 1e9) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The `q` quantile (in [0, 1]) estimated from the buckets as
    /// Prometheus's `histogram_quantile` does: linear within its bucket;
    /// past the last bound, that bound. None before any observation.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut below = 0u64;
        let mut lower = 0.0;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            let n = bucket.load(Ordering::Relaxed);
            if n > 0 && (below + n) as f64 >= rank {
                let within = (rank - below as f64) / n as f64;
                return Some(lower + (bound - lower) * within.clamp(0.0, 1.0));
            }
            below += n;
            lower = *bound;
        }
        self.bounds.last().copied()
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

const OVERHEAD_BOUNDS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
];
const LATENCY_BOUNDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Events in the last minute, in one-second slots (approximate under
/// races: a slot is reset by the first event of its next second).
pub struct LastMinute {
    slots: [(AtomicU64, AtomicU64); 60],
}

impl Default for LastMinute {
    fn default() -> Self {
        Self {
            slots: std::array::from_fn(|_| (AtomicU64::new(0), AtomicU64::new(0))),
        }
    }
}

impl LastMinute {
    pub fn tick(&self) {
        self.tick_at(unix_seconds());
    }

    fn tick_at(&self, second: u64) {
        let (at, n) = &self.slots[(second % 60) as usize];
        if at.swap(second, Ordering::Relaxed) != second {
            n.store(0, Ordering::Relaxed);
        }
        n.fetch_add(1, Ordering::Relaxed);
    }

    /// Events in the 60 seconds up to now.
    pub fn count(&self) -> u64 {
        self.count_at(unix_seconds())
    }

    fn count_at(&self, now: u64) -> u64 {
        self.slots
            .iter()
            .filter(|(at, _)| now.saturating_sub(at.load(Ordering::Relaxed)) < 60)
            .map(|(_, n)| n.load(Ordering::Relaxed))
            .sum()
    }
}

fn unix_seconds() -> u64 {
    (crate::clock::now_ms().max(0) / 1000) as u64
}

pub struct Metrics {
    /// Requests on the turn routes in the last minute.
    pub turns_last_minute: LastMinute,
    pub requests: LabeledCounter,
    pub errors: LabeledCounter,
    pub upstream_latency: Histogram,
    pub overhead: Histogram,
    pub turns_recorded: Counter,
    pub turns_unrecorded: Counter,
    pub store_errors: Counter,
    pub sessions_started: Counter,
    pub sessions_ended: LabeledCounter,
    /// Turns whose `plugins.turn_budget` ran out before every plugin call
    /// answered.
    pub turns_over_plugin_budget: Counter,
    /// Calls left out of a turn by `plugins.turn_budget`, by plugin
    /// (`name@version`: as many label sets as loaded plugins).
    pub plugin_turn_cuts: LabeledCounter,
}

/// Values read at render time rather than counted.
pub struct Gauges {
    pub uptime_seconds: f64,
    pub store_queue_depth: usize,
    pub active_sessions: usize,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self {
            requests: LabeledCounter::new(),
            errors: LabeledCounter::new(),
            upstream_latency: Histogram::new(LATENCY_BOUNDS),
            turns_last_minute: LastMinute::default(),
            overhead: Histogram::new(OVERHEAD_BOUNDS),
            turns_recorded: Counter::default(),
            turns_unrecorded: Counter::default(),
            store_errors: Counter::default(),
            sessions_started: Counter::default(),
            sessions_ended: LabeledCounter::new(),
            turns_over_plugin_budget: Counter::default(),
            plugin_turn_cuts: LabeledCounter::new(),
        }
    }

    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::with_capacity(4096);
        self.requests.render(
            &mut out,
            "metaclaw_requests_total",
            "HTTP requests answered, by route and status.",
            &["route", "status"],
        );
        self.errors.render(
            &mut out,
            "metaclaw_errors_total",
            "Failed requests, by kind.",
            &["kind"],
        );
        self.upstream_latency.render(
            &mut out,
            "metaclaw_upstream_latency_seconds",
            "From sending a request upstream to the end of the upstream's answer.",
        );
        self.overhead.render(
            &mut out,
            "metaclaw_overhead_seconds",
            "Time added by metaclaw: total request time minus time waiting on the upstream.",
        );
        for (name, help, value) in [
            (
                "metaclaw_turns_recorded_total",
                "Turns committed to the store.",
                self.turns_recorded.get(),
            ),
            (
                "metaclaw_turns_unrecorded_total",
                "Turns served but not recorded (store queue full or failing).",
                self.turns_unrecorded.get(),
            ),
            (
                "metaclaw_store_errors_total",
                "Failed store commits.",
                self.store_errors.get(),
            ),
            (
                "metaclaw_sessions_started_total",
                "Sessions started.",
                self.sessions_started.get(),
            ),
            (
                "metaclaw_turns_over_plugin_budget_total",
                "Turns whose plugins.turn_budget ran out before every retriever and executable skill answered.",
                self.turns_over_plugin_budget.get(),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        self.sessions_ended.render(
            &mut out,
            "metaclaw_sessions_ended_total",
            "Sessions ended, by reason.",
            &["reason"],
        );
        self.plugin_turn_cuts.render(
            &mut out,
            "metaclaw_plugin_turn_budget_cuts_total",
            "Plugin calls left out of a turn because plugins.turn_budget ran out (legal, not failures), by plugin.",
            &["plugin"],
        );
        for (name, help, value) in [
            (
                "metaclaw_uptime_seconds",
                "Seconds since start.",
                gauges.uptime_seconds,
            ),
            (
                "metaclaw_store_queue_depth",
                "Turns in flight or waiting to be written.",
                gauges.store_queue_depth as f64,
            ),
            (
                "metaclaw_active_sessions",
                "Sessions currently open.",
                gauges.active_sessions as f64,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new();
        m.requests.inc(&["/v1/chat/completions", "200"]);
        m.requests.inc(&["/v1/chat/completions", "200"]);
        m.errors.inc(&["upstream_unreachable"]);
        m.overhead.observe(0.0003);
        m.overhead.observe(0.2);
        let text = m.render(&Gauges {
            uptime_seconds: 1.0,
            store_queue_depth: 0,
            active_sessions: 2,
        });
        assert!(
            text.contains(
                "metaclaw_requests_total{route=\"/v1/chat/completions\",status=\"200\"} 2"
            )
        );
        assert!(text.contains("metaclaw_errors_total{kind=\"upstream_unreachable\"} 1"));
        assert!(text.contains("metaclaw_overhead_seconds_bucket{le=\"0.0005\"} 1"));
        assert!(text.contains("metaclaw_overhead_seconds_bucket{le=\"+Inf\"} 2"));
        assert!(text.contains("metaclaw_overhead_seconds_count 2"));
        assert!(text.contains("metaclaw_active_sessions 2"));
    }

    #[test]
    fn quantiles_come_from_the_buckets() {
        let m = Metrics::new();
        assert_eq!(m.overhead.quantile(0.5), None);
        // 90 in (0.0001, 0.00025], 10 in (0.001, 0.0025].
        for _ in 0..90 {
            m.overhead.observe(0.0002);
        }
        for _ in 0..10 {
            m.overhead.observe(0.002);
        }
        let p50 = m.overhead.quantile(0.5).unwrap();
        assert!((0.0001..=0.00025).contains(&p50), "{p50}");
        let p99 = m.overhead.quantile(0.99).unwrap();
        assert!((0.001..=0.0025).contains(&p99), "{p99}");
        // Past the last bound: the last bound.
        m.overhead.observe(5.0);
        assert_eq!(m.overhead.quantile(1.0), Some(0.1));
    }

    #[test]
    fn the_last_minute_forgets_older_seconds() {
        let rate = LastMinute::default();
        rate.tick_at(1000);
        rate.tick_at(1000);
        rate.tick_at(1030);
        assert_eq!(rate.count_at(1030), 3);
        assert_eq!(rate.count_at(1059), 3);
        assert_eq!(rate.count_at(1060), 1, "second 1000 is a minute old");
        // Its slot comes round again: reset, not added to.
        rate.tick_at(1060);
        assert_eq!(rate.count_at(1060), 2);
    }
}
