//! One daemon per state file and per pin directory: two daemons sharing either would overwrite
//! each other's saved health, or take each other's pinned maps for stale ones and remove them.
//! Each is held with an exclusive `flock` for the daemon's lifetime; the kernel drops it when
//! the process ends, however it ends, so a crash never leaves a stale lock behind.
use std::{
    fs::File,
    path::Path,
    time::{Duration, Instant},
};

use super::DaemonError;

/// How long a lock held by someone else is waited for before the start is refused. The lock
/// lives as long as any descriptor of its open file: a process that another thread of the
/// last holder forked (to run `nft`, a sink's command) holds a copy until it execs, so the
/// lock can outlast its holder by that instant. A second daemon is still refused, half a
/// second later.
const WAIT: Duration = Duration::from_millis(500);
/// How often the lock is tried again meanwhile.
const RETRY_EVERY: Duration = Duration::from_millis(10);

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
        let until = Instant::now() + WAIT;
        loop {
            match crate::kernel::sys::try_lock_exclusive(&file) {
                Ok(true) => return Ok(Lock { _file: file }),
                Ok(false) => {}
                Err(err) => return Err(io("lock")(err)),
            }
            if Instant::now() >= until {
                return Err(DaemonError::InUse {
                    what,
                    path: path.to_path_buf(),
                });
            }
            std::thread::sleep(RETRY_EVERY);
        }
    }
}

/// Where the lock of a state file lives: beside it.
pub fn state_lock_path(state_file: &Path) -> std::path::PathBuf {
    let mut name = state_file.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    state_file.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock_path(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("probed-lock-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("state.json.lock")
    }

    #[test]
    fn a_lock_held_for_good_refuses_after_the_wait_and_names_the_file() {
        let path = lock_path("held");
        let held = Lock::take(&path, "the state file").unwrap();
        let t0 = Instant::now();
        let Err(e) = Lock::take(&path, "the state file") else {
            panic!("a second lock on a held file");
        };
        assert!(t0.elapsed() >= WAIT, "refused only after the wait: {:?}", t0.elapsed());
        assert!(matches!(&e, DaemonError::InUse { path: p, .. } if p == &path), "{e}");
        drop(held);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_lock_released_during_the_wait_is_taken() {
        let path = lock_path("released");
        let held = Lock::take(&path, "the state file").unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        let t0 = Instant::now();
        Lock::take(&path, "the state file").expect("taken once the holder let go");
        assert!(t0.elapsed() < WAIT, "{:?}", t0.elapsed());
        release.join().unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
