//! A service manager as systemd is one to probed (emulated, for the tests that need its
//! protocols without a systemd here): the notify socket, the file descriptor store
//! (FileDescriptorStoreMax=) and the watchdog (WatchdogSec=).
use std::{
    collections::BTreeMap,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd},
        unix::{net::UnixDatagram, process::CommandExt},
    },
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// A service manager's file descriptor store, as systemd keeps it for a unit with
/// FileDescriptorStoreMax=: it takes what the service hands it (FDSTORE=1 with a descriptor,
/// over NOTIFY_SOCKET), drops what it takes back (FDSTOREREMOVE=1), and passes the rest to the
/// next process it starts.
pub struct Manager {
    socket: UnixDatagram,
    path: PathBuf,
    pub store: BTreeMap<String, OwnedFd>,
    /// With `watchdog`: the `WATCHDOG_USEC` it gives, and when each `WATCHDOG=1` came.
    watchdog: Option<Duration>,
    pub pings: Vec<Instant>,
}

impl Manager {
    pub fn new(dir: &Path) -> Manager {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        socket.set_nonblocking(true).unwrap();
        Manager {
            socket,
            path,
            store: BTreeMap::new(),
            watchdog: None,
            pings: Vec::new(),
        }
    }

    /// Asks the services it starts for `WATCHDOG=1` within `timeout` (systemd's WatchdogSec=).
    pub fn with_watchdog(mut self, timeout: Duration) -> Manager {
        self.watchdog = Some(timeout);
        self
    }

    /// Whether the service pinged within the watchdog's timeout up to now (what systemd checks
    /// before it kills the service).
    pub fn alive(&self) -> bool {
        let timeout = self.watchdog.expect("a watchdog was asked for");
        self.pings.last().is_some_and(|t| t.elapsed() < timeout)
    }

    /// Takes in what the service said so far.
    pub fn collect(&mut self) {
        loop {
            let mut buf = [0u8; 4096];
            let mut control = [0u64; 8];
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            // SAFETY: msghdr is plain data; zeroes are a valid empty value.
            let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
            hdr.msg_iov = &raw mut iov;
            hdr.msg_iovlen = 1;
            hdr.msg_control = control.as_mut_ptr().cast();
            hdr.msg_controllen = std::mem::size_of_val(&control);
            // SAFETY: recvmsg writes at most the lengths given into `buf` and `control`, which
            // outlive the call.
            let n = unsafe { libc::recvmsg(self.socket.as_raw_fd(), &raw mut hdr, libc::MSG_CMSG_CLOEXEC) };
            if n < 0 {
                return;
            }
            let mut fd = None;
            // SAFETY: the CMSG_* walk stays inside `control`, as the kernel filled it in.
            unsafe {
                let cmsg = libc::CMSG_FIRSTHDR(&raw const hdr);
                if !cmsg.is_null() && (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>());
                    fd = Some(OwnedFd::from_raw_fd(raw));
                }
            }
            let text = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
            let name = text.lines().find_map(|l| l.strip_prefix("FDNAME=")).map(str::to_string);
            match (text.lines().next(), name, fd) {
                (Some("FDSTORE=1"), Some(name), Some(fd)) => {
                    self.store.insert(name, fd);
                }
                (Some("FDSTOREREMOVE=1"), Some(name), _) => {
                    self.store.remove(&name);
                }
                (Some("WATCHDOG=1"), _, _) => self.pings.push(Instant::now()),
                _ => {}
            }
        }
    }

    /// Sets `cmd` up as the manager starts its service.
    pub fn prepare(&self, cmd: &mut std::process::Command) {
        let names: Vec<&str> = self.store.keys().map(String::as_str).collect();
        cmd.env("NOTIFY_SOCKET", &self.path)
            .env("LISTEN_FDS", names.len().to_string())
            .env("LISTEN_FDNAMES", names.join(":"));
        if let Some(t) = self.watchdog {
            // WATCHDOG_PID is the service's own: set by the shell that execs it, as LISTEN_PID.
            cmd.env("WATCHDOG_USEC", t.as_micros().to_string());
        }
        let fds: Vec<i32> = self.store.values().map(AsRawFd::as_raw_fd).collect();
        // SAFETY: fcntl and dup2 are async-signal-safe; the descriptors stay open in the
        // child until exec (they are the store's). Each is first moved above the range it is
        // placed in, so that placing one never closes another.
        unsafe {
            cmd.pre_exec(move || {
                let mut high = Vec::with_capacity(fds.len());
                for &fd in &fds {
                    let h = libc::fcntl(fd, libc::F_DUPFD, 100);
                    if h < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    high.push(h);
                }
                for (i, &h) in high.iter().enumerate() {
                    if libc::dup2(h, 3 + i as i32) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
}
