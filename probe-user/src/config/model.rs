//! The resolved configuration: every default filled in, every value typed. Nothing here can be
//! out of range, because only `validate` builds it.
use std::{
    net::{IpAddr, SocketAddr},
    path::PathBuf,
    time::Duration,
};

use ipnet::IpNet;
use serde::Serialize;

use crate::wire_enum::wire_enum;

pub use crate::rules::{Dialect, Header, HostName, HttpPath, Method, Protocol, StatusRange, Thresholds};
pub use crate::status::{AdminState, Routing};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub daemon: Daemon,
    pub source: Source,
    pub profiles: Vec<Profile>,
    /// `[[sink]]`: what the node's data path is told, per profile.
    pub sinks: Vec<Sink>,
    /// `[dns]`: the authoritative DNS server; None when the file has no `[dns]`.
    pub dns: Option<Dns>,
    /// `[cluster]`: this node shares verdicts with others; None: it probes alone.
    pub cluster: Option<Cluster>,
}

impl Config {
    pub fn endpoint_count(&self) -> usize {
        self.profiles.iter().map(|p| p.endpoints.len()).sum()
    }

    pub fn profile(&self, name: &str) -> Option<&Profile> {
        self.profiles.iter().find(|p| p.name == name)
    }

    /// A copy of everything but the profiles: the daemon's own settings, cheap to copy at any
    /// fleet size.
    pub fn without_profiles(&self) -> Config {
        Config {
            daemon: self.daemon.clone(),
            source: self.source.clone(),
            profiles: Vec::new(),
            sinks: self.sinks.clone(),
            dns: self.dns.clone(),
            cluster: self.cluster.clone(),
        }
    }
}

/// `[daemon]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Daemon {
    pub api: Api,
    pub events: EventsOutput,
    pub pin_dir: PathBuf,
    /// Last known health per endpoint, so a restart resumes instead of starting over.
    pub state_file: PathBuf,
    /// Threads that run HTTP(S) and UDP request/response probes; None: one per core.
    pub l7_workers: Option<u16>,
    /// Where plain HTTP checks run.
    pub http_probes: HttpProbes,
}

/// `http_probes` of `[daemon]`: where plain HTTP checks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HttpProbes {
    /// In probe_rx, without a socket, for every check that allows it (plain HTTP, the status
    /// alone decides, a request of at most 256 bytes); the others through sockets.
    Kernel,
    /// Every HTTP check through a socket of its own.
    Sockets,
}

impl HttpProbes {
    pub const NAMES: [&str; 2] = ["kernel", "sockets"];
}

impl Daemon {
    /// The most L7 worker threads `l7_workers` may ask for.
    pub const MAX_L7_WORKERS: u16 = 256;
}

/// The `api_*` keys of `[daemon]`: where the API listens and who may change state through it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Api {
    pub listen: ApiListen,
    /// Unix socket: the group that owns it and whose members may use mutating routes.
    pub socket_group: ApiGroup,
    /// Unix socket: its file mode (0o600..=0o777, owner read and write always set).
    pub socket_mode: u32,
    /// TCP: the file holding the bearer token mutating routes require; none means mutating
    /// routes are refused over TCP.
    pub token_file: Option<PathBuf>,
}

impl Api {
    /// The group a unix socket gets when the file names none.
    pub const DEFAULT_GROUP: &'static str = "probed";
    pub const DEFAULT_SOCKET_MODE: u32 = 0o660;
    pub const DEFAULT_SOCKET: &'static str = "/run/probed/api.sock";

    /// The default: the unix socket, group `probed`, mode 0660.
    pub fn new(listen: ApiListen) -> Self {
        Self {
            listen,
            socket_group: ApiGroup::Default,
            socket_mode: Self::DEFAULT_SOCKET_MODE,
            token_file: None,
        }
    }

    /// The keys whose values differ in `new`; a reload names them as needing a restart.
    pub fn changed_keys<'a>(&'a self, new: &'a Api) -> impl Iterator<Item = &'static str> + 'a {
        [
            ("api_listen", self.listen != new.listen),
            ("api_socket_group", self.socket_group != new.socket_group),
            ("api_socket_mode", self.socket_mode != new.socket_mode),
            ("api_token_file", self.token_file != new.token_file),
        ]
        .into_iter()
        .filter_map(|(k, changed)| changed.then_some(k))
    }
}

/// Where the API listens. Remote TCP addresses only pass validation with `api_allow_remote`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ApiListen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// The group of the API socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ApiGroup {
    /// Not set: `probed` if that group exists, else the socket is owner-only (0600).
    Default,
    /// A group name, looked up at start; a missing one stops the start.
    Name(String),
    /// A numeric gid, used as is.
    Gid(u32),
}

/// Where transition events go, one JSON line each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum EventsOutput {
    Stdout,
    File(PathBuf),
}

/// `[source]`: where probes leave from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Source {
    /// Interfaces to send on; empty means the route decides.
    pub interfaces: Vec<String>,
    /// Source addresses; empty means the route's preferred source.
    pub addresses: Vec<IpAddr>,
    pub ports: PortRange,
    /// How probe_rx attaches to the interface (XDP hook).
    pub xdp_mode: crate::kernel::AttachMode,
    /// Where the reply matcher runs: XDP, or tcx ingress beside another XDP owner.
    pub hook: crate::kernel::Hook,
}

impl Source {
    pub fn ipv4(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.iter().copied().filter(IpAddr::is_ipv4)
    }

    pub fn ipv6(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.addresses.iter().copied().filter(IpAddr::is_ipv6)
    }
}

/// Inclusive range of probe source ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub fn len(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

/// `[[profile]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    pub name: String,
    pub enabled: bool,
    pub dialect: Dialect,
    pub routing: Routing,
    pub health: HealthCheck,
    pub endpoints: Vec<Endpoint>,
    /// Endpoints that are other profiles (`profile = "NAME"`), in configuration order after
    /// the plain ones: their health and addresses come from that child profile (SPEC 8).
    pub nested: Vec<NestedEndpoint>,
    /// `dns_name`: the name answered under `[dns].zone`, relative to it, lower case; None means
    /// the profile's name.
    pub dns_name: Option<String>,
    /// `dns_ttl`: the TTL of this profile's answers; None means `[dns].ttl`.
    pub dns_ttl: Option<u32>,
    /// `aggregate`: how the verdicts of the nodes that probe an endpoint make its health, with
    /// `[cluster]` (SPEC 9); "50%" by default.
    pub aggregate: crate::cluster::aggregate::Rule,
    /// `endpoints_from`: whether the file lists the endpoints or the API owns them.
    pub endpoints_from: EndpointSource,
    /// `slow_start`: how long an endpoint that starts to take traffic again takes to reach its
    /// whole weight in the data-path sinks (`status::ramp`); zero is off.
    pub slow_start: std::time::Duration,
    /// `[profile.discovery]`: with `endpoints_from = "dns"` (and only then), the name whose
    /// records are its endpoints.
    pub discovery: Option<Discovery>,
}

/// `[profile.discovery]`: a name whose records are a profile's endpoints, the resolvers that
/// answer for it, and how often it is asked again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Discovery {
    /// The name asked: absolute, in lower case, with its final dot.
    pub name: String,
    pub records: DiscoveryRecords,
    /// A and AAAA: the endpoints' port (SRV records carry their own).
    pub port: Option<u16>,
    /// Asked in turn until one answers.
    pub resolvers: Vec<SocketAddr>,
    /// The records' TTL, bounded by these, says when the name is asked again.
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    /// How long one resolver has to answer.
    pub timeout: Duration,
}

/// Which records a discovery asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DiscoveryRecords {
    A,
    Aaaa,
    /// Both families: an A and an AAAA question.
    Both,
    /// SRV records: each target's addresses, with its port, weight and priority.
    Srv,
}

impl DiscoveryRecords {
    pub const NAMES: [&'static str; 4] = ["A", "AAAA", "A+AAAA", "SRV"];

    const ALL: [Self; 4] = [Self::A, Self::Aaaa, Self::Both, Self::Srv];

    /// As the configuration writes it (`NAMES`).
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// Any case.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name().eq_ignore_ascii_case(s))
    }
}

/// Where a profile's endpoints come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointSource {
    /// Its `[[profile.endpoint]]` tables.
    #[default]
    File,
    /// The fleet API (`POST /v1/profiles/NAME/endpoints`), kept in the fleet journal beside
    /// the state file; the file lists none.
    Api,
    /// DNS records (`[profile.discovery]`), applied as fleet batches and kept in the fleet
    /// journal as the API's are; the file lists none, and the API changes none.
    Dns,
}

impl EndpointSource {
    pub const NAMES: [&'static str; 3] = ["file", "api", "dns"];

    pub fn name(self) -> &'static str {
        match self {
            EndpointSource::File => "file",
            EndpointSource::Api => "api",
            EndpointSource::Dns => "dns",
        }
    }

    /// Its endpoints come at run time, as fleet batches kept in the fleet journal: the API's
    /// and discovery's, not the file's.
    pub fn at_run_time(self) -> bool {
        self != EndpointSource::File
    }
}

impl Profile {
    pub fn thresholds(&self) -> Thresholds {
        self.health.thresholds
    }

    /// `slow_start` in nanoseconds: 0 when off.
    pub fn slow_start_ns(&self) -> u64 {
        u64::try_from(self.slow_start.as_nanos()).unwrap_or(u64::MAX)
    }

    /// A copy of everything but its endpoints: a profile's settings, which a reload compares
    /// to tell whether the endpoints that stay the same can stay untouched.
    pub fn settings(&self) -> Profile {
        let Profile {
            name,
            enabled,
            dialect,
            routing,
            health,
            endpoints: _,
            nested,
            dns_name,
            dns_ttl,
            aggregate,
            endpoints_from,
            slow_start,
            discovery,
        } = self;
        Profile {
            name: name.clone(),
            enabled: *enabled,
            dialect: *dialect,
            routing: *routing,
            health: health.clone(),
            endpoints: Vec::new(),
            nested: nested.clone(),
            dns_name: dns_name.clone(),
            dns_ttl: *dns_ttl,
            aggregate: *aggregate,
            endpoints_from: *endpoints_from,
            slow_start: *slow_start,
            discovery: discovery.clone(),
        }
    }
}

/// The health check of a profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthCheck {
    pub probe: Probe,
    /// Port from the profile; each endpoint's resolved port is in `Endpoint::port`.
    pub port: Option<u16>,
    pub interval: Duration,
    pub timeout: Duration,
    pub thresholds: Thresholds,
    /// Optional pacing beyond the plain interval (HAProxy fastinter/downinter, jitter).
    /// When all of it is unset, the SPEC windows hold exactly.
    pub pacing: Pacing,
}

/// Intervals and jitter that change when probes go out, all off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pacing {
    /// Gap between probes while a state change is pending (a run toward a transition).
    pub fast_interval: Option<Duration>,
    /// Gap between probes while the target is settled Unhealthy.
    pub down_interval: Option<Duration>,
    /// Up to this much random extra delay before a target's very first probe.
    pub initial_jitter: Duration,
    /// Each gap is lengthened by up to this percentage of itself, drawn at random.
    pub jitter_percent: u8,
}

impl HealthCheck {
    pub fn protocol(&self) -> Protocol {
        match &self.probe {
            Probe::Tcp => Protocol::Tcp,
            Probe::Udp(_) => Protocol::Udp,
            Probe::Http(h) => match (h.grpc.is_some(), h.tls) {
                (false, false) => Protocol::Http,
                (false, true) => Protocol::Https,
                (true, false) => Protocol::Grpc,
                (true, true) => Protocol::Grpcs,
            },
        }
    }

    pub fn http(&self) -> Option<&HttpCheck> {
        match &self.probe {
            Probe::Http(h) => Some(h),
            _ => None,
        }
    }
}

/// What a probe sends and what counts as success.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Probe {
    Tcp,
    Udp(UdpCheck),
    Http(Box<HttpCheck>),
}

/// UDP probe payloads. Without a response string, silence means healthy (lb semantics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UdpCheck {
    pub request: String,
    pub response: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpCheck {
    pub tls: bool,
    pub method: Method,
    pub path: HttpPath,
    /// Host header from `host`; None means the endpoint's address, unless a Host header is set.
    pub host: Option<HostName>,
    pub headers: Vec<Header>,
    pub healthy_status: Vec<StatusRange>,
    pub body_match: Option<String>,
    /// HTTPS: how the server's certificate is checked.
    pub tls_verify: TlsVerifySetting,
    /// HTTPS: the name sent as SNI and, with `tls_verify = "ca"`, verified; None: the Host
    /// (`host`, or a Host header), else no SNI and the address.
    pub server_name: Option<HostName>,
    /// HTTPS: the client certificate (chain) and key files presented to servers that ask
    /// (mTLS backends).
    pub client_cert: Option<ClientCertFiles>,
    /// HTTPS: `min_version = "1.3"`: TLS 1.3 only (else 1.2 and 1.3).
    pub tls13_only: bool,
    /// Over TLS: a full handshake with each target at least this often, in seconds
    /// (`tls_reverify`); a session is resumed only within it.
    pub tls_reverify_s: u32,
    /// Over TLS: a notice when the server's certificate expires within this many days (0:
    /// never). Not part of the check: it changes no probe and no verdict.
    pub cert_warn_days: u16,
    /// `protocol = "grpc"` or `"grpcs"`: the service whose health is asked (`""`: the
    /// server's own). The call is fixed (`grpc.health.v1.Health/Check`, SERVING is healthy),
    /// so method, path, healthy_status and body_match keep their defaults and are not used;
    /// headers are sent as metadata.
    pub grpc: Option<String>,
}

/// `client_cert` and `client_key`: PEM files, read when the configuration is loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientCertFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
}

/// `tls_verify`: what an HTTPS check requires of the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub enum TlsVerifySetting {
    /// One must be presented; chain, name and dates are not checked (SPEC 1, the tm's rule).
    #[default]
    Presence,
    /// It must chain to a root of `ca_file` (None: the system's roots), match the server name
    /// and be within its dates.
    Ca { ca_file: Option<std::path::PathBuf> },
}

impl HttpCheck {
    /// Whether `code` is in the healthy set (the config tests' shorthand).
    #[cfg(test)]
    pub fn status_ok(&self, code: u16) -> bool {
        self.healthy_status.iter().any(|r| r.contains(code))
    }
}

/// `[[profile.endpoint]]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Endpoint {
    /// Unique within the profile; defaults to `address:port`.
    pub name: std::sync::Arc<str>,
    pub address: IpAddr,
    /// The port probed: the endpoint's own, else the health check's, else 80/443 for HTTP(S).
    pub port: u16,
    pub weight: u32,
    pub priority: u32,
    pub state: AdminState,
    /// What most endpoints leave out, in a box of its own when set (`extra()`).
    #[serde(flatten)]
    pub extra: Extra,
}

/// An endpoint's less common settings: request headers, DNS subnets and region, the HAProxy
/// server name. Boxed, and only when any is set: a million endpoints stay in the running
/// config, and 64 bytes of empty slices and `None`s in each were 64 MB of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extra(Option<Box<EndpointExtra>>);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointExtra {
    pub headers: Box<[Header]>,
    pub subnets: Box<[IpNet]>,
    pub region: Option<Box<str>>,
    /// The HAProxy server a `haproxy` sink writes for this endpoint; None means its name.
    pub haproxy_server: Option<Box<str>>,
    /// The endpoint's own TLS keys (and gRPC service) in place of its profile's.
    pub check: Option<Box<CheckOverride>>,
}

/// What an endpoint may set of its profile's TLS and gRPC check: each key left out is the
/// profile's. (A backend with its own CA, name or client certificate, or its own service.)
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckOverride {
    pub tls_verify: Option<TlsVerifySetting>,
    pub server_name: Option<HostName>,
    pub client_cert: Option<ClientCertFiles>,
    pub tls13_only: Option<bool>,
    pub service: Option<String>,
}

impl CheckOverride {
    /// Whether it changes the TLS client (verification, client certificate, versions): the
    /// endpoint then needs a client of its own.
    pub fn changes_client(&self) -> bool {
        self.tls_verify.is_some() || self.client_cert.is_some() || self.tls13_only.is_some()
    }
}

impl HttpCheck {
    /// The profile's check with `o`'s keys in place of its own.
    #[must_use]
    pub fn with_override(&self, o: &CheckOverride) -> HttpCheck {
        let mut h = self.clone();
        if let Some(v) = &o.tls_verify {
            h.tls_verify = v.clone();
        }
        if let Some(n) = &o.server_name {
            h.server_name = Some(n.clone());
        }
        if let Some(c) = &o.client_cert {
            h.client_cert = Some(c.clone());
        }
        if let Some(t) = o.tls13_only {
            h.tls13_only = t;
        }
        if let Some(s) = &o.service {
            h.grpc = Some(s.clone());
        }
        h
    }
}

impl Extra {
    /// The box, or none when everything in it is left out.
    pub fn of(extra: EndpointExtra) -> Self {
        Self((extra != EndpointExtra::default()).then(|| Box::new(extra)))
    }
}

impl Serialize for Extra {
    /// Always the four keys, empty or null when left out, as one struct wrote them.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let none = EndpointExtra::default();
        let x = self.0.as_deref().unwrap_or(&none);
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("headers", &x.headers)?;
        m.serialize_entry("subnets", &x.subnets)?;
        m.serialize_entry("region", &x.region)?;
        m.serialize_entry("haproxy_server", &x.haproxy_server)?;
        // Only when set: a config without it serializes as before.
        if let Some(check) = &x.check {
            m.serialize_entry("check", check)?;
        }
        m.end()
    }
}

// The running config keeps every endpoint: 56 bytes each (152 with Vec and String, 120 with
// the less common settings inline, 64 with the name a `String`). The name is an `Arc` that
// the endpoint's target and DNS record share instead of a copy each.
const _: () = assert!(std::mem::size_of::<Endpoint>() <= 56);

impl Endpoint {
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.address, self.port)
    }

    fn extra(&self) -> Option<&EndpointExtra> {
        self.extra.0.as_deref()
    }

    pub fn headers(&self) -> &[Header] {
        self.extra().map_or(&[], |x| &x.headers)
    }

    pub fn subnets(&self) -> &[IpNet] {
        self.extra().map_or(&[], |x| &x.subnets)
    }

    pub fn region(&self) -> Option<&str> {
        self.extra().and_then(|x| x.region.as_deref())
    }

    pub fn haproxy_server(&self) -> Option<&str> {
        self.extra().and_then(|x| x.haproxy_server.as_deref())
    }

    /// Its own TLS and gRPC keys, if it sets any.
    pub fn check_override(&self) -> Option<&CheckOverride> {
        self.extra().and_then(|x| x.check.as_deref())
    }
}

/// `[[profile.endpoint]]` with `profile = "CHILD"`: a nested profile (SPEC 8). Not probed:
/// its monitor status follows the child's endpoints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NestedEndpoint {
    /// Unique within the profile; defaults to the child's name.
    pub name: String,
    pub child: String,
    pub weight: u32,
    pub priority: u32,
    /// Enabled or disabled; always-serve is refused (SPEC 8: checks cannot be turned off).
    pub state: AdminState,
    pub subnets: Vec<IpNet>,
    pub region: Option<String>,
    /// Degraded while fewer of the child's endpoints are available (Online, CheckingEndpoint
    /// or Unmonitored); at least 1.
    pub min_child_endpoints: u32,
}

impl NestedEndpoint {
    pub const DEFAULT_MIN_CHILD_ENDPOINTS: u32 = 1;
}

/// `[[sink]]`: one forwarding structure kept in step with one profile's eligible set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sink {
    /// Unique among sinks; labels its metrics and its entry in `/v1/sinks`.
    pub name: String,
    pub profile: String,
    /// What stopping probed does to the data path: leave it as it is, or empty it.
    pub on_stop: OnStop,
    pub kind: SinkKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStop {
    /// Fail-static: the data path keeps the last eligible set.
    Keep,
    Clear,
}

wire_enum! {
    /// A sink's `kind`: each kind's name, once.
    #[derive(Debug, Hash)]
    pub enum SinkType {
        Nftables = "nftables",
        Bpf = "bpf",
        Haproxy = "haproxy",
        Exec = "exec",
        Route = "route",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    Nftables(NftSink),
    Bpf(BpfSink),
    Haproxy(HaproxySink),
    Exec(ExecSink),
    Route(RouteSink),
}

impl SinkKind {
    /// Its `kind`.
    pub fn kind(&self) -> SinkType {
        match self {
            SinkKind::Nftables(_) => SinkType::Nftables,
            SinkKind::Bpf(_) => SinkType::Bpf,
            SinkKind::Haproxy(_) => SinkType::Haproxy,
            SinkKind::Exec(_) => SinkType::Exec,
            SinkKind::Route(_) => SinkType::Route,
        }
    }
}

/// An nftables map (slot table) or set (eligible addresses) in the operator's ruleset; probed
/// owns its elements only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NftSink {
    pub family: NftFamily,
    pub table: String,
    pub target: NftTarget,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NftFamily {
    Ip,
    Ip6,
    Inet,
}

impl NftFamily {
    pub fn name(self) -> &'static str {
        match self {
            NftFamily::Ip => "ip",
            NftFamily::Ip6 => "ip6",
            NftFamily::Inet => "inet",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NftTarget {
    /// `map NAME { typeof numgen inc mod N : ip daddr [. tcp dport]; }`: slot -> backend.
    Map { name: String, slots: u32 },
    /// `set NAME { typeof ip daddr; }`: the eligible addresses.
    Set { name: String },
}

/// A pinned BPF array of backend records under the daemon's pin directory (ABI in
/// `probe_common::slots`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BpfSink {
    /// The pin's file name under `daemon.pin_dir`/sinks/.
    pub map: String,
    pub slots: u32,
}

/// One backend of a running HAProxy, driven through its admin socket: probed sets each
/// followed server's state and weight; servers it does not follow are left alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HaproxySink {
    /// `stats socket PATH level admin` in haproxy.cfg; absolute.
    pub socket: PathBuf,
    pub backend: String,
    /// What a server whose endpoint is not eligible is put in.
    pub down: HaproxyDown,
    /// Every endpoint of the profile, by name, and the server written for it (its name unless
    /// the endpoint sets `haproxy_server`). Part of the sink's settings, so a reload that
    /// renames a server restarts the sink.
    pub servers: std::collections::BTreeMap<String, String>,
}

/// The state HAProxy holds a server in while its endpoint is not eligible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HaproxyDown {
    /// No traffic at all, established sessions included once they end (`state maint`).
    Maint,
    /// No new sessions, except persistent ones (`state drain`).
    Drain,
}

impl HaproxyDown {
    pub fn name(self) -> &'static str {
        match self {
            HaproxyDown::Maint => "maint",
            HaproxyDown::Drain => "drain",
        }
    }
}

/// Routes to a VIP's prefixes in a kernel routing table, which the node's routing daemon
/// (BIRD, FRR) learns and announces by BGP, while the profile can serve (`sinks::route`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteSink {
    /// What is announced, usually one /32 or /128 per VIP; host bits clear.
    pub prefixes: Vec<IpNet>,
    /// The TUN device the routes go through, which probed makes and which goes with it.
    pub device: String,
    pub kernel_table: u32,
    /// The route protocol number the routing daemon selects probed's routes by.
    pub route_protocol: u8,
    pub metric: u32,
    /// Below `min_eligible`, announce with this metric instead of withdrawing (None:
    /// withdraw).
    pub demote_metric: Option<u32>,
    /// Serving endpoints (`sinks::route::decide`) needed to announce.
    pub min_eligible: u32,
    /// The announcement changes at most once per this; a better state must hold this long.
    pub hold_down: Duration,
}

/// A long-lived program fed one JSON line per change on its stdin (format in
/// `sinks::exec`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecSink {
    /// The program (an absolute path) and its arguments; no shell is involved.
    pub command: Vec<String>,
}

/// `[dns]`: probed answers for `zone` as its authoritative server, one name per profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Dns {
    /// UDP and TCP on each.
    pub listen: Vec<SocketAddr>,
    /// Absolute, lower case, with the final dot: `tm.example.`.
    pub zone: String,
    /// Seconds; a profile's `dns_ttl` overrides it for that profile's answers.
    pub ttl: u32,
    /// Seconds resolvers may cache NXDOMAIN and NODATA (the SOA's minimum field).
    pub negative_ttl: u32,
    /// The zone's name servers (its NS records), in the order written; `ns1.<zone>` at the
    /// specific `listen` addresses when unset.
    pub nameservers: Vec<NameServer>,
    /// Response rate limiting of UDP answers.
    pub rate_limit: DnsRateLimit,
    /// What TCP clients may hold.
    pub tcp: DnsTcp,
    /// `[[dns.region]]`: source subnets, countries and continents per region, for geographic
    /// routing.
    pub regions: Vec<DnsRegion>,
    /// A MaxMind-format database (GeoLite2/GeoIP2 Country or City) that gives a source's
    /// country and continent, for the regions that name them.
    pub geoip_db: Option<PathBuf>,
}

impl Dns {
    pub const DEFAULT_TTL: u32 = 30;
    /// At most a day: a health-driven answer cached longer defeats failover.
    pub const MAX_TTL: u32 = 86_400;

    /// The settings a reload can only apply with a restart, by their config names.
    pub fn changed_keys<'a>(&'a self, new: &'a Dns) -> impl Iterator<Item = &'static str> + 'a {
        [("dns.listen", self.listen != new.listen)]
            .into_iter()
            .filter_map(|(k, changed)| changed.then_some(k))
    }

    /// The absolute name `profile` answers to: its `dns_name` (else its name, lower case)
    /// under the zone.
    pub fn name_of(&self, profile: &Profile) -> String {
        let label = profile
            .dns_name
            .clone()
            .unwrap_or_else(|| profile.name.to_ascii_lowercase());
        format!("{label}.{}", self.zone)
    }
}

/// `[[dns.nameserver]]`: one NS record of the zone's apex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NameServer {
    /// Absolute, lower case.
    pub name: String,
    /// Its A and AAAA records when the name is inside the zone (the server answers them, and
    /// adds them to NS answers as glue); empty for a name outside it, whose own zone has them.
    pub addresses: Vec<IpAddr>,
}

/// `[dns.rate_limit]`: response rate limiting (RRL) of UDP answers, per source prefix and
/// answer, against reflection: a source (spoofed or not) gets at most `responses_per_second`
/// copies of one answer; of those dropped, every `slip`-th goes out truncated instead (TC set,
/// no records), so a real client retries over TCP, which is not limited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DnsRateLimit {
    /// 0 turns rate limiting off.
    pub responses_per_second: u32,
    /// 0: drop every answer over the limit; 1: truncate every one; n: truncate one in n.
    pub slip: u32,
    /// Sources are grouped by these prefixes.
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
    /// Sources never limited (monitoring, known resolvers).
    pub exempt: Vec<IpNet>,
}

impl Default for DnsRateLimit {
    fn default() -> Self {
        DnsRateLimit {
            responses_per_second: 20,
            slip: 2,
            ipv4_prefix: 24,
            ipv6_prefix: 56,
            exempt: Vec::new(),
        }
    }
}

/// `[dns.tcp]`: the bounds on TCP clients (RFC 7766 section 6.2): the descriptors DNS may hold
/// are `max_clients`, apart from those probes, sinks and state use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DnsTcp {
    /// Connections open at once; one over it is closed as soon as it is accepted.
    pub max_clients: u32,
    /// Connections open at once from one source prefix (`rate_limit`'s prefixes).
    pub max_clients_per_prefix: u32,
    /// A connection with no complete query for this long is closed (bytes of an unfinished
    /// query do not count: a trickle cannot keep it).
    pub idle_timeout: Duration,
    /// A connection is closed this long after it opened, busy or not (after the answers
    /// already asked for).
    pub max_lifetime: Duration,
}

impl Default for DnsTcp {
    fn default() -> Self {
        DnsTcp {
            max_clients: 1024,
            max_clients_per_prefix: 64,
            idle_timeout: Duration::from_secs(5),
            max_lifetime: Duration::from_secs(120),
        }
    }
}

impl DnsTcp {
    /// The most `max_clients` may be: a quarter of the service's LimitNOFILE (65,536).
    pub const MAX_CLIENTS: u32 = 16_384;
}

/// `[cluster]`: this node's place among the probed nodes it shares verdicts with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cluster {
    /// Unique in the cluster: it names this node's verdicts and its share of the probing.
    pub node: String,
    /// Where the node probes from (a location); the node's name when unset.
    pub region: String,
    /// The UDP address gossip listens on.
    pub listen: SocketAddr,
    /// The address other nodes reach this one at (`listen` unless that is a wildcard).
    pub advertise: SocketAddr,
    /// Nodes to join through; the first node of a cluster may list none.
    pub seeds: Vec<SocketAddr>,
    /// k: how many live nodes probe each check; 0: every node probes every check.
    pub probers_per_target: usize,
    /// Spread a check's k probers over distinct regions first.
    pub distinct_regions: bool,
    /// The shared key that authenticates every gossip message.
    pub key_file: PathBuf,
    /// How long a gone node's verdicts still count.
    pub verdict_ttl: Duration,
    pub gossip_interval: Duration,
}

impl Cluster {
    pub const MAX_PROBERS: usize = 64;
    pub const DEFAULT_VERDICT_TTL: Duration = Duration::from_secs(60);
    pub const DEFAULT_GOSSIP_INTERVAL: Duration = Duration::from_millis(200);
}

/// `[[dns.region]]`: the sources that count as one region: by subnet first (the most specific
/// wins), else by the country, else the continent `geoip_db` gives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DnsRegion {
    pub name: String,
    pub subnets: Vec<IpNet>,
    /// ISO 3166-1 alpha-2 codes, upper case.
    pub countries: Vec<String>,
    /// AF, AN, AS, EU, NA, OC, SA.
    pub continents: Vec<String>,
}
