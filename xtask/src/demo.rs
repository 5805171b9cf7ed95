//! `cargo xtask demo`: builds a small fleet in network namespaces and runs probed against it.
//!
//! The demo runs as a child of xtask, not through `cargo run`, so that xtask can wait for it
//! to clean up: Ctrl-C in a terminal sends SIGINT to the whole foreground group (cargo, xtask
//! and the demo at once), a closed terminal SIGHUP, and a service manager SIGTERM to xtask
//! alone. xtask outlives each of them until the demo has removed its namespaces and pins,
//! and passes SIGTERM and SIGHUP on to it.
use std::{
    io::Write,
    sync::atomic::{AtomicI32, Ordering},
    time::Duration,
};

use crate::util::{cargo, require_root, root, sh};

/// The last stop signal xtask received (0: none).
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::Relaxed);
}

pub fn run(seconds: Option<u64>, cluster: bool) -> anyhow::Result<()> {
    require_root("the demo")?;
    crate::setup::run()?;
    sh(cargo().args(["build", "--quiet", "-p", "probed-tests", "--bin", "probed-demo"]))?;
    let mut cmd = std::process::Command::new(root().join("target/debug/probed-demo"));
    if let Some(s) = seconds {
        cmd.args(["--seconds", &s.to_string()]);
    }
    if cluster {
        cmd.arg("--cluster");
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
    let mut child = cmd.spawn()?;
    let pid = libc::pid_t::try_from(child.id())?;
    let mut passed = 0;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        let sig = SIGNALLED.load(Ordering::Relaxed);
        if sig != 0 && sig != passed {
            // SIGINT from a terminal reached the demo too; the others may not have.
            // SAFETY: kill on the child's own pid, which it keeps until we reap it.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            passed = sig;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if SIGNALLED.load(Ordering::Relaxed) != 0 {
        // The terminal may be gone: nothing to report to, and nothing to fail for.
        let _ = writeln!(std::io::stderr(), "demo: stopped and cleaned up");
        return Ok(());
    }
    anyhow::ensure!(status.success(), "the demo failed ({status})");
    Ok(())
}
