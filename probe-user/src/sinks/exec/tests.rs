//! The exec sink's line format, and a real program (`sh -c 'cat >> FILE'`) fed, killed,
//! restarted and fed the whole profile again.
use std::path::PathBuf;

use super::*;

fn state(last: u8, eligible: bool) -> EndpointState {
    EndpointState::tcp(format!("198.18.0.{last}").parse().unwrap(), 80, eligible)
}

fn model(seq: u64, endpoints: &[(&str, u8, bool)]) -> ProfileModel {
    ProfileModel {
        profile: "web".into(),
        endpoints: endpoints
            .iter()
            .map(|(n, last, e)| (Arc::from(*n), state(*last, *e)))
            .collect(),
        seq,
    }
}

#[test]
fn a_fresh_program_gets_one_full_line_then_changes_and_removals() {
    let first = model(7, &[("b0", 2, true), ("b1", 3, false)]);
    let full = lines(&first, None);
    assert_eq!(
        full,
        ["{\"type\":\"full\",\"profile\":\"web\",\"seq\":7,\"endpoints\":[\
             {\"name\":\"b0\",\"address\":\"198.18.0.2\",\"port\":80,\"protocol\":\"tcp\",\"weight\":1,\"priority\":1,\
             \"admin\":\"enabled\",\"health\":\"Healthy\",\"status\":\"Online\",\"eligible\":true},\
             {\"name\":\"b1\",\"address\":\"198.18.0.3\",\"port\":80,\"protocol\":\"tcp\",\"weight\":1,\"priority\":1,\
             \"admin\":\"enabled\",\"health\":\"Unhealthy\",\"status\":\"Degraded\",\"eligible\":false}]}"]
    );
    let next = model(9, &[("b0", 2, false), ("b2", 4, true)]);
    let diff = lines(&next, Some(&first.endpoints));
    let kinds: Vec<(String, String)> = diff
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["seq"], 9);
            let name = v["endpoint"]["name"].as_str().or(v["name"].as_str()).unwrap();
            (v["type"].as_str().unwrap().to_string(), name.to_string())
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("change".to_string(), "b0".to_string()),
            ("change".to_string(), "b2".to_string()),
            ("removed".to_string(), "b1".to_string()),
        ]
    );
    assert!(lines(&next, Some(&next.endpoints)).is_empty());
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probed-exec-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The JSON lines in `file`, once there are `n` of them (within 5 s).
fn wait_lines(file: &Path, n: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let got: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{n} lines in {}; got:\n{text}",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sink(file: &Path) -> ExecSink {
    ExecSink::open(&Config {
        command: vec!["/bin/sh".into(), "-c".into(), format!("cat >> {}", file.display())],
    })
    .unwrap()
}

#[test]
fn a_killed_program_is_restarted_and_told_everything_again() {
    let dir = temp_dir("restart");
    let file = dir.join("lines");
    let mut s = sink(&file);
    let m = model(3, &[("b0", 2, true), ("b1", 3, true)]);
    assert_eq!(
        s.sync(&m).unwrap(),
        SyncReport {
            written: 1,
            entries: 2,
            ..SyncReport::default()
        }
    );
    let m2 = model(4, &[("b0", 2, true), ("b1", 3, false)]);
    assert_eq!(
        s.sync(&m2).unwrap(),
        SyncReport {
            written: 1,
            entries: 1,
            ..SyncReport::default()
        }
    );
    let got = wait_lines(&file, 2);
    assert_eq!(got[0]["type"], "full");
    assert_eq!(got[0]["endpoints"].as_array().unwrap().len(), 2);
    assert_eq!(
        (got[1]["type"].as_str(), got[1]["endpoint"]["name"].as_str()),
        (Some("change"), Some("b1"))
    );
    assert!(s.verify(&m2).unwrap());

    // Killed: the read-back notices, the next sync waits out the restart delay (it died
    // young), then starts it again with the whole profile.
    let pid = s.running.as_ref().unwrap().child.id();
    // SAFETY: `pid` is the child this test's sink started and has not reaped.
    unsafe { libc::kill(libc::pid_t::try_from(pid).unwrap(), libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.verify(&m2).unwrap() {
        assert!(Instant::now() < deadline, "the kill is noticed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let e = crate::errors::chain(&s.sync(&m2).unwrap_err());
    assert!(
        e.contains("killed by signal 9") && e.contains("starting it again in"),
        "{e}"
    );
    std::thread::sleep(RESTART_FIRST + Duration::from_millis(50));
    assert_eq!(
        s.sync(&m2).unwrap(),
        SyncReport {
            written: 1,
            entries: 1,
            ..SyncReport::default()
        }
    );
    let got = wait_lines(&file, 3);
    assert_eq!(
        (got[2]["type"].as_str(), got[2]["seq"].as_u64()),
        (Some("full"), Some(4))
    );
    assert_eq!(got[2]["endpoints"][1]["eligible"], false);
    assert_ne!(s.running.as_ref().unwrap().child.id(), pid);

    // Dropped: stdin closes, cat exits, and the process is gone.
    let pid = s.running.as_ref().unwrap().child.id();
    drop(s);
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the program was reaped");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_wants_an_executable_file() {
    let open = |p: &str| {
        ExecSink::open(&Config {
            command: vec![p.into()],
        })
        .err()
        .map(|e| crate::errors::chain(&e))
    };
    let e = open("/nonexistent/probed-sink").unwrap();
    assert!(
        e.contains("/nonexistent/probed-sink") && e.contains("No such file"),
        "{e}"
    );
    let dir = temp_dir("check");
    let plain = dir.join("plain");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    let e = open(plain.to_str().unwrap()).unwrap();
    assert!(e.contains("not an executable file"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    let e = open("/tmp").unwrap();
    assert!(e.contains("not an executable file"), "{e}");
    assert_eq!(open("/bin/cat"), None);
}

/// Why an exec sink of `program` does not open, if it does not.
fn open(program: &Path) -> Option<String> {
    ExecSink::open(&Config {
        command: vec![program.to_str().unwrap().into()],
    })
    .err()
    .map(|e| crate::errors::chain(&e))
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn check_refuses_a_program_others_could_change() {
    use std::os::unix::fs::{chown, lchown, symlink};
    // SAFETY: geteuid only reads the process's credentials.
    let me = unsafe { libc::geteuid() };
    let dir = temp_dir("owner");
    chmod(&dir, 0o755);
    let prog = dir.join("feed");
    std::fs::write(&prog, "#!/bin/sh\nexec cat >/dev/null\n").unwrap();
    chmod(&prog, 0o775);
    let e = open(&prog).unwrap();
    assert!(
        e.contains(&format!(
            "refusing to run {p}: the program {p} is writable by its group or others (owner uid {me}, mode 0775)",
            p = prog.display()
        )),
        "{e}"
    );
    chmod(&prog, 0o755);
    assert_eq!(open(&prog), None);

    // A directory on the way that others may write: they could put another file in its place.
    chmod(&dir, 0o777);
    let e = open(&prog).unwrap();
    assert!(
        e.contains(&format!("the directory {} is writable", dir.display())) && e.contains("mode 0777"),
        "{e}"
    );
    // Unless it is sticky (as /tmp, which every test here goes through): there only the file's
    // owner may rename or remove it.
    chmod(&dir, 0o1777);
    assert_eq!(open(&prog), None);
    chmod(&dir, 0o755);

    // Links are followed, and each part on the way checked, relative targets and `..` too.
    let sub = dir.join("sub");
    std::fs::create_dir(&sub).unwrap();
    chmod(&sub, 0o755);
    symlink("../feed", sub.join("up")).unwrap();
    symlink(sub.join("up"), dir.join("link")).unwrap();
    assert_eq!(open(&dir.join("link")), None);
    chmod(&sub, 0o775);
    let e = open(&dir.join("link")).unwrap();
    assert!(
        e.contains(&format!("the directory {} is writable", sub.display())),
        "{e}"
    );
    chmod(&sub, 0o755);

    // Owners: root or probed's own user only.
    if me == 0 {
        chown(&prog, Some(12345), None).unwrap();
        let e = open(&prog).unwrap();
        assert!(
            e.contains(&format!(
                "the program {} is owned by uid 12345 (mode 0755)",
                prog.display()
            )) && e.contains("probed's own user (uid 0)"),
            "{e}"
        );
        chown(&prog, Some(0), None).unwrap();
        lchown(sub.join("up"), Some(12345), None).unwrap();
        let e = open(&dir.join("link")).unwrap();
        assert!(
            e.contains(&format!(
                "the symbolic link {} is owned by uid 12345",
                sub.join("up").display()
            )),
            "{e}"
        );
        chown(&sub, Some(12345), None).unwrap();
        let e = open(&dir.join("link")).unwrap();
        assert!(
            e.contains(&format!("the directory {} is owned by uid 12345", sub.display())),
            "{e}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Review L6: a script's `#!` interpreter is checked as the program is, since whoever can
/// change it chooses what the script does; and that interpreter's own, when it is a script.
#[test]
fn check_refuses_a_script_whose_interpreter_others_could_change() {
    let dir = temp_dir("interp");
    chmod(&dir, 0o755);
    let tool = dir.join("tool");
    std::fs::create_dir(&tool).unwrap();
    chmod(&tool, 0o777);
    let python = tool.join("python3");
    std::fs::write(&python, "#!/bin/sh\nexec cat >/dev/null\n").unwrap();
    chmod(&python, 0o755);
    let prog = dir.join("feed");
    std::fs::write(&prog, format!("#!{} -u\nprint('x')\n", python.display())).unwrap();
    chmod(&prog, 0o755);
    let e = open(&prog).unwrap();
    assert!(
        e.contains(&format!("the directory {} is writable", tool.display())),
        "{e}"
    );
    chmod(&tool, 0o755);
    assert_eq!(open(&prog), None, "interpreter and its own (/bin/sh) are safe");
    // The interpreter's interpreter is looked at too.
    let shell = tool.join("sh");
    std::fs::write(&shell, "not a program").unwrap();
    chmod(&shell, 0o777);
    std::fs::write(&python, format!("#!{}\n", shell.display())).unwrap();
    let e = open(&prog).unwrap();
    assert!(
        e.contains(&format!("the interpreter {} is writable", shell.display())),
        "{e}"
    );
    // A relative interpreter depends on the working directory: refused.
    std::fs::write(&prog, "#!python3\n").unwrap();
    let e = open(&prog).unwrap();
    assert!(e.contains("not an absolute path"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// CAP_NET_ADMIN, CAP_NET_RAW, CAP_PERFMON, CAP_BPF: the systemd unit's four.
const UNIT_CAPS: [u32; 4] = [12, 13, 38, 39];

/// The calling thread's capability sets (raw system calls act on one thread only).
fn capget() -> [crate::kernel::caps::CapData; 2] {
    let mut header = crate::kernel::caps::CapHeader {
        version: crate::kernel::caps::LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [crate::kernel::caps::CapData::default(); 2];
    // SAFETY: capget writes the two data words version 3 defines into `data`.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) };
    assert_eq!(rc, 0, "capget: {}", std::io::Error::last_os_error());
    data
}

fn capset(data: &[crate::kernel::caps::CapData; 2]) {
    let mut header = crate::kernel::caps::CapHeader {
        version: crate::kernel::caps::LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: capset reads the header and two data words; it changes this thread only.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    assert_eq!(rc, 0, "capset: {}", std::io::Error::last_os_error());
}

/// Puts `caps` in this thread's inheritable and ambient sets, as systemd's
/// AmbientCapabilities= does for the daemon.
fn raise_ambient(caps: &[u32]) {
    let mut data = capget();
    for &c in caps {
        data[(c / 32) as usize].inheritable |= 1 << (c % 32);
    }
    capset(&data);
    for &c in caps {
        // SAFETY: prctl with integer arguments; it changes this thread only.
        let rc = unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE,
                libc::c_ulong::from(c),
                0,
                0,
            )
        };
        assert_eq!(rc, 0, "raise {c}: {}", std::io::Error::last_os_error());
    }
}

/// Starts a sink whose program writes its own `Cap*` and `NoNewPrivs` lines of
/// /proc/self/status to `dir/caps`, and returns them by name.
fn program_credentials(dir: &Path) -> BTreeMap<String, String> {
    let out = dir.join("caps");
    let script = format!(
        "while read -r l; do case $l in Cap*|NoNewPrivs*) echo \"$l\";; esac; done </proc/self/status >{o}.tmp; \
         mv {o}.tmp {o}; exec cat >/dev/null",
        o = out.display()
    );
    let mut s = ExecSink::open(&Config {
        command: vec!["/bin/sh".into(), "-c".into(), script],
    })
    .unwrap();
    s.sync(&model(1, &[("b0", 2, true)])).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !out.exists() {
        assert!(Instant::now() < deadline, "the program writes {}", out.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(s);
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Runs `f` on a thread of its own (whose credentials it may change), re-raising its panic.
fn on_own_thread(f: impl FnOnce() + Send + 'static) {
    if let Err(panic) = std::thread::spawn(f).join() {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn the_program_runs_with_no_capability() {
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: giving a thread capabilities to pass on needs root");
        return;
    }
    const NONE: &str = "0000000000000000";

    // probed as root, with ambient capabilities besides: the program keeps none, and its
    // bounding set is empty, so nothing it runs can get one back.
    let dir = temp_dir("caps-root");
    let d = dir.clone();
    on_own_thread(move || {
        raise_ambient(&UNIT_CAPS);
        let got = program_credentials(&d);
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(got.get(set).map(String::as_str), Some(NONE), "{set}: {got:?}");
        }
        assert_eq!(got["NoNewPrivs"], "1", "{got:?}");
    });
    let _ = std::fs::remove_dir_all(&dir);

    // probed as the systemd unit runs it: another user, the unit's four capabilities ambient,
    // no CAP_SETPCAP (so the bounding set cannot be lowered). The program keeps none either.
    let dir = temp_dir("caps-unit");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let d = dir.clone();
    on_own_thread(move || {
        // SAFETY: prctl and the raw set*id system calls change this thread's credentials only
        // (glibc's wrappers would change every thread of the test process).
        unsafe {
            assert_eq!(libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0), 0);
            assert_eq!(libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534), 0);
            assert_eq!(libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534), 0);
        }
        let mut data = [crate::kernel::caps::CapData::default(); 2];
        for c in UNIT_CAPS {
            let word = &mut data[(c / 32) as usize];
            word.permitted |= 1 << (c % 32);
            word.effective |= 1 << (c % 32);
        }
        capset(&data);
        raise_ambient(&UNIT_CAPS);
        let got = program_credentials(&d);
        for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
            assert_eq!(got.get(set).map(String::as_str), Some(NONE), "{set}: {got:?}");
        }
        assert_eq!(got["NoNewPrivs"], "1", "{got:?}");
    });
    let _ = std::fs::remove_dir_all(&dir);
}
