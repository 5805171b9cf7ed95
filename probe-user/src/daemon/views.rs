//! What the API returns, as plain serializable structs; also what `probed status` renders, so
//! they derive `Deserialize` too. Every state is a serde enum of `status` (SPEC section 4's
//! names), never a `Debug` string.
use serde::{Deserialize, Serialize};

pub use crate::discovery::DiscoveryView;

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
    /// is `health` or `passive`. Whole microseconds here, milliseconds on the wire and in the state file.
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

/// What passive detection saw of one endpoint (`[profile.passive]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassiveView {
    /// Client handshakes seen starting toward it since passive detection began watching it.
    pub started: u64,
    pub completed: u64,
    pub refused: u64,
    pub unreachable: u64,
    pub timed_out: u64,
    /// Failures since the last completed handshake.
    pub failing_in_a_row: u64,
    /// The completed handshakes' mean round trip (SYN out to SYN+ACK in), in milliseconds.
    pub mean_rtt_ms: f64,
    /// Out by passive detection now (not yet back through its active check).
    pub ejected: bool,
}

/// One endpoint: the GetHealthStatus of SPEC section 5.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointView {
    pub profile: String,
    pub name: String,
    pub address: String,
    pub port: u16,
    pub protocol: Protocol,
    /// enabled, disabled, always-serve or drain, as in force now.
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
    /// In a slow start: the share of its weight the data-path sinks give it now, in
    /// thousandths (`[profile] slow_start`); left out when whole.
    #[serde(
        default = "crate::status::ramp::full",
        skip_serializing_if = "crate::status::ramp::is_full"
    )]
    pub ramp: u16,
    /// Consecutive results so far toward a change.
    pub pending: usize,
    pub last_result: Option<LastResult>,
    pub last_change: Option<LastChange>,
    pub windows: Windows,
    /// With `[cluster]`: every location's verdict, of which `health` is the aggregate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<EndpointCluster>,
    /// TLS checks: the server's certificate as the last probe that got through a handshake
    /// saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<TlsCertView>,
    /// Its weight now, before any slow start: the configured one, as its agent scales it.
    #[serde(default)]
    pub weight: u32,
    /// With an agent check (`agent_port`): what its agent holds and last said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentView>,
    /// A check through the data path's tunnel (`tunnel`): the service address inside it and
    /// the encapsulation; the endpoint's address is the outer destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<crate::probe::tcp::TunnelTo>,
    /// With `[profile.passive]`: what the node's forwarded handshakes to it met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passive: Option<PassiveView>,
}

/// An endpoint's agent (`probe::agent`): what it holds, and its last answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentView {
    /// It holds the endpoint down (it said down, fail or stopped, and not up since).
    pub down: bool,
    /// The admin state it holds: "drain" or "maint"; none after ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<String>,
    /// The weight it set, in percent of the configured weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_percent: Option<u16>,
    /// Its last answer as words, or why there was none; none before the first ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub said: Option<String>,
    /// Whether the last ask got a line.
    pub answered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_unix_ms: Option<u64>,
}

/// When an endpoint's certificate expires, and whether that is within its profile's
/// `cert_warn_days`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsCertView {
    pub not_after_unix: i64,
    /// Whole days left (negative once expired), at the time of the request.
    pub days_left: i64,
    pub expiring: bool,
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
    /// The other nodes this one has heard of: live or silent, and for how long, and what
    /// their route sinks announce.
    pub nodes: Vec<crate::cluster::remote::NodeSummary>,
    /// What this node's route sinks announce.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<crate::cluster::routes::Announcement>,
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
    /// With `endpoints_from = "dns"`: how its discovery goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<DiscoveryView>,
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReloadReport {
    /// Endpoints that stayed with the same check and kept their state.
    pub kept: usize,
    /// New endpoints, or endpoints whose check changed: they start in CheckingEndpoint.
    pub added: usize,
    pub removed: usize,
    /// Settings that only a restart applies (API address, source, pin directory).
    pub restart_needed: Vec<String>,
}
