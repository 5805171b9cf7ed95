//! Sockets, interface addresses, routing questions and sysctls: the system calls userspace
//! makes outside bpf() and netlink. socket2 covers the socket calls; the few it lacks
//! (getifaddrs, IP_RECVERR, if_nametoindex) are the remaining libc FFI, each with its SAFETY.
use std::{
    ffi::{CStr, CString},
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket},
    os::fd::AsRawFd,
};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::KernelError;

/// Takes an exclusive lock on `file` without waiting: Ok(false) when another holder has it.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor the caller owns; it reads nothing else.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(err)
    }
}

/// Fills `buf` from the kernel's random source as far as one call does; how many bytes.
pub fn getrandom(buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: getrandom writes at most buf.len() bytes, into `buf`.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Connects to the unix socket at `path`, waiting at most `limit` for room in its listener's
/// backlog: a blocking connect to a listener that never accepts waits for ever once its backlog
/// is full, but gives up after the socket's send timeout, set here before connecting.
pub fn unix_connect_within(
    path: &std::path::Path,
    limit: std::time::Duration,
) -> io::Result<std::os::unix::net::UnixStream> {
    // SAFETY: plain socket(2); the descriptor is owned by `fd` from here on.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_write_timeout(Some(limit))?;
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    // Room for the terminating NUL, which the zeroed address already holds.
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path is empty or too long for a unix socket",
        ));
    }
    for (to, from) in addr.sun_path.iter_mut().zip(bytes) {
        *to = libc::c_char::from_ne_bytes([*from]);
    }
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_un>()).unwrap_or(libc::socklen_t::MAX);
    loop {
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes on this stack frame for the call;
        // `stream` owns the descriptor.
        let rc = unsafe {
            libc::connect(
                std::os::fd::AsRawFd::as_raw_fd(&stream),
                (&raw const addr).cast::<libc::sockaddr>(),
                len,
            )
        };
        if rc == 0 {
            return Ok(stream);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Puts descriptor `fd` in non-blocking mode.
pub fn set_nonblocking(fd: &impl AsRawFd) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL only read and change the flags of the caller's open descriptor.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Returns the interface index of `iface` in the caller's network namespace.
pub fn if_index(iface: &str) -> Result<u32, KernelError> {
    let missing = || KernelError::NoSuchInterface {
        iface: iface.to_string(),
    };
    let name = CString::new(iface).map_err(|_| missing())?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(missing());
    }
    Ok(index)
}

/// The address the kernel would send from to reach `target`: connecting a UDP socket
/// routes it without sending anything.
pub fn route_source(target: IpAddr) -> Option<IpAddr> {
    let bind = match target {
        IpAddr::V4(_) => SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0),
        IpAddr::V6(_) => SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 0),
    };
    let sock = UdpSocket::bind(bind).ok()?;
    // Port 9 (discard) only because connect wants one; nothing is sent.
    sock.connect(SocketAddr::new(target, 9)).ok()?;
    Some(sock.local_addr().ok()?.ip())
}

/// The name of the interface that holds `addr`.
pub fn iface_of(addr: IpAddr) -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    if unsafe { libc::getifaddrs(&raw mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        // SAFETY: ifa_addr is null or points at a sockaddr owned by the list.
        if unsafe { ip_of_sockaddr(ifa.ifa_addr) } == Some(addr) {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            found = Some(unsafe { CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned());
            break;
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: frees exactly the list getifaddrs allocated; nothing borrowed from it survives.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// The IP address in `sa`, for the two families that carry one.
///
/// # Safety
/// `sa` is null or points at a valid sockaddr whose family says which struct it is.
unsafe fn ip_of_sockaddr(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller promises a valid sockaddr; the family field is common to all of them,
    // and it decides which larger struct the pointer may be read as.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let sa = &*sa.cast::<libc::sockaddr_in>();
                Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr))))
            }
            libc::AF_INET6 => {
                let sa = &*sa.cast::<libc::sockaddr_in6>();
                Some(IpAddr::V6(Ipv6Addr::from(sa.sin6_addr.s6_addr)))
            }
            _ => None,
        }
    }
}

/// Whether IPv4 and IPv6 forwarding are on for `iface` (bpf_fib_lookup requires it).
pub fn forwarding_enabled(iface: &str) -> (bool, bool) {
    let read = |path: String| std::fs::read_to_string(path).is_ok_and(|v| v.trim() != "0");
    (
        read(format!("/proc/sys/net/ipv4/conf/{iface}/forwarding")),
        read(format!("/proc/sys/net/ipv6/conf/{iface}/forwarding")),
    )
}

/// A raw IP socket for whole packets: IPPROTO_RAW implies that the caller writes the IP
/// header (IP_HDRINCL / IPV6_HDRINCL), and the stack only routes and transmits it.
pub struct RawIpSocket(Socket);

impl RawIpSocket {
    /// Opens one for IPv4 or IPv6 (needs CAP_NET_RAW).
    pub fn open(v6: bool) -> io::Result<Self> {
        let domain = if v6 { Domain::IPV6 } else { Domain::IPV4 };
        Socket::new(domain, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW))).map(Self)
    }

    /// Sends one packet, IP header included, toward `dst`.
    pub fn send_to(&self, packet: &[u8], dst: IpAddr) -> io::Result<()> {
        // The port must be 0 on a raw socket; the destination only picks the route.
        self.0.send_to(packet, &SockAddr::from(SocketAddr::new(dst, 0)))?;
        Ok(())
    }
}

/// A non-blocking UDP socket bound to `local`, connected to `target`, with IP_RECVERR (or
/// IPV6_RECVERR) on: ICMP errors quoting its datagrams then land on its error queue with
/// their type and code, not only as a bare errno.
pub fn connected_udp_with_recverr(local: SocketAddr, target: SocketAddr) -> io::Result<UdpSocket> {
    let sock = Socket::from(udp_with_recverr(local)?);
    // A UDP connect only sets the peer: it never waits, non-blocking or not.
    sock.connect(&target.into())?;
    Ok(sock.into())
}

/// As `connected_udp_with_recverr`, not connected: for answers whose way out the socket does
/// not take (a request sent wrapped through a tunnel by a raw socket). The kernel still
/// files ICMP errors quoting its address and port on its error queue.
pub fn udp_with_recverr(local: SocketAddr) -> io::Result<UdpSocket> {
    let v4 = local.is_ipv4();
    let domain = if v4 { Domain::IPV4 } else { Domain::IPV6 };
    let sock = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    sock.bind(&local.into())?;
    let (level, name) = if v4 {
        (libc::SOL_IP, libc::IP_RECVERR)
    } else {
        (libc::SOL_IPV6, libc::IPV6_RECVERR)
    };
    // socket2 has no setter for IP_RECVERR, so this one option is set by hand.
    let on: libc::c_int = 1;
    // SAFETY: sets an int option from a valid c_int that outlives the call, on a socket we own.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&raw const on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    sock.set_nonblocking(true)?;
    Ok(sock.into())
}

// From <linux/errqueue.h>: where a queued error came from.
const SO_EE_ORIGIN_ICMP: u8 = 2;
const SO_EE_ORIGIN_ICMP6: u8 = 3;

/// Reads one entry of the socket's error queue (IP_RECVERR / IPV6_RECVERR) and returns the
/// ICMP type and code it carries, if it came from an ICMP message.
pub fn queued_icmp(sock: &impl AsRawFd) -> Option<(u8, u8)> {
    let mut data = [0u8; 512];
    // u64 elements keep the control buffer aligned for cmsghdr.
    let mut control = [0u64; 64];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast::<libc::c_void>(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data, valid when zeroed; the pointers set below stay valid for
    // the recvmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast::<libc::c_void>();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` describes buffers we own; MSG_ERRQUEUE never blocks.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &raw mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if n < 0 {
        return None;
    }
    // SAFETY: walking the control messages the kernel just wrote, with the libc macros that
    // bound every step by msg_controllen.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&raw const msg) };
    while !cmsg.is_null() {
        // SAFETY: CMSG_FIRSTHDR/NXTHDR return null or a header inside the control buffer.
        let hdr = unsafe { &*cmsg };
        let ours = (hdr.cmsg_level == libc::SOL_IP && hdr.cmsg_type == libc::IP_RECVERR)
            || (hdr.cmsg_level == libc::SOL_IPV6 && hdr.cmsg_type == libc::IPV6_RECVERR);
        let have = hdr.cmsg_len as usize;
        // SAFETY: CMSG_LEN is a pure size computation.
        let need = unsafe { libc::CMSG_LEN(std::mem::size_of::<libc::sock_extended_err>() as u32) } as usize;
        if ours && have >= need {
            // SAFETY: the header says its data holds at least a sock_extended_err;
            // read_unaligned makes no alignment demand.
            let ee: libc::sock_extended_err =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::sock_extended_err) };
            if ee.ee_origin == SO_EE_ORIGIN_ICMP || ee.ee_origin == SO_EE_ORIGIN_ICMP6 {
                return Some((ee.ee_type, ee.ee_code));
            }
        }
        // SAFETY: as above.
        cmsg = unsafe { libc::CMSG_NXTHDR(&raw const msg, cmsg) };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_routes_from_loopback_on_lo() {
        let src = route_source(Ipv4Addr::LOCALHOST.into()).expect("a route to 127.0.0.1");
        assert!(src.is_loopback(), "{src}");
        assert_eq!(iface_of(src).as_deref(), Some("lo"));
        assert!(if_index("lo").is_ok());
        assert!(matches!(
            if_index("no-such-if0"),
            Err(KernelError::NoSuchInterface { .. })
        ));
    }

    #[test]
    fn recverr_socket_is_connected() {
        let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
        let target = peer.local_addr().unwrap();
        let sock = connected_udp_with_recverr("127.0.0.1:0".parse().unwrap(), target).unwrap();
        assert_eq!(sock.peer_addr().unwrap(), target);
    }
}
