//! What the in-process benchmarks share: the process's CPU time, a private namespace whose
//! loopback owns 127.0.0.0/8, and a server child (this same binary, run with `serve ...`)
//! whose CPU is not counted.
use std::{
    io::{BufRead, BufReader},
    os::fd::AsRawFd,
    process::{Child, Command, Stdio},
    time::Duration,
};

/// User plus system CPU time of this process (children are not counted).
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage writes one rusage struct into the zeroed value we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &raw mut ru), 0);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// A network namespace this process (its main thread, and so every thread and child made
/// afterwards) has joined, with its loopback up; deleted on drop.
pub struct Namespace {
    name: String,
}

impl Namespace {
    /// Call before any other thread exists.
    pub fn create(what: &str) -> Self {
        let name = format!("probed-bench-{what}-{}", std::process::id());
        ip(&["netns", "add", &name]);
        let ns = Self { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        let file = std::fs::File::open(format!("/var/run/netns/{}", ns.name)).expect("open the namespace");
        // SAFETY: `file` is an open network-namespace file; setns changes only this thread's
        // namespace, before any other thread exists.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        ns
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

fn ip(args: &[&str]) {
    let ok = Command::new("ip").args(args).status().is_ok_and(|s| s.success());
    assert!(ok, "ip {} failed (root needed)", args.join(" "));
}

/// The server child: this binary run with `serve` and `args`. It prints "ready" once it
/// listens, and exits when its stdin closes, which dropping this does.
pub struct Server(Child);

impl Server {
    pub fn spawn(args: &[&std::ffi::OsStr]) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .arg("serve")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the server");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "server start");
        Server(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// In the server child: blocks until the parent closes stdin (or dies).
pub async fn until_parent_goes() {
    let _ = tokio::task::spawn_blocking(|| std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new())).await;
}

/// What a batch of checks cost: rate, CPU per check of this process, median latency, failures.
pub struct Row {
    pub per_sec: f64,
    pub cpu_us: f64,
    pub p50_us: u128,
    pub failures: usize,
}

/// Runs checks 0..`total`, `concurrency` at a time on the current runtime: each worker takes
/// the next number and awaits `check(i)` (true: healthy), so consecutive checks of one worker
/// are different ones.
pub async fn measure<F, Fut>(total: usize, concurrency: usize, check: F) -> Row
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    };
    let next = Arc::new(AtomicUsize::new(0));
    let cpu0 = cpu_time();
    let start = std::time::Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency.min(total) {
        let (check, next) = (check.clone(), next.clone());
        workers.spawn(async move {
            let mut latencies = Vec::new();
            let mut failures = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let t = std::time::Instant::now();
                let ok = check(i).await;
                latencies.push(t.elapsed().as_micros());
                failures += usize::from(!ok);
            }
            (latencies, failures)
        });
    }
    let mut latencies = Vec::with_capacity(total);
    let mut failures = 0;
    while let Some(done) = workers.join_next().await {
        let (l, f) = done.expect("worker finished");
        latencies.extend(l);
        failures += f;
    }
    let wall = start.elapsed();
    let cpu = cpu_time() - cpu0;
    latencies.sort_unstable();
    Row {
        per_sec: total as f64 / wall.as_secs_f64(),
        cpu_us: cpu.as_micros() as f64 / total as f64,
        p50_us: latencies.get(latencies.len() / 2).copied().unwrap_or(0),
        failures,
    }
}
