//! A TUN device that lives exactly as long as the file descriptor that made it: the route
//! sink's dead-man. Routes through it vanish with it, by the kernel's hand, however probed
//! ends (a clean stop, SIGKILL, the OOM killer, a panic), within the time the kernel takes
//! to unregister a device; no probed code has to run for that.
use std::{
    fs::{File, OpenOptions},
    io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd},
        unix::fs::OpenOptionsExt,
    },
};

/// The longest interface name the kernel takes (IFNAMSIZ less the terminating NUL).
pub const MAX_NAME: usize = 15;

/// A device made by this process, up, with no address; closing it removes the device.
#[derive(Debug)]
pub struct Tun {
    /// Never read or written: the device lives as long as it is open.
    file: File,
    name: String,
    index: u32,
}

impl Tun {
    /// Makes the device `name` (not persistent: it goes with this handle) and brings it up.
    /// Fails with `AlreadyExists` when a device of that name exists: another process's, a
    /// persistent TUN left by someone (`IFF_TUN_EXCL`: attaching to it would make routes that
    /// outlive probed), or a device of another kind.
    pub fn create(name: &str) -> io::Result<Tun> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open("/dev/net/tun")?;
        let mut req = ifreq(name)?;
        // IFF_TUN: layer-3 frames; IFF_NO_PI: no packet header. Nothing is ever read from or
        // written to the device: it exists to carry routes. IFF_TUN_EXCL: a new device only.
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_TUN_EXCL) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes the ifreq it is given, which outlives the call.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) } < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EBUSY | libc::EINVAL | libc::EPERM) if super::if_index(name).is_ok() => {
                    io::Error::new(io::ErrorKind::AlreadyExists, format!("{name} exists already: {e}"))
                }
                _ => e,
            });
        }
        Self::up(file, name)
    }

    /// The device `name` that `fd` holds: a descriptor this process inherited from the
    /// service manager's store, which kept the device (and its routes) across a restart.
    /// Fails when `fd` is not a TUN descriptor attached to a device of that name, or the
    /// device is persistent (it would outlive the descriptor, and its routes with it).
    pub fn adopt(fd: OwnedFd, name: &str) -> io::Result<Tun> {
        let file = File::from(fd);
        let mut req = ifreq(name)?;
        req.ifr_name = [0; libc::IFNAMSIZ];
        // SAFETY: TUNGETIFF writes the attached device's name and flags into the ifreq given,
        // which outlives the call.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNGETIFF, &mut req) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: TUNGETIFF filled the flags member of the union.
        let flags = i32::from(unsafe { req.ifr_ifru.ifru_flags });
        if flags & libc::IFF_PERSIST != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} is a persistent device: its routes would outlive probed"),
            ));
        }
        let held: Vec<u8> = req.ifr_name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        if held != name.as_bytes() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the descriptor holds {:?}, not {name}", String::from_utf8_lossy(&held)),
            ));
        }
        Self::up(file, name)
    }

    /// The handle of `file`, attached to `name`, with the device brought up.
    fn up(file: File, name: &str) -> io::Result<Tun> {
        set_up(name)?;
        let index = super::if_index(name).map_err(|e| io::Error::new(io::ErrorKind::NotFound, e.to_string()))?;
        Ok(Tun {
            file,
            name: name.to_string(),
            index,
        })
    }

    /// The descriptor that keeps the device, to hand to the service manager's store.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn index(&self) -> u32 {
        self.index
    }

    /// Whether the device is still the one this handle made (someone may have deleted it:
    /// `ip link del` works on it too, and takes its routes).
    pub fn alive(&self) -> bool {
        super::if_index(&self.name).is_ok_and(|i| i == self.index)
    }
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() > MAX_NAME || name.bytes().any(|b| b == 0 || b == b'/' || b.is_ascii_whitespace())
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not an interface name"),
        ));
    }
    // SAFETY: ifreq is plain old data; all zeroes is a valid value of it.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(req)
}

/// Sets IFF_UP on `name` (a device route through a device that is down is never used, and
/// routing daemons skip it).
fn set_up(name: &str) -> io::Result<()> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    let mut req = ifreq(name)?;
    // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS read and write the ifreq given, which outlives
    // both calls; the union member they use is the flags.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
