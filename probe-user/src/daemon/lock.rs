//! One daemon per state file and per pin directory: two daemons sharing either would overwrite
//! each other's saved health, or take each other's pinned maps for stale ones and remove them.
//! Each is held with an exclusive `flock` for the daemon's lifetime; the kernel drops it when
//! the process ends, however it ends, so a crash never leaves a stale lock behind.
use std::{fs::File, os::fd::AsRawFd, path::Path};

use super::DaemonError;

/// An exclusive lock, released when dropped (or when the process ends).
pub struct Lock {
    _file: File,
}

impl Lock {
    /// Locks `path` (a file, created if missing, or a directory), or says who to look for.
    pub fn take(path: &Path, what: &'static str) -> Result<Lock, DaemonError> {
        let io = |op: &'static str| {
            let path = Some(path.to_path_buf());
            move |source| DaemonError::Io { op, path, source }
        };
        let file = if path.is_dir() {
            File::open(path).map_err(io("open"))?
        } else {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(io("create the directory of"))?;
            }
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)
                .map_err(io("open"))?
        };
        // SAFETY: flock on a descriptor this function owns; it reads nothing else.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return Err(if err.kind() == std::io::ErrorKind::WouldBlock {
                DaemonError::InUse {
                    what,
                    path: path.to_path_buf(),
                }
            } else {
                io("lock")(err)
            });
        }
        Ok(Lock { _file: file })
    }
}

/// Where the lock of a state file lives: beside it.
pub fn state_lock_path(state_file: &Path) -> std::path::PathBuf {
    let mut name = state_file.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    state_file.with_file_name(name)
}
