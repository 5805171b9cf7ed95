//! Passing a file descriptor over a unix datagram socket (SCM_RIGHTS), as the service
//! manager's file descriptor store takes them (`crate::service`).
use std::{
    io,
    os::{
        fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
        unix::net::UnixDatagram,
    },
};

/// Sends `msg` with a copy of `fd` attached on the connected socket `sock`.
pub fn send_with_fd(sock: &UnixDatagram, msg: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    let raw: RawFd = fd.as_raw_fd();
    let fd_len = std::mem::size_of::<RawFd>() as u32;
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_len) } as usize;
    // u64 words keep the control buffer aligned for cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr().cast_mut().cast(),
        iov_len: msg.len(),
    };
    // SAFETY: msghdr is plain data; all zeroes is a valid (empty) value of it.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &raw mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = space;
    // SAFETY: `hdr` points at `control`, which has room for one cmsghdr carrying one fd
    // (CMSG_SPACE above); CMSG_FIRSTHDR is non-null for a buffer that size, and CMSG_DATA
    // points inside it. sendmsg reads `msg` (through iov) and `control` only, both alive for
    // the call; the kernel duplicates `raw`, which stays ours.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&raw const hdr);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_len) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), raw);
        if libc::sendmsg(sock.as_raw_fd(), &raw const hdr, libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Takes ownership of descriptor `fd`, inherited from the process that started this one,
/// after checking that it is open, and marks it close-on-exec (nothing probed starts should
/// inherit it).
pub fn adopt_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD and F_SETFD only read and set the descriptor's flags; on a descriptor
    // that is not open they fail with EBADF, which is reported.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: open (checked above), and the service manager passed it for this process
        // alone to own: nothing else in probed knows this number.
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
