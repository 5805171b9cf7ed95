//! The passive observers: `passive_out` at tcx egress and `passive_in` at tcx ingress of the
//! interface toward the backends, watching the TCP handshakes the node forwards to them
//! (`probe_common::passive` has the model and the decisions). Built as an object of its own,
//! loaded only when a profile asks for passive detection.
//!
//! Observe only: both programs return TCX_NEXT for every packet, change no byte of it and
//! never redirect it; what they learn goes into the maps alone. What they cannot be sure of
//! (a packet they cannot parse, a backend they are not told of, an answer that does not
//! acknowledge the client's SYN) they leave uncounted.
#![no_std]
#![no_main]
// The atomic add: core's atomic types offer no read-modify-write on the BPF target, whose
// atomics LLVM lowers only where the result goes unused (BPF's atomic add, every CPU version).
#![feature(core_intrinsics)]
#![allow(internal_features)]

use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{
    bindings::{tcx_action_base::TCX_NEXT, BPF_F_MMAPABLE, BPF_F_NO_PREALLOC, BPF_NOEXIST},
    helpers::bpf_ktime_get_ns,
    macros::{classifier, map},
    maps::{Array, HashMap, LruHashMap},
    programs::TcContext,
};
use probe_common::{
    l4::FlowKey,
    packet::{
        IcmpHdr, TcpHdr, ETH_P_IP, ETH_P_IPV6, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, TCP_ACK, TCP_RST, TCP_SYN,
    },
    parse::{parse_link, parse_quote, Packet},
    passive::{
        answer_flow, backend_of, is_unreachable, on_answer, on_syn, syn_flow, Answer, BackendKey, BackendRule,
        Handshake, Outcome, PassiveStats, SynStep, DEFAULT_PASSIVE_FLOWS, MAX_PASSIVE_BACKENDS,
    },
};
use probe_ebpf::{
    ctx::pull_headers,
    parse::{parse_l3, Frame, L3},
};

/// The address of field `$f` of the counters `$s` points at (a live PASSIVE_STATS slot).
macro_rules! at {
    ($s:expr, $f:ident) => {
        // SAFETY: `$s` came from PASSIVE_STATS.get_ptr_mut, so it points at a live slot; only
        // the field's address is taken, no reference is made.
        unsafe { &raw mut (*$s).$f }
    };
}

/// The watched backends and their rules, written by userspace.
#[map]
static PASSIVE_BACKENDS: HashMap<BackendKey, BackendRule> =
    HashMap::with_max_entries(MAX_PASSIVE_BACKENDS, BPF_F_NO_PREALLOC);

/// Each watched backend's counters, by `BackendRule::id`. Userspace reads them through a
/// shared mapping (BPF_F_MMAPABLE): polling every backend costs no syscall.
#[map]
static PASSIVE_STATS: Array<PassiveStats> = Array::with_max_entries(MAX_PASSIVE_BACKENDS, BPF_F_MMAPABLE);

/// Handshakes in flight, by flow (client to backend): the least recently touched go first
/// when it is full, so its size bounds the memory whatever the traffic. Userspace sizes it.
#[map]
static PASSIVE_FLOWS: LruHashMap<FlowKey, Handshake> = LruHashMap::with_max_entries(DEFAULT_PASSIVE_FLOWS, 0);

/// What is read of a packet: the link header, the IP header with options or extension
/// headers, and an ICMP error's quote of the same.
const HEADER_BYTES: u32 = 192;

#[classifier]
pub fn passive_out(ctx: TcContext) -> i32 {
    let _ = on_egress(&ctx);
    TCX_NEXT
}

#[classifier]
pub fn passive_in(ctx: TcContext) -> i32 {
    let _ = on_ingress(&ctx);
    TCX_NEXT
}

/// A client's SYN toward a watched backend, on its way out: a handshake starts, or its SYN
/// came again (the client's timer ran out: unanswered that long).
#[inline(always)]
fn on_egress(ctx: &TcContext) -> Option<()> {
    // SAFETY: reading a field of the program's own __sk_buff context.
    let ingress = unsafe { (*ctx.skb.skb).ingress_ifindex };
    // Only what the node forwards: a packet it sends itself (its own connections, probes sent
    // through sockets) came in by no interface.
    if ingress == 0 {
        return None;
    }
    pull_headers(ctx, HEADER_BYTES);
    let (l3, frame) = network(ctx)?;
    if l3.proto != IPPROTO_TCP {
        return None;
    }
    let tcp = frame.read::<TcpHdr>(l3.l4_off)?;
    if tcp.flags & (TCP_SYN | TCP_ACK | TCP_RST) != TCP_SYN {
        return None;
    }
    let flow = syn_flow(&l3, tcp.sport(), tcp.dport());
    // SAFETY: a map lookup; the value is copied out at once.
    let rule = unsafe { *PASSIVE_BACKENDS.get(backend_of(&flow))? };
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let seq = tcp.seq();
    let fresh = Handshake {
        first_ns: now,
        isn: seq,
        syns: 1,
        state: Handshake::OPEN,
        _pad: 0,
    };
    // A new flow, as nearly every SYN is: one hash operation, not a lookup and an insert. (On
    // a full LRU the kernel takes a free element before it finds the key, so a SYN sent again
    // may push out the least recently seen handshake.)
    if PASSIVE_FLOWS.insert(flow, fresh, u64::from(BPF_NOEXIST)).is_ok() {
        let s = stats(rule.id)?;
        add(at!(s, started), 1);
        return Some(());
    }
    let p = PASSIVE_FLOWS.get_ptr_mut(flow)?;
    // SAFETY: an LRU value pointer into preallocated map memory, which stays valid; another
    // CPU may delete the entry meanwhile and the kernel may hand the element to another flow
    // at once, which at worst miscounts one handshake.
    match on_syn(Some(unsafe { &*p }), seq, now, timeout_ns(&rule)) {
        SynStep::Start | SynStep::Restart => {
            // SAFETY: as above.
            unsafe { *p = fresh };
            let s = stats(rule.id)?;
            add(at!(s, started), 1);
        }
        SynStep::TimedOut => {
            // SAFETY: as above.
            unsafe {
                (*p).state = Handshake::DONE;
                (*p).syns = (*p).syns.saturating_add(1);
            }
            count(rule.id, Outcome::TimedOut, now);
        }
        SynStep::Again => {
            // SAFETY: as above.
            unsafe { (*p).syns = (*p).syns.saturating_add(1) };
        }
    }
    Some(())
}

/// A backend's answer on its way in, before the node translates it back: a SYN+ACK or RST
/// from a watched backend, or an ICMP destination unreachable quoting a client's SYN to one.
#[inline(always)]
fn on_ingress(ctx: &TcContext) -> Option<()> {
    pull_headers(ctx, HEADER_BYTES);
    let (l3, frame) = network(ctx)?;
    let (flow, answer) = match l3.proto {
        IPPROTO_TCP => {
            let tcp = frame.read::<TcpHdr>(l3.l4_off)?;
            let answer = if tcp.flags & TCP_RST != 0 {
                Answer::Rst {
                    ack: (tcp.flags & TCP_ACK != 0).then(|| tcp.ack()),
                }
            } else if tcp.flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK {
                Answer::SynAck { ack: tcp.ack() }
            } else {
                return None;
            };
            (answer_flow(&l3, tcp.sport(), tcp.dport()), answer)
        }
        IPPROTO_ICMP | IPPROTO_ICMPV6 => {
            let icmp = frame.read::<IcmpHdr>(l3.l4_off)?;
            if !is_unreachable(l3.ipv6, icmp.kind, icmp.code) {
                return None;
            }
            let quote = parse_quote(&frame, l3.l4_off, l3.ipv6)?;
            if quote.l3.proto != IPPROTO_TCP {
                return None;
            }
            let flow = syn_flow(&quote.l3, quote.l4.sport(), quote.l4.dport());
            (flow, Answer::Unreachable { seq: quote.l4.seq() })
        }
        _ => return None,
    };
    // SAFETY: a map lookup; the value is copied out at once.
    let rule = unsafe { *PASSIVE_BACKENDS.get(backend_of(&flow))? };
    let p = PASSIVE_FLOWS.get_ptr_mut(flow)?;
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: an LRU value pointer into preallocated map memory (see on_egress).
    let outcome = on_answer(unsafe { &*p }, answer, now, timeout_ns(&rule))?;
    if let Outcome::Completed { .. } = outcome {
        // Done with: out of the LRU at once, so that the handshakes in flight keep its room
        // and a new one rarely has to evict. A failed one stays, marked, so that the client's
        // SYN sent again is not counted as another.
        let _ = PASSIVE_FLOWS.remove(flow);
    } else {
        // SAFETY: as above.
        unsafe { (*p).state = Handshake::DONE };
    }
    count(rule.id, outcome, now);
    Some(())
}

/// The frame's network header, parsed with probe_rx's strict rules.
#[inline(always)]
fn network(ctx: &TcContext) -> Option<(L3, Frame)> {
    let frame = Frame::of(ctx);
    let link = parse_link(&frame)?;
    let ipv6 = match link.eth.ethertype() {
        ETH_P_IP => false,
        ETH_P_IPV6 => true,
        _ => return None,
    };
    Some((parse_l3(ctx, link.l3_off, ipv6)?, frame))
}

#[inline(always)]
fn timeout_ns(rule: &BackendRule) -> u64 {
    u64::from(rule.timeout_ms) * 1_000_000
}

/// Backend `id`'s counters: a raw pointer, since the kernel on other CPUs and userspace
/// through its mapping share them; every access goes through `add`, `get` and `set`.
#[inline(always)]
fn stats(id: u32) -> Option<*mut PassiveStats> {
    PASSIVE_STATS.get_ptr_mut(id)
}

/// Adds an outcome to backend `id`'s counters. Other CPUs count for the same backend at the
/// same time: the totals are atomic adds; the run of failures is read back and compared
/// without a lock, which at worst misses one failure of a run two CPUs extend at once.
#[inline(always)]
fn count(id: u32, outcome: Outcome, now: u64) {
    let Some(s) = stats(id) else {
        return;
    };
    let counter = match outcome {
        Outcome::Completed { rtt_ns } => {
            add(at!(s, completed), 1);
            add(at!(s, rtt_sum_ns), rtt_ns);
            set(at!(s, consecutive), 0);
            return;
        }
        Outcome::Refused => at!(s, refused),
        Outcome::Unreachable => at!(s, unreachable),
        Outcome::TimedOut => at!(s, timed_out),
    };
    add(counter, 1);
    let consecutive = at!(s, consecutive);
    add(consecutive, 1);
    let run = get(consecutive);
    if run == 1 {
        set(at!(s, streak_first_ns), now);
    }
    let peak = at!(s, peak);
    if run > get(peak) {
        set(peak, run);
        set(at!(s, peak_first_ns), get(at!(s, streak_first_ns)));
    }
    set(at!(s, last_fail_ns), now);
}

/// An atomic add whose result is unused (BPF's atomic add, which every BPF CPU version has).
#[inline(always)]
fn add(field: *mut u64, n: u64) {
    // SAFETY: the field is an aligned u64 in map memory shared with other CPUs and userspace;
    // every concurrent access to it is atomic or a plain aligned load or store.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(field, n) };
}

#[inline(always)]
fn get(field: *mut u64) -> u64 {
    // SAFETY: an aligned u64 in map memory (see add).
    unsafe { core::ptr::read_volatile(field) }
}

#[inline(always)]
fn set(field: *mut u64, v: u64) {
    // SAFETY: an aligned u64 in map memory (see add); a plain aligned store.
    unsafe { core::ptr::write_volatile(field, v) };
}
