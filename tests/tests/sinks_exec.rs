//! The exec sink inside the daemon: a program (`sh -c 'cat >> FILE'`) gets the profile's
//! endpoints as JSON lines, first all of them, then each change; killed, it is started again
//! and gets all of them again; when probed stops, it exits.
use std::{
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
    files.header(PROBER_IF)
        + "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n\n[profile.health]\nprotocol = \"tcp\"\nport = 80\n\
           interval = \"100ms\"\ntimeout = \"100ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n"
        + &format!(
            "\n[[profile.endpoint]]\nname = \"b0\"\naddress = \"{BACKEND_V4}\"\n\
             \n[[profile.endpoint]]\nname = \"b1\"\naddress = \"{DEAD}\"\n\
             \n[[sink]]\nname = \"feed\"\nprofile = \"web\"\nkind = \"exec\"\n\
             command = [\"/bin/sh\", \"-c\", \"cat >> {}\"]\n",
            out.display()
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
    topo.prober.ip(&[
        "neigh",
        "replace",
        DEAD,
        "lladdr",
        &topo.backend.mac(BACKEND_IF),
        "dev",
        PROBER_IF,
        "nud",
        "permanent",
    ]);
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
