//! The tables and keys of the configuration file. Each table's keys are in the order the
//! reader lists them in its "unknown key" error; the page shows them in the same order.
//! `Type::String` is written in full: `String` alone is the standard type.
use super::{
    Allowed::{self, Int, Millis, Octal, OneOf, Seconds},
    Key,
    Reload::{Applies, PerKey, Recheck, Restart, Retime},
    Section, Type,
    Type::{Boolean, Duration, Integer, Strings, Table, Tables},
    Unset::{Dialect, Required, Value},
};
use crate::{
    config::model::{Cluster, Daemon, DnsTcp, EndpointSource, HttpProbes, Protocol, SinkType},
    kernel::{AttachMode, Hook},
    rules::limits::{MAX_PACING_MS, MAX_SLOTS, THRESHOLD_MAX},
    status::{AdminState, Method},
};

mod cluster;
mod daemon;
mod discovery;
mod dns;
mod endpoint;
mod health;
mod passive;
mod profile;
mod root;
mod sink;
mod source;

pub use cluster::*;
pub use daemon::*;
pub use discovery::*;
pub use dns::*;
pub use endpoint::*;
pub use health::*;
pub use passive::*;
pub use profile::*;
pub use root::*;
pub use sink::*;
pub use source::*;

/// The name alphabet of profiles, endpoints and cluster nodes.
pub(super) const NAME: &str = "1 to 63 letters, digits, '-', '_', '.', ':', '[' or ']'";
pub(super) use crate::sinks::names::IDENT;

pub(super) use crate::schema::keys::{said, words};

/// Every table but the top level, in the order the page shows them.
pub const SECTIONS: [&Section; 14] = [
    &DAEMON,
    &SOURCE,
    &PROFILE,
    &HEALTH,
    &ENDPOINT,
    &DISCOVERY,
    &PASSIVE,
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
