//! `[[sink]]`: which forwarding structure follows which profile, per kind.
use std::{path::PathBuf, time::Duration};

use ipnet::IpNet;
use serde::Serialize;

use crate::wire_enum::wire_enum;

pub use crate::rules::SinkType;

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

wire_enum! {
    /// What stopping probed does to a sink's data path.
    #[derive(Debug)]
    pub enum OnStop {
        /// Fail-static: the data path keeps the last eligible set.
        Keep = "keep",
        Clear = "clear",
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

wire_enum! {
    /// The family of an nftables sink's table.
    #[derive(Debug)]
    pub enum NftFamily {
        Ip = "ip",
        Ip6 = "ip6",
        Inet = "inet",
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

wire_enum! {
    /// The state HAProxy holds a server in while its endpoint is not eligible.
    #[derive(Debug)]
    pub enum HaproxyDown {
        /// No traffic at all, established sessions included once they end (`state maint`).
        Maint = "maint",
        /// No new sessions, except persistent ones (`state drain`).
        Drain = "drain",
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
