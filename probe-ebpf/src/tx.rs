//! The probe generator: the role probe_rx plays for frames that start with the generator's
//! marker (`GENERATOR_MARK_LEN`), which userspace runs with BPF_PROG_TEST_RUN in live-frames mode. Each run takes
//! the next job, routes it (bpf_fib_lookup), writes a SYN or UDP probe over the template
//! frame, records it in the in-flight table and transmits it.
//!
//! One program for both roles, rather than a separate generator program: an XDP test run
//! installs its program in the kernel's XDP dispatcher and removes it afterwards, and each
//! change rewrites kernel text (IPIs to every CPU) and waits for an RCU grace period, 15-50 ms
//! here per run. The program attached to the interface (native mode) is already installed,
//! so a test run of it changes nothing and returns as soon as the frames are out.
use aya_ebpf::{
    bindings::{bpf_fib_lookup as FibParams, xdp_action, BPF_FIB_LKUP_RET_NO_NEIGH, BPF_FIB_LOOKUP_SRC},
    helpers::{bpf_fib_lookup, bpf_ktime_get_ns, bpf_redirect, bpf_xdp_adjust_head},
    macros::xdp,
    programs::XdpContext,
};
use probe_common::{
    cookie::probe_cookie,
    frame::{
        write_syn_gue_v4, write_syn_gue_v6, write_syn_ipip_v4, write_syn_ipip_v6, write_syn_v4, write_syn_v6,
        write_udp_v4, write_udp_v6, Ends, SynGueV4, SynGueV6, SynIpipV4, SynIpipV6,
    },
    l4::{
        EventKind, FlowKey, Inflight, ProbeEvent, ProbeJob, Road, TxCtl, FAMILY_V4, FIB_NOT_A_PROBE_IFACE,
        GENERATOR_MARK_LEN, STAGE_SYN_SENT, TUNNEL_GUE, TUNNEL_NONE,
    },
    packet::{IPPROTO_IPIP, IPPROTO_IPV6, IPPROTO_TCP, IPPROTO_UDP},
};

use crate::{
    maps::{
        fib_src_off, tx_counters, PROBE_EVENTS, PROBE_IFACES, PROBE_INFLIGHT, PROBE_JOBS, PROBE_KEY, PROBE_ROADS,
        PROBE_TX_CTL,
    },
    parse::ptr_at,
};

const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const EINVAL: i64 = 22;

/// Whether this kernel's bpf_fib_lookup takes BPF_FIB_LOOKUP_SRC (Linux 6.7+); older ones
/// refuse the unknown flag with -EINVAL before looking anything up. Userspace runs this once
/// at start (a plain BPF_PROG_TEST_RUN, never attached): XDP_PASS when the flag is known,
/// XDP_DROP when it is not. The lookup itself (127.0.0.1 from the run's device) may fail in
/// any other way: only the flag check matters.
#[xdp]
pub fn probe_fib_src(ctx: XdpContext) -> u32 {
    // SAFETY: all-zero is bpf_fib_lookup's documented starting state for its plain-data block.
    let mut fib: FibParams = unsafe { core::mem::zeroed() };
    fib.family = AF_INET;
    fib.ifindex = ctx.ingress_ifindex() as u32;
    fib.__bindgen_anon_4.ipv4_dst = u32::from_ne_bytes([127, 0, 0, 1]);
    // SAFETY: `fib` is an initialised parameter block on this stack frame, of the size passed.
    let rc = unsafe {
        bpf_fib_lookup(
            ctx.ctx.cast(),
            &raw mut fib,
            core::mem::size_of::<FibParams>() as i32,
            BPF_FIB_LOOKUP_SRC,
        )
    };
    if rc == -EINVAL || fib_src_off() {
        xdp_action::XDP_DROP
    } else {
        xdp_action::XDP_PASS
    }
}

/// True for a frame of the generator's test run: it starts with this start's marker
/// (`TxCtl::marker`, never 0), which no other frame can know.
#[inline(always)]
pub fn is_generator_frame(ctx: &XdpContext) -> bool {
    let (data, end) = (ctx.data(), ctx.data_end());
    if data + GENERATOR_MARK_LEN > end {
        return false;
    }
    let Some(ctl) = PROBE_TX_CTL.get(0) else {
        return false;
    };
    // SAFETY: the check above proves the eight bytes lie within the frame.
    let got = unsafe { core::ptr::read_unaligned(data as *const u64) };
    ctl.marker != 0 && got == ctl.marker
}

/// Sends the next job as a probe. Separate BPF function: its stack is not added to the
/// matcher's.
#[inline(never)]
pub fn generate(ctx: &mut XdpContext) -> u32 {
    // The marker only told this program the frame is the generator's: it goes before the
    // frame is written, so that the probe starts at its Ethernet header.
    // SAFETY: the frame holds the marker and the template behind it (`is_generator_frame`).
    if unsafe { bpf_xdp_adjust_head(ctx.ctx, GENERATOR_MARK_LEN as i32) } != 0 {
        return xdp_action::XDP_DROP;
    }
    try_generate(ctx).unwrap_or(xdp_action::XDP_DROP)
}

#[inline(always)]
fn try_generate(ctx: &mut XdpContext) -> Option<u32> {
    let counters = tx_counters()?;
    let ctl = PROBE_TX_CTL.get_ptr_mut(0)?;
    // SAFETY: `ctl` points at the single, always-present slot of an array map. A plain
    // increment is enough: the engine drives the generator from one thread at a time, and a
    // live-frames run executes its whole batch on the calling CPU, one frame after another.
    let (idx, count) = unsafe {
        let idx = (*ctl).next;
        (*ctl).next = idx + 1;
        (idx, (*ctl).count)
    };
    // SAFETY: as above; the payload fields are written by userspace before the run.
    let ctl: &TxCtl = unsafe { &*ctl };
    if idx >= count {
        counters.no_job += 1;
        return Some(xdp_action::XDP_DROP);
    }
    let job = PROBE_JOBS.get_ptr_mut(idx as u32)?;
    // SAFETY: `job` points at an element of an array map; userspace does not touch the jobs
    // while the generator runs, and this run is the only one reading this index.
    let job = unsafe { &mut *job };
    // A key of zero means userspace has not started the engine: fail closed, send nothing.
    let key = &PROBE_KEY.get(0)?.k;
    if *key == [0, 0] {
        return Some(xdp_action::XDP_DROP);
    }
    let ifindex = ctx.ingress_ifindex() as u32;
    let mut hop = Hop::default();
    let rc = route_job(ctx, job, ifindex, &mut hop);
    if rc != 0 {
        let kind = if rc == i64::from(BPF_FIB_LKUP_RET_NO_NEIGH) {
            counters.no_neigh += 1;
            EventKind::NoNeighbour
        } else {
            counters.no_route += 1;
            EventKind::NoRoute
        };
        report(job, kind, rc as u8, counters);
        return Some(xdp_action::XDP_DROP);
    }
    let flow = &job.flow;
    let cookie = cookie_of(key, flow, job.gen);
    let v4 = flow.family == FAMILY_V4;
    let built = match (job.tunnel == TUNNEL_NONE, v4) {
        (true, true) => build_v4(ctx, flow, &hop, cookie, ctl),
        (true, false) => build_v6(ctx, flow, &hop, cookie, ctl),
        (false, _) => build_tunnel(ctx, job, &hop, cookie),
    };
    if !built {
        return Some(xdp_action::XDP_DROP);
    }
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let sent_ns = unsafe { bpf_ktime_get_ns() };
    let entry = Inflight {
        slot: job.slot,
        gen: job.gen,
        cookie,
        peer_seq: 0,
        sent_ns,
        req: job.req,
        stage: STAGE_SYN_SENT,
        tunnel: job.tunnel,
        _pad: [0; 2],
    };
    if PROBE_INFLIGHT.insert(flow, entry, 0).is_err() {
        counters.inflight_full += 1;
        return Some(xdp_action::XDP_DROP);
    }
    if job.tunnel != TUNNEL_NONE && keep_road(job) != 0 {
        counters.roads_full += 1;
    }
    counters.sent += 1;
    if hop.ifindex == ifindex {
        Some(xdp_action::XDP_TX)
    } else {
        // SAFETY: bpf_redirect only records the target ifindex for after the program returns.
        Some(unsafe { bpf_redirect(hop.ifindex, 0) } as u32)
    }
}

// The route lookup and the builders below are separate BPF functions (not inlined) so that
// their temporaries do not share one stack frame: the verifier allows 512 bytes in all.

/// Where a routed probe goes: the MACs and the egress device.
#[derive(Default)]
struct Hop {
    smac: [u8; 6],
    dmac: [u8; 6],
    ifindex: u32,
}

/// Routes `flow` with bpf_fib_lookup and fills `hop`; returns the helper's result (0 when
/// the probe can go). A flow without a source address gets the route's preferred source
/// from the same lookup (BPF_FIB_LOOKUP_SRC), written into `flow`, so userspace never
/// resolves sources per target and follows route changes for free.
///
/// The lookup is made as if the probe had arrived on the generator's interface and were
/// being forwarded (not BPF_FIB_LOOKUP_OUTPUT, which would only consider routes out of that
/// one interface), so a probe leaves by whichever interface its route names, as long as
/// probe_rx is attached there to match the reply (FIB_NOT_A_PROBE_IFACE otherwise).
#[inline(never)]
fn route(ctx: &XdpContext, flow: &mut FlowKey, ifindex: u32, hop: &mut Hop) -> i64 {
    let pick_source = flow.source_unset();
    if pick_source && fib_src_off() {
        // What Linux 6.3-6.6 answers to BPF_FIB_LOOKUP_SRC.
        return -EINVAL;
    }
    let mut fib = fib_params(flow, ifindex);
    let flags = if pick_source { BPF_FIB_LOOKUP_SRC } else { 0 };
    // SAFETY: `fib` is a properly initialised parameter block on this stack frame and the
    // size passed is its own.
    let rc = unsafe {
        bpf_fib_lookup(
            ctx.ctx.cast(),
            &raw mut fib,
            core::mem::size_of::<FibParams>() as i32,
            flags,
        )
    };
    if rc == 0 {
        if fib.ifindex != ifindex && PROBE_IFACES.get_ptr(fib.ifindex).is_none() {
            return i64::from(FIB_NOT_A_PROBE_IFACE);
        }
        if pick_source {
            copy_source(&fib, flow);
        }
        hop.smac = fib.smac;
        hop.dmac = fib.dmac;
        hop.ifindex = fib.ifindex;
    }
    rc
}

/// Routes a job: a plain probe by its flow, a tunnelled one by its outer destination (the
/// backend), whose source, when the lookup picks it, is the inner packet's too. The inner
/// flow keeps its service address: the reply comes from there.
#[inline(never)]
fn route_job(ctx: &XdpContext, job: &mut ProbeJob, ifindex: u32, hop: &mut Hop) -> i64 {
    if job.tunnel == TUNNEL_NONE {
        return route(ctx, &mut job.flow, ifindex, hop);
    }
    let (proto, dport) = if job.tunnel == TUNNEL_GUE {
        (IPPROTO_UDP, job.tunnel_port)
    } else if job.flow.family == FAMILY_V4 {
        (IPPROTO_IPIP, 0)
    } else {
        (IPPROTO_IPV6, 0)
    };
    // The lookup is made for the outer packet: the backend, and the outer transport.
    let mut outer = FlowKey {
        daddr: job.outer,
        dport,
        proto,
        ..job.flow
    };
    let rc = route(ctx, &mut outer, ifindex, hop);
    if rc == 0 {
        job.flow.saddr = outer.saddr;
        // The outer header leaves from the probe's source unless the job names its own
        // (`tunnel_source`): settled here, so the writers copy no address of their own.
        if job.outer_src == [0; 16] {
            job.outer_src = outer.saddr;
        }
    }
    rc
}

/// Records a tunnelled job's road for probe_rx (`Road`). A failure (the table full) leaves
/// probe_rx without it: the RST then goes unwrapped, and an HTTP probe ends without a verdict.
#[inline(never)]
fn keep_road(job: &ProbeJob) -> i64 {
    let Some(road) = Road::of(job) else { return 0 };
    match PROBE_ROADS.insert(job.flow, road, 0) {
        Ok(()) => 0,
        Err(e) => e.into(),
    }
}

#[inline(never)]
fn cookie_of(key: &[u64; 2], flow: &FlowKey, gen: u32) -> u32 {
    probe_cookie(key, flow, gen)
}

/// The probe's Ethernet, IPv4 and port ends.
#[inline(always)]
fn ends_v4(flow: &FlowKey, hop: &Hop) -> Ends<[u8; 4]> {
    Ends {
        smac: hop.smac,
        dmac: hop.dmac,
        saddr: flow.saddr_v4(),
        daddr: flow.daddr_v4(),
        sport: flow.sport,
        dport: flow.dport,
    }
}

#[inline(always)]
fn ends_v6(flow: &FlowKey, hop: &Hop) -> Ends<[u8; 16]> {
    Ends {
        smac: hop.smac,
        dmac: hop.dmac,
        saddr: flow.saddr,
        daddr: flow.daddr,
        sport: flow.sport,
        dport: flow.dport,
    }
}

// One builder per family for plain probes and one for tunnelled ones, each its own BPF
// function: the verifier allows 512 bytes of stack for the whole call chain, and the writers'
// temporaries are counted in the function they are inlined into.

#[inline(never)]
fn build_v4(ctx: &mut XdpContext, flow: &FlowKey, hop: &Hop, cookie: u32, ctl: &TxCtl) -> bool {
    let e = ends_v4(flow, hop);
    if flow.proto == IPPROTO_TCP {
        let Some(f) = frame_mut(ctx) else { return false };
        write_syn_v4(f, &e, cookie);
    } else {
        let Some(f) = frame_mut(ctx) else { return false };
        write_udp_v4(f, &e, cookie as u16, ctl.payload_len as u16, ctl.payload_sum);
    }
    true
}

#[inline(never)]
fn build_v6(ctx: &mut XdpContext, flow: &FlowKey, hop: &Hop, cookie: u32, ctl: &TxCtl) -> bool {
    let e = ends_v6(flow, hop);
    if flow.proto == IPPROTO_TCP {
        let Some(f) = frame_mut(ctx) else { return false };
        write_syn_v6(f, &e, cookie);
    } else {
        let Some(f) = frame_mut(ctx) else { return false };
        write_udp_v6(f, &e, cookie, ctl.payload_len as u16, ctl.payload_sum);
    }
    true
}

/// Writes a tunnelled probe (userspace sends only TCP probes through a tunnel) over the
/// frame; false when the frame is too short.
///
/// Each shape has a BPF function of its own that takes the frame, checked here, rather than
/// the context, and returns the TCP checksum it wrote, which is kept with a volatile store.
/// Both for the verifier: given the context, LLVM handed the builders the packet's bounds as
/// plain integers, which the verifier refuses arithmetic on; and a function whose result LLVM
/// finds unused (or constant) loses its return value, and may then exit with a stack address
/// in the return register, which the verifier refuses too. In the family builders above,
/// the tunnelled writers' temporaries passed the verifier's 512 bytes for the call chain.
///
/// A template frame longer than the shape holds zeros after it (`tunnel_mtu`): the outer
/// headers count them, so the outer packet is full-size while the probe inside is not.
#[inline(always)]
fn build_tunnel(ctx: &mut XdpContext, job: &ProbeJob, hop: &Hop, cookie: u32) -> bool {
    let v4 = job.flow.family == FAMILY_V4;
    let len = ctx.data_end() - ctx.data();
    // Bounded for the verifier; the template is never longer than a page.
    let pad = |shape: usize| (len.saturating_sub(shape) & 0xfff) as u16;
    let written = match (job.tunnel == TUNNEL_GUE, v4) {
        (true, true) => frame_mut(ctx).map(|f| gue_v4(f, job, hop, (cookie, pad(SynGueV4::LEN)))),
        (true, false) => frame_mut(ctx).map(|f| gue_v6(f, job, hop, (cookie, pad(SynGueV6::LEN)))),
        (false, true) => frame_mut(ctx).map(|f| ipip_v4(f, job, hop, (cookie, pad(SynIpipV4::LEN)))),
        (false, false) => frame_mut(ctx).map(|f| ipip_v6(f, job, hop, (cookie, pad(SynIpipV6::LEN)))),
    };
    let Some(csum) = written else { return false };
    let mut kept = 0u16;
    // SAFETY: a plain store to a local.
    unsafe { core::ptr::write_volatile(&raw mut kept, csum) };
    true
}

#[inline(never)]
fn ipip_v4(f: &mut SynIpipV4, job: &ProbeJob, hop: &Hop, (cookie, pad): (u32, u16)) -> u16 {
    let (src, backend) = outer_v4(job);
    write_syn_ipip_v4(f, &ends_v4(&job.flow, hop), (&src, &backend), cookie, pad);
    u16::from_be_bytes(f.tcp.csum_be)
}

#[inline(never)]
fn ipip_v6(f: &mut SynIpipV6, job: &ProbeJob, hop: &Hop, (cookie, pad): (u32, u16)) -> u16 {
    write_syn_ipip_v6(f, &ends_v6(&job.flow, hop), (&job.outer_src, &job.outer), cookie, pad);
    u16::from_be_bytes(f.tcp.csum_be)
}

#[inline(never)]
fn gue_v4(f: &mut SynGueV4, job: &ProbeJob, hop: &Hop, (cookie, pad): (u32, u16)) -> u16 {
    let (src, backend) = outer_v4(job);
    write_syn_gue_v4(
        f,
        &ends_v4(&job.flow, hop),
        (&src, &backend, job.tunnel_port),
        cookie,
        pad,
    );
    u16::from_be_bytes(f.tcp.csum_be)
}

#[inline(never)]
fn gue_v6(f: &mut SynGueV6, job: &ProbeJob, hop: &Hop, (cookie, pad): (u32, u16)) -> u16 {
    write_syn_gue_v6(
        f,
        &ends_v6(&job.flow, hop),
        (&job.outer_src, &job.outer, job.tunnel_port),
        cookie,
        pad,
    );
    u16::from_be_bytes(f.tcp.csum_be)
}

/// An IPv4 job's outer source (settled by `route_job`) and destination.
#[inline(always)]
fn outer_v4(job: &ProbeJob) -> ([u8; 4], [u8; 4]) {
    let (s, d) = (&job.outer_src, &job.outer);
    ([s[0], s[1], s[2], s[3]], [d[0], d[1], d[2], d[3]])
}

/// The start of the packet as a frame layout `T`; None if the template frame is too short.
/// The frame is reached through the context, so it is borrowed from it exclusively: while
/// the frame is being written, nothing else can derive a pointer into the packet.
#[inline(always)]
fn frame_mut<T>(ctx: &mut XdpContext) -> Option<&mut T> {
    let p = ptr_at::<T>(ctx, 0)?;
    // SAFETY: ptr_at checked the frame holds size_of::<T>() bytes; every frame layout has
    // alignment 1 (asserted in probe-common), and the packet is reached only through `ctx`,
    // which the returned reference borrows mutably, so no other reference to it can exist.
    Some(unsafe { &mut *p })
}

#[inline(always)]
fn fib_params(flow: &FlowKey, ifindex: u32) -> FibParams {
    // SAFETY: bpf_fib_lookup's parameter block is plain data; all-zero is its documented
    // starting state.
    let mut p: FibParams = unsafe { core::mem::zeroed() };
    p.l4_protocol = flow.proto;
    p.sport = flow.sport.to_be();
    p.dport = flow.dport.to_be();
    p.ifindex = ifindex;
    if flow.family == FAMILY_V4 {
        p.family = AF_INET;
        p.__bindgen_anon_3.ipv4_src = u32::from_ne_bytes(flow.saddr_v4());
        p.__bindgen_anon_4.ipv4_dst = u32::from_ne_bytes(flow.daddr_v4());
    } else {
        p.family = AF_INET6;
        p.__bindgen_anon_3.ipv6_src = words(&flow.saddr);
        p.__bindgen_anon_4.ipv6_dst = words(&flow.daddr);
    }
    p
}

/// Copies the source address bpf_fib_lookup picked (BPF_FIB_LOOKUP_SRC) into `flow`.
#[inline(always)]
fn copy_source(fib: &FibParams, flow: &mut FlowKey) {
    if flow.family == FAMILY_V4 {
        // SAFETY: for AF_INET the lookup fills the ipv4 member of the union.
        let src = unsafe { fib.__bindgen_anon_3.ipv4_src };
        flow.saddr[..4].copy_from_slice(&src.to_ne_bytes());
    } else {
        // SAFETY: for AF_INET6 the lookup fills the ipv6 member of the union.
        let src = unsafe { fib.__bindgen_anon_3.ipv6_src };
        for (i, w) in src.iter().enumerate() {
            flow.saddr[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
        }
    }
}

#[inline(always)]
fn words(a: &[u8; 16]) -> [u32; 4] {
    [
        u32::from_ne_bytes([a[0], a[1], a[2], a[3]]),
        u32::from_ne_bytes([a[4], a[5], a[6], a[7]]),
        u32::from_ne_bytes([a[8], a[9], a[10], a[11]]),
        u32::from_ne_bytes([a[12], a[13], a[14], a[15]]),
    ]
}

#[inline(always)]
fn report(job: &ProbeJob, kind: EventKind, rc: u8, counters: &mut probe_common::counters::TxCounters) {
    // The lookup result rides in icmp_code, for diagnostics.
    let ev = ProbeEvent {
        rtt_ns: 0,
        slot: job.slot,
        gen: job.gen,
        kind: kind as u8,
        icmp_code: rc,
        ..Default::default()
    };
    if PROBE_EVENTS.output::<ProbeEvent>(&ev, 0).is_err() {
        counters.ringbuf_full += 1;
    }
}
