//! The API's unix socket: created with its final group and mode before it appears at its path,
//! a stale socket replaced but never any other file, and the credentials of each peer.
use std::{
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
    crate::kernel::creds::group_id(name).map_err(|source| ApiError::GroupLookup {
        name: name.to_string(),
        source,
    })
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
            uid: crate::kernel::process::euid(),
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
    let p = crate::kernel::creds::peer(stream)?;
    Ok(PeerCred {
        uid: p.uid,
        gid: p.gid,
        groups: p.groups,
    })
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
        let gid = crate::kernel::process::egid();
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
        let (uid, gid) = (crate::kernel::process::euid(), crate::kernel::process::egid());
        assert_eq!((c.uid, c.gid), (uid, gid));
    }

    #[test]
    fn groups_are_looked_up() {
        assert_eq!(group_id("root").unwrap(), Some(0));
        assert_eq!(group_id("no-such-group-probed").unwrap(), None);
    }
}
