//! Who holds the other end of a loopback TCP connection: the uid that owns the client's
//! socket, asked of the kernel through sock_diag (`NETLINK_SOCK_DIAG`, one exact lookup of
//! the connection's four-tuple). Over loopback every address of 127.0.0.0/8 reaches the
//! listener, so an address says nothing about who connects: one local user binding
//! 127.0.0.2, .3, ... would otherwise count as many peers. A uid is what the unix socket's
//! peers are counted by, and now loopback TCP's too.
//!
//! The only kernel-facing code here is `ask`: a netlink socket, one request, one answer, each
//! a fixed layout from `linux/inet_diag.h`; everything around it is plain.
use std::{
    io,
    net::{IpAddr, SocketAddr},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

/// Whether `ip` is a loopback address, v4-mapped ones included.
pub(super) fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// The uid owning the client socket of the connection from `peer` to `local` (both as the
/// server sees them); an error when the kernel does not say (the socket is gone, or sock_diag
/// is not there).
pub(super) fn uid_of(peer: SocketAddr, local: SocketAddr) -> io::Result<u32> {
    // A v4 client on a dual-stack listener shows as v4-mapped; its socket is an AF_INET one.
    let (peer, local) = (unmapped(peer), unmapped(local));
    if peer.is_ipv4() != local.is_ipv4() {
        return Err(io::Error::other("the two ends are of different families"));
    }
    let reply = ask(&request(peer, local))?;
    parse_reply(&reply)
}

fn unmapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(a, |v4| SocketAddr::new(IpAddr::V4(v4), a.port())),
        IpAddr::V4(_) => a,
    }
}

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, then the socket id.
const REQ_LEN: usize = 4 + 4 + SOCKID_LEN;
/// `struct inet_diag_sockid`: sport, dport (big-endian), src, dst (four words each), ifindex,
/// cookie (two words).
const SOCKID_LEN: usize = 2 + 2 + 16 + 16 + 4 + 8;
/// Where `idiag_uid` is in `struct inet_diag_msg`: family, state, timer, retrans, the socket
/// id, expires, rqueue, wqueue.
const UID_AT: usize = 4 + SOCKID_LEN + 12;

/// The lookup of the client's socket: its own address and port first, the server's second.
fn request(client: SocketAddr, server: SocketAddr) -> Vec<u8> {
    let mut m = Vec::with_capacity(NLMSG_HDR + REQ_LEN);
    m.extend_from_slice(&u32::try_from(NLMSG_HDR + REQ_LEN).unwrap_or(0).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    let family = if client.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    m.push(u8::try_from(family).unwrap_or(0));
    m.push(u8::try_from(libc::IPPROTO_TCP).unwrap_or(0));
    m.push(0); // no extensions
    m.push(0);
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // any state
    m.extend_from_slice(&client.port().to_be_bytes());
    m.extend_from_slice(&server.port().to_be_bytes());
    for ip in [client.ip(), server.ip()] {
        let mut words = [0u8; 16];
        match ip {
            IpAddr::V4(v4) => words[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => words.copy_from_slice(&v6.octets()),
        }
        m.extend_from_slice(&words);
    }
    m.extend_from_slice(&0u32.to_ne_bytes()); // any interface
    m.extend_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
    m
}

/// The uid in the kernel's answer, or the error it sent.
fn parse_reply(reply: &[u8]) -> io::Result<u32> {
    let short = || io::Error::other("sock_diag's answer is cut short");
    let header = reply.get(..NLMSG_HDR).ok_or_else(short)?;
    let kind = u16::from_ne_bytes([header[4], header[5]]);
    let body = &reply[NLMSG_HDR..];
    if kind == NLMSG_ERROR {
        let errno = body
            .get(..4)
            .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        return Err(io::Error::from_raw_os_error(-errno));
    }
    if kind != SOCK_DIAG_BY_FAMILY {
        return Err(io::Error::other(format!("sock_diag answered message type {kind}")));
    }
    let uid = body.get(UID_AT..UID_AT + 4).ok_or_else(short)?;
    Ok(u32::from_ne_bytes([uid[0], uid[1], uid[2], uid[3]]))
}

/// Sends `request` on a new sock_diag socket and returns the first answer.
fn ask(request: &[u8]) -> io::Result<Vec<u8>> {
    // SAFETY: plain socket(2); the descriptor is owned from here on.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let timeout = libc::timeval { tv_sec: 1, tv_usec: 0 };
    // SAFETY: setsockopt with a timeval of the right size; a failure only leaves no timeout.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::addr_of!(timeout).cast(),
            u32::try_from(std::mem::size_of::<libc::timeval>()).unwrap_or(0),
        );
    }
    // SAFETY: `request` is valid for its length; the netlink socket's default destination is
    // the kernel.
    let sent = unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 1024];
    // SAFETY: `buf` is valid for writes of its length.
    let got = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(usize::try_from(got).unwrap_or(0));
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_127_8_and_colon_colon_1_mapped_or_not() {
        for a in ["127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.2"] {
            assert!(is_loopback(a.parse().unwrap()), "{a}");
        }
        for a in ["198.18.0.1", "::ffff:198.18.0.1", "2001:2::1", "0.0.0.0"] {
            assert!(!is_loopback(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn the_owner_of_a_loopback_client_is_found_by_its_four_tuple() {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        for host in ["127.0.0.1", "[::1]"] {
            let Ok(listener) = std::net::TcpListener::bind(format!("{host}:0")) else {
                continue; // no IPv6 loopback here
            };
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, peer) = listener.accept().unwrap();
            assert_eq!(peer, client.local_addr().unwrap());
            assert_eq!(uid_of(peer, server.local_addr().unwrap()).unwrap(), me, "{host}");
            // A connection that does not exist is an error, not a uid.
            let mut gone = peer;
            gone.set_port(peer.port().wrapping_add(1).max(1));
            assert!(uid_of(gone, server.local_addr().unwrap()).is_err(), "{host}");
        }
    }

    #[test]
    fn a_reply_too_short_or_an_error_is_no_uid() {
        assert!(parse_reply(&[0; 8]).is_err());
        let mut err = vec![0u8; NLMSG_HDR + 4];
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[NLMSG_HDR..].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(parse_reply(&err).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    }
}
