//! One network namespace, created with iproute2 and deleted on drop.
use std::{fs::File, os::fd::AsRawFd, path::PathBuf};

use crate::{run, serial::Shared, unique_name};

/// A named network namespace (`ip netns add`), deleted on drop.
pub struct Netns {
    pub name: String,
    /// While it exists, no other test runs `serial::alone` (and it waits for one that does).
    _shared: Shared,
}

impl Netns {
    pub fn new(prefix: &str) -> Self {
        let shared = Shared::take();
        let name = unique_name(prefix);
        run("ip", &["netns", "add", &name]);
        let ns = Self { name, _shared: shared };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// `ip -n NAME ARGS...`
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Runs a program inside the namespace (`ip netns exec`).
    pub fn exec(&self, cmd: &str, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.name, cmd];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// As `exec`, its failure an error (its output) rather than a panic.
    pub fn try_exec(&self, cmd: &str, args: &[&str]) -> Result<String, String> {
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.name, cmd])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("spawn {cmd}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "{} ({}): {stdout}{}",
                cmd,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Sets a sysctl inside the namespace.
    pub fn sysctl(&self, key: &str, value: &str) {
        self.exec("sysctl", &["-qw", &format!("{key}={value}")]);
    }

    /// Loads an nftables ruleset (`nft -f -` semantics) inside the namespace.
    pub fn nft(&self, ruleset: &str) {
        if let Err(e) = self.exec_input("nft", &["-f", "-"], ruleset) {
            panic!("nft rejected:\n{ruleset}\n{e}");
        }
    }

    /// Runs a program inside the namespace with `input` on its stdin; its stdout, or its
    /// stderr when it fails.
    pub fn exec_input(&self, cmd: &str, args: &[&str], input: &str) -> Result<String, String> {
        use std::io::Write;
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", &self.name, cmd])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd}: {e}"));
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Runs `f` on a fresh thread that has joined this namespace, and returns its result.
    /// Sockets and XDP attachments made by `f` belong to this namespace; a panic in `f` is
    /// re-raised here after the thread has unwound.
    pub fn enter<T: Send, F: FnOnce() -> T + Send>(&self, f: F) -> T {
        let file = File::open(self.path()).unwrap_or_else(|e| panic!("open {}: {e}", self.path().display()));
        std::thread::scope(|s| {
            let handle = s.spawn(move || {
                // SAFETY: `file` is an open namespace file; setns only changes this thread's
                // network namespace, which is a thread of its own that ends after `f`.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
                f()
            });
            match handle.join() {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Returns true when the namespace still exists.
    pub fn exists(name: &str) -> bool {
        PathBuf::from("/var/run/netns").join(name).exists()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
