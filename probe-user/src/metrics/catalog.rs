//! Every metric probed exports, declared once: name, kind, help and label names. Monotonic
//! counts are counters named `*_total` (the kernel's included); values that go up and down
//! are gauges. `docs/operations/metrics.md` lists them for operators.
use super::{LATENESS_BUCKETS, RTT_BUCKETS};

/// What kind of series a metric is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    Counter,
    Gauge,
    /// With its bucket upper bounds, in seconds.
    Histogram(&'static [f64]),
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(_) => "histogram",
        }
    }
}

/// One metric's declaration.
#[derive(Debug, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// Label names, in the order every series gives them.
    pub labels: &'static [&'static str],
}

impl Metric {
    pub const fn counter(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Metric {
        Metric {
            name,
            kind: Kind::Counter,
            help,
            labels,
        }
    }

    pub const fn gauge(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Metric {
        Metric {
            name,
            kind: Kind::Gauge,
            help,
            labels,
        }
    }

    pub const fn histogram(
        name: &'static str,
        help: &'static str,
        bounds: &'static [f64],
        labels: &'static [&'static str],
    ) -> Metric {
        Metric {
            name,
            kind: Kind::Histogram(bounds),
            help,
            labels,
        }
    }
}

// ---- probing (the runner) ----

pub const PROBES_SENT: Metric = Metric::counter(
    "probed_probes_sent_total",
    "Probes sent, by kind and profile",
    &["kind", "profile"],
);
pub const PROBE_RESULTS: Metric = Metric::counter(
    "probed_probe_results_total",
    "Probe results, by kind, profile and outcome",
    &["kind", "profile", "outcome"],
);
pub const PROBE_RTT: Metric = Metric::histogram(
    "probed_probe_rtt_seconds",
    "Round-trip time of successful probes",
    RTT_BUCKETS,
    &["kind", "profile"],
);
pub const SCHEDULE_LATENESS: Metric = Metric::histogram(
    "probed_schedule_lateness_seconds",
    "Time from a probe's due time to its start (on the wire for L4 probes, after any wait for an HTTP slot)",
    LATENESS_BUCKETS,
    &[],
);
pub const TRANSITIONS: Metric = Metric::counter(
    "probed_transitions_total",
    "Verdicts of the threshold machine, by profile and new health",
    &["profile", "to"],
);
pub const SCHEDULE_BEHIND: Metric = Metric::gauge(
    "probed_schedule_behind_endpoints",
    "Probed endpoints whose last probe started more than 50 ms after its due time: their windows stretch",
    &["profile"],
);
pub const SCHEDULE_LAG: Metric = Metric::gauge(
    "probed_schedule_lag_seconds",
    "The latest start after its due time among the probes that ended in the last second",
    &[],
);
pub const LAST_RESULT_AGE: Metric = Metric::gauge(
    "probed_last_result_age_seconds",
    "Time since the last probe result of any kind (since start before the first): a checker that has stopped learning shows it",
    &[],
);
pub const ENDPOINTS: Metric = Metric::gauge(
    "probed_endpoints",
    "Endpoints by profile and monitor status",
    &["profile", "status"],
);
pub const TLS_CERT_EXPIRY: Metric = Metric::gauge(
    "probed_tls_cert_expiry_seconds",
    "Seconds until the server certificate of a TLS check's endpoint expires (negative once expired), as its last handshake showed it",
    &["profile", "endpoint"],
);
pub const CHECKS: Metric = Metric::gauge(
    "probed_checks",
    "Distinct checks scheduled (identical checks are shared)",
    &[],
);

// ---- the change stream, per subscriber ----

pub const CHANGES_PUBLISHED: Metric = Metric::counter(
    "probed_changes_published_total",
    "State changes offered to a subscriber's queue, folded and dropped ones included",
    &["subscriber"],
);
pub const CHANGES_COALESCED: Metric = Metric::counter(
    "probed_changes_coalesced_total",
    "State changes folded into one already waiting for the same endpoint or profile",
    &["subscriber"],
);
pub const CHANGES_DROPPED: Metric = Metric::counter(
    "probed_changes_dropped_total",
    "State changes lost because the subscriber's queue was full",
    &["subscriber"],
);
pub const CHANGES_PENDING: Metric = Metric::gauge(
    "probed_changes_pending",
    "State changes waiting in a subscriber's queue",
    &["subscriber"],
);
pub const CHANGES_LAG: Metric = Metric::gauge(
    "probed_changes_lag_seconds",
    "Age of the oldest change waiting in a subscriber's queue",
    &["subscriber"],
);

// ---- sinks, per sink ----

pub const SINK_SYNCS: Metric = Metric::counter(
    "probed_sink_syncs_total",
    "Successful syncs of a sink's structure with its profile's eligible set",
    &["sink"],
);
pub const SINK_ERRORS: Metric = Metric::counter(
    "probed_sink_errors_total",
    "Failed syncs and read-backs of a sink (retried with backoff)",
    &["sink"],
);
pub const SINK_DRIFT: Metric = Metric::counter(
    "probed_sink_drift_total",
    "Read-backs that found a sink's structure edited by someone else (undone by the next sync)",
    &["sink"],
);
pub const SINK_ENTRIES: Metric = Metric::gauge("probed_sink_entries", "Elements a sink's structure holds", &["sink"]);
pub const SINK_IN_SYNC: Metric = Metric::gauge(
    "probed_sink_in_sync",
    "1 when a sink's structure held what it should at the last sync or read-back",
    &["sink"],
);
pub const SINK_GENERATION: Metric = Metric::gauge(
    "probed_sink_generation",
    "Successful syncs of a sink since it started: the generation its structure holds",
    &["sink"],
);

pub const ROUTE_ANNOUNCED: Metric = Metric::gauge(
    "probed_route_announced",
    "1 while a route sink announces the prefix (demoted or not), 0 while it is withdrawn",
    &["sink", "prefix"],
);
pub const ROUTE_DEMOTED: Metric = Metric::gauge(
    "probed_route_demoted",
    "1 while a route sink announces the prefix with its demote_metric",
    &["sink", "prefix"],
);
pub const ROUTE_CHANGES: Metric = Metric::counter(
    "probed_route_changes_total",
    "Changes of a prefix's announcement (announced, demoted, withdrawn) since the start",
    &["sink", "prefix"],
);
pub const ROUTE_LAST_CHANGE: Metric = Metric::gauge(
    "probed_route_last_change_timestamp_seconds",
    "When a prefix's announcement last changed (Unix time; 0: not since the start)",
    &["sink", "prefix"],
);

// ---- the kernel engine ----

pub const TX_PATH: Metric = Metric::gauge(
    "probed_tx_path",
    "Transmit path in use (1) for L4 probes: xdp live frames, or the raw-socket fallback",
    &["path"],
);
pub const KERNEL_RX: Metric = Metric::counter(
    "probed_kernel_rx_total",
    "probe_rx events: matched replies, forged and stale replies, RSTs sent, HTTP requests sent and responses matched",
    &["event"],
);
pub const KERNEL_TX: Metric = Metric::counter(
    "probed_kernel_tx_total",
    "Generator events (probe_rx's live-frames runs): probes sent and why others were not",
    &["event"],
);
pub const ENGINE_STACK_FALLBACKS: Metric = Metric::counter(
    "probed_engine_stack_fallbacks_total",
    "L4 probes handed to the raw socket because XDP could not route them",
    &[],
);
pub const KERNEL_HTTP_SETTLED: Metric = Metric::counter(
    "probed_kernel_http_settled_by_socket_total",
    "Plain HTTP probes the kernel path could not decide with certainty, settled through a socket, by why",
    &["reason"],
);
pub const AGENT_ANSWERS: Metric = Metric::counter(
    "probed_agent_answers_total",
    "Asks of endpoints' agents (agent_port), by what came back: a line, or none (not reached, timed out, no complete line)",
    &["answer"],
);
pub const KERNEL_HTTP_ENABLED: Metric = Metric::gauge(
    "probed_kernel_http_enabled",
    "1 while plain HTTP checks run in probe_rx, 0 once they all go through sockets",
    &[],
);
pub const ENGINE_INFLIGHT: Metric = Metric::gauge("probed_engine_inflight", "L4 probes in flight", &[]);
pub const ENGINE_BACKLOG: Metric = Metric::gauge(
    "probed_engine_backlog",
    "L4 probes handed to the engine and not yet sent (their wait counts as lateness)",
    &[],
);
pub const ENGINE_HTTP_TEMPLATES: Metric = Metric::gauge(
    "probed_engine_http_templates",
    "HTTP request templates held in the kernel for HTTP probes run by probe_rx",
    &[],
);
pub const NESTED_ENDPOINTS: Metric = Metric::gauge(
    "probed_nested_endpoints",
    "Nested endpoints (other profiles standing as endpoints) by monitor status; probed_endpoints counts them too",
    &["profile", "status"],
);
pub const DNS_ANSWERS: Metric = Metric::counter(
    "probed_dns_answers_total",
    "DNS answers sent, by response code (noerror, nxdomain, refused, formerr, other)",
    &["rcode"],
);
pub const DNS_TCP_ANSWERS: Metric = Metric::counter(
    "probed_dns_tcp_answers_total",
    "DNS answers sent over TCP (the rest went over UDP)",
    &[],
);
pub const DNS_RATE_LIMITED: Metric = Metric::counter(
    "probed_dns_rate_limited_total",
    "UDP answers response rate limiting held back: dropped, or sent truncated (slip) so the client retries over TCP",
    &["action"],
);
pub const DNS_TCP_CONNECTIONS: Metric = Metric::gauge(
    "probed_dns_tcp_connections",
    "TCP connections the DNS server holds now (at most [dns.tcp] max_clients)",
    &[],
);
pub const DNS_TCP_CLOSED: Metric = Metric::counter(
    "probed_dns_tcp_closed_total",
    "TCP connections the DNS server closed, by reason: full (max_clients), prefix (max_clients_per_prefix), idle, lifetime, error; a client's own close is not counted",
    &["reason"],
);
pub const DNS_SEND_ERRORS: Metric = Metric::counter(
    "probed_dns_send_errors_total",
    "DNS answers that could not be sent (the client's socket or connection failed)",
    &[],
);

/// Every declaration, for the documentation test.
pub const CLUSTER_MEMBERS: Metric = Metric::gauge(
    "probed_cluster_members",
    "Live nodes of the cluster, this one included",
    &[],
);
pub const CLUSTER_PROBED_HERE: Metric = Metric::gauge(
    "probed_cluster_probed_endpoints",
    "Endpoints this node probes (its share); the rest it learns from the other nodes",
    &[],
);
pub const CLUSTER_DATAGRAMS: Metric = Metric::counter(
    "probed_cluster_datagrams_total",
    "Gossip datagrams received, by result (accepted; forged, stale, replayed, malformed, misdirected: dropped)",
    &["result"],
);
pub const CLUSTER_BYTES: Metric = Metric::counter(
    "probed_cluster_gossip_bytes_total",
    "Bytes of gossip sent and received (whole datagrams)",
    &["direction"],
);
pub const PASSIVE_HANDSHAKES: Metric = Metric::counter(
    "probed_passive_handshakes_total",
    "Client handshakes the node forwarded to endpoints of profiles with [profile.passive], by result (started; \
     completed, refused, unreachable, timed-out)",
    &["profile", "result"],
);
pub const PASSIVE_EJECTIONS: Metric = Metric::counter(
    "probed_passive_ejections_total",
    "Endpoints passive detection took out, by profile and whether it did (ejected) or its cap held it back (capped)",
    &["profile", "result"],
);
/// Every metric, for the catalog's own tests.
#[cfg(test)]
pub const ALL: &[&Metric] = &[
    &PROBES_SENT,
    &PROBE_RESULTS,
    &PROBE_RTT,
    &SCHEDULE_LATENESS,
    &TRANSITIONS,
    &SCHEDULE_BEHIND,
    &SCHEDULE_LAG,
    &LAST_RESULT_AGE,
    &ENDPOINTS,
    &TLS_CERT_EXPIRY,
    &CHECKS,
    &CHANGES_PUBLISHED,
    &CHANGES_COALESCED,
    &CHANGES_DROPPED,
    &CHANGES_PENDING,
    &CHANGES_LAG,
    &SINK_SYNCS,
    &SINK_ERRORS,
    &SINK_DRIFT,
    &SINK_ENTRIES,
    &SINK_IN_SYNC,
    &SINK_GENERATION,
    &ROUTE_ANNOUNCED,
    &ROUTE_DEMOTED,
    &ROUTE_CHANGES,
    &ROUTE_LAST_CHANGE,
    &TX_PATH,
    &KERNEL_RX,
    &KERNEL_TX,
    &ENGINE_STACK_FALLBACKS,
    &KERNEL_HTTP_SETTLED,
    &AGENT_ANSWERS,
    &KERNEL_HTTP_ENABLED,
    &ENGINE_INFLIGHT,
    &ENGINE_BACKLOG,
    &ENGINE_HTTP_TEMPLATES,
    &NESTED_ENDPOINTS,
    &DNS_ANSWERS,
    &DNS_TCP_ANSWERS,
    &DNS_SEND_ERRORS,
    &DNS_RATE_LIMITED,
    &DNS_TCP_CONNECTIONS,
    &DNS_TCP_CLOSED,
    &CLUSTER_MEMBERS,
    &CLUSTER_PROBED_HERE,
    &CLUSTER_DATAGRAMS,
    &CLUSTER_BYTES,
    &PASSIVE_HANDSHAKES,
    &PASSIVE_EJECTIONS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_conventions_and_are_unique() {
        let mut names: Vec<&str> = ALL.iter().map(|m| m.name).collect();
        for m in ALL {
            assert!(m.name.starts_with("probed_"), "{}", m.name);
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}: counters and only counters end in _total",
                m.name
            );
            assert!(!m.help.is_empty() && !m.help.ends_with('.'), "{}", m.name);
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "a name is declared twice");
    }
}
