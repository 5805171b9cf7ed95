//! The runner's metrics: per-probe figures gathered between loop turns and merged into the
//! registry once per turn, and the gauges computed when scraped. Updating the registry per
//! probe (label vectors, string keys, tree lookups) was most of the runner's cost per result
//! at 100k probes/s. Scrapes go through a request, which flushes first, so none sees a
//! partial turn.
use crate::changes::Bus;
use std::time::Duration;

use super::{
    checks::ProbeReport,
    table::{ProfileEntry, Table},
};
use crate::{
    config::Protocol,
    hash::FastMap,
    health::HealthState,
    metrics::{catalog, Histogram, Kind, Registry},
    outcome::Outcome,
};

#[derive(Default)]
struct Pending {
    /// Results by kind, profile index and outcome.
    results: FastMap<(Protocol, u32, Outcome), u64>,
    /// Round-trip times of successful probes, by kind and profile index.
    rtt: FastMap<(Protocol, u32), Histogram>,
    /// Scheduler lateness (due time to send).
    lateness: Option<Histogram>,
    /// Probes sent, by kind and profile index.
    sent: FastMap<(Protocol, u32), u64>,
}

#[derive(Default)]
pub(crate) struct RunnerMetrics {
    registry: Registry,
    pending: Pending,
}

fn bounds(m: &catalog::Metric) -> &'static [f64] {
    match m.kind {
        Kind::Histogram(b) => b,
        Kind::Counter | Kind::Gauge => &[],
    }
}

impl RunnerMetrics {
    /// A probe of `protocol` was sent for these profiles.
    pub fn sent<'a>(&mut self, protocol: Protocol, profiles: impl Iterator<Item = &'a u32>) {
        for &p in profiles {
            *self.pending.sent.entry((protocol, p)).or_default() += 1;
        }
    }

    /// A kernel HTTP probe was left to a socket, for `reason`.
    pub fn kernel_http_settled(&mut self, reason: &'static str) {
        self.registry
            .inc(&catalog::KERNEL_HTTP_SETTLED, vec![("reason", reason.into())], 1);
    }

    /// An agent was asked (few: counted at once).
    pub fn agent_answer(&mut self, answer: &crate::probe::agent::AgentAnswer) {
        use crate::probe::agent::{AgentAnswer, Missed};
        let word = match answer {
            AgentAnswer::Reply(_) => "line",
            AgentAnswer::Missed(Missed::Connect(_)) => "not-reached",
            AgentAnswer::Missed(Missed::Timeout) => "timeout",
            AgentAnswer::Missed(Missed::Io(_) | Missed::NoLine) => "no-line",
        };
        self.registry
            .inc(&catalog::AGENT_ANSWERS, vec![("answer", word.into())], 1);
    }

    /// Whether plain HTTP checks run in the kernel now.
    pub fn kernel_http_enabled(&mut self, on: bool) {
        self.registry
            .set(&catalog::KERNEL_HTTP_ENABLED, vec![], if on { 1.0 } else { 0.0 });
    }

    /// A probe went out `late_ns` after its due time (the runner's delay and any wait after
    /// it: for an HTTP slot, in the L4 engine's backlog). Observed when its result comes,
    /// which is when the whole wait is known.
    pub fn late(&mut self, late_ns: u64) {
        self.pending
            .lateness
            .get_or_insert_with(|| Histogram::new(bounds(&catalog::SCHEDULE_LATENESS)))
            .observe(Duration::from_nanos(late_ns).as_secs_f64());
    }

    /// A result for one owner of a check.
    pub fn result(&mut self, protocol: Protocol, profile_ix: u32, report: &ProbeReport) {
        *self
            .pending
            .results
            .entry((protocol, profile_ix, report.outcome))
            .or_default() += 1;
        if report.healthy {
            self.pending
                .rtt
                .entry((protocol, profile_ix))
                .or_insert_with(|| Histogram::new(bounds(&catalog::PROBE_RTT)))
                .observe(report.elapsed.as_secs_f64());
        }
    }

    /// A verdict of a threshold machine (rare: counted at once).
    pub fn transition(&mut self, profile: &str, to: HealthState) {
        self.registry.inc(
            &catalog::TRANSITIONS,
            vec![("profile", profile.into()), ("to", health_label(to).into())],
            1,
        );
    }

    /// Client handshakes passive detection counted for `profile` since its last read: `delta`
    /// is (started, completed, refused, unreachable, timed out).
    pub fn passive_handshakes(&mut self, profile: &str, delta: [u64; 5]) {
        for (result, n) in ["started", "completed", "refused", "unreachable", "timed-out"]
            .into_iter()
            .zip(delta)
        {
            if n > 0 {
                self.registry.inc(
                    &catalog::PASSIVE_HANDSHAKES,
                    vec![("profile", profile.into()), ("result", result.into())],
                    n,
                );
            }
        }
    }

    /// Passive detection ejected an endpoint of `profile`, or its cap held it back.
    pub fn passive_ejection(&mut self, profile: &str, ejected: bool) {
        let result = if ejected { "ejected" } else { "capped" };
        self.registry.inc(
            &catalog::PASSIVE_EJECTIONS,
            vec![("profile", profile.into()), ("result", result.into())],
            1,
        );
    }

    /// Merges what was gathered since the last turn; `profiles` names the indices.
    pub fn flush(&mut self, profiles: &[ProfileEntry]) {
        let pending = &mut self.pending;
        let registry = &mut self.registry;
        if let Some(h) = pending.lateness.take().filter(|h| !h.is_empty()) {
            registry.merge(&catalog::SCHEDULE_LATENESS, vec![], &h);
        }
        let profile = |ix: u32| {
            profiles
                .get(ix as usize)
                .map(|p| p.name.to_string())
                .unwrap_or_default()
        };
        for ((proto, ix), n) in pending.sent.drain() {
            registry.inc(
                &catalog::PROBES_SENT,
                vec![("kind", proto.as_str().into()), ("profile", profile(ix))],
                n,
            );
        }
        for ((proto, ix, outcome), n) in pending.results.drain() {
            registry.inc(
                &catalog::PROBE_RESULTS,
                vec![
                    ("kind", proto.as_str().into()),
                    ("profile", profile(ix)),
                    ("outcome", outcome.as_str().into()),
                ],
                n,
            );
        }
        for ((proto, ix), h) in pending.rtt.drain() {
            registry.merge(
                &catalog::PROBE_RTT,
                vec![("kind", proto.as_str().into()), ("profile", profile(ix))],
                &h,
            );
        }
    }

    /// The endpoints behind schedule per profile (indexed as `table.profiles()`) and the worst
    /// lateness, from the runner's scan (`runner/pace.rs`).
    pub fn pace(&mut self, table: &Table, behind: &[u64], worst_ns: u64) {
        let r = &mut self.registry;
        r.clear(&catalog::SCHEDULE_BEHIND);
        for (p, n) in table.profiles().iter().zip(behind) {
            r.set(
                &catalog::SCHEDULE_BEHIND,
                vec![("profile", p.name.to_string())],
                *n as f64,
            );
        }
        r.set(&catalog::SCHEDULE_LAG, vec![], worst_ns as f64 / 1e9);
    }

    pub fn cluster(&mut self, view: &super::views::ClusterView) {
        let r = &mut self.registry;
        r.set(&catalog::CLUSTER_MEMBERS, vec![], view.members.len() as f64);
        r.set(&catalog::CLUSTER_PROBED_HERE, vec![], view.probed_here as f64);
        let d = &view.datagrams;
        for (result, n) in [
            ("accepted", d.accepted),
            ("forged", d.forged),
            ("stale", d.stale),
            ("replayed", d.replayed),
            ("malformed", d.malformed),
            ("misdirected", d.misdirected),
        ] {
            r.set_total(&catalog::CLUSTER_DATAGRAMS, vec![("result", result.to_string())], n);
        }
        for (direction, n) in [("sent", d.bytes_sent), ("received", d.bytes_received)] {
            r.set_total(&catalog::CLUSTER_BYTES, vec![("direction", direction.to_string())], n);
        }
    }

    /// The runner's metrics text, with the gauges computed now. Kernel counters are read by
    /// the caller off the runner's thread (`metrics::kernel`).
    pub fn render(&mut self, table: &Table, checks: usize, bus: &Bus, last_result_ns: u64, now_ns: u64) -> String {
        let r = &mut self.registry;
        r.set(
            &catalog::LAST_RESULT_AGE,
            vec![],
            std::time::Duration::from_nanos(now_ns.saturating_sub(last_result_ns)).as_secs_f64(),
        );
        r.clear(&catalog::ENDPOINTS);
        for p in table.profiles() {
            for &status in crate::status::EndpointStatus::ALL {
                let n = p.counts.get(status);
                if n > 0 {
                    r.set(
                        &catalog::ENDPOINTS,
                        vec![("profile", p.name.to_string()), ("status", status.as_str().into())],
                        f64::from(n),
                    );
                }
            }
        }
        r.clear(&catalog::NESTED_ENDPOINTS);
        for p in table.profiles() {
            let counts = crate::status::StatusCounts::of(&p.nested.iter().map(|n| n.status).collect::<Vec<_>>());
            for &status in crate::status::EndpointStatus::ALL {
                let n = counts.get(status);
                if n > 0 {
                    r.set(
                        &catalog::NESTED_ENDPOINTS,
                        vec![("profile", p.name.to_string()), ("status", status.as_str().into())],
                        f64::from(n),
                    );
                }
            }
        }
        r.clear(&catalog::TLS_CERT_EXPIRY);
        let now_unix = i64::try_from(crate::clock::unix_ms() / 1000).unwrap_or(i64::MAX);
        for (id, cert) in table.certs() {
            if let Some(t) = table.targets().get(id) {
                let labels = vec![
                    ("profile", table.profile_of(t).to_string()),
                    ("endpoint", t.name().to_string()),
                ];
                r.set(&catalog::TLS_CERT_EXPIRY, labels, (cert.not_after - now_unix) as f64);
            }
        }
        r.set(&catalog::CHECKS, vec![], checks as f64);
        for m in [
            &catalog::CHANGES_PUBLISHED,
            &catalog::CHANGES_COALESCED,
            &catalog::CHANGES_DROPPED,
            &catalog::CHANGES_PENDING,
            &catalog::CHANGES_LAG,
        ] {
            r.clear(m);
        }
        for s in bus.stats(now_ns) {
            let label = || vec![("subscriber", s.name.to_string())];
            let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
            r.set_total(&catalog::CHANGES_PUBLISHED, label(), load(&s.stats.published));
            r.set_total(&catalog::CHANGES_COALESCED, label(), load(&s.stats.coalesced));
            r.set_total(&catalog::CHANGES_DROPPED, label(), load(&s.stats.dropped));
            r.set(&catalog::CHANGES_PENDING, label(), s.pending as f64);
            r.set(&catalog::CHANGES_LAG, label(), s.lag.as_secs_f64());
        }
        r.render()
    }
}

fn health_label(h: HealthState) -> &'static str {
    h.as_str()
}
