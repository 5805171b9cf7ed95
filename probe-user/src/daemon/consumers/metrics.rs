//! The consumers' metrics, read from their shared views and counters when scraped: the
//! sinks' syncs and the DNS server's answers. The runner's own are in `daemon/metrics.rs`.
use super::Consumers;
use crate::{
    dns::shared::{counter_values, tcp_closed_values, Counters},
    metrics::{catalog, Registry},
    sinks::{route::decide::Announce, SinkView},
};
use std::sync::atomic::{AtomicU64, Ordering};

impl Consumers {
    /// Their metrics text now.
    pub(crate) fn render_metrics(&mut self) -> String {
        let views = self.sink_views();
        sinks(&mut self.metrics, &views);
        if let Some(dns) = &self.dns {
            dns_counters(&mut self.metrics, dns.counters());
        }
        self.metrics.render()
    }
}

fn sinks(r: &mut Registry, views: &[SinkView]) {
    for m in [
        &catalog::SINK_SYNCS,
        &catalog::SINK_ERRORS,
        &catalog::SINK_DRIFT,
        &catalog::SINK_ENTRIES,
        &catalog::SINK_IN_SYNC,
        &catalog::SINK_GENERATION,
        &catalog::ROUTE_ANNOUNCED,
        &catalog::ROUTE_DEMOTED,
        &catalog::ROUTE_CHANGES,
        &catalog::ROUTE_LAST_CHANGE,
    ] {
        r.clear(m);
    }
    for s in views {
        let label = || vec![("sink", s.name.clone())];
        r.set_total(&catalog::SINK_SYNCS, label(), s.syncs_total);
        r.set_total(&catalog::SINK_ERRORS, label(), s.errors_total);
        r.set_total(&catalog::SINK_DRIFT, label(), s.drift_total);
        r.set(&catalog::SINK_ENTRIES, label(), s.entries as f64);
        r.set(&catalog::SINK_IN_SYNC, label(), if s.in_sync { 1.0 } else { 0.0 });
        r.set(&catalog::SINK_GENERATION, label(), s.generation as f64);
        for route in &s.routes {
            let label = || vec![("sink", s.name.clone()), ("prefix", route.prefix.clone())];
            let on = |b: bool| if b { 1.0 } else { 0.0 };
            r.set(
                &catalog::ROUTE_ANNOUNCED,
                label(),
                on(route.state != Announce::Withdrawn),
            );
            r.set(&catalog::ROUTE_DEMOTED, label(), on(route.state == Announce::Demoted));
            r.set_total(&catalog::ROUTE_CHANGES, label(), route.changes);
            r.set(
                &catalog::ROUTE_LAST_CHANGE,
                label(),
                route.last_change_unix_ms as f64 / 1e3,
            );
        }
    }
}

/// The DNS server's answer counters.
fn dns_counters(r: &mut Registry, counters: &Counters) {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    for (rcode, n) in counter_values(counters) {
        r.set_total(&catalog::DNS_ANSWERS, vec![("rcode", rcode.to_string())], n);
    }
    r.set_total(&catalog::DNS_TCP_ANSWERS, vec![], load(&counters.tcp));
    r.set_total(&catalog::DNS_SEND_ERRORS, vec![], load(&counters.send_errors));
    for (action, c) in [("drop", &counters.rrl_dropped), ("slip", &counters.rrl_slipped)] {
        r.set_total(
            &catalog::DNS_RATE_LIMITED,
            vec![("action", action.to_string())],
            load(c),
        );
    }
    r.set(&catalog::DNS_TCP_CONNECTIONS, vec![], load(&counters.tcp_open) as f64);
    for (reason, c) in tcp_closed_values(counters) {
        r.set_total(&catalog::DNS_TCP_CLOSED, vec![("reason", reason.to_string())], c);
    }
}
