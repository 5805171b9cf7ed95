//! `[[sink]]`: which forwarding structure follows which profile. The types are the sinks'
//! (`sinks::config` and each kind's folder); the configuration names them.
pub use crate::sinks::{
    bpf::config::BpfSink,
    config::{OnStop, Sink, SinkKind, SinkType},
    exec::config::ExecSink,
    haproxy::config::{HaproxyDown, HaproxySink},
    nftables::config::{NftFamily, NftSink, NftTarget},
    route::config::RouteSink,
};
