//! Prometheus text exposition (format 0.0.4) without a client library: labelled counters,
//! gauges and fixed-bucket histograms, owned by the runner and rendered on request.
use std::{collections::BTreeMap, fmt::Write, time::Duration};

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

/// Every metric by name, with its help line. Names are fixed at the call sites.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    families: BTreeMap<&'static str, (&'static str, Family)>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `by` to a counter.
    pub fn inc(&mut self, name: &'static str, help: &'static str, labels: Labels, by: u64) {
        let (_, fam) = self
            .families
            .entry(name)
            .or_insert_with(|| (help, Family::Counter(BTreeMap::new())));
        if let Family::Counter(m) = fam {
            *m.entry(labels).or_default() += by;
        }
    }

    /// Sets a gauge.
    pub fn set(&mut self, name: &'static str, help: &'static str, labels: Labels, v: f64) {
        let (_, fam) = self
            .families
            .entry(name)
            .or_insert_with(|| (help, Family::Gauge(BTreeMap::new())));
        if let Family::Gauge(m) = fam {
            m.insert(labels, v);
        }
    }

    /// Drops every series of a gauge, before it is set afresh (e.g. per-profile statuses
    /// after a reload removed a profile).
    pub fn clear_gauge(&mut self, name: &'static str) {
        if let Some((_, Family::Gauge(m))) = self.families.get_mut(name) {
            m.clear();
        }
    }

    /// Records one observation in a histogram with the given bucket bounds (a batch of one;
    /// hot paths gather a `Histogram` and `merge` it).
    pub fn observe(
        &mut self,
        name: &'static str,
        help: &'static str,
        bounds: &'static [f64],
        labels: Labels,
        v: Duration,
    ) {
        let mut one = Histogram::new(bounds);
        one.observe(v.as_secs_f64());
        self.merge(name, help, labels, &one);
    }

    /// Adds a batch of observations (made with the same bounds) to a histogram series.
    pub fn merge(&mut self, name: &'static str, help: &'static str, labels: Labels, batch: &Histogram) {
        let (_, fam) = self
            .families
            .entry(name)
            .or_insert_with(|| (help, Family::Histogram(batch.bounds, BTreeMap::new())));
        if let Family::Histogram(bounds, m) = fam {
            debug_assert_eq!(*bounds, batch.bounds, "{name}: merged with other bounds");
            m.entry(labels).or_insert_with(|| Histogram::new(bounds)).add(batch);
        }
    }

    /// A counter's value, for tests and the status summary.
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
        for (name, (help, fam)) in &self.families {
            let kind = match fam {
                Family::Counter(_) => "counter",
                Family::Gauge(_) => "gauge",
                Family::Histogram(..) => "histogram",
            };
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
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

    #[test]
    fn renders_counters_gauges_and_cumulative_histograms() {
        let mut r = Registry::new();
        r.inc("probed_x_total", "x", vec![("kind", "tcp".into())], 2);
        r.inc("probed_x_total", "x", vec![("kind", "tcp".into())], 1);
        r.set("probed_g", "g", vec![("path", "a\"b".into())], 1.0);
        r.observe(
            "probed_h_seconds",
            "h",
            &[0.001, 0.01],
            vec![],
            Duration::from_micros(500),
        );
        r.observe(
            "probed_h_seconds",
            "h",
            &[0.001, 0.01],
            vec![],
            Duration::from_millis(5),
        );
        r.observe("probed_h_seconds", "h", &[0.001, 0.01], vec![], Duration::from_secs(1));
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
        const B: &[f64] = &[0.001, 0.01];
        let mut one_by_one = Registry::new();
        let mut batched = Registry::new();
        let mut batch = Histogram::new(B);
        for us in [500, 5_000, 50_000, 700] {
            let d = Duration::from_micros(us);
            one_by_one.observe("probed_h_seconds", "h", B, vec![("p", "a".into())], d);
            batch.observe(d.as_secs_f64());
        }
        batched.merge("probed_h_seconds", "h", vec![("p", "a".into())], &batch);
        assert_eq!(one_by_one.render(), batched.render());
        assert!(batched
            .render()
            .contains("probed_h_seconds_bucket{p=\"a\",le=\"0.001\"} 2\n"));
    }
}
