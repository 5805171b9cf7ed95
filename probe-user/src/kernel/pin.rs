//! A pin directory under bpffs, owned by one daemon instance and removed when it stops.
use std::path::{Path, PathBuf};

use super::KernelError;

/// A directory of pinned maps. bpffs is global (not per network namespace), so every daemon
/// and every test needs a directory of its own.
#[derive(Debug)]
pub struct PinDir {
    path: PathBuf,
    pinned: Vec<PathBuf>,
}

impl PinDir {
    /// Creates (or reuses) `path`, which must lie on a mounted bpffs.
    pub fn create(path: impl Into<PathBuf>) -> Result<Self, KernelError> {
        let path = path.into();
        ensure_bpffs_mounted(&path);
        std::fs::create_dir_all(&path).map_err(|source| KernelError::Pin {
            op: "create pin directory",
            path: path.clone(),
            source,
        })?;
        ensure_bpffs_mounted(&path);
        if !is_bpffs(&path) {
            return Err(KernelError::Pin {
                op: "pin directory is not on bpffs (mount it with `mount -t bpf bpf /sys/fs/bpf`)",
                path,
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            });
        }
        Ok(Self {
            path,
            pinned: Vec::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Pins `map` as `name` in this directory, replacing a stale pin of an earlier run.
    pub fn pin_map(&mut self, map: &aya::maps::Map, name: &str) -> Result<(), KernelError> {
        let path = self.path.join(name);
        if path.exists() {
            std::fs::remove_file(&path).map_err(|source| KernelError::Pin {
                op: "remove stale pin",
                path: path.clone(),
                source,
            })?;
        }
        map.pin(&path).map_err(|e| KernelError::Pin {
            op: "pin map at",
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        self.pinned.push(path);
        Ok(())
    }
}

impl Drop for PinDir {
    fn drop(&mut self) {
        for path in &self.pinned {
            let _ = std::fs::remove_file(path);
        }
        // Only removes the directory when nothing else lives in it.
        let _ = std::fs::remove_dir(&self.path);
    }
}

fn is_bpffs(path: &Path) -> bool {
    const BPF_FS_MAGIC: i64 = 0xcafe4a11;
    let Ok(cpath) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs is plain data, valid when zeroed; `cpath` is NUL-terminated and outlives
    // the call, and `buf` is a valid out-pointer.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: see above.
    let rc = unsafe { libc::statfs(cpath.as_ptr(), &raw mut buf) };
    rc == 0 && buf.f_type as i64 == BPF_FS_MAGIC
}

/// `ip netns exec` gives its command a fresh sysfs without bpffs; when the pin directory lies
/// under the conventional /sys/fs/bpf and that is not bpffs, mount it there (best effort: the
/// bpffs check that follows reports failure).
pub(crate) fn ensure_bpffs_mounted(path: &Path) {
    let root = Path::new(probe_common::PIN_ROOT);
    if !path.starts_with(root) || is_bpffs(root) {
        return;
    }
    let (Ok(src), Ok(target), Ok(fstype)) = (
        std::ffi::CString::new("bpf"),
        std::ffi::CString::new(probe_common::PIN_ROOT),
        std::ffi::CString::new("bpf"),
    ) else {
        return;
    };
    // SAFETY: all three strings are valid and NUL-terminated for the duration of the call;
    // a NULL data pointer is allowed for bpffs.
    unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
}
