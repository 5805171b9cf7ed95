//! An off-path attacker on the backend's link: it learns the live probes' tuples by capturing
//! them (an AF_PACKET socket in the backend namespace) and floods forged SYN+ACKs, RSTs and
//! ICMP errors at those tuples from another AF_PACKET socket, in `sendmmsg` batches.
//!
//! Forged frames carry TTL (hop limit) `FORGED_TTL`, which the backend's stack never uses
//! (64), so counters on the prober's side tell them from genuine replies.
use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use probe_common::{
    csum::{finish, payload_sum, pseudo_v4, pseudo_v6},
    packet::{IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, TCP_ACK, TCP_RST, TCP_SYN},
};

use crate::Netns;

/// The TTL / hop limit of every forged frame.
pub const FORGED_TTL: u8 = 201;
/// Frames per `sendmmsg` call.
pub const BATCH: usize = 64;
/// Room for the largest forged frame (ICMPv6 quoting an IPv6 header: 14 + 40 + 8 + 40 + 8).
pub const FRAME_MAX: usize = 128;

const ETH_P_ALL: u16 = 0x0003;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_QDISC_BYPASS: libc::c_int = 20;

/// A probe as the backend sees it: the prober's address and port, the target's, the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuple {
    pub prober: IpAddr,
    pub sport: u16,
    pub target: IpAddr,
    pub dport: u16,
    pub proto: u8,
}

/// What a forged frame pretends to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A SYN+ACK from the target with a random ack (a TCP probe's "open").
    SynAck,
    /// A RST+ACK from the target with a random ack (a TCP probe's "refused").
    Rst,
    /// ICMP(v6) destination unreachable quoting the TCP probe, with a random sequence number.
    IcmpTcp,
    /// ICMP(v6) port unreachable quoting the UDP probe, with a random IPv4 id / flow label.
    IcmpUdp,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::SynAck, Kind::Rst, Kind::IcmpTcp, Kind::IcmpUdp];

    pub fn name(self) -> &'static str {
        match self {
            Kind::SynAck => "syn-ack",
            Kind::Rst => "rst",
            Kind::IcmpTcp => "icmp-tcp",
            Kind::IcmpUdp => "icmp-udp",
        }
    }
}

/// xorshift64*: fast, good enough for ack numbers nobody can predict from the prober's side.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}

fn check(rc: libc::c_int, what: &str) {
    assert!(rc >= 0, "{what}: {}", std::io::Error::last_os_error());
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T, what: &str) {
    // SAFETY: `value` is a live T and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(value).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    check(rc, what);
}

/// An AF_PACKET socket bound to `dev` of the calling thread's namespace; `protocol` 0 receives
/// nothing (a sender), ETH_P_ALL everything.
fn packet_socket(dev: &str, protocol: u16) -> OwnedFd {
    let name = std::ffi::CString::new(dev).unwrap();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(ifindex != 0, "no interface {dev}");
    // SAFETY: plain socket(2); checked below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(protocol.to_be())) };
    check(fd, "AF_PACKET socket");
    // SAFETY: fd is fresh and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data, valid when zeroed.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a valid sockaddr_ll for the length passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    check(rc, "bind AF_PACKET");
    fd
}

/// Classic BPF: accept IPv4/IPv6 UDP, and TCP with SYN set and ACK clear (a probe's SYN);
/// reject the rest (the prober stack's RSTs to our forged SYN+ACKs, above all).
fn probe_filter() -> Vec<libc::sock_filter> {
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let (ldh, ldb, ldxb_msh, ldb_ind, jeq, and, ret) = (0x28, 0x30, 0xb1, 0x50, 0x15, 0x54, 0x06);
    vec![
        op(ldh, 0, 0, 12),      // 0: ethertype
        op(jeq, 0, 7, 0x0800),  // 1: IPv4, else 9
        op(ldb, 0, 0, 23),      // 2: IPv4 protocol
        op(jeq, 12, 0, 17),     // 3: UDP: accept
        op(jeq, 0, 12, 6),      // 4: TCP, else reject
        op(ldxb_msh, 0, 0, 14), // 5: X = IHL * 4
        op(ldb_ind, 0, 0, 27),  // 6: TCP flags (14 + X + 13)
        op(and, 0, 0, 0x12),    // 7: SYN | ACK
        op(jeq, 7, 8, 0x02),    // 8: SYN alone: accept, else reject
        op(jeq, 0, 7, 0x86dd),  // 9: IPv6, else reject
        op(ldb, 0, 0, 20),      // 10: next header
        op(jeq, 4, 0, 17),      // 11: UDP: accept
        op(jeq, 0, 4, 6),       // 12: TCP, else reject
        op(ldb, 0, 0, 67),      // 13: TCP flags (14 + 40 + 13)
        op(and, 0, 0, 0x12),    // 14
        op(jeq, 0, 1, 0x02),    // 15: SYN alone: accept, else reject
        op(ret, 0, 0, 0xffff),  // 16: accept
        op(ret, 0, 0, 0),       // 17: reject
    ]
}

/// The newest probe seen per target (address, port, transport), and how many were seen.
#[derive(Default)]
pub struct Live {
    pub latest: HashMap<(IpAddr, u16, u8), Tuple>,
    pub probes_seen: u64,
}

/// A capture of the probes arriving at the backend's interface, on a thread of its own until
/// dropped.
pub struct Capture {
    pub live: Arc<Mutex<Live>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Capture {
    pub fn start(ns: &Netns, dev: &str) -> Self {
        let fd = ns.enter(|| packet_socket(dev, ETH_P_ALL));
        let one: libc::c_int = 1;
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            PACKET_IGNORE_OUTGOING,
            &one,
            "PACKET_IGNORE_OUTGOING",
        );
        let filter = probe_filter();
        let prog = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr().cast_mut(),
        };
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog, "SO_ATTACH_FILTER");
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 20_000,
        };
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout, "SO_RCVTIMEO");
        let live = Arc::new(Mutex::new(Live::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (live, stop) = (live.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: `buf` is writable for its length.
                    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
                    let Ok(n) = usize::try_from(n) else { continue };
                    if let Some(t) = parse_probe(&buf[..n]) {
                        let mut l = live.lock().unwrap();
                        l.latest.insert((t.target, t.dport, t.proto), t);
                        l.probes_seen += 1;
                    }
                }
            })
        };
        Self {
            live,
            stop,
            thread: Some(thread),
        }
    }

    /// The newest probe to each target seen so far.
    pub fn tuples(&self) -> HashMap<(IpAddr, u16, u8), Tuple> {
        self.live.lock().unwrap().latest.clone()
    }

    pub fn probes_seen(&self) -> u64 {
        self.live.lock().unwrap().probes_seen
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The tuple of a probe frame (a SYN or a UDP datagram), or None.
fn parse_probe(f: &[u8]) -> Option<Tuple> {
    let ethertype = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    let (prober, target, proto, l4): (IpAddr, IpAddr, u8, usize) = match ethertype {
        0x0800 => {
            let ip = f.get(14..34)?;
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let s: [u8; 4] = ip[12..16].try_into().ok()?;
            let d: [u8; 4] = ip[16..20].try_into().ok()?;
            (s.into(), d.into(), ip[9], 14 + ihl)
        }
        0x86dd => {
            let ip = f.get(14..54)?;
            let s: [u8; 16] = ip[8..24].try_into().ok()?;
            let d: [u8; 16] = ip[24..40].try_into().ok()?;
            (s.into(), d.into(), ip[6], 54)
        }
        _ => return None,
    };
    let ports = f.get(l4..l4 + 4)?;
    if proto != IPPROTO_TCP && proto != IPPROTO_UDP {
        return None;
    }
    Some(Tuple {
        prober,
        sport: u16::from_be_bytes([ports[0], ports[1]]),
        target,
        dport: u16::from_be_bytes([ports[2], ports[3]]),
        proto,
    })
}

/// Writes an IPv4 header (no options, DF, TTL `FORGED_TTL` unless `ttl` says otherwise).
fn ipv4(b: &mut [u8], src: [u8; 4], dst: [u8; 4], proto: u8, payload: usize, id: u16, ttl: u8) {
    let tot = (20 + payload) as u16;
    b[0] = 0x45;
    b[1] = 0;
    b[2..4].copy_from_slice(&tot.to_be_bytes());
    b[4..6].copy_from_slice(&id.to_be_bytes());
    b[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
    b[8] = ttl;
    b[9] = proto;
    b[10..12].fill(0);
    b[12..16].copy_from_slice(&src);
    b[16..20].copy_from_slice(&dst);
    let c = finish(payload_sum(&b[..20]));
    b[10..12].copy_from_slice(&c.to_be_bytes());
}

fn ipv6(b: &mut [u8], src: [u8; 16], dst: [u8; 16], next: u8, payload: usize, label: u32, hops: u8) {
    b[0..4].copy_from_slice(&(0x6000_0000 | (label & 0xfffff)).to_be_bytes());
    b[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
    b[6] = next;
    b[7] = hops;
    b[8..24].copy_from_slice(&src);
    b[24..40].copy_from_slice(&dst);
}

fn v4(a: IpAddr) -> [u8; 4] {
    match a {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(_) => panic!("{a} is not IPv4"),
    }
}

fn v6(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V6(a) => a.octets(),
        IpAddr::V4(_) => panic!("{a} is not IPv6"),
    }
}

/// Writes a client's TCP segment (no payload, flags `flags`, sequence number `seq`) from
/// `src:sport` to `dst:dport` into `b` behind an Ethernet header with `macs` (destination,
/// source), checksums right, and returns its length: what a client sends through a router.
pub fn segment(
    b: &mut [u8; FRAME_MAX],
    macs: ([u8; 6], [u8; 6]),
    (src, sport): (IpAddr, u16),
    (dst, dport): (IpAddr, u16),
    flags: u8,
    seq: u32,
) -> usize {
    b[0..6].copy_from_slice(&macs.0);
    b[6..12].copy_from_slice(&macs.1);
    let is_v6 = src.is_ipv6();
    b[12..14].copy_from_slice(&(if is_v6 { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
    let l4 = 14 + if is_v6 { 40 } else { 20 };
    let seg = &mut b[l4..l4 + 20];
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    seg[4..8].copy_from_slice(&seq.to_be_bytes());
    seg[8..12].copy_from_slice(&(if flags & TCP_ACK != 0 { 1u32 } else { 0 }).to_be_bytes());
    seg[12] = 5 << 4;
    seg[13] = flags;
    seg[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    seg[16..20].fill(0);
    let sum = if is_v6 {
        ipv6(&mut b[14..], v6(src), v6(dst), IPPROTO_TCP, 20, 0, 64);
        pseudo_v6(&v6(src), &v6(dst), IPPROTO_TCP, 20)
    } else {
        ipv4(&mut b[14..], v4(src), v4(dst), IPPROTO_TCP, 20, sport, 64);
        pseudo_v4(&v4(src), &v4(dst), IPPROTO_TCP, 20)
    };
    let c = finish(sum + payload_sum(&b[l4..l4 + 20]));
    b[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
    l4 + 20
}

/// Writes one forged frame about probe `t` into `b` (Ethernet first) and returns its length.
/// Everything a sender can choose without knowing the cookie is random: acks, sequence
/// numbers, IPv4 ids, flow labels.
pub fn forge(b: &mut [u8; FRAME_MAX], macs: ([u8; 6], [u8; 6]), t: &Tuple, kind: Kind, rng: &mut Rng) -> usize {
    let (dst_mac, src_mac) = macs;
    b[0..6].copy_from_slice(&dst_mac);
    b[6..12].copy_from_slice(&src_mac);
    let is_v6 = t.prober.is_ipv6();
    b[12..14].copy_from_slice(&(if is_v6 { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
    let l3 = if is_v6 { 40 } else { 20 };
    let l4 = 14 + l3;
    let r = rng.next_u64();
    // The transport part, then the outer IP header around it, then its checksum.
    let (proto, len) = match kind {
        Kind::SynAck | Kind::Rst => {
            let seg = &mut b[l4..l4 + 20];
            seg[0..2].copy_from_slice(&t.dport.to_be_bytes());
            seg[2..4].copy_from_slice(&t.sport.to_be_bytes());
            seg[4..8].copy_from_slice(&((r >> 32) as u32).to_be_bytes());
            seg[8..12].copy_from_slice(&(r as u32).to_be_bytes());
            seg[12] = 5 << 4;
            seg[13] = if kind == Kind::SynAck {
                TCP_SYN | TCP_ACK
            } else {
                TCP_RST | TCP_ACK
            };
            seg[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
            seg[16..20].fill(0);
            (IPPROTO_TCP, 20)
        }
        Kind::IcmpTcp | Kind::IcmpUdp => {
            let inner_proto = if kind == Kind::IcmpTcp {
                IPPROTO_TCP
            } else {
                IPPROTO_UDP
            };
            let msg = &mut b[l4..];
            // Unreachable with codes that would end a probe (packet.rs's refusing codes): port
            // unreachable for UDP, administratively prohibited (a REJECT rule) for TCP. Other
            // codes are passed before any matching, as `other`.
            msg[0..8].copy_from_slice(&[0; 8]);
            (msg[0], msg[1]) = match (is_v6, kind) {
                (false, Kind::IcmpUdp) => (3, 3),
                (false, _) => (3, 13),
                (true, Kind::IcmpUdp) => (1, 4),
                (true, _) => (1, 1),
            };
            let q = 8 + l3;
            // The quoted probe: our side to the target, the random field where the cookie is.
            if is_v6 {
                ipv6(&mut msg[8..], v6(t.prober), v6(t.target), inner_proto, 8, r as u32, 64);
            } else {
                let id = if kind == Kind::IcmpUdp {
                    r as u16
                } else {
                    (r >> 48) as u16
                };
                ipv4(&mut msg[8..], v4(t.prober), v4(t.target), inner_proto, 8, id, 64);
            }
            msg[q..q + 2].copy_from_slice(&t.sport.to_be_bytes());
            msg[q + 2..q + 4].copy_from_slice(&t.dport.to_be_bytes());
            msg[q + 4..q + 8].copy_from_slice(&((r >> 16) as u32).to_be_bytes());
            (if is_v6 { IPPROTO_ICMPV6 } else { IPPROTO_ICMP }, q + 8)
        }
    };
    // Where the checksum goes: offset 2 of an ICMP(v6) message, 16 of a TCP header.
    let ck = if proto == IPPROTO_TCP { 16 } else { 2 };
    let outer_label = (r >> 40) as u32;
    let sum = if is_v6 {
        ipv6(
            &mut b[14..],
            v6(t.target),
            v6(t.prober),
            proto,
            len,
            outer_label,
            FORGED_TTL,
        );
        pseudo_v6(&v6(t.target), &v6(t.prober), proto, len as u32)
    } else {
        ipv4(
            &mut b[14..],
            v4(t.target),
            v4(t.prober),
            proto,
            len,
            (r >> 24) as u16,
            FORGED_TTL,
        );
        if proto == IPPROTO_TCP {
            pseudo_v4(&v4(t.target), &v4(t.prober), proto, len as u16)
        } else {
            0 // ICMPv4 sums its message only
        }
    };
    let c = finish(sum + payload_sum(&b[l4..l4 + len]));
    b[l4 + ck..l4 + ck + 2].copy_from_slice(&c.to_be_bytes());
    l4 + len
}

/// What to forge: one stream per (target, kind), fed round-robin.
#[derive(Clone, Copy, Debug)]
pub struct Stream {
    pub target: (IpAddr, u16, u8),
    pub kind: Kind,
}

/// What a flood sent.
#[derive(Debug, Default)]
pub struct FloodReport {
    /// Frames the kernel accepted, by kind and family ("v4"/"v6").
    pub sent: BTreeMap<(Kind, &'static str), u64>,
    pub elapsed: Duration,
    /// Send calls refused (ENOBUFS: the veth's ring was full) and retried.
    pub busy: u64,
}

impl FloodReport {
    pub fn total(&self) -> u64 {
        self.sent.values().sum()
    }

    pub fn rate(&self) -> f64 {
        self.total() as f64 / self.elapsed.as_secs_f64()
    }
}

/// A sender on `dev` of the namespace `ns`, aiming frames at the peer `dst_mac`.
pub struct Flooder {
    fd: OwnedFd,
    macs: ([u8; 6], [u8; 6]),
}

pub fn parse_mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s.split(':').map(|x| u8::from_str_radix(x, 16).unwrap()).collect();
    v.try_into().unwrap_or_else(|_| panic!("bad MAC {s}"))
}

impl Flooder {
    pub fn new(ns: &Netns, dev: &str, dst_mac: [u8; 6]) -> Self {
        let src_mac = parse_mac(&ns.mac(dev));
        let fd = ns.enter(|| packet_socket(dev, 0));
        let one: libc::c_int = 1;
        // Straight to the driver: the flood measures probe_rx, not a qdisc.
        setsockopt(&fd, libc::SOL_PACKET, PACKET_QDISC_BYPASS, &one, "PACKET_QDISC_BYPASS");
        Self {
            fd,
            macs: (dst_mac, src_mac),
        }
    }

    /// Sends `total` forged frames over `streams` (skipping targets whose probe the capture
    /// has not seen yet), re-reading the live tuples before each batch; stops at `limit`.
    pub fn flood(&self, capture: &Capture, streams: &[Stream], total: u64, limit: Duration, seed: u64) -> FloodReport {
        let mut rng = Rng::new(seed);
        let mut frames = vec![[0u8; FRAME_MAX]; BATCH];
        let mut lens = [0usize; BATCH];
        let mut what: Vec<(Kind, &'static str)> = vec![(Kind::SynAck, "v4"); BATCH];
        let mut report = FloodReport::default();
        let start = Instant::now();
        let mut next = 0usize;
        let mut sent = 0u64;
        while sent < total && start.elapsed() < limit {
            let tuples = capture.tuples();
            let n = BATCH.min((total - sent) as usize);
            let mut filled = 0;
            let mut misses = 0;
            while filled < n && misses < streams.len() {
                let s = streams[next % streams.len()];
                next += 1;
                let Some(t) = tuples.get(&s.target) else {
                    misses += 1;
                    continue;
                };
                misses = 0;
                lens[filled] = forge(&mut frames[filled], self.macs, t, s.kind, &mut rng);
                what[filled] = (s.kind, if t.prober.is_ipv6() { "v6" } else { "v4" });
                filled += 1;
            }
            if filled == 0 {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mut done = 0;
            while done < filled && start.elapsed() < limit {
                let k = self.send_batch(&mut frames[done..filled], &lens[done..filled]);
                for w in &what[done..done + k] {
                    *report.sent.entry(*w).or_default() += 1;
                }
                done += k;
                sent += k as u64;
                if done < filled {
                    // The peer's ring is full: let its NAPI catch up rather than lose frames.
                    report.busy += 1;
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
        report.elapsed = start.elapsed();
        report
    }

    /// The (destination, source) MACs its frames carry.
    pub fn macs(&self) -> ([u8; 6], [u8; 6]) {
        self.macs
    }

    /// Sends `frames` (each `lens` long), one sendmmsg per call; how many the kernel took.
    pub fn send(&self, frames: &mut [[u8; FRAME_MAX]], lens: &[usize]) -> usize {
        self.send_batch(frames, lens)
    }

    /// One sendmmsg; how many frames the kernel took (0 when the first was refused with
    /// ENOBUFS or EAGAIN; any other error fails the test).
    fn send_batch(&self, frames: &mut [[u8; FRAME_MAX]], lens: &[usize]) -> usize {
        let mut iov: Vec<libc::iovec> = frames
            .iter_mut()
            .zip(lens)
            .map(|(f, &len)| libc::iovec {
                iov_base: f.as_mut_ptr().cast(),
                iov_len: len,
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: msghdr is plain data, valid when zeroed.
                let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
                h.msg_iov = std::ptr::from_mut(v);
                h.msg_iovlen = 1;
                libc::mmsghdr { msg_hdr: h, msg_len: 0 }
            })
            .collect();
        // SAFETY: every header points at one live iovec over a live frame buffer.
        let rc = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as u32, 0) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            assert!(
                matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN)),
                "sendmmsg: {e}"
            );
            return 0;
        }
        rc as usize
    }
}

/// Counters on the prober's side, ahead of everything else in prerouting (after XDP): forged
/// frames (TTL `FORGED_TTL`) that probe_rx passed to the stack, by kind and family, and the
/// genuine replies of the same classes it passed (late or duplicate ones).
/// Frames passed after XDP, by kind and family: (forged, genuine).
pub type Passed = BTreeMap<(Kind, &'static str), (u64, u64)>;

pub struct PassedCounters<'a> {
    ns: &'a Netns,
}

const ACCT_TABLE: &str = "probed_flood_acct";

impl<'a> PassedCounters<'a> {
    pub fn install(ns: &'a Netns) -> Self {
        let mut rules = String::new();
        for (fam, marker, icmp, inner_off) in [
            (
                "v4",
                format!("ip ttl {FORGED_TTL}"),
                "icmp type destination-unreachable",
                136,
            ),
            (
                "v6",
                format!("ip6 hoplimit {FORGED_TTL}"),
                "icmpv6 type destination-unreachable",
                112,
            ),
        ] {
            // The quoted probe's transport: IPv4 protocol at ICMP offset 8 + 9, IPv6 next
            // header at 8 + 6 (offsets in bits from the ICMP header).
            let genuine = marker.replace(&FORGED_TTL.to_string(), &format!("!= {FORGED_TTL}"));
            for (kind, rule) in [
                (Kind::SynAck, "tcp flags & (syn | ack) == syn | ack".to_string()),
                (Kind::Rst, "tcp flags & rst == rst".to_string()),
                (Kind::IcmpTcp, format!("{icmp} @th,{inner_off},8 6")),
                (Kind::IcmpUdp, format!("{icmp} @th,{inner_off},8 17")),
            ] {
                rules += &format!("  {marker} {rule} counter comment \"forged-{}-{fam}\"\n", kind.name());
                rules += &format!("  {genuine} {rule} counter comment \"genuine-{}-{fam}\"\n", kind.name());
            }
        }
        ns.nft(&format!(
            "table inet {ACCT_TABLE} {{\n chain pre {{\n  type filter hook prerouting priority -400; policy accept;\n{rules} }}\n}}\n"
        ));
        Self { ns }
    }

    /// (forged, genuine) frames passed, by kind and family.
    pub fn read(&self) -> Passed {
        let listing = self.ns.exec("nft", &["list", "table", "inet", ACCT_TABLE]);
        let mut out = BTreeMap::new();
        for kind in Kind::ALL {
            for fam in ["v4", "v6"] {
                let at =
                    |who: &str| crate::servers::counted_packets(&listing, &format!("\"{who}-{}-{fam}\"", kind.name()));
                out.insert((kind, fam), (at("forged"), at("genuine")));
            }
        }
        out
    }
}

impl Drop for PassedCounters<'_> {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns.name,
                "nft",
                "delete",
                "table",
                "inet",
                ACCT_TABLE,
            ])
            .status();
    }
}

/// probe_rx's counters, summed over CPUs, from the pinned PROBE_RX_COUNTERS.
pub fn rx_counters(pin_dir: &std::path::Path) -> probe_common::counters::RxCounters {
    let data = aya::maps::MapData::from_pin(pin_dir.join("PROBE_RX_COUNTERS")).expect("open pinned PROBE_RX_COUNTERS");
    let map: aya::maps::PerCpuArray<_, probe_common::counters::RxCounters> =
        aya::maps::PerCpuArray::try_from(aya::maps::Map::PerCpuArray(data)).expect("a per-CPU array");
    let mut sum = probe_common::counters::RxCounters::default();
    for c in map.get(&0, 0).expect("read slot 0").iter() {
        sum.accumulate(c);
    }
    sum
}

/// A link's dropped packets (rx, tx) from `ip -s -j link`.
pub fn link_drops(ns: &Netns, dev: &str) -> (u64, u64) {
    let out = ns.ip(&["-s", "-j", "link", "show", "dev", dev]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("ip -j output");
    let s = &v[0]["stats64"];
    let get = |dir: &str| s[dir]["dropped"].as_u64().unwrap_or(0);
    (get("rx"), get("tx"))
}

/// `probed_probe_results_total` by (profile, outcome), from Prometheus text.
pub fn results_by_profile(metrics: &str) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("probed_probe_results_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let n = value.trim().parse::<f64>().unwrap_or(0.0) as u64;
        *out.entry((label("profile"), label("outcome"))).or_default() += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every forged frame carries checksums a receiving stack accepts (they sum to zero), the
    /// marker TTL, and the reply's direction of the probe's ports.
    #[test]
    fn forged_frames_have_valid_checksums() {
        let fold = |sum: u64, bytes: &[u8]| finish(sum + payload_sum(bytes));
        let mut rng = Rng::new(7);
        let mut b = [0u8; FRAME_MAX];
        for (prober, target) in [("198.18.0.1", "198.18.0.2"), ("2001:2::1", "2001:2::2")] {
            for kind in Kind::ALL {
                let proto = if kind == Kind::IcmpUdp {
                    IPPROTO_UDP
                } else {
                    IPPROTO_TCP
                };
                let t = Tuple {
                    prober: prober.parse().unwrap(),
                    sport: 61234,
                    target: target.parse().unwrap(),
                    dport: 8080,
                    proto,
                };
                for _ in 0..100 {
                    let len = forge(&mut b, ([2; 6], [4; 6]), &t, kind, &mut rng);
                    let f = &b[..len];
                    let (l4, next, sum) = if t.prober.is_ipv6() {
                        assert_eq!(f[21], FORGED_TTL);
                        let plen = usize::from(u16::from_be_bytes([f[18], f[19]]));
                        assert_eq!(plen, len - 54);
                        let (s, d) = (v6(t.target), v6(t.prober));
                        (54, f[20], pseudo_v6(&s, &d, f[20], plen as u32))
                    } else {
                        assert_eq!(fold(0, &f[14..34]), 0, "IPv4 header checksum");
                        assert_eq!(f[22], FORGED_TTL);
                        let sum = if f[23] == IPPROTO_TCP {
                            pseudo_v4(&v4(t.target), &v4(t.prober), IPPROTO_TCP, (len - 34) as u16)
                        } else {
                            0
                        };
                        (34, f[23], sum)
                    };
                    assert_eq!(fold(sum, &f[l4..]), 0, "{kind:?} {prober}: checksum of protocol {next}");
                    if next == IPPROTO_TCP {
                        assert_eq!(&f[l4..l4 + 4], &[0x1f, 0x90, 0xef, 0x32], "8080 -> 61234");
                    } else {
                        // The quoted probe's ports, our side first.
                        let q = l4 + 8 + if t.prober.is_ipv6() { 40 } else { 20 };
                        assert_eq!(&f[q..q + 4], &[0xef, 0x32, 0x1f, 0x90], "61234 -> 8080");
                    }
                }
            }
        }
    }
}
