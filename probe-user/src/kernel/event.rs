//! Waiting on descriptors: an eventfd one thread signals to wake another, and a poll for
//! readability with a timeout.
use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    time::Duration,
};

/// A non-blocking eventfd.
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }

    /// Makes it readable (a waiting poll returns).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Makes it unreadable again (nothing to do when it was not signalled).
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64; EAGAIN when not signalled is fine.
        unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut v).cast(), 8) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Waits up to `wait` (rounded up to a millisecond) until one of `fds` is readable; which of
/// them are. An interrupted or failed poll says none is.
pub fn poll_readable<const N: usize>(fds: [RawFd; N], wait: Duration) -> [bool; N] {
    let mut polled = fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    });
    // Rounded up so that a deadline 0.4 ms away does not turn into a busy loop.
    let ms = i32::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
    // SAFETY: `polled` is a valid array of N pollfd for the duration of the call.
    let n = unsafe { libc::poll(polled.as_mut_ptr(), N as libc::nfds_t, ms) };
    polled.map(|p| n > 0 && p.revents & libc::POLLIN != 0)
}

/// Waits up to `limit` (at least a millisecond) until `fd` can be written to; an error from
/// poll (EINTR among them) is returned as it is.
pub fn wait_writable(fd: RawFd, limit: Duration) -> io::Result<()> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    let ms = libc::c_int::try_from(limit.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfd` is one valid pollfd on this stack frame for the whole call.
    if unsafe { libc::poll(&raw mut pfd, 1, ms) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_wakes_a_poll_until_cleared() {
        let e = EventFd::new().unwrap();
        assert_eq!(poll_readable([e.as_raw_fd()], Duration::ZERO), [false]);
        e.signal();
        assert_eq!(poll_readable([e.as_raw_fd()], Duration::from_millis(10)), [true]);
        e.clear();
        assert_eq!(poll_readable([e.as_raw_fd()], Duration::ZERO), [false]);
    }
}
