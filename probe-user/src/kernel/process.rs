//! The process's own credentials and its threads' priority: the libc calls the daemon makes
//! about itself, each behind a safe function.
use std::io;

/// The process's effective uid (who owns the files it may trust: key files, exec programs).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The process's effective gid.
pub fn egid() -> u32 {
    // SAFETY: getegid has no preconditions and cannot fail.
    unsafe { libc::getegid() }
}

/// The soft limit on open files (RLIMIT_NOFILE), None when it cannot be read.
pub fn open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct we own.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } == 0).then_some(limit.rlim_cur)
}

/// Blocks (`block`) or unblocks `signals` for the calling thread and the threads it starts
/// after.
pub fn mask_signals(block: bool, signals: &[i32]) {
    let how = if block { libc::SIG_BLOCK } else { libc::SIG_UNBLOCK };
    // SAFETY: a zeroed sigset_t is a valid argument to sigemptyset, which initialises it;
    // sigaddset and pthread_sigmask only read and write that set and this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        for s in signals {
            libc::sigaddset(&raw mut set, *s);
        }
        libc::pthread_sigmask(how, &raw const set, std::ptr::null_mut());
    }
}

/// Lowers the calling thread's priority by `by` nice levels from where it is (at most to 19).
/// Linux keeps a nice value per thread, which starts at the process's.
pub fn lower_this_thread(by: i32) -> io::Result<()> {
    // SAFETY: gettid, getpriority and setpriority take and return plain integers; who = 0
    // would mean the whole process, so the thread's own id is passed. getpriority's -1 is a
    // valid nice value, so errno is cleared before and read after.
    let rc = unsafe {
        let tid = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        if now == -1 && *libc::__errno_location() != 0 {
            -1
        } else {
            libc::setpriority(libc::PRIO_PROCESS, tid, (now + by).min(19))
        }
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_lowers_its_own_priority_only() {
        let main_nice = || {
            // SAFETY: as above; the process's (main thread's) nice value.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
        };
        let before = main_nice();
        std::thread::spawn(|| super::lower_this_thread(1).unwrap())
            .join()
            .unwrap();
        assert_eq!(main_nice(), before, "the other threads keep theirs");
    }
}
