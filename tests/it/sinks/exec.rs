//! The exec sink inside the daemon: a program (`sh -c 'cat >> FILE'`) gets the profile's
//! endpoints as JSON lines, first all of them, then each change; killed, it is started again
//! and gets all of them again; when probed stops, it exits. The program runs with no
//! capability even when probed has ambient ones, and a program others may change stops the
//! start.
use std::{
    os::unix::fs::PermissionsExt,
    path::Path,
    time::{Duration, Instant},
};

use probed::status::EndpointStatus as S;
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    topo::*,
};
use serde_json::Value;

/// An address nothing answers on (a local address of the backend with no listener: refused).
const DEAD: &str = "198.18.0.9";

fn config(files: &DaemonFiles, out: &Path) -> String {
    config_running(files, &["/bin/sh", "-c", &format!("cat >> {}", out.display())])
}

/// The test's profile (b0 at the backend, b1 at `DEAD`) and an exec sink `feed` running
/// `command`.
fn config_running(files: &DaemonFiles, command: &[&str]) -> String {
    // A JSON string is a TOML basic string.
    let command: Vec<String> = command.iter().map(|a| serde_json::to_string(a).unwrap()).collect();
    files.header(PROBER_IF)
        + "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n\n[profile.health]\nprotocol = \"tcp\"\nport = 80\n\
           interval = \"100ms\"\ntimeout = \"100ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n"
        + &format!(
            "\n[[profile.endpoint]]\nname = \"b0\"\naddress = \"{BACKEND_V4}\"\n\
             \n[[profile.endpoint]]\nname = \"b1\"\naddress = \"{DEAD}\"\n\
             \n[[sink]]\nname = \"feed\"\nprofile = \"web\"\nkind = \"exec\"\ncommand = [{}]\n",
            command.join(", ")
        )
}

fn lines(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// Polls the program's output until `ok` holds (within `within`); the lines then.
fn wait_lines(out: &Path, what: &str, within: Duration, ok: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let got = lines(out);
        if ok(&got) {
            return got;
        }
        assert!(Instant::now() < deadline, "{what} within {within:?}; lines:\n{got:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The eligible names a `full` line lists.
fn eligible(full: &Value) -> Vec<&str> {
    full["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["eligible"] == true)
        .map(|e| e["name"].as_str().unwrap())
        .collect()
}

/// PIDs of this process's children whose command line mentions `needle`: the sink's program
/// (the daemon runs in this process), found without guessing at anyone else's processes.
fn our_children(needle: &str) -> Vec<i32> {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // pid (comm) state ppid ...: the fields after the last ')'.
            let ppid = stat.rsplit(')').next().and_then(|r| r.split_whitespace().nth(1));
            let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(me.as_str()) && cmdline.contains(needle)
        })
        .collect()
}

#[test]
fn exec_program_gets_every_change_and_everything_again_after_a_restart() {
    let topo = Topology::new();
    let _b0 = topo.backend.tcp_listen(&format!("{BACKEND_V4}:80"));
    topo.backend
        .ip(&["addr", "add", &format!("{DEAD}/24"), "dev", BACKEND_IF]);
    topo.prober
        .static_neighbour(DEAD, &topo.backend.mac(BACKEND_IF), PROBER_IF);
    let files = DaemonFiles::new();
    let out = files.dir.join("feed.jsonl");
    let cfg = files.write_config(&config(&files, &out));
    let daemon = RunningDaemon::start(&topo.prober, cfg, None).expect("start");
    daemon.wait_status("web", "b0", S::Online, Duration::from_secs(5));
    daemon.wait_status("web", "b1", S::Degraded, Duration::from_secs(5));

    // First the whole profile, then changes; the changes bring b1 to not eligible.
    let got = wait_lines(&out, "b1 leaves the eligible set", Duration::from_secs(2), |l| {
        l.iter()
            .any(|v| v["type"] == "change" && v["endpoint"]["name"] == "b1" && v["endpoint"]["eligible"] == false)
    });
    assert_eq!(got[0]["type"], "full", "{got:#?}");
    assert_eq!(got[0]["profile"], "web");
    assert_eq!(got[0]["endpoints"].as_array().unwrap().len(), 2);
    let seqs: Vec<u64> = got.iter().map(|v| v["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "seq never goes down: {seqs:?}");
    let sinks = daemon.get("/v1/sinks");
    assert_eq!(
        (&sinks[0]["name"], &sinks[0]["in_sync"]),
        (&"feed".into(), &true.into()),
        "{sinks}"
    );

    // Killed: within the read-back interval and the restart delay it runs again, told all.
    let needle = out.to_str().unwrap();
    let pids = our_children(needle);
    assert_eq!(pids.len(), 1, "one program runs: {pids:?}");
    let before = lines(&out).len();
    // SAFETY: plain syscall on the PID of a child of this process, found just above.
    unsafe { libc::kill(pids[0], libc::SIGKILL) };
    let got = wait_lines(&out, "a second full line", Duration::from_secs(8), |l| {
        l.len() > before && l[before..].iter().any(|v| v["type"] == "full")
    });
    let full = got[before..].iter().find(|v| v["type"] == "full").unwrap();
    assert_eq!(eligible(full), ["b0"], "{full}");
    let again = our_children(needle);
    assert!(
        again.len() == 1 && again != pids,
        "a new program: {again:?} (was {pids:?})"
    );

    // probed stops: the program's stdin closes and it exits.
    daemon.stop();
    let deadline = Instant::now() + Duration::from_secs(3);
    while !our_children(needle).is_empty() {
        assert!(Instant::now() < deadline, "the program exits when probed stops");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The systemd unit's ambient capabilities: CAP_NET_ADMIN, CAP_NET_RAW, CAP_PERFMON, CAP_BPF.
const UNIT_CAPS: [u32; 4] = [12, 13, 38, 39];

/// capset(2)'s header and one word of each set (linux/capability.h, version 3: two words).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Puts `caps` in the calling thread's inheritable and ambient sets, as systemd's
/// AmbientCapabilities= does for the daemon. Raw system calls: this thread only.
fn raise_ambient(caps: &[u32]) {
    let mut header = CapHeader {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes the two data words of version 3 into `data`.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) };
    assert_eq!(rc, 0, "capget: {}", std::io::Error::last_os_error());
    for &c in caps {
        data[(c / 32) as usize].inheritable |= 1 << (c % 32);
    }
    // SAFETY: capset reads the header and the two words; it changes this thread only.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    assert_eq!(rc, 0, "capset: {}", std::io::Error::last_os_error());
    for &c in caps {
        let c = libc::c_ulong::from(c);
        // SAFETY: prctl with integer arguments; it changes this thread only.
        let rc = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE, c, 0, 0) };
        assert_eq!(rc, 0, "raise capability {c}: {}", std::io::Error::last_os_error());
    }
}

/// probed (root here) is started from a thread holding the unit's four capabilities as ambient
/// ones, which its threads inherit; its program shows its own sets: all empty, bounding set
/// included, and no_new_privs set. Without the drop the program had every capability.
#[test]
fn exec_program_runs_with_no_capability_whatever_probed_holds() {
    let topo = Topology::new();
    let _b0 = topo.backend.tcp_listen(&format!("{BACKEND_V4}:80"));
    let files = DaemonFiles::new();
    let out = files.dir.join("caps");
    let script = format!(
        "while read -r l; do case $l in Cap*|NoNewPrivs*) echo \"$l\";; esac; done </proc/self/status >{o}.tmp; \
         mv {o}.tmp {o}; exec cat >/dev/null",
        o = out.display()
    );
    let cfg = files.write_config(&config_running(&files, &["/bin/sh", "-c", &script]));
    let daemon = std::thread::scope(|s| {
        s.spawn(|| {
            raise_ambient(&UNIT_CAPS);
            let amb = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            assert!(
                amb.contains("CapAmb:\t000000c000003000"),
                "the thread holds them:\n{amb}"
            );
            RunningDaemon::start(&topo.prober, cfg, None).expect("start")
        })
        .join()
        .unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while !out.exists() {
        assert!(Instant::now() < deadline, "the program writes {}", out.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&out).unwrap();
    let sets: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k, v.trim()))
        .collect();
    let none = "0000000000000000";
    assert_eq!(
        sets,
        [
            ("CapInh", none),
            ("CapPrm", none),
            ("CapEff", none),
            ("CapBnd", none),
            ("CapAmb", none),
            ("NoNewPrivs", "1")
        ],
        "{text}"
    );
    daemon.stop();
}

/// A program its group may write is refused at start, the error naming the sink, the file, its
/// owner and its mode.
#[test]
fn a_program_others_may_change_stops_the_start() {
    let topo = Topology::new();
    let files = DaemonFiles::new();
    std::fs::set_permissions(&files.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let program = files.dir.join("feed");
    std::fs::write(&program, "#!/bin/sh\nexec cat >/dev/null\n").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o775)).unwrap();
    let cfg = files.write_config(&config_running(&files, &[program.to_str().unwrap()]));
    let err = RunningDaemon::start(&topo.prober, cfg, None).err().expect("refused");
    assert!(
        err.contains(&format!(
            "sink feed: exec sink: refusing to run {p}: the program {p} is writable by its group or others \
             (owner uid 0, mode 0775)",
            p = program.display()
        )),
        "{err}"
    );
}
