//! Replies that reach probe_rx VLAN-tagged, as on a trunk NIC that leaves tags in the frame:
//! one 802.1Q tag, and QinQ (802.1ad + 802.1Q). This kernel is built without VLAN devices
//! (CONFIG_VLAN_8021Q is off), so the backend writes the tagged replies itself, as whole
//! Ethernet frames through a packet socket on its veth, with the live probes' cookies: the
//! bytes XDP sees are exactly those. probe_rx must match them, and send each RST back with
//! the SYN+ACK's tags. These expectations are XDP's: at tcx ingress the kernel has already
//! moved the outermost tag into the skb's metadata (so a frame shows one tag fewer), which is
//! why `cargo xtask test` leaves this suite out of its tcx pass (xtask/src/test.rs).
use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::{Duration, Instant},
};

use probe_common::{
    csum::{add_bytes, finish, pseudo_v6},
    frame::ipv4,
    l4::{FlowKey, Inflight, FAMILY_V4},
    packet::{IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, TCP_ACK, TCP_RST, TCP_SYN},
};
use probed::{
    engine::{L4Outcome, L4Proto, L4Request, TxChoice},
    probe::udp::UdpOutcome,
};
use probed_tests::{
    l4::{collect, start_engine_with},
    topo::*,
    TestPins, Topology,
};

const DROPPED: u16 = 8082;
const PAYLOAD: &[u8] = b"probed";

/// Parses "aa:bb:cc:dd:ee:ff".
fn mac(s: &str) -> [u8; 6] {
    let mut m = [0u8; 6];
    for (i, part) in s.split(':').enumerate() {
        m[i] = u8::from_str_radix(part, 16).unwrap_or_else(|e| panic!("MAC {s}: {e}"));
    }
    m
}

/// A packet socket on the backend's veth (ETH_P_ALL): sends whole frames, sees every frame.
fn packet_socket() -> (OwnedFd, i32) {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2), checked below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK, i32::from(proto)) };
    assert!(fd >= 0, "packet socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd is fresh and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let name = std::ffi::CString::new(BACKEND_IF).unwrap();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
    assert!(ifindex > 0, "no {BACKEND_IF}");
    let sll = sockaddr(ifindex, proto);
    // SAFETY: `sll` is valid for the length passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sll).cast::<libc::sockaddr>(),
            std::mem::size_of_val(&sll) as u32,
        )
    };
    assert_eq!(rc, 0, "bind the packet socket: {}", std::io::Error::last_os_error());
    let on: i32 = 1;
    // SAFETY: an int option, valid for its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_AUXDATA,
            (&raw const on).cast(),
            std::mem::size_of_val(&on) as u32,
        )
    };
    assert_eq!(rc, 0, "PACKET_AUXDATA: {}", std::io::Error::last_os_error());
    (fd, ifindex)
}

fn sockaddr(ifindex: i32, proto_be: u16) -> libc::sockaddr_ll {
    // SAFETY: sockaddr_ll is plain data, valid when zeroed.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto_be;
    sll.sll_ifindex = ifindex;
    sll
}

fn send_frame(fd: &OwnedFd, ifindex: i32, frame: &[u8]) {
    let sll = sockaddr(ifindex, (libc::ETH_P_ALL as u16).to_be());
    // SAFETY: `frame` and `sll` are valid for the lengths passed.
    let rc = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&raw const sll).cast::<libc::sockaddr>(),
            std::mem::size_of_val(&sll) as u32,
        )
    };
    assert_eq!(
        rc,
        frame.len() as isize,
        "send a frame: {}",
        std::io::Error::last_os_error()
    );
}

/// The frames that arrived on the backend's veth so far (bounded), as they were on the wire:
/// the receive path moves the outer VLAN tag out of the data, and PACKET_AUXDATA gives it
/// back, so it is put back in place here.
fn arrived(fd: &OwnedFd) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..10_000 {
        let mut buf = [0u8; 2048];
        // Room for one tpacket_auxdata control message, 8-byte aligned.
        let mut ctl = [0u64; 16];
        // SAFETY: sockaddr_ll and msghdr are plain data, valid when zeroed.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: as above.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&raw mut sll).cast();
        msg.msg_namelen = std::mem::size_of_val(&sll) as u32;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&ctl);
        // SAFETY: every buffer `msg` points to lives to the end of this iteration.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &raw mut msg, 0) };
        let Ok(n) = usize::try_from(n) else { break };
        if sll.sll_pkttype == libc::PACKET_OUTGOING {
            continue;
        }
        let mut frame = buf[..n].to_vec();
        // SAFETY: msg was filled by recvmsg; the CMSG macros walk its control buffer.
        let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&raw const msg) };
        while !cmsg.is_null() {
            // SAFETY: cmsg points into `ctl`, as CMSG_FIRSTHDR/NXTHDR guarantee.
            let c = unsafe { &*cmsg };
            if c.cmsg_level == libc::SOL_PACKET && c.cmsg_type == libc::PACKET_AUXDATA {
                // SAFETY: the kernel writes a tpacket_auxdata after a PACKET_AUXDATA header.
                let aux = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::tpacket_auxdata>()) };
                if aux.tp_status & libc::TP_STATUS_VLAN_VALID != 0 {
                    let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                        aux.tp_vlan_tpid
                    } else {
                        0x8100
                    };
                    let tag = [tpid.to_be_bytes(), aux.tp_vlan_tci.to_be_bytes()].concat();
                    frame.splice(12..12, tag);
                }
            }
            // SAFETY: as above.
            cmsg = unsafe { libc::CMSG_NXTHDR(&raw const msg, cmsg) };
        }
        out.push(frame);
    }
    out
}

/// Ethernet from the backend to the prober with `tags` (TPID, VID), then `ip` (an IP packet).
fn tagged(dst: [u8; 6], src: [u8; 6], tags: &[(u16, u16)], v4: bool, ip: &[u8]) -> Vec<u8> {
    let mut f = [dst, src].concat();
    for (tpid, vid) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&vid.to_be_bytes());
    }
    f.extend_from_slice(&(if v4 { 0x0800u16 } else { 0x86dd }).to_be_bytes());
    f.extend_from_slice(ip);
    f
}

/// The SYN+ACK the target would send for `flow` (IP header on).
fn syn_ack(flow: &FlowKey, cookie: u32) -> Vec<u8> {
    probed_tests::forge::reply_segment(flow, flow.sport, 0x5eed_0000, cookie.wrapping_add(1), TCP_SYN | TCP_ACK)
}

fn sum_of(bytes: &[u8], start: u64) -> [u8; 2] {
    let mut sum = start;
    for c in bytes.chunks(2) {
        sum = add_bytes(sum, &[c[0], c.get(1).copied().unwrap_or(0)]);
    }
    finish(sum).to_be_bytes()
}

/// The port unreachable the target would send for UDP probe `flow` with `cookie`.
fn port_unreachable(flow: &FlowKey, cookie: u32) -> Vec<u8> {
    let udp_len = 8 + PAYLOAD.len() as u16;
    let mut udp = flow.sport.to_be_bytes().to_vec();
    udp.extend_from_slice(&flow.dport.to_be_bytes());
    udp.extend_from_slice(&udp_len.to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    if flow.family == FAMILY_V4 {
        let quoted_ip = ipv4(flow.saddr_v4(), flow.daddr_v4(), IPPROTO_UDP, udp_len, cookie as u16);
        let mut icmp = vec![3, 3, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&header_bytes(&quoted_ip));
        icmp.extend_from_slice(&udp);
        let csum = sum_of(&icmp, 0);
        icmp[2..4].copy_from_slice(&csum);
        let outer = ipv4(flow.daddr_v4(), flow.saddr_v4(), IPPROTO_ICMP, icmp.len() as u16, 7);
        [header_bytes(&outer), icmp].concat()
    } else {
        let mut icmp = vec![1, 4, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&ip6(flow.saddr, flow.daddr, IPPROTO_UDP, udp_len, cookie & 0xf_ffff));
        icmp.extend_from_slice(&udp);
        let csum = sum_of(
            &icmp,
            pseudo_v6(&flow.daddr, &flow.saddr, IPPROTO_ICMPV6, icmp.len() as u32),
        );
        icmp[2..4].copy_from_slice(&csum);
        [ip6(flow.daddr, flow.saddr, IPPROTO_ICMPV6, icmp.len() as u16, 0), icmp].concat()
    }
}

fn header_bytes(h: &probe_common::packet::Ipv4Hdr) -> Vec<u8> {
    let mut b = vec![h.ver_ihl, h.tos];
    for part in [
        &h.tot_len_be[..],
        &h.id_be,
        &h.frag_off_be,
        &[h.ttl, h.proto],
        &h.csum_be,
        &h.saddr,
        &h.daddr,
    ] {
        b.extend_from_slice(part);
    }
    b
}

fn ip6(src: [u8; 16], dst: [u8; 16], next: u8, payload_len: u16, label: u32) -> Vec<u8> {
    let mut b = (0x6000_0000u32 | label).to_be_bytes().to_vec();
    b.extend_from_slice(&payload_len.to_be_bytes());
    b.extend_from_slice(&[next, 64]);
    b.extend_from_slice(&src);
    b.extend_from_slice(&dst);
    b
}

fn probe(token: u64, target: String, udp: bool) -> L4Request {
    L4Request {
        token,
        target: target.parse().unwrap(),
        proto: if udp {
            L4Proto::Udp {
                payload: std::sync::Arc::from(PAYLOAD),
            }
        } else {
            L4Proto::Tcp
        },
        timeout: Duration::from_millis(2000),
        tunnel: None,
    }
}

/// The live probes (flow, entry), once `n` are in the in-flight table.
fn live(pins: &TestPins, n: usize) -> Vec<(FlowKey, Inflight)> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let live = probed_tests::forge::inflight(&pins.path);
        if live.len() >= n {
            return live;
        }
        assert!(Instant::now() < deadline, "{n} probes in flight: {live:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Which XDP mode the engine attaches in: the tests' setting, or generic where the RSTs are
/// captured (see `replies_behind_tags_are_matched`).
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    FromEnv,
    GenericWithCapture,
}

fn replies_behind_tags_are_matched(tags: &[(u16, u16)], mode: Mode) {
    let topo = Topology::new();
    // The real target stays silent, so only the tagged replies written below answer.
    topo.backend.nft_drop("tcp", DROPPED);
    topo.backend.nft_drop("udp", DROPPED);
    let prober_mac = mac(&topo.prober.mac(PROBER_IF));
    let backend_mac = mac(&topo.backend.mac(BACKEND_IF));
    let (fd, ifindex) = topo.backend.enter(packet_socket);
    let pins = TestPins::new();
    let v4 = format!("{BACKEND_V4}:{DROPPED}");
    let v6 = format!("[{BACKEND_V6}]:{DROPPED}");
    // Tokens 1-4 get tagged replies; 5 gets its right reply behind one tag too many.
    let reqs = [
        probe(1, v4.clone(), false),
        probe(2, v6.clone(), false),
        probe(3, v4.clone(), true),
        probe(4, v6.clone(), true),
        probe(5, v4, false),
    ];
    let (results, snap, live) = topo.prober.enter(|| {
        let (engine, mut rx) = start_engine_with(&pins, TxChoice::Auto, |c| {
            if mode == Mode::GenericWithCapture {
                c.mode = probed::kernel::AttachMode::Skb;
            }
        });
        engine.submit(reqs[..4].to_vec()).unwrap();
        let live4 = live(&pins, 4);
        engine.submit(reqs[4..].to_vec()).unwrap();
        let all = live(&pins, 5);
        let extra = all
            .iter()
            .find(|(k, _)| !live4.iter().any(|(l, _)| l == k))
            .copied()
            .unwrap();
        for (flow, entry) in &live4 {
            let v4 = flow.family == FAMILY_V4;
            let ip = if flow.proto == IPPROTO_TCP {
                syn_ack(flow, entry.cookie)
            } else {
                port_unreachable(flow, entry.cookie)
            };
            send_frame(&fd, ifindex, &tagged(prober_mac, backend_mac, tags, v4, &ip));
        }
        let mut too_many = vec![(0x88a8u16, 1u16)];
        too_many.extend_from_slice(tags);
        too_many.push((0x8100, 3));
        send_frame(
            &fd,
            ifindex,
            &tagged(
                prober_mac,
                backend_mac,
                &too_many,
                true,
                &syn_ack(&extra.0, extra.1.cookie),
            ),
        );
        let results = collect(&mut rx, 5, Duration::from_secs(4));
        (results, engine.snapshot().unwrap(), live4)
    });
    let mut results = results;
    results.sort_by_key(|r| r.token);
    let got: Vec<String> = results
        .iter()
        .map(|r| match r.token {
            3 | 4 => UdpOutcome::try_from(r.outcome)
                .map(|o| o.to_string())
                .unwrap_or_default(),
            _ => r.outcome.to_string(),
        })
        .collect();
    assert_eq!(
        got,
        ["open", "open", "port unreachable", "port unreachable", "timeout"],
        "tagged replies matched; one behind {} tags not: {results:?}",
        tags.len() + 2
    );
    assert_eq!(results[4].outcome, L4Outcome::Timeout);
    assert_eq!(
        (snap.rx.matched_open, snap.rx.matched_unreach, snap.rx.rst_sent),
        (2, 2, 2),
        "{:?}",
        snap.rx
    );
    // The two RSTs came back to the backend with the SYN+ACKs' tags, addressed to it. Only
    // checked in generic mode: with native XDP on a veth, frames that came from a packet
    // socket and are sent back with XDP_TX never reach the peer, tagged or not (the veth's
    // xdp_tx counter rises, the peer receives nothing), so the capture would fail for a
    // reason of the harness, not of probe_rx.
    if mode != Mode::GenericWithCapture {
        return;
    }
    let hdr = 12 + 4 * tags.len();
    let all = topo.backend.enter(|| arrived(&fd));
    let rsts: Vec<Vec<u8>> = all
        .into_iter()
        .filter(|f| {
            f.len() > hdr + 2
                && f[..6] == backend_mac
                && tags.first().is_none_or(|t| f[12..14] == t.0.to_be_bytes())
                && f[6..12] == prober_mac
        })
        .collect();
    assert_eq!(rsts.len(), 2, "two frames back from probe_rx: {rsts:02x?}");
    for f in &rsts {
        assert_eq!(f[6..12], prober_mac, "from the prober: {f:02x?}");
        for (i, (tpid, vid)) in tags.iter().enumerate() {
            let at = 12 + 4 * i;
            assert_eq!(f[at..at + 2], tpid.to_be_bytes(), "tag {i} TPID kept: {f:02x?}");
            assert_eq!(f[at + 2..at + 4], vid.to_be_bytes(), "tag {i} VID kept: {f:02x?}");
        }
        let v4 = f[hdr..hdr + 2] == [0x08, 0x00];
        let l4 = hdr + 2 + if v4 { 20 } else { 40 };
        assert_eq!(f.len(), l4 + 20, "a bare RST: {f:02x?}");
        assert_eq!(f[l4 + 13] & TCP_RST, TCP_RST, "RST flag: {f:02x?}");
        let sport = u16::from_be_bytes([f[l4], f[l4 + 1]]);
        let (flow, entry) = live
            .iter()
            .find(|(k, _)| k.proto == IPPROTO_TCP && k.sport == sport && (k.family == FAMILY_V4) == v4)
            .unwrap_or_else(|| panic!("an RST from a probe's port: {f:02x?}"));
        let seq = u32::from_be_bytes([f[l4 + 4], f[l4 + 5], f[l4 + 6], f[l4 + 7]]);
        assert_eq!(seq, entry.cookie.wrapping_add(1), "seq is the SYN+ACK's ack ({flow:?})");
    }
}

#[test]
fn replies_behind_one_vlan_tag_are_matched() {
    replies_behind_tags_are_matched(&[(0x8100, 100)], Mode::FromEnv);
}

#[test]
fn replies_behind_qinq_tags_are_matched() {
    replies_behind_tags_are_matched(&[(0x88a8, 200), (0x8100, 100)], Mode::FromEnv);
}

#[test]
fn rsts_go_back_with_the_replies_vlan_tags() {
    replies_behind_tags_are_matched(&[(0x8100, 100)], Mode::GenericWithCapture);
    replies_behind_tags_are_matched(&[(0x88a8, 200), (0x8100, 100)], Mode::GenericWithCapture);
}
