//! A throwaway Debian root for the package tests: debootstrap's minbase with a few packages
//! added, made once and kept as a tarball under target/debian/rootfs/, unpacked for each test.
//! Filesystems mounted in it and processes started in it are undone on drop (and so on panic):
//! processes killed by PID, mounts unmounted innermost first, and the tree removed only when
//! nothing is mounted in it any more (`rm --one-file-system` besides). Nothing outside the tree
//! is touched, except a named network namespace a caller may create for its daemon.
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::Mutex,
};

/// Where the tests' roots and the cached tarball live: target/debian/, as an absolute path
/// without symlinks, the form /proc/self/mounts and /proc/PID/root give theirs in.
fn debian_dir() -> PathBuf {
    let dir = crate::target_dir().join("debian");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir.canonicalize()
        .unwrap_or_else(|e| panic!("resolve {}: {e}", dir.display()))
}

const SUITE: &str = "bookworm";
const MIRROR: &str = "http://deb.debian.org/debian";
/// What runs inside: a fixed PATH, no locale, nothing of the caller's environment.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Two tests in one process share the tarball: the first makes it, the other waits.
static TARBALL: Mutex<()> = Mutex::new(());

/// An unpacked root, removed on drop.
pub struct Chroot {
    pub dir: PathBuf,
    /// Mount points inside `dir`, in mount order.
    mounts: Vec<PathBuf>,
    /// Background processes, killed on drop.
    children: Vec<Child>,
}

impl Chroot {
    /// Unpacks a root with `include` added to minbase (debootstrap'd once per list of packages).
    pub fn new(include: &[&str]) -> Self {
        let base = debian_dir().join("roots");
        std::fs::create_dir_all(&base).expect("create target/debian/roots");
        remove_stale(&base);
        let tarball = tarball(include);
        let dir = base.join(crate::unique_name(""));
        std::fs::create_dir(&dir).expect("create the root directory");
        let root = Chroot {
            dir,
            mounts: Vec::new(),
            children: Vec::new(),
        };
        crate::run(
            "tar",
            &[
                "-xzpf",
                tarball.to_str().unwrap(),
                "--numeric-owner",
                "-C",
                root.dir.to_str().unwrap(),
            ],
        );
        root
    }

    /// `path` (absolute inside the root) as the host sees it.
    pub fn path(&self, path: &str) -> PathBuf {
        self.dir.join(path.trim_start_matches('/'))
    }

    /// Mounts a filesystem of `fstype` at `at` inside the root, until drop.
    pub fn mount(&mut self, fstype: &str, at: &str) {
        let target = self.path(at);
        std::fs::create_dir_all(&target).unwrap_or_else(|e| panic!("create {}: {e}", target.display()));
        crate::run("mount", &["-t", fstype, fstype, target.to_str().unwrap()]);
        self.mounts.push(target);
    }

    /// `chroot DIR argv...` with a clean environment (and `env`, e.g. DEBIAN_FRONTEND), as root
    /// or as `user` (uid, gid; the root's own numbers).
    pub fn command(&self, user: Option<(u32, u32)>, argv: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new("chroot");
        if let Some((uid, gid)) = user {
            cmd.arg(format!("--userspec={uid}:{gid}"))
                .arg(format!("--groups={gid}"));
        }
        cmd.arg(&self.dir).arg("/usr/bin/env").arg("-i");
        cmd.arg(format!("PATH={PATH}")).arg("HOME=/root").arg("LC_ALL=C.UTF-8");
        for (k, v) in env {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.args(argv).stdin(Stdio::null());
        cmd
    }

    /// Runs `argv` in the root; its output, whatever the exit status.
    pub fn output(&self, argv: &[&str]) -> Output {
        self.command(None, argv, &[("DEBIAN_FRONTEND", "noninteractive")])
            .output()
            .unwrap_or_else(|e| panic!("chroot {}: {e}", argv.join(" ")))
    }

    /// Runs `argv` in the root and returns its standard output; panics with both outputs when
    /// it fails.
    pub fn ok(&self, argv: &[&str]) -> String {
        let out = self.output(argv);
        assert!(
            out.status.success(),
            "in the root: {} failed ({}):\n{}{}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Keeps a background process to kill on drop; returns its PID.
    pub fn adopt(&mut self, child: Child) -> u32 {
        let pid = child.id();
        self.children.push(child);
        pid
    }

    /// Waits up to `timeout` for the adopted process `pid` to exit; its status, or None.
    pub fn wait_exit(&mut self, pid: u32, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
        let i = self.children.iter().position(|c| c.id() == pid)?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if self.children[i].try_wait().expect("wait for the process").is_some() {
                // Reaped already: wait() gives the status it kept.
                let mut child = self.children.remove(i);
                return Some(child.wait().expect("the exit status"));
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for Chroot {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        remove_root(&self.dir, &self.mounts);
    }
}

/// Kills whatever still runs inside the root (a process a maintainer script or a test started
/// and nobody stopped), by PID: those whose root directory is `dir` or below it.
fn kill_processes_in(dir: &Path) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|n| n.parse::<libc::pid_t>().ok()) else {
            continue;
        };
        if std::fs::read_link(p.path().join("root")).is_ok_and(|r| r.starts_with(dir)) {
            // SAFETY: kill(2) with a PID read from /proc and a valid signal number.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Stops what runs in `dir`, unmounts everything mounted inside it, then removes it; leaves it
/// (and says so) when a mount cannot be undone, since removing files below a mount point would
/// reach into it.
fn remove_root(dir: &Path, known: &[PathBuf]) {
    kill_processes_in(dir);
    for m in known.iter().rev() {
        let _ = Command::new("umount").arg(m).status();
    }
    // Whatever else is still mounted below the root (debootstrap's own mounts after a failed
    // run, or a mount a test made by hand), innermost first; lazily if it is busy.
    for m in mounts_under(dir).iter().rev() {
        let unmounted = Command::new("umount").arg(m).status().is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
    let left = mounts_under(dir);
    if !left.is_empty() {
        eprintln!("leaving {} in place: still mounted inside it: {left:?}", dir.display());
        return;
    }
    let _ = Command::new("rm")
        .args(["-rf", "--one-file-system", "--"])
        .arg(dir)
        .status();
}

/// Mount points at or below `dir`, in the order of /proc/self/mounts (outermost first).
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("read /proc/self/mounts");
    mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        // /proc/self/mounts writes a space in a path as \040; our paths have none.
        .map(PathBuf::from)
        .filter(|m| m.starts_with(dir))
        .collect()
}

/// Roots left by a test process that died before its drop ran (killed, or the machine reset):
/// `PID-N` (a test's root) and `build-PID` (a half-made tarball's), PID no longer running.
fn remove_stale(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let name = name.strip_prefix("build-").unwrap_or(&name);
        let pid = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            remove_root(&e.path(), &[]);
        }
    }
}

/// The cached tarball of minbase plus `include`, made with debootstrap when missing.
fn tarball(include: &[&str]) -> PathBuf {
    let _one = TARBALL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut packages: Vec<&str> = include.to_vec();
    packages.sort_unstable();
    packages.dedup();
    let dir = debian_dir().join("rootfs");
    let tarball = dir.join(format!("{SUITE}-minbase+{}.tar.gz", packages.join("+")));
    if tarball.exists() {
        return tarball;
    }
    std::fs::create_dir_all(&dir).expect("create target/debian/rootfs");
    remove_stale(&dir);
    // Tarballs for other package lists are out of date: the package's Depends changed.
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{SUITE}-minbase+")) && name.ends_with(".tar.gz") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let started = std::time::Instant::now();
    let build = dir.join(format!("build-{}", std::process::id()));
    // A guard for the half-made root: debootstrap mounts /proc and /sys inside while it runs.
    let guard = Chroot {
        dir: build.clone(),
        mounts: Vec::new(),
        children: Vec::new(),
    };
    let include_arg = format!("--include={}", packages.join(","));
    let out = Command::new("debootstrap")
        .args(["--variant=minbase", &include_arg, SUITE])
        .arg(&build)
        .arg(MIRROR)
        .output()
        .expect("run debootstrap (cargo xtask setup installs it)");
    assert!(
        out.status.success(),
        "debootstrap {SUITE} from {MIRROR} failed ({}); is the mirror reachable?\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        mounts_under(&build).is_empty(),
        "debootstrap left mounts in {}",
        build.display()
    );
    // The downloaded .debs are half the size and no test needs them.
    let archives = build.join("var/cache/apt/archives");
    for e in std::fs::read_dir(&archives).into_iter().flatten().flatten() {
        if e.path().extension().is_some_and(|x| x == "deb") {
            std::fs::remove_file(e.path()).expect("remove a cached .deb");
        }
    }
    let partial = tarball.with_extension("partial");
    crate::run(
        "tar",
        &[
            "-czpf",
            partial.to_str().unwrap(),
            "--numeric-owner",
            "-C",
            build.to_str().unwrap(),
            ".",
        ],
    );
    std::fs::rename(&partial, &tarball).expect("move the tarball into place");
    drop(guard);
    eprintln!("made {} in {:.0} s", tarball.display(), started.elapsed().as_secs_f64());
    tarball
}
