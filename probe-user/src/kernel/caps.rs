//! Capabilities: dropping every one of them in a child before it runs a program (the exec
//! sink's), and capset(2)'s arguments, which the libc crate does not define.

/// Runs in the child between fork and exec (system calls only: no allocation, no lock) and
/// leaves it, and anything it runs, no capability:
/// - the ambient set is emptied, so that the exec does not hand probed's capabilities on;
/// - the bounding set is emptied when probed may (it holds CAP_SETPCAP, as root does); without
///   it (the systemd unit's user, whose bounding set is the unit's four) it stays as it is;
/// - no_new_privs is set: set-user-ID bits and file capabilities give nothing, and the exec
///   cannot raise the permitted set above the one it starts from;
/// - the permitted, effective and inheritable sets are emptied (lowering one's own sets needs
///   no privilege). With no_new_privs that holds across the exec even for root, whose
///   capabilities the kernel would otherwise grant again from the bounding set.
///
/// A root probed's program still runs as uid 0: no capability, but the owner of root's files.
pub fn drop_capabilities() -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments only; it changes this process's credentials.
    if unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) } != 0 {
        let e = std::io::Error::last_os_error();
        // Kernels before 4.3 have no ambient set, and nothing to clear.
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    for cap in 0..=63 as libc::c_ulong {
        // SAFETY: as above.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } == 0 {
            continue;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            // EINVAL: past the kernel's last capability, done. EPERM: no CAP_SETPCAP, so the
            // bounding set cannot be lowered; the empty permitted set and no_new_privs below
            // keep any capability from coming back all the same.
            Some(libc::EINVAL | libc::EPERM) => break,
            _ => return Err(e),
        }
    }
    // SAFETY: as above.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let none = [CapData::default(); 2];
    // SAFETY: capset reads one header and the two data words version 3 defines, both valid
    // for the call; pid 0 is this process.
    if unsafe { libc::syscall(libc::SYS_capset, &raw mut header, none.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// capset(2)'s arguments (linux/capability.h), which the libc crate does not define.
#[repr(C)]
pub struct CapHeader {
    pub version: u32,
    pub pid: libc::c_int,
}

/// One 32-bit word of each set; version 3 takes two (capabilities 0-31, 32-63).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CapData {
    pub effective: u32,
    pub permitted: u32,
    pub inheritable: u32,
}

pub const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
