//! What probed says to the service manager that started it, in systemd's protocols (which
//! other managers implement too): readiness (`notify`), liveness (`watchdog_every`: the
//! runner's loop pings, so a stuck runner is killed by the manager), and the file descriptor
//! store, which keeps a route sink's device, and so its routes, across a restart (`store_fd`,
//! `claim`).
//! Nothing happens when no manager asked (no `NOTIFY_SOCKET`, no `LISTEN_FDS`): `probed run`
//! by hand behaves the same, and a stop or a crash then takes the device with the process.
use std::{
    collections::HashMap,
    os::{
        fd::{BorrowedFd, OwnedFd},
        unix::net::{SocketAddr, UnixDatagram},
    },
    sync::Mutex,
};

/// Descriptors handed to this process at its start, by name (`LISTEN_FDNAMES`), until a
/// sink claims them.
static INHERITED: Mutex<Option<HashMap<String, OwnedFd>>> = Mutex::new(None);

/// The first descriptor a manager passes (`SD_LISTEN_FDS_START`).
const FIRST_FD: i32 = 3;

fn manager() -> Option<std::io::Result<UnixDatagram>> {
    let path = std::env::var_os("NOTIFY_SOCKET")?;
    Some((|| {
        let socket = UnixDatagram::unbound()?;
        let bytes = path.as_encoded_bytes();
        let addr = match bytes.strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name)?
            }
            None => SocketAddr::from_pathname(&path)?,
        };
        socket.connect_addr(&addr)?;
        Ok(socket)
    })())
}

/// Sends `state` (e.g. "READY=1") to the service manager, if one asked for it.
pub fn notify(state: &str) {
    if let Some(Err(e)) = manager().map(|s| s.and_then(|s| s.send(state.as_bytes()))) {
        log::warn!("cannot tell the service manager {state:?}: {e}");
    }
}

/// How often to send `WATCHDOG=1`, when the manager asked for it (`WATCHDOG_USEC`, for this
/// process if `WATCHDOG_PID` is set): a third of its timeout, so that a ping late by a loop
/// turn or two still comes in time.
pub fn watchdog_every() -> Option<std::time::Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    (usec > 0).then(|| std::time::Duration::from_micros(usec / 3))
}

/// Hands a copy of `fd` to the manager's store under `name`; whether a manager took it (it
/// keeps it only if its unit allows a store: systemd's FileDescriptorStoreMax=).
pub fn store_fd(name: &str, fd: BorrowedFd<'_>) -> bool {
    let Some(socket) = manager() else {
        return false;
    };
    let msg = format!("FDSTORE=1\nFDNAME={name}");
    match socket.and_then(|s| crate::kernel::fdpass::send_with_fd(&s, msg.as_bytes(), fd)) {
        Ok(()) => true,
        Err(e) => {
            log::warn!("cannot hand {name} to the service manager: {e}");
            false
        }
    }
}

/// Takes `name` out of the manager's store (its copy is closed).
pub fn remove_fd(name: &str) {
    notify(&format!("FDSTOREREMOVE=1\nFDNAME={name}"));
}

/// Takes the descriptors the manager passed this process (`LISTEN_PID`, `LISTEN_FDS`,
/// `LISTEN_FDNAMES`), once, at the start, before anything else opens a file; the variables
/// are removed so that no child sees them.
pub fn take_inherited() {
    let ours = std::env::var("LISTEN_PID").ok().and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<i32>().ok())
        .unwrap_or(0);
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    // Called at the start of `probed run`, before any other thread exists.
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    if !ours || count <= 0 {
        return;
    }
    let mut map = HashMap::new();
    for (i, name) in (0..count).zip(names.split(':').chain(std::iter::repeat(""))) {
        match crate::kernel::fdpass::adopt_inherited(FIRST_FD + i) {
            Ok(fd) => {
                map.insert(name.to_string(), fd);
            }
            Err(e) => log::warn!("descriptor {} from the service manager: {e}", FIRST_FD + i),
        }
    }
    *lock() = Some(map);
}

fn lock() -> std::sync::MutexGuard<'static, Option<HashMap<String, OwnedFd>>> {
    INHERITED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The descriptor the manager passed under `name`, taken (a second claim gets None).
pub fn claim(name: &str) -> Option<OwnedFd> {
    lock().as_mut()?.remove(name)
}

/// The first descriptor the manager passed under a name `accepts` takes, with that name,
/// taken (the route sink finds its device under the name of its table and protocol then).
pub fn claim_matching(accepts: impl Fn(&str) -> bool) -> Option<(String, OwnedFd)> {
    let mut guard = lock();
    let map = guard.as_mut()?;
    let mut names: Vec<&String> = map.keys().filter(|n| accepts(n)).collect();
    names.sort();
    let name = names.first().map(|n| (*n).clone())?;
    map.remove(&name).map(|fd| (name, fd))
}

/// Closes what no sink claimed, and takes it out of the manager's store: a device kept for a
/// route sink that the configuration no longer has goes, with its routes. Their names.
pub fn release_unclaimed() -> Vec<String> {
    let left = lock().take().unwrap_or_default();
    let mut names: Vec<String> = left.into_keys().collect();
    names.sort();
    for name in &names {
        remove_fd(name);
    }
    names
}
