//! Processes the benchmarks run in namespaces (probed, HAProxy, gdnsd, dnsperf, nginx): spawned
//! by setns alone (`ip netns exec` would remount /sys and hide bpffs from probed), optionally
//! pinned to one CPU, stopped on drop; and their CPU time read from /proc.
use std::{
    os::{
        fd::AsRawFd,
        unix::process::{CommandExt, ExitStatusExt},
    },
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use crate::Netns;

/// A process in a namespace, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Proc {
    child: Child,
    what: &'static str,
    log: PathBuf,
    status: Option<ExitStatus>,
}

impl Proc {
    /// `argv` inside `ns`'s network namespace, on CPU `cpu` alone when given, output to `log`.
    pub fn spawn(ns: &Netns, cpu: Option<usize>, argv: &[&str], log: &Path, what: &'static str) -> Self {
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..]);
        Self::spawn_command(ns, cpu, cmd, log, what)
    }

    /// As `spawn`, for a command the caller has prepared (its environment, its own pre-exec
    /// steps, which run before the namespace is joined).
    pub fn spawn_command(ns: &Netns, cpu: Option<usize>, mut cmd: Command, log: &Path, what: &'static str) -> Self {
        let netns = std::fs::File::open(ns.path()).expect("open the namespace");
        // Far above the descriptors a caller's own pre-exec steps place (the emulated service
        // manager's, from 3 up): one of them landing on this one would join the wrong file.
        // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor the OwnedFd then owns alone.
        let netns = unsafe {
            let fd = libc::fcntl(netns.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 512);
            assert!(
                fd >= 0,
                "dup the namespace's descriptor: {}",
                std::io::Error::last_os_error()
            );
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
        };
        let out = std::fs::File::create(log).expect("create the log");
        cmd.stdout(out.try_clone().unwrap()).stderr(out).stdin(Stdio::null());
        // Its own process group: a Ctrl-C at the terminal reaches the bench only, whose guards
        // then stop it.
        cmd.process_group(0);
        // SAFETY: setns(2) and sched_setaffinity(2) are async-signal-safe; the namespace's fd
        // stays open in the child until exec, and the cpu set is built before the fork.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if let Some(c) = cpu {
                libc::CPU_SET(c, &mut set);
            }
            cmd.pre_exec(move || {
                if libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if cpu.is_some()
                    && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        Self {
            child,
            what,
            log: log.to_path_buf(),
            status: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn alive(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.is_none()
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the process to exit by itself, at most `within`; `go_on` may end the wait
    /// early with an error (an interrupted bench).
    pub fn wait(&mut self, within: Duration, go_on: impl Fn() -> Result<(), String>) -> Result<ExitStatus, String> {
        let deadline = Instant::now() + within;
        while self.alive() {
            go_on()?;
            if Instant::now() > deadline {
                return Err(format!("{} still ran after {within:?}", self.what));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(self.status.expect("exited"))
    }

    /// An error if the process has exited, with what it said.
    pub fn check_alive(&mut self, when: &str) -> Result<(), String> {
        if self.alive() {
            return Ok(());
        }
        Err(format!(
            "{} exited {when} ({}):\n{}",
            self.what,
            describe(self.status.expect("exited")),
            self.output()
        ))
    }
}

pub fn describe(status: ExitStatus) -> String {
    status
        .signal()
        .map_or_else(|| status.to_string(), |s| format!("signal {s}"))
}

impl Proc {
    /// Sends SIGTERM and waits up to `within` for the process to exit: how long it took, or
    /// None if it had not exited by then (it is killed when dropped).
    pub fn terminate(&mut self, within: Duration) -> Option<Duration> {
        if !self.alive() {
            return Some(Duration::ZERO);
        }
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped (it is alive).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let t = Instant::now();
        while self.alive() {
            if t.elapsed() > within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(t.elapsed())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.alive() {
            return;
        }
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped (it is alive).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.alive() {
            eprintln!("{} did not stop on SIGTERM; killing it", self.what);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64
}

pub fn ticks(t: u64) -> Duration {
    Duration::from_micros(t * 1_000_000 / clk_tck())
}

/// Utime + stime from a /proc stat line (`/proc/PID/stat` or `/proc/PID/task/TID/stat`).
pub fn stat_cpu(path: &str) -> Duration {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // The command name may hold spaces: the fields that follow start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (the state); utime and stime are fields 14 and 15.
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    ticks(get(11) + get(12))
}

/// Utime + stime of a process, all its threads.
pub fn proc_cpu(pid: u32) -> Duration {
    stat_cpu(&format!("/proc/{pid}/stat"))
}

/// Busy time of the whole machine (every state but idle, iowait and nice: niced work is
/// someone else's), from /proc/stat.
pub fn machine_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let busy: u64 = f
        .iter()
        .enumerate()
        .filter(|(i, _)| ![1, 3, 4].contains(i) && *i < 8)
        .map(|(_, v)| v)
        .sum();
    Duration::from_micros(busy * 1_000_000 / clk_tck())
}

/// One column of the whole machine's `cpu` line in /proc/stat (1 user, 2 nice, 3 system,
/// ... 7 softirq), as time.
pub fn machine_stat(column: usize) -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let t: u64 = stat
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(column))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    ticks(t)
}

/// Softirq time of the whole machine.
pub fn softirq_cpu() -> Duration {
    machine_stat(7)
}

/// A /proc/PID/status field in KiB (`VmHWM:`, `VmRSS:`); 0 if the process is gone.
pub fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A benchmark's `--sizes N,N,...` value.
pub fn parse_sizes(value: &str) -> Vec<usize> {
    value
        .split(',')
        .map(|v| v.parse().unwrap_or_else(|_| panic!("--sizes: {v:?} is not a number")))
        .collect()
}
