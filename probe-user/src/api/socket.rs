//! The API's unix socket: created with its final group and mode before it appears at its path,
//! a stale socket replaced but never any other file, and the credentials of each peer.
use std::{
    ffi::CString,
    io,
    os::{
        fd::AsRawFd,
        unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt},
    },
    path::{Path, PathBuf},
};

use super::{auth::PeerCred, ApiError};
use crate::config::{Api, ApiGroup};

/// The gid the socket gets, `None` for an owner-only socket: the default group `probed` may be
/// missing (a hand-run daemon on a dev box), a group the file names may not.
pub(super) fn resolve_group(api: &Api) -> Result<Option<u32>, ApiError> {
    match &api.socket_group {
        ApiGroup::Gid(g) => Ok(Some(*g)),
        ApiGroup::Name(name) => match group_id(name)? {
            Some(g) => Ok(Some(g)),
            None => Err(ApiError::NoGroup { name: name.clone() }),
        },
        ApiGroup::Default => {
            let g = group_id(Api::DEFAULT_GROUP)?;
            if g.is_none() {
                log::warn!(
                    "group {:?} does not exist: the API socket is owner-only (0600), so only root and the \
                     daemon's user can use it; create the group or set daemon.api_socket_group",
                    Api::DEFAULT_GROUP
                );
            }
            Ok(g)
        }
    }
}

/// Looks `name` up in the group database (files, LDAP, whatever nsswitch says).
fn group_id(name: &str) -> Result<Option<u32>, ApiError> {
    let lookup = |source| ApiError::GroupLookup {
        name: name.to_string(),
        source,
    };
    let cname = CString::new(name).map_err(|_| lookup(io::Error::from(io::ErrorKind::InvalidInput)))?;
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
            e => return Err(lookup(io::Error::from_raw_os_error(e))),
        }
    }
}

/// Binds the socket at `path` with `mode` and `group`. The socket is bound inside a fresh 0700
/// directory beside `path`, given its group and mode there, then renamed into place: at `path`
/// it is never more open than configured. A socket left by a crash is replaced; a live one (a
/// daemon answers) or anything that is not a socket is left alone and the start fails.
pub(super) fn bind(path: &Path, mode: u32, group: Option<u32>) -> Result<tokio::net::UnixListener, ApiError> {
    let io_err = |op: &'static str, at: &Path| {
        let path = at.to_path_buf();
        move |source| ApiError::Io { op, path, source }
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(io_err("create the directory of the API socket", dir))?;
    check_existing(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staging = dir.join(format!(".{name}.{}", std::process::id()));
    // A leftover of an earlier process with this pid, which cannot be running.
    if std::fs::symlink_metadata(&staging).is_ok_and(|m| m.is_dir()) {
        let _ = std::fs::remove_dir_all(&staging);
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(io_err("create a private directory for the API socket", &staging))?;
    let result = bind_staged(&staging.join("s"), path, mode, group);
    let _ = std::fs::remove_dir_all(&staging);
    result
}

fn bind_staged(
    staged: &Path,
    path: &Path,
    mode: u32,
    group: Option<u32>,
) -> Result<tokio::net::UnixListener, ApiError> {
    let io_err = |op: &'static str, at: &Path| {
        let path = at.to_path_buf();
        move |source| ApiError::Io { op, path, source }
    };
    let listener = std::os::unix::net::UnixListener::bind(staged).map_err(io_err("listen for the API on", path))?;
    let mode = if group.is_some() { mode } else { mode & !0o070 };
    if let Some(gid) = group {
        std::os::unix::fs::chown(staged, None, Some(gid)).map_err(|source| ApiError::Chown {
            gid,
            // SAFETY: geteuid only reads the process's credentials.
            uid: unsafe { libc::geteuid() },
            source,
        })?;
    }
    std::fs::set_permissions(staged, std::fs::Permissions::from_mode(mode))
        .map_err(io_err("set the mode of the API socket", path))?;
    std::fs::rename(staged, path).map_err(io_err("move the API socket into place at", path))?;
    listener
        .set_nonblocking(true)
        .map_err(io_err("listen for the API on", path))?;
    tokio::net::UnixListener::from_std(listener).map_err(io_err("listen for the API on", path))
}

/// Fails when `path` holds something that must not be replaced.
fn check_existing(path: &Path) -> Result<(), ApiError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ApiError::Io {
                op: "look at the API socket path",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ApiError::NotASocket {
            path: path.to_path_buf(),
            kind: kind(meta.file_type()),
        });
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(ApiError::InUse {
            path: path.to_path_buf(),
        });
    }
    // A socket nobody serves: the rename replaces it.
    Ok(())
}

fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else {
        "a device"
    }
}

/// Removes the socket at `path` if it is still a socket (not a file put there since).
pub(super) fn remove(path: &PathBuf) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

/// The uid, gid and supplementary groups the peer had when it connected.
pub(super) fn peer_cred(stream: &impl AsRawFd) -> io::Result<PeerCred> {
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
    Ok(PeerCred {
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("probed-sock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn socket_gets_mode_and_group_and_replaces_only_a_stale_socket() {
        let dir = tmp("mode");
        let path = dir.join("api.sock");
        // SAFETY: getegid only reads the process's credentials.
        let gid = unsafe { libc::getegid() };
        let l = bind(&path, 0o640, Some(gid)).unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert!(m.file_type().is_socket());
        assert_eq!((m.mode() & 0o777, m.gid()), (0o640, gid));
        // Served: a second daemon must not take it over.
        let e = bind(&path, 0o640, Some(gid)).unwrap_err();
        assert!(matches!(e, ApiError::InUse { .. }), "{e}");
        drop(l);
        // Stale: replaced, and no staging directory is left behind.
        let _l = bind(&path, 0o600, None).unwrap();
        assert_eq!(std::fs::symlink_metadata(&path).unwrap().mode() & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("api.sock")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn without_a_group_the_group_bits_are_dropped() {
        let dir = tmp("nogroup");
        let path = dir.join("api.sock");
        let _l = bind(&path, 0o666, None).unwrap();
        assert_eq!(std::fs::symlink_metadata(&path).unwrap().mode() & 0o777, 0o606);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_socket_is_never_removed() {
        let dir = tmp("file");
        let path = dir.join("api.sock");
        std::fs::write(&path, "precious").unwrap();
        let e = bind(&path, 0o660, None).unwrap_err();
        assert!(e.to_string().contains("a regular file"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
        remove(&path);
        assert!(path.exists(), "remove() only removes sockets");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn own_credentials_are_read() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = peer_cred(&a).unwrap();
        // SAFETY: these only read the process's credentials.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        assert_eq!((c.uid, c.gid), (uid, gid));
    }

    #[test]
    fn groups_are_looked_up() {
        assert_eq!(group_id("root").unwrap(), Some(0));
        assert_eq!(group_id("no-such-group-probed").unwrap(), None);
    }
}
