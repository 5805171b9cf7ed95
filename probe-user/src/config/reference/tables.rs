//! The tables and keys of the configuration file. Each table's keys are in the order the
//! reader lists them in its "unknown key" error; the page shows them in the same order.
//! `Type::String` is written in full: `String` alone is the standard type.
use super::{
    Allowed::{self, Bytes, Int, Millis, Octal, OneOf, Seconds},
    Key,
    Reload::{Applies, PerKey, Reask, Recheck, Restart, Retime},
    Section, Type,
    Type::{Boolean, Duration, Integer, Strings, Table, Tables},
    Unset::{self, Dialect, Required, Value},
};
use crate::{
    config::model::{Cluster, Daemon, DnsTcp, EndpointSource, HttpProbes, Protocol, SinkType},
    kernel::{AttachMode, Hook},
    rules::limits::{MAX_PACING_MS, MAX_SLOTS, MAX_UDP_PAYLOAD, THRESHOLD_MAX},
    status::{AdminState, Method},
};

const fn words(text: &'static str) -> Allowed {
    Allowed::Text(text)
}

const fn said(text: &'static str) -> Unset {
    Unset::Text(text)
}

/// Every table but the top level, in the order the page shows them.
pub const SECTIONS: [&Section; 13] = [
    &DAEMON,
    &SOURCE,
    &PROFILE,
    &HEALTH,
    &ENDPOINT,
    &DISCOVERY,
    &SINK,
    &DNS,
    &NAMESERVER,
    &RATE_LIMIT,
    &DNS_TCP,
    &REGION,
    &CLUSTER,
];

pub(super) const DESCRIPTION: &[&str] = &[
    "probed(8) reads one TOML file. probed validate FILE checks it and reports every problem at once, \
     each with its line, column, key, value and what is allowed; the daemon refuses to start with a file \
     that has any, and a reload refuses it whole. A key a table does not take is an error, and so is a \
     key of another protocol, dialect or sink kind than the one the table is for.",
    "Durations are strings of a whole number and a unit, ms or s: \"500ms\", \"2s\"; fractions and other \
     units are refused. Where a key takes an array of strings, a single string counts as an array of one. \
     Names of profiles, endpoints, sinks and regions end up in URLs, metric labels and commands, so they \
     are held to the alphabets given below.",
    "A profile's dialect (lb, the load balancer; tm, the DNS traffic manager; ga, the global \
     accelerator) decides the defaults and ranges of its health check; a value outside them is refused \
     with what the dialect allows.",
];

pub(super) const RELOAD: &[&str] = &[
    "A reload (SIGHUP, probed reload, or POST /v1/reload) reads the file again and applies it whole or \
     not at all: a file with any error, or one whose new sinks, events file or GeoIP database cannot \
     be opened, is refused, and the running configuration carries on untouched. Each key below says what \
     a reload does when its value changes: it is applied; it is applied and the checks it is part of \
     start over; or it needs a restart, in which case the daemon keeps the running value and the reload's \
     answer lists the change under restart_needed.",
    "An endpoint that stays (the same profile and name, checked by the same protocol at the same address \
     and port) keeps its health, its eligibility and any enable or disable set through the API, whatever \
     else of its check changes: a reload never withdraws, demotes or drains an endpoint that is healthy \
     before and after it. A change of timing (interval, timeout, pacing) or thresholds also keeps its \
     results so far toward a change (at most one short of a lowered threshold), and a change of what the \
     check sends or expects (path, host, method, headers, status, body, request, response, service, TLS \
     verification) has the new check's results count from the health it had. A new endpoint, or one whose \
     protocol, address or port changed, starts in CheckingEndpoint (or from the state file, which keeps \
     the same rules across a restart). Weights, priorities, admin states and routing keep every \
     endpoint's health. A sink whose keys change is updated in place when it writes the same structure \
     (the same nft table and map or set, BPF map, HAProxy socket and backend, program, or any route \
     sink): only what differs is written, nothing is cleared in between.",
];

pub(super) const EXAMPLE: &str = r#"[daemon]
api_listen = "unix:/run/probed/api.sock"
events = "/var/log/probed/events.jsonl"

[source]
interfaces = ["eth0"]

[[profile]]
name = "web"
dialect = "lb"

[profile.health]
protocol = "http"
port = 8080
path = "/healthz"
interval = "2s"
healthy_threshold = 2

[[profile.endpoint]]
address = "10.0.0.11"

[[profile.endpoint]]
address = "10.0.0.12"
weight = 2

[[sink]]
profile = "web"
kind = "nftables"
family = "ip"
table = "lb"
map = "web_slots""#;

/// The top level of the file: its tables.
pub const ROOT: Section = Section {
    path: "",
    header: "",
    about: "The top level of the file holds these tables and nothing else; each is optional.",
    keys: &[
        Key::new(
            "daemon",
            Table,
            said("every key at its default"),
            Allowed::Any,
            PerKey,
            "The daemon's own settings: the API, the events output, the pin directory, the state file \
             and the threads and paths of HTTP checks.",
        ),
        Key::new(
            "source",
            Table,
            said("every key at its default"),
            Allowed::Any,
            Restart,
            "Where probes leave from and how the reply matcher attaches.",
        ),
        Key::new(
            "profile",
            Tables,
            said("none: nothing is probed"),
            Allowed::Any,
            PerKey,
            "A named group of endpoints with one health check and one routing method; one table per \
             profile.",
        ),
        Key::new(
            "sink",
            Tables,
            said("none"),
            Allowed::Any,
            Applies,
            "A forwarding structure of the node kept equal to one profile's eligible endpoints; one \
             table per sink.",
        ),
        Key::new(
            "dns",
            Table,
            said("none: no DNS server"),
            Allowed::Any,
            Restart,
            "The authoritative DNS server. Adding or removing the table needs a restart; its keys say \
             what a reload does with each.",
        ),
        Key::new(
            "cluster",
            Table,
            said("none: the node probes alone"),
            Allowed::Any,
            Restart,
            "Several nodes sharing the probing and their verdicts.",
        ),
    ],
};

pub const DAEMON: Section = Section {
    path: "daemon",
    header: "[daemon]",
    about: "The daemon's own settings. The api_* keys decide where the API listens and who may change \
            state through it; the API keeps all of them until a restart, never a mix of old and new.",
    keys: &[
        Key::new(
            "api_listen",
            Type::String,
            Value("\"unix:/run/probed/api.sock\""),
            words(
                "\"unix:\" and an absolute path, or ADDRESS:PORT; an address other than loopback only \
                 with api_allow_remote = true",
            ),
            Restart,
            "Where the API listens: a unix socket, or a TCP address (plain HTTP, no TLS).",
        ),
        Key::new(
            "api_allow_remote",
            Boolean,
            Value("false"),
            Allowed::Any,
            Applies,
            "Lets api_listen name an address other than loopback. Whoever reaches it can read \
             everything, and its traffic is cleartext. It only decides whether api_listen is valid; the \
             listener changes at a restart.",
        ),
        Key::new(
            "api_socket_group",
            Type::String,
            said("probed, if that group exists; else the socket is owner-only (mode 0600) and the log says so"),
            words(
                "a group name (letters, digits, '_', '-' and '.', at most 32, not starting with '-') or a \
                 numeric gid",
            ),
            Restart,
            "The group that owns the API socket; its members may use the routes that change state. A \
             group named here that does not exist stops the start.",
        )
        .only("a unix socket"),
        Key::new(
            "api_socket_mode",
            Integer,
            Value("0o660"),
            Octal(0o600, 0o777),
            Restart,
            "The API socket's file mode, in octal, with the owner's read and write bits set. Whatever \
             the mode, only root, the daemon's user and the group's members may change state.",
        )
        .only("a unix socket"),
        Key::new(
            "api_token_file",
            Type::String,
            said("none: changes are refused over TCP"),
            words("an absolute file path"),
            Restart,
            "A file holding the bearer token that routes which change state require over TCP \
             (Authorization: Bearer TOKEN).",
        )
        .only("a TCP listener"),
        Key::new(
            "events",
            Type::String,
            Value("\"-\""),
            words("\"-\" for standard output, or a file path"),
            Applies,
            "Where transition events go, one JSON object per line. A reload opens the new file before \
             it changes anything; SIGUSR1 reopens the file at its path (for logrotate).",
        ),
        Key::new(
            "pin_dir",
            Type::String,
            Value("\"/sys/fs/bpf/probed\""),
            words("an absolute path on bpffs"),
            Restart,
            "Where the BPF maps are pinned, bpf sinks' under sinks/. The daemon locks it: a second \
             daemon with the same directory does not start.",
        ),
        Key::new(
            "state_file",
            Type::String,
            Value("\"/var/lib/probed/state.json\""),
            words("an absolute file path"),
            Restart,
            "Where the last known health of every endpoint is kept, so that a restart resumes it. \
             Locked like pin_dir.",
        ),
        Key::new(
            "l7_workers",
            Integer,
            said("one per CPU core"),
            Int(1, Daemon::MAX_L7_WORKERS as i64),
            Restart,
            "Threads that run HTTP and HTTPS probes through sockets and UDP request/response probes.",
        ),
        Key::new(
            "http_probes",
            Type::String,
            Value("\"kernel\""),
            OneOf(&HttpProbes::NAMES),
            Restart,
            "Where plain HTTP checks run. kernel: inside probe_rx, without a socket, for each check \
             that allows it (protocol http, no body_match, a request of at most 256 bytes), the others \
             through sockets; sockets: every HTTP check through a socket.",
        ),
    ],
};

pub const SOURCE: Section = Section {
    path: "source",
    header: "[source]",
    about: "Where probes leave from and how the reply matcher, probe_rx, attaches. Once the L4 engine \
            runs, a change here needs a restart (the reload names source); until the engine first \
            starts, it starts with the values of the latest reload.",
    keys: &[
        Key::new(
            "interfaces",
            Strings,
            Value("[]"),
            words("interface names of 1 to 15 characters, without '/', ':' or spaces"),
            Restart,
            "The interfaces probe_rx attaches to and probes are sent by. None: the interface the route \
             to the first TCP or UDP endpoint leaves by.",
        ),
        Key::new(
            "addresses",
            Strings,
            Value("[]"),
            words("unicast IPv4 or IPv6 addresses"),
            Restart,
            "Source addresses of probes. With none of a family, each probe of that family takes the \
             source its route prefers.",
        ),
        Key::new(
            "port_range",
            Type::String,
            Value("\"61000-65095\""),
            words(
                "\"FIRST-LAST\" with 1024 <= FIRST <= LAST <= 65535, outside the kernel's default \
                 ephemeral range 32768-60999 (an overlap with the node's own \
                 net.ipv4.ip_local_port_range stops the engine's start)",
            ),
            Restart,
            "The source ports of probes. While the engine runs they are added to \
             net.ipv4.ip_local_reserved_ports. Fewer than 4096 ports weaken UDP checks against forged \
             ICMP errors.",
        ),
        Key::new(
            "xdp_mode",
            Type::String,
            Value("\"auto\""),
            OneOf(&AttachMode::NAMES),
            Restart,
            "How probe_rx attaches at XDP. auto: native (driver) mode, else generic (skb) mode with a \
             warning, since generic XDP turns LRO and hardware GRO off on the device; driver: native \
             mode or no start; skb: generic mode only.",
        ),
        Key::new(
            "hook",
            Type::String,
            Value("\"xdp\""),
            OneOf(&Hook::NAMES),
            Restart,
            "Where the reply matcher runs. xdp: at the interface's XDP hook, which it must have to itself \
             (another XDP program there stops the start); tcx: at tc ingress, first in the chain, beside \
             another XDP program (Linux 6.6 or later).",
        ),
    ],
};

/// The name alphabet of profiles, endpoints and cluster nodes.
const NAME: &str = "1 to 63 letters, digits, '-', '_', '.', ':', '[' or ']'";

pub const PROFILE: Section = Section {
    path: "profile",
    header: "[[profile]]",
    about: "A named group of endpoints, probed with one health check ([profile.health]) and answered \
            for with one routing method. A reload applies every key here.",
    keys: &[
        Key::new(
            "name",
            Type::String,
            Required,
            words("1 to 63 letters, digits, '-', '_', '.', ':', '[' or ']'; unique among profiles"),
            Recheck,
            "Names the profile in the API, events, metrics and sinks, and in DNS unless dns_name is \
             set. A renamed profile is a new one: its endpoints start over.",
        ),
        Key::new(
            "enabled",
            Boolean,
            Value("true"),
            Allowed::Any,
            Applies,
            "false: nothing of the profile is probed, its endpoints are Inactive and its DNS name \
             answers NXDOMAIN. A change here replaces an enable or disable set through the API, which \
             otherwise survives reloads and restarts.",
        ),
        Key::new(
            "dialect",
            Type::String,
            Required,
            OneOf(&["lb", "tm", "ga"]),
            Retime,
            "The product whose health-check rules the profile follows: lb (load balancer), tm (DNS \
             traffic manager) or ga (global accelerator). It decides the defaults and ranges of \
             [profile.health] and which of its threshold keys apply.",
        ),
        Key::new(
            "routing",
            Type::String,
            Value("\"priority\""),
            OneOf(Method::NAMES),
            Applies,
            "How DNS answers and /v1/select pick among the eligible endpoints: the lowest priority; one \
             at random by weight; up to max_answers by priority; by the subnets that hold the source; \
             by the source's region ([[dns.region]]), without failover to another region; or the lowest \
             round-trip time this node measured.",
        ),
        Key::new(
            "max_answers",
            Integer,
            Value("2"),
            Int(1, 32),
            Applies,
            "How many endpoints one multivalue answer holds at most.",
        )
        .only("routing = \"multivalue\""),
        Key::new(
            "health",
            Table,
            Required,
            Allowed::Any,
            PerKey,
            "The health check: see [profile.health].",
        ),
        Key::new(
            "endpoint",
            Tables,
            said("none"),
            Allowed::Any,
            PerKey,
            "The endpoints: see [[profile.endpoint]].",
        ),
        Key::new(
            "discovery",
            Table,
            said("none; required with endpoints_from = \"dns\", refused without"),
            Allowed::Any,
            PerKey,
            "Where its endpoints come from with endpoints_from = \"dns\": see [profile.discovery].",
        ),
        Key::new(
            "endpoints_from",
            Type::String,
            Value("\"file\""),
            OneOf(&EndpointSource::NAMES),
            Applies,
            "Who owns the profile's endpoints. file: its [[profile.endpoint]] tables. api: the fleet \
             API (POST /v1/profiles/NAME/endpoints, probed endpoints), which adds, updates and removes \
             them at run time without a reload; they are kept in the fleet journal beside the state \
             file (state_file with the extension .fleet), so restarts and reloads keep them, and the \
             file lists none. dns: the records of the name [profile.discovery] gives, asked again at \
             their TTL and applied as the API's batches are (kept in the same journal; the API \
             changes none of them). A profile moved from api or dns to file takes the file's \
             endpoints, each keeping its health where its name and check stay the same.",
        ),
        Key::new(
            "slow_start",
            Duration,
            Value("\"0s\""),
            words("\"0s\" (off) or a duration from 1s to 1h"),
            Applies,
            "How long an endpoint that starts to take traffic again takes to reach its whole weight \
             in the data-path sinks: back from Degraded, re-enabled or undrained, or added to the \
             running profile by a reload or the fleet API. Its share starts at 1% and grows in 20 \
             steps (5%, 10%, ... 95%, whole). The BPF slot tables share by the ramped weight; \
             HAProxy gets it rounded up, never below 1; DNS answers and /v1/select keep the \
             configured weight. An endpoint's first verdict after probed starts, or in a profile \
             that is new, does not ramp (there is no traffic to protect it from yet), and a \
             restart ends every ramp.",
        ),
        Key::new(
            "dns_name",
            Type::String,
            said("the profile's name, in lower case"),
            words("a DNS name relative to the zone, without a final dot; unique in the zone"),
            Applies,
            "The name the profile answers to under [dns] zone.",
        ),
        Key::new(
            "dns_ttl",
            Duration,
            said("[dns] ttl"),
            Seconds(0, 86_400),
            Applies,
            "The TTL of this profile's DNS answers.",
        ),
        Key::new(
            "aggregate",
            Type::String,
            Value("\"50%\""),
            words("\"N%\" with N from 1 to 100, \"any\" or \"all\""),
            Applies,
            "How the verdicts of the nodes that probe an endpoint make its health: healthy while at \
             least N% of the nodes with a verdict see it up, while any does, or only while all do.",
        )
        .only("a node with [cluster]"),
    ],
};

const HTTP: &[Protocol] = &[Protocol::Http, Protocol::Https];
const HTTP_AND_GRPC: &[Protocol] = &[Protocol::Http, Protocol::Https, Protocol::Grpc, Protocol::Grpcs];
const GRPC: &[Protocol] = &[Protocol::Grpc, Protocol::Grpcs];
const OVER_TLS: &[Protocol] = &[Protocol::Https, Protocol::Grpcs];
/// Why the request's keys are not gRPC's.
const GRPC_CALL: &str = "(a gRPC check's call is grpc.health.v1.Health/Check, and SERVING is healthy)";

pub const HEALTH: Section = Section {
    path: "profile.health",
    header: "[profile.health]",
    about: "The profile's health check, by its dialect's rules. The keys of one protocol are refused on \
            another. Every key here but the thresholds is part of the check: changing it makes each \
            endpoint's check a new one.",
    keys: &[
        Key::new(
            "protocol",
            Type::String,
            Required,
            OneOf(Protocol::NAMES),
            Recheck,
            "What a probe is: a TCP handshake, a UDP datagram, an HTTP or HTTPS request (HTTPS needs \
             a certificate presented, and by default does not verify it), or a gRPC health check \
             (grpc.health.v1.Health/Check over HTTP/2: grpc in cleartext by prior knowledge, grpcs \
             over TLS; SERVING is healthy). lb takes all six; tm and ga all but udp.",
        ),
        Key::new(
            "port",
            Integer,
            said("none: 80 for http, 443 for https; tcp, udp, grpc and grpcs need a port here or on every endpoint"),
            Int(1, 65_535),
            Recheck,
            "The port probed on the endpoints that do not set their own.",
        ),
        Key::new(
            "path",
            Type::String,
            Value("\"/\""),
            words(
                "1 to 80 characters starting with '/': letters, digits and - / . % ? # & _ ; ~ ! ( ) * [ ] \
                 @ $ ^ : ' , +",
            ),
            Reask,
            "The path requested.",
        )
        .protocols(HTTP, GRPC_CALL),
        Key::new(
            "host",
            Type::String,
            said("the endpoint's address"),
            words("a DNS name or an IP address, optionally with :PORT; no '*'"),
            Reask,
            "The Host header (a gRPC call's :authority), and the name sent in TLS. tm sets Host \
             through headers instead, except for gRPC.",
        )
        .protocols(HTTP_AND_GRPC, "(http and https: in lb and ga)"),
        Key::new(
            "method",
            Type::String,
            Dialect(["\"HEAD\"", "\"GET\"", "\"GET\""]),
            OneOf(&["HEAD", "GET"]),
            Reask,
            "The request method, in any case; tm and ga take GET only.",
        )
        .protocols(HTTP, GRPC_CALL),
        Key::new(
            "headers",
            Strings,
            Value("[]"),
            words(
                "at most 8 \"name:value\" strings, each name once; not Content-Length, Transfer-Encoding, \
                 Connection, Upgrade or TE",
            ),
            Reask,
            "Request headers of every probe; tm sets Host this way: \"Host:www.example.com\". For \
             gRPC, the call's metadata (every dialect): not Host, Content-Type, TE or grpc-*.",
        )
        .protocols(HTTP_AND_GRPC, "(http and https: in tm)"),
        Key::new(
            "status",
            Strings,
            Dialect(["[\"2xx\", \"3xx\"]", "[\"200\"]", "[\"2xx\", \"3xx\"]"]),
            words(
                "lb: classes \"2xx\" to \"5xx\"; tm: at most 8 codes or ranges within 100-599, like \"200\" \
                 or \"200-299\" (one string \"200-299, 301\" also works); ga: not configurable",
            ),
            Reask,
            "The status codes that make a response healthy.",
        )
        .protocols(HTTP, GRPC_CALL),
        Key::new(
            "interval",
            Duration,
            Dialect(["\"2s\"", "\"30s\"", "\"2s\""]),
            words("lb: \"100ms\" to \"300s\"; tm: \"10s\" or \"30s\"; ga: whole seconds from \"1s\" to \"50s\""),
            Retime,
            "The time from the end of one probe of an endpoint to the start of the next.",
        ),
        Key::new(
            "timeout",
            Duration,
            Dialect(["\"5s\"", "\"10s\"", "\"3s\""]),
            words(
                "lb: \"100ms\" to \"60s\"; tm: whole seconds from \"5s\" to \"10s\", to \"9s\" with \
                 interval \"10s\"; ga: \"3s\" only",
            ),
            Retime,
            "How long a probe may take before it fails. tm's default is \"9s\" with interval \"10s\".",
        ),
        Key::new(
            "healthy_threshold",
            Integer,
            Value("3"),
            Int(1, THRESHOLD_MAX as i64),
            Retime,
            "Consecutive successes that make an endpoint healthy.",
        )
        .only("dialect = \"lb\""),
        Key::new(
            "unhealthy_threshold",
            Integer,
            Value("3"),
            Int(1, THRESHOLD_MAX as i64),
            Retime,
            "Consecutive failures that make an endpoint unhealthy.",
        )
        .only("dialect = \"lb\""),
        Key::new(
            "tolerated_failures",
            Integer,
            Value("3"),
            Int(0, THRESHOLD_MAX as i64 - 1),
            Retime,
            "Consecutive failures tolerated: the next one makes the endpoint Degraded, and one success \
             makes it Online again.",
        )
        .only("dialect = \"tm\""),
        Key::new(
            "threshold",
            Integer,
            Value("3"),
            Int(2, THRESHOLD_MAX as i64),
            Retime,
            "Consecutive results, successes or failures, that change an endpoint's health.",
        )
        .only("dialect = \"ga\""),
        Key::new(
            "request",
            Type::String,
            Value("\"\""),
            Bytes(0, MAX_UDP_PAYLOAD),
            Reask,
            "The datagram sent. Without response, silence within the timeout is healthy and an ICMP \
             error unhealthy; a backend that rate-limits its ICMP errors can then look healthy on a \
             closed port.",
        )
        .protocols(&[Protocol::Udp], ""),
        Key::new(
            "response",
            Type::String,
            said("none"),
            Bytes(0, MAX_UDP_PAYLOAD),
            Reask,
            "A string the reply must contain. With it only such a reply within the timeout is healthy, \
             and silence fails.",
        )
        .protocols(&[Protocol::Udp], ""),
        Key::new(
            "body_match",
            Type::String,
            said("none"),
            Bytes(1, 1024),
            Reask,
            "A string the response body must contain, within its first 64 KiB; not with method HEAD. \
             A check with it runs through a socket, never in the kernel.",
        )
        .protocols(HTTP, GRPC_CALL),
        Key::new(
            "service",
            Type::String,
            Value("\"\""),
            words("a gRPC service name of at most 256 bytes, like \"shop.Cart\"; no control characters"),
            Reask,
            "The service whose health the check asks about; \"\" asks about the server as a whole. \
             SERVING is healthy; NOT_SERVING, UNKNOWN and SERVICE_UNKNOWN fail with that name as the \
             reason, and so does a gRPC error status (UNIMPLEMENTED: no health service; NOT_FOUND: a \
             service the server does not know; UNAVAILABLE; DEADLINE_EXCEEDED). The timeout is sent \
             as the call's deadline.",
        )
        .protocols(GRPC, ""),
        Key::new(
            "tls_verify",
            Type::String,
            Value("\"presence\""),
            OneOf(&["presence", "ca"]),
            Reask,
            "presence: the server must present a certificate, which is not checked (the traffic \
             manager's rule). ca: it must chain to a root of ca_file (or the system's roots), match \
             server_name and be within its dates; a failure is the check's failure, its reason naming it \
             (expired, unknown issuer, not valid for the name).",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "ca_file",
            Type::String,
            said("the system's roots"),
            words("an absolute path to a PEM file of CA certificates, read at start and reload"),
            Reask,
            "The roots a certificate must chain to with tls_verify = \"ca\".",
        )
        .protocols(OVER_TLS, "with tls_verify = \"ca\""),
        Key::new(
            "server_name",
            Type::String,
            said("the Host (host, or a Host header); else the address, with no SNI"),
            words("a host name"),
            Reask,
            "The name sent as SNI and, with tls_verify = \"ca\", the name the certificate must be \
             valid for.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "client_cert",
            Type::String,
            said("none: no client certificate"),
            words("an absolute path to a PEM file: the certificate, then its chain"),
            Reask,
            "The certificate presented to servers that ask for one (mTLS backends), with client_key. \
             Read when the configuration is loaded; a renewed file at the same path is taken at the \
             next restart, or by a reload that changes the path.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "client_key",
            Type::String,
            said("none"),
            words("an absolute path to a PEM private key that only its owner (root or the daemon's user) may read"),
            Reask,
            "The client certificate's key.",
        )
        .protocols(OVER_TLS, "with client_cert"),
        Key::new(
            "min_version",
            Type::String,
            Value("\"1.2\""),
            OneOf(&["1.2", "1.3"]),
            Reask,
            "The lowest TLS version the check accepts: 1.2 offers TLS 1.2 and 1.3; 1.3 offers TLS 1.3 \
             alone, and a server that speaks only TLS 1.2 fails the check.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "tls_reverify",
            Duration,
            Value("\"300s\""),
            Seconds(1, 86_400),
            Reask,
            "With tls_verify = \"ca\": a full, verified handshake with each endpoint at least this \
             often. A resumed TLS session carries no certificate, so a session is resumed only within \
             this of the endpoint's own last full handshake, and never once that certificate has \
             expired; sessions are kept per endpoint (address, port and TLS name), never offered to \
             another endpoint behind the same name. A certificate that expires or is replaced by a bad \
             one fails the check within this (plus the failure threshold), as curl fails a new \
             connection at once.",
        )
        .protocols(OVER_TLS, "with tls_verify = \"ca\""),
        Key::new(
            "cert_warn_days",
            Integer,
            Value("14"),
            Int(0, 3650),
            Applies,
            "A cert-expiring event (once per certificate) when the server's certificate expires within \
             this many days; 0: never. The check's verdict does not change. Every TLS check records \
             the certificate's expiry, shown in the status view (tls_cert) and the metric \
             probed_tls_cert_expiry_seconds.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "fast_interval",
            Duration,
            said("interval"),
            Millis(1, MAX_PACING_MS),
            Retime,
            "The time between probes while a change of health is pending (HAProxy's fastinter).",
        ),
        Key::new(
            "down_interval",
            Duration,
            said("interval"),
            Millis(1, MAX_PACING_MS),
            Retime,
            "The time between probes while an endpoint is settled unhealthy (HAProxy's downinter).",
        ),
        Key::new(
            "initial_jitter",
            Duration,
            Value("\"0s\""),
            Millis(0, MAX_PACING_MS),
            Retime,
            "Up to this much random delay before an endpoint's first probe.",
        ),
        Key::new(
            "jitter_percent",
            Integer,
            Value("0"),
            Int(0, 100),
            Retime,
            "Each time between probes is lengthened at random by up to this share of itself. With all \
             four pacing keys left out, probes keep the dialect's windows exactly.",
        ),
    ],
};

const PLAIN: &str = "plain endpoints, not nested ones";

pub const ENDPOINT: Section = Section {
    path: "profile.endpoint",
    header: "[[profile.endpoint]]",
    about: "One backend of the profile, probed with the profile's check. An endpoint with profile = \
            \"CHILD\" is a nested profile instead: it is not probed, its status follows the child's \
            endpoints, and it takes only name, profile, weight, priority, state, subnets, region and \
            min_child_endpoints.",
    keys: &[
        Key::new(
            "name",
            Type::String,
            said("ADDRESS:PORT; for a nested endpoint, the child's name"),
            words("1 to 63 letters, digits, '-', '_', '.', ':', '[' or ']'; unique in the profile"),
            Recheck,
            "Names the endpoint in the API, events and metrics. A renamed endpoint is a new one.",
        ),
        Key::new(
            "address",
            Type::String,
            Required,
            words("a unicast IPv4 or IPv6 address"),
            Recheck,
            "The backend's address: what is probed, answered in DNS and written to sinks.",
        )
        .only(PLAIN),
        Key::new(
            "port",
            Integer,
            said("the health check's port, else 80 for http and 443 for https"),
            Int(1, 65_535),
            Recheck,
            "The port probed, and written to sinks that hold ports.",
        )
        .only(PLAIN),
        Key::new(
            "weight",
            Integer,
            Value("1"),
            Int(1, 1000),
            Applies,
            "The endpoint's share under weighted routing and in slot tables. A haproxy sink takes \
             weights up to 256.",
        ),
        Key::new(
            "priority",
            Integer,
            said("the endpoint's position in the profile, from 1"),
            Int(1, 1000),
            Applies,
            "The order of priority and multivalue routing, lowest first; unique in the profile under \
             priority routing.",
        ),
        Key::new(
            "state",
            Type::String,
            Value("\"enabled\""),
            OneOf(AdminState::NAMES),
            Applies,
            "The admin state: disabled takes the endpoint out of rotation; always-serve keeps it \
             eligible whatever its checks say; drain keeps probing it but sends it no new traffic \
             (always-serve and drain are refused on a nested endpoint). A change here replaces a \
             state set through the API, which otherwise survives reloads and restarts.",
        ),
        Key::new(
            "headers",
            Strings,
            Value("[]"),
            words("as headers in [profile.health]"),
            Reask,
            "Request headers of this endpoint's probes, sent with the profile's.",
        )
        .protocols(HTTP_AND_GRPC, "(plain endpoints; http and https: of a tm profile; grpc and grpcs: sent as metadata)"),
        Key::new(
            "subnets",
            Strings,
            Value("[]"),
            words("CIDRs, each mapped by one endpoint of the profile"),
            Applies,
            "Sources in these subnets get this endpoint. One endpoint of the profile may have none: it \
             gets every source no subnet maps.",
        )
        .only("routing = \"subnet\""),
        Key::new(
            "region",
            Type::String,
            said("none; required under geographic routing"),
            words("a lower-case name (see name in [[dns.region]]), or \"world\"; one endpoint per region"),
            Applies,
            "Queries from the sources of the [[dns.region]] of this name get this endpoint; the world \
             endpoint gets every source whose region has no endpoint of its own.",
        )
        .only("routing = \"geographic\""),
        Key::new(
            "haproxy_server",
            Type::String,
            said("the endpoint's name"),
            words("1 to 63 letters, digits, '-', '_', '.' or ':'"),
            Applies,
            "The HAProxy server a haproxy sink sets for this endpoint.",
        )
        .only(PLAIN),
        Key::new(
            "tls_verify",
            Type::String,
            said("the profile's"),
            OneOf(&["presence", "ca"]),
            Reask,
            "The profile's tls_verify, for this endpoint alone (with its own ca_file when \"ca\"; a ca_file here needs tls_verify here).",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "ca_file",
            Type::String,
            said("the profile's roots"),
            words("an absolute path to a PEM file of CA certificates, read at start and reload"),
            Reask,
            "The roots this endpoint's certificate must chain to, with tls_verify = \"ca\" on the endpoint.",
        )
        .protocols(OVER_TLS, "with tls_verify = \"ca\" on the endpoint"),
        Key::new(
            "server_name",
            Type::String,
            said("the profile's"),
            words("a host name"),
            Reask,
            "The name this endpoint is greeted with (SNI) and verified against.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "client_cert",
            Type::String,
            said("the profile's"),
            words("an absolute path to a PEM file: the certificate, then its chain"),
            Reask,
            "The client certificate this endpoint is shown, with client_key.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "client_key",
            Type::String,
            said("the profile's"),
            words("an absolute path to a PEM private key that only its owner may read"),
            Reask,
            "The key of the endpoint's client_cert.",
        )
        .protocols(OVER_TLS, "with client_cert on the endpoint"),
        Key::new(
            "min_version",
            Type::String,
            said("the profile's"),
            OneOf(&["1.2", "1.3"]),
            Reask,
            "The lowest TLS version this endpoint is accepted with.",
        )
        .protocols(OVER_TLS, ""),
        Key::new(
            "service",
            Type::String,
            said("the profile's"),
            words("a gRPC service name of at most 256 bytes; no control characters"),
            Reask,
            "The gRPC service whose health this endpoint is asked about.",
        )
        .protocols(GRPC, ""),
        Key::new(
            "profile",
            Type::String,
            said("none: a plain endpoint"),
            words("the name of another profile, without loops"),
            Applies,
            "Makes the endpoint a nested profile: the child named here, whose routing picks the \
             addresses its answers hold.",
        ),
        Key::new(
            "min_child_endpoints",
            Integer,
            Value("1"),
            Int(1, 1000),
            Applies,
            "The nested endpoint is Degraded while fewer of the child's endpoints are available \
             (Online, CheckingEndpoint or Unmonitored).",
        )
        .only("nested endpoints"),
    ],
};

/// The sinks that keep a slot table.
const MAPS: &[SinkType] = &[SinkType::Nftables, SinkType::Bpf];
/// The alphabet of sink, nftables and pin names.
const IDENT: &str = "1 to 63 letters, digits, '_' or '-', starting with a letter";

pub const DISCOVERY: Section = Section {
    path: "profile.discovery",
    header: "[profile.discovery]",
    about: "Where a profile with endpoints_from = \"dns\" finds its endpoints: the records of one name, \
            asked of the resolvers given, again when their TTL runs out (within min_ttl and max_ttl). \
            Each address found is an endpoint named ADDRESS:PORT; records that go take their endpoints \
            with them, and one that stays keeps its health. A resolver that fails (no answer in time, \
            SERVFAIL, REFUSED, a garbled answer) changes nothing: the last good set stays, and the name \
            is asked again sooner. An answer that the name has no such records (NXDOMAIN, or no \
            data) is an answer: the profile is then left with no endpoints.",
    keys: &[
        Key::new(
            "name",
            Type::String,
            Required,
            words("a fully qualified DNS name (a final dot is allowed)"),
            Applies,
            "The name asked: for A and AAAA its addresses, for SRV its service records \
             (_service._proto.name).",
        ),
        Key::new(
            "type",
            Type::String,
            Value("\"A+AAAA\""),
            OneOf(&crate::config::model::DiscoveryRecords::NAMES),
            Applies,
            "Which records: A, AAAA, both (one question each), or SRV, whose targets' addresses \
             (from the answer's additional section, else asked for) are the endpoints, each with \
             the record's port, its weight (1 to 1000: 0 counts as 1, more than 1000 as 1000) and \
             its priority plus one (at most 1000).",
        ),
        Key::new(
            "port",
            Integer,
            said("none: required for A and AAAA, refused for SRV"),
            Int(1, 65_535),
            Applies,
            "The endpoints' port, for A and AAAA records (SRV records carry their own).",
        ),
        Key::new(
            "resolvers",
            Strings,
            Required,
            words("1 to 8 addresses, each with :PORT or not (53); IPv6 with a port in brackets"),
            Applies,
            "The resolvers asked, in turn until one answers (over UDP, and over TCP when an answer \
             comes truncated).",
        ),
        Key::new(
            "min_ttl",
            Duration,
            Value("\"1s\""),
            Millis(1_000, 3_600_000),
            Applies,
            "The name is asked again no sooner than this, whatever the records' TTL.",
        ),
        Key::new(
            "max_ttl",
            Duration,
            said("\"60s\", or min_ttl when that is longer"),
            Millis(1_000, 3_600_000),
            Applies,
            "And no later than this; also the wait after an answer with no TTL to go by. Not below min_ttl.",
        ),
        Key::new(
            "timeout",
            Duration,
            Value("\"1s\""),
            Millis(100, 10_000),
            Applies,
            "How long each resolver has to answer.",
        ),
    ],
};

pub const SINK: Section = Section {
    path: "sink",
    header: "[[sink]]",
    about: "Keeps one forwarding structure of the node equal to one profile's eligible endpoints (nested \
            ones left out). nftables: a map of the operator's ruleset used as a slot table, or a set of \
            the eligible addresses; bpf: a pinned slot table for an XDP or tc load balancer; haproxy: \
            the servers of a running HAProxy backend, through its admin socket; exec: a program fed one \
            JSON line per change; route: routes to a VIP in a kernel table, announced by the node's \
            routing daemon while the profile can serve. A reload restarts the sinks whose settings changed, and is refused \
            when a new or changed sink's structure is missing.",
    keys: &[
        Key::new(
            "name",
            Type::String,
            said(
                "the map's or set's name (nftables), the map's (bpf), the backend's (haproxy), the program's \
                 file name (exec)",
            ),
            words("1 to 63 letters, digits, '_' or '-', starting with a letter; unique among sinks"),
            Applies,
            "Labels the sink's metrics and its entry in /v1/sinks.",
        ),
        Key::new(
            "profile",
            Type::String,
            Required,
            words("the name of a profile"),
            Applies,
            "The profile whose eligible endpoints the sink follows.",
        ),
        Key::new(
            "kind",
            Type::String,
            Required,
            OneOf(SinkType::NAMES),
            Applies,
            "What the sink drives.",
        ),
        Key::new(
            "on_stop",
            Type::String,
            Value("\"keep\""),
            OneOf(&["keep", "clear"]),
            Applies,
            "What stopping probed does to the structure: keep leaves it as it is, so the node goes on \
             forwarding to the last eligible set; clear empties it. A route sink always withdraws (its \
             routes go with probed's device) and takes no on_stop.",
        ),
        Key::new(
            "family",
            Type::String,
            Required,
            OneOf(&["ip", "ip6", "inet"]),
            Applies,
            "The family of the nftables table.",
        )
        .sinks(&[SinkType::Nftables], ""),
        Key::new(
            "table",
            Type::String,
            Required,
            words(IDENT),
            Applies,
            "The nftables table that holds the map or set.",
        )
        .sinks(&[SinkType::Nftables], ""),
        Key::new(
            "map",
            Type::String,
            said("none; bpf needs it, and nftables needs map or set"),
            words(IDENT),
            Applies,
            "nftables: a map keyed by slot (typeof numgen inc mod SLOTS : ip daddr, with . tcp dport to \
             set the port too). bpf: the pin's name under pin_dir/sinks/; probed creates NAME and \
             NAME_ctl and leaves them when it stops.",
        )
        .sinks(MAPS, ""),
        Key::new(
            "set",
            Type::String,
            said("none"),
            words(IDENT),
            Applies,
            "An nftables set that holds the eligible addresses (and ports, with . inet_service in its \
             type); instead of map.",
        )
        .sinks(&[SinkType::Nftables], ""),
        Key::new(
            "slots",
            Integer,
            Value("64"),
            Int(1, MAX_SLOTS as i64),
            Applies,
            "The slots of the slot table; each names one eligible endpoint, in proportion to weight, and \
             only the slots of an endpoint that leaves or returns move.",
        )
        .sinks(MAPS, "with map"),
        Key::new(
            "socket",
            Type::String,
            Required,
            words("an absolute path"),
            Applies,
            "HAProxy's admin socket (stats socket PATH level admin in haproxy.cfg).",
        )
        .sinks(&[SinkType::Haproxy], ""),
        Key::new(
            "backend",
            Type::String,
            Required,
            words("1 to 63 letters, digits, '-', '_', '.' or ':'"),
            Applies,
            "The HAProxy backend whose servers probed sets: each endpoint's server (its name, or its \
             haproxy_server) gets its state and weight.",
        )
        .sinks(&[SinkType::Haproxy], ""),
        Key::new(
            "down",
            Type::String,
            Value("\"maint\""),
            OneOf(&["maint", "drain"]),
            Applies,
            "The state of a server whose endpoint is not eligible: maint (no traffic) or drain (no new \
             sessions but persistent ones).",
        )
        .sinks(&[SinkType::Haproxy], ""),
        Key::new(
            "command",
            Strings,
            Required,
            words("the program's absolute path, then its arguments; no shell, no PATH search"),
            Applies,
            "The program started and fed one JSON line per change on its standard input.",
        )
        .sinks(&[SinkType::Exec], ""),
        Key::new(
            "prefixes",
            Strings,
            Required,
            words("1 to 64 IPv4 or IPv6 prefixes (a VIP: /32 or /128) with their host bits clear, each in one route sink only"),
            Applies,
            "What the node announces while the profile can serve: a route to each prefix in kernel_table, \
             which the routing daemon (BIRD, FRR) learns and announces by BGP.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "device",
            Type::String,
            said("\"probed-\" and the sink's name"),
            words("1 to 15 letters, digits, '_' or '-'; unique among route sinks"),
            Applies,
            "The TUN device the routes go through. probed makes it, and it goes when probed ends, \
             however it ends (stop, SIGKILL, OOM, panic): the kernel removes its routes, and the routing \
             daemon withdraws them.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "kernel_table",
            Integer,
            Value("201"),
            Int(1, 4_294_967_294),
            Applies,
            "The kernel routing table the routes are written to (BIRD: kernel table; FRR: ip \
             import-table). Not the main table: nothing on the node forwards by it.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "route_protocol",
            Integer,
            Value("201"),
            Int(5, 254),
            Applies,
            "The routes' protocol number (ip route ... proto N), by which the routing daemon picks \
             probed's routes (BIRD: krt_source = N).",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "metric",
            Integer,
            Value("100"),
            Int(0, 4_294_967_295),
            Applies,
            "The metric of an announced route (BIRD: krt_metric).",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "demote_metric",
            Integer,
            said("none: below min_eligible the routes are withdrawn"),
            words("0 to 4294967295, not metric"),
            Applies,
            "Below min_eligible serving endpoints (but some enabled), keep the routes with this metric \
             instead of withdrawing them; the routing daemon's export filter maps it to worse attributes \
             (a community, AS-path prepending), so traffic still lands here when no node announces \
             better. A disabled profile and a stop still withdraw.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "min_eligible",
            Integer,
            Value("1"),
            Int(1, 100_000),
            Applies,
            "Serving endpoints needed to announce: eligible and Online, or Unmonitored (always-serve). \
             Degraded endpoints made eligible by fail-open and endpoints still being checked do not \
             count.",
        )
        .sinks(&[SinkType::Route], ""),
        Key::new(
            "hold_down",
            Duration,
            Value("\"5s\""),
            Millis(0, 3_600_000),
            Applies,
            "The announcement changes at most once per hold_down, and a better state (withdrawn to \
             demoted to announced) must hold this long without a break first; a worse one is applied \
             as soon as the rate allows. A start resumes the saved health at once.",
        )
        .sinks(&[SinkType::Route], ""),
    ],
};

pub const DNS: Section = Section {
    path: "dns",
    header: "[dns]",
    about: "Makes probed the authoritative DNS server of one zone: each profile answers to one name in it, \
            with the endpoints its routing method picks among the eligible ones at the moment of the \
            query.",
    keys: &[
        Key::new(
            "listen",
            Strings,
            Required,
            words("at least one ADDRESS:PORT, each once"),
            Restart,
            "Where the server answers, over UDP and TCP on each.",
        ),
        Key::new(
            "zone",
            Type::String,
            Required,
            words("a DNS name, with or without the final dot"),
            Applies,
            "The zone the server answers for.",
        ),
        Key::new(
            "ttl",
            Duration,
            Value("\"30s\""),
            Seconds(0, 86_400),
            Applies,
            "The TTL of answers whose profile sets no dns_ttl, and of the SOA.",
        ),
        Key::new(
            "negative_ttl",
            Duration,
            said("ttl"),
            Seconds(0, 86_400),
            Applies,
            "How long resolvers may keep NXDOMAIN and NODATA answers (the SOA's minimum field).",
        ),
        Key::new(
            "nameserver",
            Tables,
            said("one, ns1.ZONE, at the listen addresses that are not wildcards"),
            Allowed::Any,
            Applies,
            "The zone's name servers: see [[dns.nameserver]].",
        ),
        Key::new(
            "nameservers",
            Strings,
            said("none"),
            words("none: it is refused"),
            Applies,
            "The earlier form of nameserver. It is refused, with the [[dns.nameserver]] tables to write \
             instead.",
        ),
        Key::new(
            "rate_limit",
            Table,
            said("every key at its default: rate limiting is on"),
            Allowed::Any,
            Applies,
            "See [dns.rate_limit].",
        ),
        Key::new(
            "tcp",
            Table,
            said("every key at its default"),
            Allowed::Any,
            Applies,
            "See [dns.tcp].",
        ),
        Key::new(
            "region",
            Tables,
            said("none"),
            Allowed::Any,
            Applies,
            "The regions of geographic routing: see [[dns.region]].",
        ),
        Key::new(
            "geoip_db",
            Type::String,
            said("none"),
            words("an absolute path to a MaxMind-format (.mmdb) database"),
            Applies,
            "Gives a source's country and continent, for the regions that name them. Read into memory \
             at the start and at every reload; a missing or bad file stops the start or refuses the \
             reload.",
        ),
    ],
};

pub const NAMESERVER: Section = Section {
    path: "dns.nameserver",
    header: "[[dns.nameserver]]",
    about: "One NS record of the zone's apex, in the order written; the first is the SOA's primary name \
            server.",
    keys: &[
        Key::new(
            "name",
            Type::String,
            Required,
            words("a DNS name other than the zone's own; unique, and no profile's name"),
            Applies,
            "The name server's name.",
        ),
        Key::new(
            "addresses",
            Strings,
            said("none; required for a name inside the zone, refused for one outside it"),
            words("IPv4 or IPv6 addresses that resolvers can query, each once"),
            Applies,
            "The addresses of a name server inside the zone: the server answers for them and adds them \
             to NS answers as glue.",
        ),
    ],
};

pub const RATE_LIMIT: Section = Section {
    path: "dns.rate_limit",
    header: "[dns.rate_limit]",
    about: "Response rate limiting of UDP answers, against reflection. Each source prefix has a bucket per \
            answer that holds a second's worth of them; over the limit an answer is dropped, except every \
            slip-th, which goes out truncated so that a real client retries over TCP, which is not \
            limited.",
    keys: &[
        Key::new(
            "responses_per_second",
            Integer,
            Value("20"),
            Int(0, 1_000_000),
            Applies,
            "How many copies of one answer a source prefix gets per second; 0 turns rate limiting off.",
        ),
        Key::new(
            "slip",
            Integer,
            Value("2"),
            Int(0, 10),
            Applies,
            "Of the answers over the limit, every slip-th goes out truncated: 1 truncates them all, 0 \
             drops them all.",
        ),
        Key::new(
            "ipv4_prefix",
            Integer,
            Value("24"),
            Int(8, 32),
            Applies,
            "The prefix length IPv4 sources are grouped by.",
        ),
        Key::new(
            "ipv6_prefix",
            Integer,
            Value("56"),
            Int(16, 128),
            Applies,
            "The prefix length IPv6 sources are grouped by.",
        ),
        Key::new(
            "exempt",
            Strings,
            Value("[]"),
            words("CIDRs"),
            Applies,
            "Sources never limited, such as monitoring or known resolvers.",
        ),
    ],
};

pub const DNS_TCP: Section = Section {
    path: "dns.tcp",
    header: "[dns.tcp]",
    about: "What DNS clients may hold over TCP. A reload applies it to new connections.",
    keys: &[
        Key::new(
            "max_clients",
            Integer,
            Value("1024"),
            Int(1, DnsTcp::MAX_CLIENTS as i64),
            Applies,
            "Connections open at once, the descriptor budget of DNS. At the cap a new connection takes \
             the place of the one idle the longest (or whose answer has waited over a second for its \
             reader), and is refused when every one is busy. An IPv6 /48 holds a quarter of them at \
             most, a /32 half.",
        ),
        Key::new(
            "max_clients_per_prefix",
            Integer,
            Value("64"),
            Int(1, DnsTcp::MAX_CLIENTS as i64),
            Applies,
            "Connections open at once from one source prefix (those of [dns.rate_limit]); at most \
             max_clients. At the cap a new one takes the place of that prefix's connection idle the \
             longest.",
        ),
        Key::new(
            "idle_timeout",
            Duration,
            Value("\"5s\""),
            Millis(100, 300_000),
            Applies,
            "A connection that brings no complete query for this long is closed (the bytes of an \
             unfinished query do not count); at most max_lifetime.",
        ),
        Key::new(
            "max_lifetime",
            Duration,
            Value("\"120s\""),
            Millis(1000, 3_600_000),
            Applies,
            "A connection is closed this long after it opened, however busy.",
        ),
    ],
};

pub const REGION: Section = Section {
    path: "dns.region",
    header: "[[dns.region]]",
    about: "The sources that make up one region of geographic routing: a source belongs to the region \
            whose subnets hold it (the most specific wins), else, with geoip_db, to the region that lists \
            its country, else its continent. A source in no region gets the endpoint whose region is \
            world.",
    keys: &[
        Key::new(
            "name",
            Type::String,
            Required,
            words(
                "a lower-case name of 1 to 63 letters, digits, '-', '_', '.', ':', '[' or ']'; not \"world\"; unique",
            ),
            Applies,
            "The name endpoints give as their region.",
        ),
        Key::new(
            "subnets",
            Strings,
            said("none; required unless countries or continents are given"),
            words("CIDRs, each in one region"),
            Applies,
            "The source subnets of the region.",
        ),
        Key::new(
            "countries",
            Strings,
            Value("[]"),
            words("ISO 3166-1 alpha-2 codes in upper case, each in one region"),
            Applies,
            "The countries whose sources belong to the region.",
        )
        .only("a [dns] with geoip_db"),
        Key::new(
            "continents",
            Strings,
            Value("[]"),
            words("AF, AN, AS, EU, NA, OC or SA, each in one region"),
            Applies,
            "The continents whose sources belong to the region.",
        )
        .only("a [dns] with geoip_db"),
    ],
};

pub const CLUSTER: Section = Section {
    path: "cluster",
    header: "[cluster]",
    about: "Shares verdicts with other probed nodes over authenticated gossip (UDP) and splits the \
            probing among them. Any change here needs a restart: the running node keeps its name, \
            address, key and share.",
    keys: &[
        Key::new(
            "node",
            Type::String,
            Required,
            words(NAME),
            Restart,
            "This node's name, unique in the cluster.",
        ),
        Key::new(
            "region",
            Type::String,
            said("the node's name"),
            words(NAME),
            Restart,
            "Where the node probes from; distinct_regions spreads probers over regions.",
        ),
        Key::new(
            "listen",
            Type::String,
            Required,
            words("ADDRESS:PORT"),
            Restart,
            "The UDP address gossip listens on.",
        ),
        Key::new(
            "advertise",
            Type::String,
            said("listen; required when listen is a wildcard"),
            words("ADDRESS:PORT, not a wildcard"),
            Restart,
            "The address other nodes reach this one at.",
        ),
        Key::new(
            "seeds",
            Strings,
            Value("[]"),
            words("ADDRESS:PORT, each once"),
            Restart,
            "Nodes to join through: any live one will do, and the first node of a cluster lists none.",
        ),
        Key::new(
            "probers_per_target",
            Integer,
            Value("0"),
            Int(0, Cluster::MAX_PROBERS as i64),
            Restart,
            "How many live nodes probe each check; 0: every node probes every check.",
        ),
        Key::new(
            "distinct_regions",
            Boolean,
            Value("true"),
            Allowed::Any,
            Restart,
            "Spreads a check's probers over distinct regions first.",
        ),
        Key::new(
            "key_file",
            Type::String,
            Required,
            words("an absolute path"),
            Restart,
            "The file holding the cluster's shared key (at least 32 random bytes), readable by probed \
             only; every gossip datagram carries a tag made with it.",
        ),
        Key::new(
            "verdict_ttl",
            Duration,
            Value("\"60s\""),
            Millis(1000, 3_600_000),
            Restart,
            "How long the verdicts of a node gone silent still count.",
        ),
        Key::new(
            "gossip_interval",
            Duration,
            Value("\"200ms\""),
            Millis(50, 10_000),
            Restart,
            "The time between two rounds of gossip.",
        ),
    ],
};
