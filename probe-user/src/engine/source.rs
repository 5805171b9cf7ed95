//! Where probes come from: the source address for each target (configured, or what the
//! routing table would pick), the interface of an address, and whether a device can
//! transmit XDP frames.
use std::{
    collections::HashMap,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket},
    time::{Duration, Instant},
};

/// Picks source addresses: the configured one for the family, else the route's preferred
/// source. On the XDP path the generator's own route lookup picks it; this picker's route
/// lookups serve the raw-socket path and the probes handed back to the stack.
pub struct SourcePicker {
    v4: Option<Ipv4Addr>,
    v6: Option<Ipv6Addr>,
    cache: HashMap<IpAddr, (Option<IpAddr>, Instant)>,
}

/// Most route lookups remembered; past that the cache starts over.
const CACHE_MAX: usize = 1 << 20;
/// How long a route lookup is trusted: routes change, and the next lookup follows them.
const CACHE_TTL: Duration = Duration::from_secs(30);

impl SourcePicker {
    pub fn new(v4: Option<Ipv4Addr>, v6: Option<Ipv6Addr>) -> Self {
        Self {
            v4,
            v6,
            cache: HashMap::new(),
        }
    }

    /// The configured source address for `target`'s family, if any.
    pub fn configured(&self, target: IpAddr) -> Option<IpAddr> {
        match target {
            IpAddr::V4(_) => self.v4.map(IpAddr::V4),
            IpAddr::V6(_) => self.v6.map(IpAddr::V6),
        }
    }

    /// The source address for probes to `target`, or None when there is no route.
    pub fn source_for(&mut self, target: IpAddr, now: Instant) -> Option<IpAddr> {
        if let Some(src) = self.configured(target) {
            return Some(src);
        }
        if let Some(&(src, at)) = self.cache.get(&target) {
            if now.saturating_duration_since(at) < CACHE_TTL {
                return src;
            }
        }
        if self.cache.len() >= CACHE_MAX {
            self.cache.clear();
        }
        let src = route_source(target);
        self.cache.insert(target, (src, now));
        src
    }
}

/// The address the kernel would send from to reach `target`: connecting a UDP socket
/// routes it without sending anything.
pub fn route_source(target: IpAddr) -> Option<IpAddr> {
    let bind: SocketAddr = if target.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let sock = UdpSocket::bind(bind).ok()?;
    sock.connect(SocketAddr::new(target, 9)).ok()?;
    Some(sock.local_addr().ok()?.ip())
}

/// The name of the interface that holds `addr`.
pub fn iface_of(addr: IpAddr) -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says which struct it is.
            let ip = unsafe {
                match (*ifa.ifa_addr).sa_family as i32 {
                    libc::AF_INET => {
                        let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr))))
                    }
                    libc::AF_INET6 => {
                        let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        Some(IpAddr::V6(Ipv6Addr::from(sa.sin6_addr.s6_addr)))
                    }
                    _ => None,
                }
            };
            if ip == Some(addr) {
                // SAFETY: ifa_name is a NUL-terminated string owned by the list.
                found = Some(
                    unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
                        .to_string_lossy()
                        .into_owned(),
                );
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: frees exactly the list getifaddrs allocated.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// Whether `iface` advertises XDP transmit of redirected frames (NETDEV_XDP_ACT_NDO_XMIT),
/// which live-frames XDP_TX needs. Asked through the generic-netlink `netdev` family
/// (Linux 6.3+); when the question cannot be asked the answer is no, and the engine uses
/// the raw socket, which always works.
pub fn device_can_xmit_xdp(iface: &str) -> bool {
    const NDO_XMIT: u64 = 1 << 2;
    let Ok(index) = crate::kernel::if_index(iface) else {
        return false;
    };
    netlink::xdp_features(index).is_some_and(|f| f & NDO_XMIT != 0)
}

/// Whether IPv4 and IPv6 forwarding are on for `iface` (bpf_fib_lookup requires it).
pub fn forwarding_enabled(iface: &str) -> (bool, bool) {
    let read = |path: String| std::fs::read_to_string(path).is_ok_and(|v| v.trim() != "0");
    (
        read(format!("/proc/sys/net/ipv4/conf/{iface}/forwarding")),
        read(format!("/proc/sys/net/ipv6/conf/{iface}/forwarding")),
    )
}

mod netlink {
    //! Just enough generic netlink to ask the `netdev` family for a device's XDP features.
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    const GENL_ID_CTRL: u16 = 0x10;
    const CTRL_CMD_GETFAMILY: u8 = 3;
    const CTRL_ATTR_FAMILY_ID: u16 = 1;
    const CTRL_ATTR_FAMILY_NAME: u16 = 2;
    const NETDEV_CMD_DEV_GET: u8 = 1;
    const NETDEV_A_DEV_IFINDEX: u16 = 1;
    const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;

    fn request(family: u16, cmd: u8, attr_type: u16, attr: &[u8]) -> Vec<u8> {
        let attr_len = 4 + attr.len();
        let padded = attr_len.div_ceil(4) * 4;
        let total = 16 + 4 + padded;
        let mut m = Vec::with_capacity(total);
        m.extend_from_slice(&(total as u32).to_ne_bytes());
        m.extend_from_slice(&family.to_ne_bytes());
        m.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
        m.extend_from_slice(&1u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[cmd, 1, 0, 0]);
        m.extend_from_slice(&(attr_len as u16).to_ne_bytes());
        m.extend_from_slice(&attr_type.to_ne_bytes());
        m.extend_from_slice(attr);
        m.resize(total, 0);
        m
    }

    /// Sends one request and returns the attributes of the reply (type, payload).
    fn ask(fd: &OwnedFd, msg: &[u8]) -> Option<Vec<(u16, Vec<u8>)>> {
        // SAFETY: `msg` is valid for its length.
        if unsafe { libc::send(fd.as_raw_fd(), msg.as_ptr() as *const _, msg.len(), 0) } < 0 {
            return None;
        }
        let mut buf = vec![0u8; 8192];
        // SAFETY: `buf` is valid for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr() as *mut _, buf.len(), 0) };
        if n < 20 {
            return None;
        }
        let buf = &buf[..n as usize];
        let msg_type = u16::from_ne_bytes([buf[4], buf[5]]);
        if msg_type == libc::NLMSG_ERROR as u16 {
            return None;
        }
        let len = (u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize).min(buf.len());
        let mut attrs = Vec::new();
        let mut off = 20;
        while off + 4 <= len {
            let alen = u16::from_ne_bytes([buf[off], buf[off + 1]]) as usize;
            let atype = u16::from_ne_bytes([buf[off + 2], buf[off + 3]]) & 0x3fff;
            if alen < 4 || off + alen > len {
                break;
            }
            attrs.push((atype, buf[off + 4..off + alen].to_vec()));
            off += alen.div_ceil(4) * 4;
        }
        Some(attrs)
    }

    pub(super) fn xdp_features(ifindex: u32) -> Option<u64> {
        // SAFETY: plain socket(2) call, checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_GENERIC,
            )
        };
        if raw < 0 {
            return None;
        }
        // SAFETY: fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let tv = libc::timeval { tv_sec: 1, tv_usec: 0 };
        // SAFETY: sets a receive timeout from a valid timeval.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const _ as *const _,
                std::mem::size_of_val(&tv) as u32,
            )
        };
        let fam = ask(
            &fd,
            &request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_NAME, b"netdev\0"),
        )?;
        let id = fam
            .iter()
            .find(|(t, _)| *t == CTRL_ATTR_FAMILY_ID)
            .map(|(_, v)| u16::from_ne_bytes([v[0], v[1]]))?;
        let dev = ask(
            &fd,
            &request(id, NETDEV_CMD_DEV_GET, NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes()),
        )?;
        let (_, v) = dev
            .iter()
            .find(|(t, v)| *t == NETDEV_A_DEV_XDP_FEATURES && v.len() >= 8)?;
        Some(u64::from_ne_bytes(v[..8].try_into().ok()?))
    }
}
