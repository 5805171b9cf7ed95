//! Every map of the probe programs; names share the `PROBE_` prefix so `bpftool map` groups them.
use aya_ebpf::{
    bindings::{BPF_F_MMAPABLE, BPF_F_NO_PREALLOC},
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use probe_common::{
    counters::{RxCounters, TxCounters},
    http::{HttpReq, MAX_HTTP_REQS},
    l4::{CookieKey, Ended, FlowKey, Inflight, ProbeJob, Road, TxCtl, MAX_ENDED, MAX_IFACES, MAX_INFLIGHT, MAX_JOBS},
    parse::VlanTag,
};

/// What probe_rx saw, one slot per CPU (index 0).
#[map]
pub static PROBE_RX_COUNTERS: PerCpuArray<RxCounters> = PerCpuArray::with_max_entries(1, 0);

/// What the generator did, one slot per CPU (index 0).
#[map]
pub static PROBE_TX_COUNTERS: PerCpuArray<TxCounters> = PerCpuArray::with_max_entries(1, 0);

/// The jobs of the current generator run. Userspace writes them through a shared mapping
/// (BPF_F_MMAPABLE), so handing over a batch costs no syscall per job.
#[map]
pub static PROBE_JOBS: Array<ProbeJob> = Array::with_max_entries(MAX_JOBS, BPF_F_MMAPABLE);

/// Generator control (index 0): job count and the next job to take.
#[map]
pub static PROBE_TX_CTL: Array<TxCtl> = Array::with_max_entries(1, 0);

/// The cookie key (index 0), random per daemon start. All zero means "not set yet".
#[map]
pub static PROBE_KEY: Array<CookieKey> = Array::with_max_entries(1, 0);

/// The interfaces probe_rx is attached to, by ifindex: probes may leave only by these.
#[map]
pub static PROBE_IFACES: HashMap<u32, u32> = HashMap::with_max_entries(MAX_IFACES, 0);

/// Probes on the wire, by flow.
#[map]
pub static PROBE_INFLIGHT: HashMap<FlowKey, Inflight> = HashMap::with_max_entries(MAX_INFLIGHT, 0);

/// How tunnelled probes in flight reach their backends, by flow (`Road`): written with the
/// in-flight entry, deleted by userspace when the probe ends. Allocated as entries come, so a
/// node without tunnelled checks pays nothing for it; userspace sizes it like PROBE_INFLIGHT.
#[map]
pub static PROBE_ROADS: HashMap<FlowKey, Road> = HashMap::with_max_entries(MAX_INFLIGHT, BPF_F_NO_PREALLOC);

/// What probe_rx carries between the steps of wrapping a segment, one slot per CPU (index 0):
/// the verifier's 512 bytes of stack for the call chain have no room left for it.
#[map]
pub static PROBE_SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);

/// A tunnelled probe's road (`road.tunnel` is `TUNNEL_NONE` for any other packet: reset for
/// each one), and what the segment writer left for the step that wraps its segment: the
/// inner packet's length and word sum, our port, and the frame's VLAN tags.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Scratch {
    pub road: Road,
    pub len: u16,
    pub sport: u16,
    pub sum: u64,
    pub tags: [VlanTag; 2],
}

/// This CPU's scratch slot.
#[inline(always)]
pub fn scratch() -> Option<&'static mut Scratch> {
    let p = PROBE_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: a per-CPU array slot is only touched by programs on this CPU, one at a time.
    Some(unsafe { &mut *p })
}

/// Probe connections probe_rx ended with its own RST, most recent first out of room: what
/// proves that a later segment in the probe port range is a probe's (`Ended`).
#[map]
pub static PROBE_ENDED: LruHashMap<FlowKey, Ended> = LruHashMap::with_max_entries(MAX_ENDED, 0);

/// HTTP request templates by id (Inflight::req minus one). Allocated as userspace adds
/// them, so a node without HTTP checks pays nothing for the map.
#[map]
pub static PROBE_HTTP_REQS: HashMap<u32, HttpReq> = HashMap::with_max_entries(MAX_HTTP_REQS, BPF_F_NO_PREALLOC);

/// Outcomes and generator reports for userspace: 1 MiB, about 32k 32-byte records. The
/// engine reads it after every slice of probes it sends (SEND_SLICE, 4,096), so it holds the
/// replies of a few slices at a time, and between rounds it reads as they come. It once had
/// to be 16 MiB, when a whole backlog went out in one turn and replies to it waited in the
/// ring (a reply dropped there is a probe without a verdict: `ringbuf_full`). Userspace maps
/// its data twice, so each MiB here is two of the daemon's resident memory at any fleet size.
#[map]
pub static PROBE_EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Lowest and highest source port the engine uses: replies to other ports are foreign.
/// Load-time globals: the kernel only reads them.
#[no_mangle]
static PROBE_SPORT_MIN: u16 = 0;
#[no_mangle]
static PROBE_SPORT_MAX: u16 = 0;

/// Non-zero: behave as a kernel whose bpf_fib_lookup lacks BPF_FIB_LOOKUP_SRC (Linux
/// 6.3-6.6), which refuses the flag with -EINVAL. Set only by tests of the userspace fallback.
#[no_mangle]
static PROBE_FIB_SRC_OFF: u8 = 0;

/// probe_rx's switches (index 0, `probe_common::l4::RX_CTL_*` bits), set by userspace before
/// attaching and when an interface loses XDP transmit while probed runs.
#[map]
pub static PROBE_RX_CTL: Array<u32> = Array::with_max_entries(1, 0);

/// Whether probe_rx cannot send frames back out (native XDP on a device without XDP transmit,
/// such as veth whose peer has no NAPI): a matched SYN+ACK is then passed to the stack, whose
/// own RST ends the half-open connection, instead of becoming that RST here and being dropped
/// by the device.
#[inline(always)]
pub fn rst_by_stack() -> bool {
    PROBE_RX_CTL
        .get(0)
        .is_some_and(|v| *v & probe_common::l4::RX_CTL_RST_BY_STACK != 0)
}

/// Whether the loader asked for the pre-6.7 behaviour of BPF_FIB_LOOKUP_SRC (see above).
#[inline(always)]
pub fn fib_src_off() -> bool {
    // SAFETY: a volatile read of a static the loader patched before load; it never changes.
    unsafe { core::ptr::read_volatile(&raw const PROBE_FIB_SRC_OFF) != 0 }
}

/// Whether `port` (ours, host order) lies in the engine's source-port range.
#[inline(always)]
pub fn is_probe_port(port: u16) -> bool {
    // SAFETY: volatile reads of statics the loader patched before load; they never change.
    let (lo, hi) = unsafe {
        (
            core::ptr::read_volatile(&raw const PROBE_SPORT_MIN),
            core::ptr::read_volatile(&raw const PROBE_SPORT_MAX),
        )
    };
    port >= lo && port <= hi
}

/// This CPU's rx counters, or None if the lookup failed (it cannot for index 0).
#[inline(always)]
pub fn rx_counters() -> Option<&'static mut RxCounters> {
    let p = PROBE_RX_COUNTERS.get_ptr_mut(0)?;
    // SAFETY: a per-CPU array slot is only touched by programs on this CPU, one at a time.
    Some(unsafe { &mut *p })
}

/// This CPU's tx counters.
#[inline(always)]
pub fn tx_counters() -> Option<&'static mut TxCounters> {
    let p = PROBE_TX_COUNTERS.get_ptr_mut(0)?;
    // SAFETY: as for rx_counters.
    Some(unsafe { &mut *p })
}
