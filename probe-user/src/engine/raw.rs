//! The raw-socket sender: the generator's frames, built by the same probe-common code, sent
//! through the node's IP stack. Used where the device cannot transmit XDP frames, and for a
//! probe whose next hop has no resolved neighbour yet (the stack resolves it).
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use probe_common::{
    frame::{payload_sum, syn_v4, syn_v6, udp_v4, udp_v6, Ends},
    l4::{FlowKey, FAMILY_V4},
    packet::{EthHdr, IPPROTO_TCP},
};

use super::EngineError;

pub(crate) struct RawSender {
    v4: OwnedFd,
    v6: Option<OwnedFd>,
}

fn raw_socket(family: i32) -> std::io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked. IPPROTO_RAW implies that we supply
    // the IP header (IP_HDRINCL / IPV6_HDRINCL).
    let fd = unsafe { libc::socket(family, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::IPPROTO_RAW) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is fresh and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl RawSender {
    pub(crate) fn new() -> Result<Self, EngineError> {
        let v4 = raw_socket(libc::AF_INET).map_err(|source| EngineError::Io {
            op: "open a raw IPv4 socket (needs CAP_NET_RAW)",
            source,
        })?;
        // A node without IPv6 still probes IPv4 targets.
        let v6 = raw_socket(libc::AF_INET6).ok();
        Ok(Self { v4, v6 })
    }

    /// Sends the probe of `flow` carrying `cookie` (and `payload` for UDP).
    pub(crate) fn send(&self, flow: &FlowKey, cookie: u32, payload: Option<&[u8]>) -> std::io::Result<()> {
        let mut pkt = Vec::with_capacity(96);
        let tcp = flow.proto == IPPROTO_TCP;
        let (plen, psum) = payload.map(|p| (p.len() as u16, payload_sum(p))).unwrap_or((0, 0));
        if flow.family == FAMILY_V4 {
            let e = Ends {
                smac: [0; 6],
                dmac: [0; 6],
                saddr: flow.saddr_v4(),
                daddr: flow.daddr_v4(),
                sport: flow.sport,
                dport: flow.dport,
            };
            if tcp {
                pkt.extend_from_slice(&syn_v4(&e, cookie).bytes()[EthHdr::LEN..]);
            } else {
                pkt.extend_from_slice(&udp_v4(&e, cookie as u16, plen, psum).bytes()[EthHdr::LEN..]);
            }
        } else {
            let e = Ends {
                smac: [0; 6],
                dmac: [0; 6],
                saddr: flow.saddr,
                daddr: flow.daddr,
                sport: flow.sport,
                dport: flow.dport,
            };
            if tcp {
                pkt.extend_from_slice(&syn_v6(&e, cookie).bytes()[EthHdr::LEN..]);
            } else {
                pkt.extend_from_slice(&udp_v6(&e, cookie, plen, psum).bytes()[EthHdr::LEN..]);
            }
        }
        if !tcp {
            pkt.extend_from_slice(payload.unwrap_or(&[]));
        }
        let rc = if flow.family == FAMILY_V4 {
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(flow.daddr_v4()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `pkt` and `sa` are valid for the lengths passed.
            unsafe {
                libc::sendto(
                    self.v4.as_raw_fd(),
                    pkt.as_ptr() as *const _,
                    pkt.len(),
                    0,
                    &sa as *const _ as *const libc::sockaddr,
                    std::mem::size_of_val(&sa) as u32,
                )
            }
        } else {
            let Some(fd) = &self.v6 else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "no IPv6 raw socket",
                ));
            };
            // SAFETY: sockaddr_in6 is plain data, valid when zeroed.
            let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sa.sin6_family = libc::AF_INET6 as u16;
            sa.sin6_addr.s6_addr = flow.daddr;
            // SAFETY: `pkt` and `sa` are valid for the lengths passed.
            unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    pkt.as_ptr() as *const _,
                    pkt.len(),
                    0,
                    &sa as *const _ as *const libc::sockaddr,
                    std::mem::size_of_val(&sa) as u32,
                )
            }
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}
