//! Credentials by the system's rules: a group's id by name (nsswitch), and who is at the
//! other end of a unix socket (uid, gid and supplementary groups, as the kernel recorded them
//! when the peer connected).
use std::{ffi::CString, io, os::fd::AsRawFd};

/// A unix socket peer's credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Looks `name` up in the group database (files, LDAP, whatever nsswitch says).
pub fn group_id(name: &str) -> io::Result<Option<u32>> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: a zeroed `group` is a valid out-parameter; getgrnam_r writes into it and into
        // `buf` (whose length it is told) and sets `found` to null or to `grp`.
        let (rc, found, gid) = unsafe {
            let mut grp: libc::group = std::mem::zeroed();
            let mut found: *mut libc::group = std::ptr::null_mut();
            let rc = libc::getgrnam_r(
                cname.as_ptr(),
                &raw mut grp,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &raw mut found,
            );
            (rc, !found.is_null(), grp.gr_gid)
        };
        match rc {
            0 => return Ok(found.then_some(gid)),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            e => return Err(io::Error::from_raw_os_error(e)),
        }
    }
}

/// The uid, gid and supplementary groups the peer had when it connected.
pub fn peer(stream: &impl AsRawFd) -> io::Result<Peer> {
    let fd = stream.as_raw_fd();
    let mut ucred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = socklen::<libc::ucred>(1);
    // SAFETY: `ucred` is a valid buffer of `len` bytes for SO_PEERCRED.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut ucred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // Without SO_PEERGROUPS (before Linux 4.13) only the uid and primary gid count.
    let groups = peer_groups(fd).unwrap_or_else(|e| {
        log::debug!("API connection: no supplementary groups of the peer: {e}");
        Vec::new()
    });
    Ok(Peer {
        uid: ucred.uid,
        gid: ucred.gid,
        groups,
    })
}

/// SO_PEERGROUPS (Linux 4.13): the kernel says how much room it needs when the buffer is short.
fn peer_groups(fd: i32) -> io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    for _ in 0..3 {
        let mut len = socklen::<libc::gid_t>(groups.len());
        // SAFETY: `groups` is a valid buffer of `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        let n = len as usize / size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) {
            return Err(e);
        }
        groups.resize(n.max(groups.len() * 2), 0);
    }
    Err(io::Error::from_raw_os_error(libc::ERANGE))
}

fn socklen<T>(n: usize) -> libc::socklen_t {
    libc::socklen_t::try_from(size_of::<T>() * n).expect("a small buffer")
}
