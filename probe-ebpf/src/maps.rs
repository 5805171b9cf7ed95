//! Every map of the probe programs; names share the `PROBE_` prefix so `bpftool map` groups them.
use aya_ebpf::{macros::map, maps::PerCpuArray};
use probe_common::counters::RxCounters;

/// What probe_rx saw, one slot per CPU (index 0).
#[map]
pub static PROBE_RX_COUNTERS: PerCpuArray<RxCounters> = PerCpuArray::with_max_entries(1, 0);
