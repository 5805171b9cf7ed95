//! Prometheus text exposition (format 0.0.4) without a client library: labelled counters,
//! gauges and fixed-bucket histograms, owned by the runner and rendered on request. Every
//! metric is declared once in `catalog`; the registry takes those declarations, so a name,
//! its kind, help and labels cannot drift apart between call sites.
pub mod catalog;
pub mod kernel;

use std::{collections::BTreeMap, fmt::Write};

pub use catalog::{Kind, Metric};

/// Label pairs in the order they are written.
pub type Labels = Vec<(&'static str, String)>;

/// Upper bounds, in seconds, for probe round-trip times: 100 us to 10 s.
pub const RTT_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Upper bounds, in seconds, for scheduler lateness (due time to send): 50 us to 1 s.
pub const LATENESS_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Fixed-bucket observations: one series of a histogram family, or a batch of observations
/// gathered off the registry and merged into it at once (`Registry::merge`).
#[derive(Debug, Clone)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket, not cumulative; cumulated when rendered.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn add(&mut self, other: &Histogram) {
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        self.sum += other.sum;
        self.count += other.count;
    }
}

#[derive(Debug, Clone)]
enum Family {
    Counter(BTreeMap<Labels, u64>),
    Gauge(BTreeMap<Labels, f64>),
    Histogram(&'static [f64], BTreeMap<Labels, Histogram>),
}

/// Every metric by name, with its declaration.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    families: BTreeMap<&'static str, (&'static Metric, Family)>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    fn family(&mut self, metric: &'static Metric, labels: &Labels) -> &mut Family {
        debug_assert!(
            labels.len() == metric.labels.len() && labels.iter().zip(metric.labels).all(|((k, _), want)| k == want),
            "{}: labels {labels:?}, declared {:?}",
            metric.name,
            metric.labels
        );
        let (_, fam) = self.families.entry(metric.name).or_insert_with(|| {
            let fam = match metric.kind {
                Kind::Counter => Family::Counter(BTreeMap::new()),
                Kind::Gauge => Family::Gauge(BTreeMap::new()),
                Kind::Histogram(bounds) => Family::Histogram(bounds, BTreeMap::new()),
            };
            (metric, fam)
        });
        fam
    }

    /// Adds `by` to a counter.
    pub fn inc(&mut self, metric: &'static Metric, labels: Labels, by: u64) {
        match self.family(metric, &labels) {
            Family::Counter(m) => *m.entry(labels).or_default() += by,
            _ => debug_assert!(false, "{} is not a counter", metric.name),
        }
    }

    /// Sets a counter to a total counted elsewhere (the kernel's counters).
    pub fn set_total(&mut self, metric: &'static Metric, labels: Labels, total: u64) {
        match self.family(metric, &labels) {
            Family::Counter(m) => {
                m.insert(labels, total);
            }
            _ => debug_assert!(false, "{} is not a counter", metric.name),
        }
    }

    /// Sets a gauge.
    pub fn set(&mut self, metric: &'static Metric, labels: Labels, v: f64) {
        match self.family(metric, &labels) {
            Family::Gauge(m) => {
                m.insert(labels, v);
            }
            _ => debug_assert!(false, "{} is not a gauge", metric.name),
        }
    }

    /// Drops every series of a metric, before it is set afresh (per-profile statuses after a
    /// reload removed a profile, the queues of a consumer that has gone).
    pub fn clear(&mut self, metric: &'static Metric) {
        match self.families.get_mut(metric.name) {
            Some((_, Family::Gauge(m))) => m.clear(),
            Some((_, Family::Counter(m))) => m.clear(),
            Some((_, Family::Histogram(_, m))) => m.clear(),
            None => {}
        }
    }

    /// Records one observation in a histogram (a batch of one; hot paths gather a
    /// `Histogram` and `merge` it).
    #[cfg(test)]
    pub fn observe(&mut self, metric: &'static Metric, labels: Labels, v: std::time::Duration) {
        let Kind::Histogram(bounds) = metric.kind else {
            debug_assert!(false, "{} is not a histogram", metric.name);
            return;
        };
        let mut one = Histogram::new(bounds);
        one.observe(v.as_secs_f64());
        self.merge(metric, labels, &one);
    }

    /// Adds a batch of observations (made with the metric's bounds) to a histogram series.
    pub fn merge(&mut self, metric: &'static Metric, labels: Labels, batch: &Histogram) {
        match self.family(metric, &labels) {
            Family::Histogram(bounds, m) => {
                debug_assert_eq!(*bounds, batch.bounds, "{}: merged with other bounds", metric.name);
                m.entry(labels).or_insert_with(|| Histogram::new(bounds)).add(batch);
            }
            _ => debug_assert!(false, "{} is not a histogram", metric.name),
        }
    }

    /// A counter's value, for tests.
    #[cfg(test)]
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.families.get(name) {
            Some((_, Family::Counter(m))) => m
                .iter()
                .filter(|(l, _)| labels.iter().all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v)))
                .map(|(_, v)| v)
                .sum(),
            _ => 0,
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, (metric, fam)) in &self.families {
            let _ = writeln!(out, "# HELP {name} {}", metric.help);
            let _ = writeln!(out, "# TYPE {name} {}", metric.kind.name());
            match fam {
                Family::Counter(m) => {
                    for (labels, v) in m {
                        let _ = writeln!(out, "{name}{} {v}", label_text(labels, None));
                    }
                }
                Family::Gauge(m) => {
                    for (labels, v) in m {
                        let _ = writeln!(out, "{name}{} {v}", label_text(labels, None));
                    }
                }
                Family::Histogram(bounds, m) => {
                    for (labels, h) in m {
                        let mut cumulative = 0;
                        for (b, c) in bounds.iter().zip(&h.counts) {
                            cumulative += c;
                            let le = format!("{b}");
                            let _ = writeln!(out, "{name}_bucket{} {cumulative}", label_text(labels, Some(&le)));
                        }
                        let _ = writeln!(out, "{name}_bucket{} {}", label_text(labels, Some("+Inf")), h.count);
                        let _ = writeln!(out, "{name}_sum{} {}", label_text(labels, None), h.sum);
                        let _ = writeln!(out, "{name}_count{} {}", label_text(labels, None), h.count);
                    }
                }
            }
        }
        out
    }
}

fn label_text(labels: &Labels, le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    format!("{{{}}}", parts.join(","))
}

/// Label values escape backslash, quote and newline (exposition format rules).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const X: Metric = Metric::counter("probed_x_total", "x", &["kind"]);
    const G: Metric = Metric::gauge("probed_g", "g", &["path"]);
    const H: Metric = Metric::histogram("probed_h_seconds", "h", &[0.001, 0.01], &[]);
    const HP: Metric = Metric::histogram("probed_h_seconds", "h", &[0.001, 0.01], &["p"]);

    #[test]
    fn renders_counters_gauges_and_cumulative_histograms() {
        let mut r = Registry::new();
        r.inc(&X, vec![("kind", "tcp".into())], 2);
        r.inc(&X, vec![("kind", "tcp".into())], 1);
        r.set(&G, vec![("path", "a\"b".into())], 1.0);
        r.observe(&H, vec![], Duration::from_micros(500));
        r.observe(&H, vec![], Duration::from_millis(5));
        r.observe(&H, vec![], Duration::from_secs(1));
        let text = r.render();
        assert!(
            text.contains("# TYPE probed_x_total counter\nprobed_x_total{kind=\"tcp\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("probed_g{path=\"a\\\"b\"} 1\n"), "{text}");
        assert!(text.contains("probed_h_seconds_bucket{le=\"0.001\"} 1\n"), "{text}");
        assert!(text.contains("probed_h_seconds_bucket{le=\"0.01\"} 2\n"), "{text}");
        assert!(text.contains("probed_h_seconds_bucket{le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("probed_h_seconds_count 3\n"), "{text}");
        assert_eq!(r.counter("probed_x_total", &[("kind", "tcp")]), 3);
        assert_eq!(r.counter("probed_x_total", &[("kind", "udp")]), 0);
    }

    #[test]
    fn a_merged_batch_counts_as_its_observations_would() {
        let Kind::Histogram(bounds) = HP.kind else {
            unreachable!()
        };
        let mut one_by_one = Registry::new();
        let mut batched = Registry::new();
        let mut batch = Histogram::new(bounds);
        for us in [500, 5_000, 50_000, 700] {
            let d = Duration::from_micros(us);
            one_by_one.observe(&HP, vec![("p", "a".into())], d);
            batch.observe(d.as_secs_f64());
        }
        batched.merge(&HP, vec![("p", "a".into())], &batch);
        assert_eq!(one_by_one.render(), batched.render());
        assert!(batched
            .render()
            .contains("probed_h_seconds_bucket{p=\"a\",le=\"0.001\"} 2\n"));
    }
}
