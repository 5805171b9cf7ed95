//! What the API returns, as plain serializable structs; also what `probed status` renders, so
//! they derive `Deserialize` too. Every state is a serde enum of `status` (SPEC section 4's
//! names), never a `Debug` string.
use serde::{Deserialize, Serialize};

pub use crate::changes::ChangeKind;
use crate::{
    config::Protocol,
    outcome::Outcome,
    status::{AdminState, EndpointStatus, Health, ProfileStatus, Routing},
};

/// The result of the latest probe of an endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastResult {
    pub ok: bool,
    pub outcome: Outcome,
    /// Short cause: "open", "refused", "timeout", "http 503", ... (shared with the report it
    /// came from: most are one of a few strings).
    pub reason: std::sync::Arc<str>,
    /// Round-trip time of a reply, or how long the probe waited: whole microseconds here,
    /// `rtt_ms` on the wire.
    #[serde(rename = "rtt_ms", with = "crate::changes::micros_as_ms")]
    pub rtt_us: u32,
    pub at_unix_ms: u64,
}

// Every target holds one (`table::Target::last`): 40 bytes with the time as an `f64`.
const _: () = assert!(std::mem::size_of::<LastResult>() <= 32);

impl LastResult {
    pub fn rtt_ms(&self) -> f64 {
        crate::changes::micros_as_ms::ms(self.rtt_us)
    }
}

/// The latest change of an endpoint's monitor status. `from` and `to` always speak the
/// endpoint status vocabulary (Online, Degraded, Disabled, ...); `kind` says what caused it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LastChange {
    pub at_unix_ms: u64,
    pub kind: ChangeKind,
    /// None when the endpoint had just appeared (new in the configuration).
    pub from: Option<EndpointStatus>,
    pub to: EndpointStatus,
    /// From the start of the first probe of the deciding run to the change; 0 unless `kind`
    /// is `health`. Whole microseconds here, milliseconds on the wire and in the state file.
    #[serde(rename = "measured_window_ms", with = "crate::changes::micros_as_ms")]
    pub measured_window_us: u32,
    #[serde(rename = "formula_window_ms", with = "crate::changes::micros_as_ms")]
    pub formula_window_us: u32,
}

// Every target holds one once its status has changed: 32 bytes with the windows as `f64`s.
const _: () = assert!(std::mem::size_of::<Option<LastChange>>() <= 24);

impl LastChange {
    pub fn measured_window_ms(&self) -> f64 {
        crate::changes::micros_as_ms::ms(self.measured_window_us)
    }

    pub fn formula_window_ms(&self) -> f64 {
        crate::changes::micros_as_ms::ms(self.formula_window_us)
    }
}

/// The windows SPEC section 3 predicts for this endpoint's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Windows {
    pub interval_ms: f64,
    pub timeout_ms: f64,
    pub healthy_threshold: u32,
    pub unhealthy_threshold: u32,
    /// timeout * unhealthy + interval * (unhealthy - 1).
    pub fail_window_ms: f64,
    /// rtt * healthy + interval * (healthy - 1), with the last measured RTT (0 before any).
    pub success_window_ms: f64,
    /// How late the last probe started after its due time.
    #[serde(default)]
    pub late_ms: f64,
    /// False while probes start more than 50 ms late: the windows above then stretch by as
    /// much (the daemon is behind schedule, see `probed_schedule_behind_endpoints`).
    #[serde(default = "holds")]
    pub hold: bool,
}

fn holds() -> bool {
    true
}

/// One endpoint: the GetHealthStatus of SPEC section 5.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointView {
    pub profile: String,
    pub name: String,
    pub address: String,
    pub port: u16,
    pub protocol: Protocol,
    /// enabled, disabled or always-serve, as in force now.
    pub admin: AdminState,
    /// True when `admin` was set through the API rather than the config file.
    pub admin_from_api: bool,
    /// Endpoint monitor status (SPEC section 4).
    pub status: EndpointStatus,
    /// Health of the threshold state machine: CheckingEndpoint, Healthy, Unhealthy.
    pub health: Health,
    pub probed: bool,
    /// Eligible for traffic now, fail-open included.
    pub eligible: bool,
    /// Consecutive results so far toward a change.
    pub pending: usize,
    pub last_result: Option<LastResult>,
    pub last_change: Option<LastChange>,
    pub windows: Windows,
    /// With `[cluster]`: every location's verdict, of which `health` is the aggregate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<EndpointCluster>,
}

/// An endpoint as the cluster sees it (SPEC 9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointCluster {
    /// This node is one of its k probers.
    pub probed_here: bool,
    /// How its profile aggregates: "50%", "any", "all", "N%".
    pub aggregate: String,
    /// Each location's verdict (this node's first when it probes it): up, down or checking.
    pub locations: Vec<LocationVerdict>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocationVerdict {
    pub node: String,
    pub verdict: crate::cluster::aggregate::Verdict,
    /// How long the node has been silent (0 while it is live, and for this node): a silent
    /// node's verdict counts until `cluster.verdict_ttl`.
    #[serde(default)]
    pub silent_ms: u64,
}

/// `GET /v1/cluster`: this node, the members, and what each node gossips.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    pub node: String,
    pub region: String,
    /// k (0: every node probes every endpoint).
    pub probers_per_target: usize,
    /// Live nodes, this one included, by name.
    pub members: Vec<String>,
    /// The other nodes this one has heard of: live or silent, and for how long.
    pub nodes: Vec<crate::cluster::remote::NodeSummary>,
    /// Endpoints this node probes, of all it knows.
    pub probed_here: usize,
    pub endpoints: usize,
    /// Gossip datagrams taken and turned away, by reason.
    pub datagrams: DatagramCounts,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatagramCounts {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub accepted: u64,
    pub forged: u64,
    pub stale: u64,
    pub replayed: u64,
    pub malformed: u64,
    #[serde(default)]
    pub misdirected: u64,
}

/// One profile and its endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileView {
    pub name: String,
    pub enabled: bool,
    /// `enabled` was set through the API, against the configuration.
    #[serde(default)]
    pub enabled_from_api: bool,
    pub dialect: String,
    pub routing: Routing,
    /// Profile monitor status (SPEC section 4).
    pub status: ProfileStatus,
    /// Every eligible endpoint is Degraded, so all of them answer.
    pub fail_open: bool,
    pub endpoints: Vec<EndpointView>,
    /// The sinks that follow this profile: generation applied, in sync, last error.
    #[serde(default)]
    pub sinks: Vec<crate::sinks::SinkView>,
    /// Its nested endpoints: other profiles standing as endpoints (SPEC 8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nested: Vec<NestedView>,
    /// Set when `endpoints` is one page of them (`?offset=&limit=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<Page>,
}

/// Which endpoints of a profile a paged view holds, in configuration order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub offset: usize,
    pub limit: usize,
    /// Endpoints the profile has in all.
    pub total: usize,
}

/// A nested endpoint: its status comes from its child profile's endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NestedView {
    pub name: String,
    /// The child profile.
    pub profile: String,
    pub admin: AdminState,
    pub status: EndpointStatus,
    pub eligible: bool,
    pub priority: u32,
    pub weight: u32,
    pub min_child_endpoints: u32,
    /// The child's endpoints that are Online, CheckingEndpoint or Unmonitored now.
    pub available_child_endpoints: u32,
    pub last_change: Option<LastChange>,
}

/// The answer to a selection query.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectView {
    pub profile: String,
    pub source: String,
    pub region: Option<String>,
    /// NXDOMAIN: the profile is disabled.
    pub nxdomain: bool,
    /// Endpoint names, best first; empty is a NODATA answer.
    pub endpoints: Vec<String>,
    pub addresses: Vec<String>,
}

/// What a reload changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReloadReport {
    /// Endpoints that stayed with the same check and kept their state.
    pub kept: usize,
    /// New endpoints, or endpoints whose check changed: they start in CheckingEndpoint.
    pub added: usize,
    pub removed: usize,
    /// Settings that only a restart applies (API address, source, pin directory).
    pub restart_needed: Vec<String>,
}

/// `probed cluster`: this node's share, the members, what each node gossips.
pub fn render_cluster(v: &ClusterView) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let k = match v.probers_per_target {
        0 => "every node probes every endpoint".to_string(),
        k => format!("{k} nodes probe each endpoint"),
    };
    let _ = writeln!(
        out,
        "node {} (region {}): probes {} of {} endpoints; {k}",
        v.node, v.region, v.probed_here, v.endpoints
    );
    let _ = writeln!(out, "members: {}", v.members.join(" "));
    let _ = writeln!(
        out,
        "{:<20} {:<12} {:<5} {:>9} {:>9}",
        "NODE", "REGION", "LIVE", "SILENT", "VERDICTS"
    );
    for n in &v.nodes {
        let silent = if n.live {
            "-".to_string()
        } else {
            format!("{:.1}s", n.silent_ms as f64 / 1000.0)
        };
        let _ = writeln!(
            out,
            "{:<20} {:<12} {:<5} {:>9} {:>9}",
            n.name,
            n.region,
            if n.live { "yes" } else { "NO" },
            silent,
            n.verdicts
        );
    }
    let d = &v.datagrams;
    let _ = writeln!(
        out,
        "gossip: {:.1} KiB sent, {:.1} KiB received; datagrams {} accepted, dropped {} forged, {} stale, {} replayed, {} malformed, {} misdirected",
        d.bytes_sent as f64 / 1024.0,
        d.bytes_received as f64 / 1024.0,
        d.accepted,
        d.forged,
        d.stale,
        d.replayed,
        d.malformed,
        d.misdirected
    );
    out
}

/// `text` in the colour of `status` (an endpoint's or a profile's) when `colour`.
pub fn paint(status: &str, text: String, colour: bool) -> String {
    if !colour {
        return text;
    }
    let code = match status {
        "Online" => "32",
        "Degraded" => "31",
        "CheckingEndpoint" | "CheckingEndpoints" => "33",
        "Unmonitored" => "36",
        _ => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// The status table `probed status` and the demo print; ANSI colours when `colour`.
pub fn render_table(profiles: &[ProfileView], colour: bool) -> String {
    use std::fmt::Write;
    let paint = |status: &str, text: String| paint(status, text, colour);
    let mut out = String::new();
    for p in profiles {
        let status = if p.fail_open {
            format!("{} (fail-open)", p.status)
        } else {
            p.status.to_string()
        };
        let _ = writeln!(
            out,
            "{}  [{} {}]  {}",
            p.name,
            p.dialect,
            routing_name(p.routing),
            paint(p.status.as_str(), status)
        );
        let _ = writeln!(
            out,
            "  {:<18} {:<24} {:<5} {:<17} {:<4} {:<22} {:>9}  LAST CHANGE",
            "ENDPOINT", "ADDRESS", "PROTO", "STATUS", "ELIG", "LAST RESULT", "RTT ms"
        );
        for e in &p.endpoints {
            let addr = if e.address.contains(':') {
                format!("[{}]:{}", e.address, e.port)
            } else {
                format!("{}:{}", e.address, e.port)
            };
            let (last, rtt) = match &e.last_result {
                Some(r) => (
                    format!("{} {}", if r.ok { "ok" } else { "fail" }, r.reason),
                    format!("{:.2}", r.rtt_ms()),
                ),
                None => ("-".to_string(), "-".to_string()),
            };
            let change = match &e.last_change {
                Some(c) => {
                    let from = c.from.map_or("new", EndpointStatus::as_str);
                    if c.kind == ChangeKind::Health {
                        format!(
                            "{from} -> {} in {:.0} ms (formula {:.0} ms)",
                            c.to,
                            c.measured_window_ms(),
                            c.formula_window_ms()
                        )
                    } else {
                        format!("{from} -> {} ({})", c.to, kind_name(c.kind))
                    }
                }
                None => "-".to_string(),
            };
            // In transition: results toward a change so far (down toward Degraded, up toward
            // Online).
            let status = match (e.pending, e.status) {
                (0, s) => format!("{s:<17}"),
                (n, EndpointStatus::Degraded) => format!("{:<17}", format!("{} ^{n}", e.status)),
                (n, s) => format!("{:<17}", format!("{s} v{n}")),
            };
            let _ = writeln!(
                out,
                "  {:<18} {:<24} {:<5} {} {:<4} {:<22} {:>9}  {}",
                truncate(&e.name, 18),
                addr,
                e.protocol.name(),
                paint(e.status.as_str(), status),
                if e.eligible { "yes" } else { "no" },
                truncate(&last, 22),
                rtt,
                change
            );
        }
        for n in &p.nested {
            let status = format!("{:<17}", n.status);
            let last = format!("{} of {} up", n.available_child_endpoints, n.min_child_endpoints);
            let change = n.last_change.as_ref().map_or_else(
                || "-".to_string(),
                |c| format!("{} -> {}", c.from.map_or("new", EndpointStatus::as_str), c.to),
            );
            let _ = writeln!(
                out,
                "  {:<18} {:<24} {:<5} {} {:<4} {:<22} {:>9}  {}",
                truncate(&n.name, 18),
                truncate(&format!("profile {}", n.profile), 24),
                "-",
                paint(n.status.as_str(), status),
                if n.eligible { "yes" } else { "no" },
                truncate(&last, 22),
                "-",
                change
            );
        }
    }
    out
}

/// What `probed status --watch` shows above the table, from the daemon's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WatchSummary {
    /// Probes sent per second since the previous frame.
    pub probes_per_s: Option<f64>,
    /// The worst start lateness among the endpoints' last probes.
    pub lag_ms: Option<f64>,
    /// What the keys do, at the end of the line (the CLI's watch: "q quits").
    pub keys: &'static str,
}

/// The watch view: a summary line, then the table with problems first (profiles and their
/// endpoints by severity: Degraded, then in transition or checking, then the rest).
pub fn render_watch(profiles: &[ProfileView], summary: &WatchSummary, colour: bool) -> String {
    use std::fmt::Write;
    let mut sorted = profiles.to_vec();
    sorted.sort_by_key(|p| (profile_rank(p.status), p.name.clone()));
    for p in &mut sorted {
        p.endpoints
            .sort_by_key(|e| (endpoint_rank(e.status), e.pending == 0, e.name.clone()));
    }
    let mut counts: Vec<(EndpointStatus, usize)> = Vec::new();
    for e in sorted.iter().flat_map(|p| &p.endpoints) {
        match counts.iter_mut().find(|(s, _)| *s == e.status) {
            Some((_, n)) => *n += 1,
            None => counts.push((e.status, 1)),
        }
    }
    counts.sort_by_key(|(s, _)| endpoint_rank(*s));
    let by_status: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let mut out = String::new();
    let _ = write!(
        out,
        "probed: {} profiles, endpoints: {}",
        sorted.len(),
        if by_status.is_empty() {
            "none".to_string()
        } else {
            by_status.join(", ")
        }
    );
    if let Some(r) = summary.probes_per_s {
        let _ = write!(out, "; {r:.0} probes/s");
    }
    if let Some(l) = summary.lag_ms {
        let _ = write!(out, "; lateness {l:.0} ms");
    }
    if !summary.keys.is_empty() {
        let _ = write!(out, "   ({})", summary.keys);
    }
    out.push_str("\n\n");
    out.push_str(&render_table(&sorted, colour));
    out
}

fn profile_rank(s: ProfileStatus) -> u8 {
    match s {
        ProfileStatus::Degraded => 0,
        ProfileStatus::CheckingEndpoints => 1,
        ProfileStatus::Inactive => 2,
        ProfileStatus::Online => 3,
        ProfileStatus::Disabled => 4,
    }
}

fn endpoint_rank(s: EndpointStatus) -> u8 {
    match s {
        EndpointStatus::Degraded => 0,
        EndpointStatus::Stopped => 1,
        EndpointStatus::CheckingEndpoint => 2,
        EndpointStatus::Online => 3,
        EndpointStatus::Unmonitored => 4,
        EndpointStatus::Disabled => 5,
        EndpointStatus::Inactive => 6,
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('~');
        t
    }
}

/// Routing as the table shows it: `multivalue(2)`.
fn routing_name(r: Routing) -> String {
    match r {
        Routing::Priority => "priority".into(),
        Routing::Weighted => "weighted".into(),
        Routing::Multivalue { max_answers } => format!("multivalue({max_answers})"),
        Routing::Subnet => "subnet".into(),
        Routing::Geographic => "geographic".into(),
        Routing::Performance => "performance".into(),
    }
}

fn kind_name(k: ChangeKind) -> &'static str {
    match k {
        ChangeKind::Health => "health",
        ChangeKind::Admin => "admin",
        ChangeKind::Config => "config",
        ChangeKind::FailOpen => "fail-open",
        ChangeKind::Cluster => "cluster",
    }
}
