//! Forging replies from inside a namespace with a raw socket, to prove the matcher ignores
//! them; and reading the engine's live probes from its pinned in-flight table.
use std::{
    net::Ipv4Addr,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
};

use probe_common::l4::{FlowKey, Inflight};

/// Sends a raw IPv4 packet (IP header included) to `dst` from the calling thread's namespace.
pub fn send_raw_v4(dst: Ipv4Addr, packet: &[u8]) {
    // SAFETY: plain socket(2); checked below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_RAW) };
    assert!(fd >= 0, "raw socket: {}", std::io::Error::last_os_error());
    // SAFETY: fd is fresh and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(dst.octets()),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `packet` and `sa` are valid for the lengths passed.
    let rc = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            packet.as_ptr().cast(),
            packet.len(),
            0,
            (&raw const sa).cast::<libc::sockaddr>(),
            std::mem::size_of_val(&sa) as u32,
        )
    };
    assert!(rc >= 0, "sendto: {}", std::io::Error::last_os_error());
}

/// The live probes in the pinned PROBE_INFLIGHT map under `pin_dir`.
pub fn inflight(pin_dir: &Path) -> Vec<(FlowKey, Inflight)> {
    let data = aya::maps::MapData::from_pin(pin_dir.join("PROBE_INFLIGHT")).expect("open pinned PROBE_INFLIGHT");
    let map: aya::maps::HashMap<_, FlowKey, Inflight> =
        aya::maps::HashMap::try_from(aya::maps::Map::HashMap(data)).expect("PROBE_INFLIGHT is a hash map");
    map.iter().map(|r| r.expect("read entry")).collect()
}
