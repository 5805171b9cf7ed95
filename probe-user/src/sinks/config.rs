//! A `[[sink]]` as the configuration gives it, and its kinds: each kind's settings, keys and
//! reader are in its folder; this is the one list that names them.
use serde::Serialize;

use super::{
    bpf::config::BpfSink, exec::config::ExecSink, haproxy::config::HaproxySink, nftables::config::NftSink,
    route::config::RouteSink,
};
pub use crate::rules::SinkType;
use crate::wire_enum::wire_enum;

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
