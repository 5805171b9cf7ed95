//! The bpf sink's settings and reader; its keys (`map`, `slots`) are the reference's, shared
//! with the nftables sink.
use serde::Serialize;

use crate::{
    schema::read::{Reader, Table},
    sinks::names::{required_ident, slots},
};

/// A pinned BPF array of backend records under the daemon's pin directory (ABI in
/// `probe_common::slots`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BpfSink {
    /// The pin's file name under `daemon.pin_dir`/sinks/.
    pub map: String,
    pub slots: u32,
}

/// `kind = "bpf"`, and its default name (the pin's).
pub(crate) fn read(r: &mut Reader<'_>, t: &Table<'_, '_>) -> (Option<BpfSink>, Option<String>) {
    let map = required_ident(
        r,
        t,
        "map",
        "a bpf sink needs map = \"NAME\", the pin's name under pin_dir/sinks/",
    );
    let slots = slots(r, t);
    let name = map.clone();
    (map.zip(slots).map(|(map, slots)| BpfSink { map, slots }), name)
}
