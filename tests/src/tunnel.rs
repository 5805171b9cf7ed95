//! IP-in-IP for tests, in userspace: this machine's kernel is built without the ipip,
//! ip6_tunnel, fou and GRE drivers, so neither a backend's decapsulating device nor a
//! reference client's encapsulating one can be the kernel's own. Each end here is a TUN
//! device and a raw socket of protocol 4 (IPv4 in IPv4) or 41 (IPv6 in IPv6), pumped by a
//! thread: what the kernel's tunnel devices do with the packets, done in the test process.
//!
//! What the kernel still does itself is everything around it: an unwrapped packet enters the
//! backend's stack through its own device (`dev`), so the service address must be local, the
//! device up and its reverse path valid (rp_filter) for it to be taken, exactly as with an ipip
//! device; the wrapped one leaves by the namespace's routes.
use std::{
    fs::File,
    io::{Read, Write},
    net::{IpAddr, SocketAddr},
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use probed::kernel::tun::Tun;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::Netns;

/// Protocol numbers of the inner packet in the outer header.
const IPPROTO_IPIP: i32 = 4;
const IPPROTO_IPV6: i32 = 41;
/// How long a pump waits for a packet before it looks at its stop flag.
const TICK: Duration = Duration::from_millis(50);

/// One tunnel end: its device and the threads pumping it; both go on drop.
pub struct TunnelEnd {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    _tun: Tun,
}

impl Drop for TunnelEnd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn raw_socket(v6: bool) -> Socket {
    let (domain, proto) = if v6 {
        (Domain::IPV6, IPPROTO_IPV6)
    } else {
        (Domain::IPV4, IPPROTO_IPIP)
    };
    let s = Socket::new(domain, Type::RAW, Some(Protocol::from(proto))).expect("raw tunnel socket");
    s.set_read_timeout(Some(TICK)).expect("read timeout");
    s
}

/// The backend's end: IPv4-in-IPv4 and IPv6-in-IPv6 packets addressed to `ns` come out of its
/// device `dev` (made here, up) as their inner packets. While a socket of the protocol is open
/// the kernel answers no such packet with "protocol unreachable"; it drops those it cannot
/// hand to `dev` (the device down) as an ipip device's receive path does.
pub fn decap(ns: &Netns, dev: &str) -> TunnelEnd {
    let (tun, socks) = ns.enter(|| {
        let tun = Tun::create(dev).unwrap_or_else(|e| panic!("create {dev}: {e}"));
        (tun, [raw_socket(false), raw_socket(true)])
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (v6, sock) in socks.into_iter().enumerate().map(|(i, s)| (i == 1, s)) {
        let mut out = device_file(&tun);
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut sock = sock;
            let mut buf = vec![0u8; 65536];
            while !stop.load(Ordering::Relaxed) {
                let Ok(n) = sock.read(&mut buf) else { continue };
                // An IPv4 raw socket reads the outer header too; an IPv6 one only what follows it.
                let start = if v6 { 0 } else { usize::from(buf[0] & 0x0f) * 4 };
                if n > start {
                    // A device that is down refuses the write: the packet is lost, as it is to a
                    // tunnel device that is down.
                    let _ = out.write(&buf[start..n]);
                }
            }
        }));
    }
    TunnelEnd {
        stop,
        threads,
        _tun: tun,
    }
}

/// The client's end: what `ns` routes into its device `dev` (made here, up) leaves inside an
/// outer header of the packet's own family to `backend_v4` or `backend_v6`.
pub fn encap(ns: &Netns, dev: &str, backend_v4: IpAddr, backend_v6: IpAddr) -> TunnelEnd {
    let (tun, v4, v6) = ns.enter(|| {
        let tun = Tun::create(dev).unwrap_or_else(|e| panic!("create {dev}: {e}"));
        (tun, raw_socket(false), raw_socket(true))
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut input = device_file(&tun);
    let stop2 = stop.clone();
    let thread = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let (to4, to6) = (
            SockAddr::from(SocketAddr::new(backend_v4, 0)),
            SockAddr::from(SocketAddr::new(backend_v6, 0)),
        );
        while !stop2.load(Ordering::Relaxed) {
            if !readable(&input) {
                continue;
            }
            let Ok(n) = input.read(&mut buf) else { continue };
            let _ = match buf.first().map(|b| b >> 4) {
                Some(4) => v4.send_to(&buf[..n], &to4),
                Some(6) => v6.send_to(&buf[..n], &to6),
                _ => continue,
            };
        }
    });
    TunnelEnd {
        stop,
        threads: vec![thread],
        _tun: tun,
    }
}

/// The device's packets, read and written through a descriptor of its own.
fn device_file(tun: &Tun) -> File {
    File::from(tun.fd().try_clone_to_owned().expect("dup the TUN descriptor"))
}

/// Whether `f` has a packet within one tick.
fn readable(f: &File) -> bool {
    let mut p = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the length given.
    let rc = unsafe { libc::poll(&raw mut p, 1, TICK.as_millis() as i32) };
    rc > 0 && p.revents & libc::POLLIN != 0
}
