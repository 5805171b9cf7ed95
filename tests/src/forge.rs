//! Forging replies from inside a namespace with a raw socket, to prove the matcher ignores
//! them; and reading the engine's live probes from its pinned in-flight table.
use std::{
    net::Ipv4Addr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
};

use probe_common::{
    frame::{segment_v4, write_segment_v6, Ends, RstV6},
    l4::{FlowKey, Inflight, FAMILY_V4},
    packet::EthHdr,
};

/// Sends a raw IPv4 packet (IP header included) to `dst` from the calling thread's namespace.
pub fn send_raw_v4(dst: Ipv4Addr, packet: &[u8]) {
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(dst.octets()),
        },
        sin_zero: [0; 8],
    };
    send_raw(libc::AF_INET, &sa, packet);
}

/// Sends a raw IPv6 packet (IP header included) to `dst` from the calling thread's namespace.
pub fn send_raw_v6(dst: [u8; 16], packet: &[u8]) {
    // SAFETY: sockaddr_in6 is plain data, valid when zeroed.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    sa.sin6_family = libc::AF_INET6 as u16;
    sa.sin6_addr.s6_addr = dst;
    send_raw(libc::AF_INET6, &sa, packet);
}

/// Sends `packet` whole through a fresh IPPROTO_RAW socket of `family` (which takes the IP
/// header from us) to `sa`, a sockaddr of that family.
fn send_raw<A>(family: libc::c_int, sa: &A, packet: &[u8]) {
    // SAFETY: plain socket(2); checked below.
    let fd = unsafe { libc::socket(family, libc::SOCK_RAW, libc::IPPROTO_RAW) };
    assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd is fresh and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `packet` and `sa` are valid for the lengths passed.
    let rc = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            packet.as_ptr().cast(),
            packet.len(),
            0,
            std::ptr::from_ref(sa).cast::<libc::sockaddr>(),
            std::mem::size_of::<A>() as u32,
        )
    };
    assert_eq!(rc, packet.len() as isize, "sendto: {}", std::io::Error::last_os_error());
}

/// A TCP segment (IP header on, no Ethernet header) from the target of `flow`'s probe to the
/// prober's port `dport` (the probe's own, or another for a reply no probe waits for), with
/// `seq`, `ack` and `flags`: what the target sends, or a forger in its place. IPv4 or IPv6 as
/// the flow is.
pub fn reply_segment(flow: &FlowKey, dport: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    if flow.family == FAMILY_V4 {
        let e = Ends {
            smac: [0; 6],
            dmac: [0; 6],
            saddr: flow.daddr_v4(),
            daddr: flow.saddr_v4(),
            sport: flow.dport,
            dport,
        };
        segment_v4(&e, seq, ack, flags).bytes()[EthHdr::LEN..].to_vec()
    } else {
        let e = Ends {
            smac: [0; 6],
            dmac: [0; 6],
            saddr: flow.daddr,
            daddr: flow.saddr,
            sport: flow.dport,
            dport,
        };
        let mut f = RstV6::default();
        write_segment_v6(&mut f, &e, seq, ack, flags);
        f.bytes()[EthHdr::LEN..].to_vec()
    }
}

/// The live probes in the pinned PROBE_INFLIGHT map under `pin_dir`.
pub fn inflight(pin_dir: &Path) -> Vec<(FlowKey, Inflight)> {
    let data = aya::maps::MapData::from_pin(pin_dir.join("PROBE_INFLIGHT")).expect("open pinned PROBE_INFLIGHT");
    let map: aya::maps::HashMap<_, FlowKey, Inflight> =
        aya::maps::HashMap::try_from(aya::maps::Map::HashMap(data)).expect("PROBE_INFLIGHT is a hash map");
    map.iter().map(|r| r.expect("read entry")).collect()
}
