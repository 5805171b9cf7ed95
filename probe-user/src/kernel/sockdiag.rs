//! Two questions for the kernel's socket table (sock_diag, `NETLINK_SOCK_DIAG`, the layouts of
//! `linux/inet_diag.h`): who owns the client end of one loopback connection (the API counts
//! local peers by it), and which local sockets are bound inside a port range (the probe-port
//! guard warns about them). Plain byte layouts over a socket2 netlink socket; no unsafe.
use std::{
    io::{self, Read},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::Duration,
};

use socket2::{Domain, Protocol, Socket, Type};

const NLMSG_HDR: usize = 16;
const NLMSG_DONE: u16 = 3;
const NLMSG_ERROR: u16 = 2;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
/// `struct inet_diag_sockid`: sport, dport (big-endian), src, dst (four words each), ifindex,
/// cookie (two words).
const SOCKID_LEN: usize = 2 + 2 + 16 + 16 + 4 + 8;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, then the socket id.
const REQ_LEN: usize = 4 + 4 + SOCKID_LEN;
/// In `struct inet_diag_msg`: the socket id after family, state, timer and retrans; the uid
/// after the id, expires, rqueue and wqueue.
const ID_AT: usize = 4;
const UID_AT: usize = ID_AT + SOCKID_LEN + 12;
/// The messages a dump is read for at most (a node's sockets, with room).
const MAX_DUMP_MESSAGES: usize = 1 << 20;

/// A transport sock_diag is asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

/// A local socket bound to a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub addr: IpAddr,
    pub port: u16,
    pub uid: u32,
}

/// The uid owning the client socket of the connection from `client` to `server` (both as the
/// server sees them, v4-mapped addresses as IPv4); an error when the kernel does not say.
pub fn owner(client: SocketAddr, server: SocketAddr) -> io::Result<u32> {
    let (client, server) = (unmapped(client), unmapped(server));
    if client.is_ipv4() != server.is_ipv4() {
        return Err(io::Error::other("the two ends are of different families"));
    }
    let sock = open()?;
    let states = u32::MAX;
    sock.send(&request(
        Transport::Tcp,
        client.is_ipv6(),
        states,
        NLM_F_REQUEST,
        Some((client, server)),
    ))?;
    let mut buf = vec![0u8; 1024];
    let n = (&sock).read(&mut buf)?;
    let mut uid = None;
    for msg in messages(&buf[..n]) {
        uid = Some(msg.and_then(|m| parse_msg(m).map(|b| b.uid))?);
    }
    uid.ok_or_else(|| io::Error::other("sock_diag gave no answer"))
}

/// The sockets of `transport` bound on this node's IPv6 (`v6`) or IPv4 addresses: TCP ones
/// that listen, every UDP one.
pub fn bound(transport: Transport, v6: bool) -> io::Result<Vec<Bound>> {
    // TCP_LISTEN is state 10; UDP sockets are in any.
    let states = match transport {
        Transport::Tcp => 1 << 10,
        Transport::Udp => u32::MAX,
    };
    let sock = open()?;
    sock.send(&request(transport, v6, states, NLM_F_REQUEST | NLM_F_DUMP, None))?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    let mut seen = 0;
    loop {
        let n = (&sock).read(&mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        for msg in messages(&buf[..n]) {
            match msg {
                Ok(m) => out.extend(parse_msg(m)),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(out),
                Err(e) => return Err(e),
            }
            seen += 1;
            if seen > MAX_DUMP_MESSAGES {
                return Ok(out);
            }
        }
    }
}

fn open() -> io::Result<Socket> {
    let sock = Socket::new(
        Domain::from(libc::AF_NETLINK),
        Type::DGRAM,
        Some(Protocol::from(libc::NETLINK_SOCK_DIAG)),
    )?;
    // A kernel that never answers must not hang the caller.
    sock.set_read_timeout(Some(Duration::from_secs(1)))?;
    Ok(sock)
}

fn unmapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(a, |v4| SocketAddr::new(IpAddr::V4(v4), a.port())),
        IpAddr::V4(_) => a,
    }
}

/// A request for sockets of `transport` and family (`v6`) in `states`; with `exact`, the one
/// socket whose own end is the first address and whose peer is the second.
fn request(
    transport: Transport,
    v6: bool,
    states: u32,
    flags: u16,
    exact: Option<(SocketAddr, SocketAddr)>,
) -> Vec<u8> {
    let mut m = Vec::with_capacity(NLMSG_HDR + REQ_LEN);
    m.extend_from_slice(&u32::try_from(NLMSG_HDR + REQ_LEN).unwrap_or(0).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    let proto = match transport {
        Transport::Tcp => libc::IPPROTO_TCP,
        Transport::Udp => libc::IPPROTO_UDP,
    };
    m.push(u8::try_from(family).unwrap_or(0));
    m.push(u8::try_from(proto).unwrap_or(0));
    m.push(0); // no extensions
    m.push(0);
    m.extend_from_slice(&states.to_ne_bytes());
    let (own, peer) = exact.unwrap_or((
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
    ));
    m.extend_from_slice(&own.port().to_be_bytes());
    m.extend_from_slice(&peer.port().to_be_bytes());
    for ip in [own.ip(), peer.ip()] {
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

/// The messages of one datagram: each `inet_diag_msg` body, an error, or `UnexpectedEof` at
/// the end of a dump.
fn messages(buf: &[u8]) -> impl Iterator<Item = io::Result<&[u8]>> {
    let mut off = 0;
    std::iter::from_fn(move || {
        let header = buf.get(off..off + NLMSG_HDR)?;
        let len = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let kind = u16::from_ne_bytes([header[4], header[5]]);
        if len < NLMSG_HDR || off + len > buf.len() {
            off = buf.len();
            return Some(Err(io::Error::other("sock_diag's answer is cut short")));
        }
        let body = &buf[off + NLMSG_HDR..off + len];
        off += len.div_ceil(4) * 4;
        Some(match kind {
            NLMSG_DONE => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
            NLMSG_ERROR => {
                let errno = body
                    .get(..4)
                    .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                Err(io::Error::from_raw_os_error(-errno))
            }
            SOCK_DIAG_BY_FAMILY => Ok(body),
            other => Err(io::Error::other(format!("sock_diag answered message type {other}"))),
        })
    })
}

/// A socket's own address, port and owner from its `inet_diag_msg`.
fn parse_msg(m: &[u8]) -> io::Result<Bound> {
    let short = || io::Error::other("sock_diag's answer is cut short");
    let uid = m.get(UID_AT..UID_AT + 4).ok_or_else(short)?;
    let family = i32::from(m[0]);
    let id = &m[ID_AT..ID_AT + SOCKID_LEN];
    let src: [u8; 16] = id[4..20].try_into().map_err(|_| short())?;
    let addr = if family == libc::AF_INET {
        IpAddr::V4(Ipv4Addr::new(src[0], src[1], src[2], src[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(src))
    };
    Ok(Bound {
        addr,
        port: u16::from_be_bytes([id[0], id[1]]),
        uid: u32::from_ne_bytes([uid[0], uid[1], uid[2], uid[3]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> u32 {
        crate::kernel::process::euid()
    }

    #[test]
    fn the_owner_of_a_loopback_client_is_found_by_its_four_tuple() {
        for host in ["127.0.0.1", "[::1]"] {
            let Ok(listener) = std::net::TcpListener::bind(format!("{host}:0")) else {
                continue; // no IPv6 loopback here
            };
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, peer) = listener.accept().unwrap();
            assert_eq!(peer, client.local_addr().unwrap());
            assert_eq!(owner(peer, server.local_addr().unwrap()).unwrap(), me(), "{host}");
            // A connection that does not exist is an error, not a uid.
            let mut gone = peer;
            gone.set_port(peer.port().wrapping_add(1).max(1));
            assert!(owner(gone, server.local_addr().unwrap()).is_err(), "{host}");
        }
    }

    #[test]
    fn bound_sockets_are_listed_with_their_port_and_owner() {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (tp, up) = (tcp.local_addr().unwrap().port(), udp.local_addr().unwrap().port());
        let listening = bound(Transport::Tcp, false).unwrap();
        assert!(
            listening
                .iter()
                .any(|b| b.port == tp && b.uid == me() && b.addr == IpAddr::from([127, 0, 0, 1])),
            "{listening:?}"
        );
        let udps = bound(Transport::Udp, false).unwrap();
        assert!(udps.iter().any(|b| b.port == up), "{udps:?}");
        // A connected client is not listening.
        let client = std::net::TcpStream::connect(tcp.local_addr().unwrap()).unwrap();
        let cp = client.local_addr().unwrap().port();
        assert!(!bound(Transport::Tcp, false).unwrap().iter().any(|b| b.port == cp));
    }

    #[test]
    fn an_error_or_a_short_answer_is_no_uid() {
        let mut err = vec![0u8; NLMSG_HDR + 4];
        let len = u32::try_from(err.len()).unwrap();
        err[0..4].copy_from_slice(&len.to_ne_bytes());
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[NLMSG_HDR..].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        let got: Vec<_> = messages(&err).collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref().unwrap_err().raw_os_error(), Some(libc::ENOENT));
        assert!(messages(&[0u8; 8]).next().is_none());
        assert!(parse_msg(&[0u8; 20]).is_err());
    }
}
