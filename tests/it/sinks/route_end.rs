//! Issue 46 point 2 (review H2, M4): the VIP is withdrawn whenever the node cannot check.
//! `probed run` with a route sink under an emulated service manager (descriptor store and
//! watchdog, as systemd keeps them for the packaged unit); the route is read in the node's
//! kernel table 201, which the routing daemon exports (tests/it/sinks/route.rs shows BIRD
//! following it). A stop that was asked for leaves the device to the store, for a restart; an
//! error exit and a start that fails take it out, and the route goes; a probed that stops
//! working without dying misses its watchdog, and the one the manager starts in its place
//! withdraws once its checks fail.
use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use probed_tests::{
    daemon::DaemonFiles,
    lb::{doc_block, wait_until, Backend},
    manager::Manager,
    probed_bin,
    procs::Proc,
    topo::*,
    unique_name, Topology,
};

const VIP: &str = "198.18.250.1";
/// The device's name in the store: its name, table and route protocol (the documented defaults).
const STORED: &str = "route-probed-vip.201.201";

struct Rig {
    topo: Topology,
    files: DaemonFiles,
    manager: Manager,
    probed: Option<Proc>,
    backends: Vec<Backend>,
    log_dir: PathBuf,
}

impl Rig {
    fn new(watchdog: Option<Duration>) -> Rig {
        let topo = Topology::new();
        let files = DaemonFiles::new();
        let log_dir = std::env::temp_dir().join(unique_name("probed-route-end-"));
        std::fs::create_dir_all(&log_dir).unwrap();
        let mut manager = Manager::new(&log_dir);
        if let Some(t) = watchdog {
            manager = manager.with_watchdog(t);
        }
        let mut rig = Rig {
            topo,
            files,
            manager,
            probed: None,
            backends: Vec::new(),
            log_dir,
        };
        rig.restore_backends();
        rig
    }

    /// One profile of two backends with fast checks, and the documented route sink without
    /// demotion (a node whose checks fail withdraws).
    fn config(&self, extra: &str) -> String {
        let mut text = self.files.header(PROBER_IF)
            + "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"tcp\"\n\
               interval = \"100ms\"\ntimeout = \"100ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n";
        for (i, port) in [80, 81].iter().enumerate() {
            text += &format!("\n[[profile.endpoint]]\nname = \"b{i}\"\naddress = \"{BACKEND_V4}\"\nport = {port}\n");
        }
        text + "\n" + &doc_block("route-sink").replace("demote_metric = 500\n", "") + extra
    }

    fn restore_backends(&mut self) {
        self.backends.clear();
        self.backends = [80, 81]
            .iter()
            .map(|p| Backend::on(&self.topo.backend, &format!("{BACKEND_V4}:{p}")))
            .collect();
    }

    /// `probed run` started by the manager, as systemd starts the unit; waits for its API
    /// unless `expect_failure`.
    fn start(&mut self, extra: &str, expect_failure: bool) {
        let config = self.files.config_path();
        std::fs::write(&config, self.config(extra)).unwrap();
        let log = self.log_dir.join(format!("probed-{}.log", unique_name("")));
        let mut cmd = std::process::Command::new("sh");
        cmd.args([
            "-c",
            "LISTEN_PID=$$ WATCHDOG_PID=$$ exec \"$0\" \"$@\"",
            probed_bin().to_str().unwrap(),
        ])
        .args(["run", "--config", config.to_str().unwrap()]);
        self.manager.prepare(&mut cmd);
        self.probed = Some(Proc::spawn_command(&self.topo.prober, None, cmd, &log, "probed"));
        if !expect_failure {
            let api = self.files.api();
            wait_until("probed's API answers", Duration::from_secs(20), || {
                probed::api::client::request(&api, "GET", "/v1/status").is_ok()
            });
        }
    }

    fn announced(&self) -> bool {
        self.announced_in(201)
    }

    fn announced_in(&self, table: u32) -> bool {
        // A table with no route left is no table: ip says so, and that is "withdrawn".
        self.topo
            .prober
            .try_exec("ip", &["route", "show", "table", &table.to_string()])
            .is_ok_and(|routes| routes.lines().any(|l| l.starts_with(VIP)))
    }

    fn signal(&self, sig: libc::c_int) {
        let p = self.probed.as_ref().expect("probed runs");
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped.
        unsafe { libc::kill(p.pid() as i32, sig) };
    }

    /// Starts probed, waits for the announcement, then stops it as asked (SIGTERM): the
    /// device, with the route, stays in the manager's store for a restart.
    fn announce_then_stop_kept(&mut self) {
        self.start("", false);
        wait_until("announced", Duration::from_secs(5), || self.announced());
        self.signal(libc::SIGTERM);
        let (status, log) = self.ended(Duration::from_secs(10));
        assert!(status.success(), "{log}");
        assert!(self.manager.store.contains_key(STORED), "kept for the restart:\n{log}");
    }

    /// Waits for probed to end; its exit status and what it logged.
    fn ended(&mut self, within: Duration) -> (std::process::ExitStatus, String) {
        let mut p = self.probed.take().expect("probed runs");
        let status = p
            .wait(within, || Ok(()))
            .unwrap_or_else(|e| panic!("{e}\n{}", p.output()));
        self.manager.collect();
        (status, p.output())
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(p) = self.probed.as_ref() {
            // SAFETY: as in `signal`; a stopped process must be woken to die cleanly.
            unsafe {
                libc::kill(p.pid() as i32, libc::SIGCONT);
            }
        }
        drop(self.probed.take());
        self.manager.store.clear();
        let _ = std::fs::remove_dir_all(&self.log_dir);
    }
}

#[test]
fn an_error_exit_takes_the_device_out_of_the_store_and_the_route_goes() {
    let mut rig = Rig::new(None);
    rig.start("", false);
    wait_until("announced", Duration::from_secs(5), || rig.announced());
    rig.manager.collect();
    assert!(rig.manager.store.contains_key(STORED), "the device is in the store");
    // The probe interface goes: the engine stops, and probed exits with an error.
    rig.topo.prober.ip(&["link", "del", PROBER_IF]);
    let (status, log) = rig.ended(Duration::from_secs(10));
    assert!(!status.success(), "an error exit: {status:?}\n{log}");
    assert!(
        !rig.manager.store.contains_key(STORED),
        "an error exit leaves nothing to the store (it was kept, and the VIP with it):\n{log}"
    );
    wait_until("withdrawn", Duration::from_secs(2), || !rig.announced());
}

#[test]
fn a_start_that_fails_lets_go_of_the_kept_device_and_the_route_goes() {
    let mut rig = Rig::new(None);
    // A stop that was asked for: the device (and the route) stay with the manager.
    rig.announce_then_stop_kept();
    assert!(rig.announced(), "kept while the manager holds the device");
    // The restart cannot finish (its HAProxy is not there): it lets go of the device.
    let haproxy = "\n[[sink]]\nname = \"lb\"\nprofile = \"web\"\nkind = \"haproxy\"\n\
                   socket = \"/nonexistent/haproxy.sock\"\nbackend = \"web\"\n";
    rig.start(haproxy, true);
    let (status, log) = rig.ended(Duration::from_secs(20));
    assert!(!status.success(), "the start fails: {log}");
    assert!(
        !rig.manager.store.contains_key(STORED),
        "a failed start leaves nothing to the store:\n{log}"
    );
    wait_until("withdrawn", Duration::from_secs(2), || !rig.announced());
}

#[test]
fn a_stuck_probed_misses_its_watchdog_and_its_successor_withdraws() {
    let watchdog = Duration::from_secs(2);
    let mut rig = Rig::new(Some(watchdog));
    rig.start("", false);
    wait_until("announced", Duration::from_secs(5), || rig.announced());
    // The runner's loop pings about three times per timeout.
    std::thread::sleep(Duration::from_millis(1500));
    rig.manager.collect();
    assert!(rig.manager.alive(), "pings: {}", rig.manager.pings.len());
    let gaps: Vec<Duration> = rig.manager.pings.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g < watchdog / 2),
        "pings well within the timeout: {gaps:?}"
    );
    // Stuck (stopped, as a deadlock or a debugger would hold it), then its backends fail.
    rig.signal(libc::SIGSTOP);
    let stuck = Instant::now();
    rig.backends.clear();
    wait_until("the watchdog's timeout passes with no ping", watchdog * 2, || {
        rig.manager.collect();
        !rig.manager.alive()
    });
    assert!(rig.announced(), "a stopped probed changes nothing by itself");
    // The manager kills it and starts another (Restart=on-failure), which takes the device
    // over, decides from its checks and withdraws.
    rig.signal(libc::SIGKILL);
    let _ = rig.ended(Duration::from_secs(5));
    assert!(
        rig.manager.store.contains_key(STORED),
        "a killed probed leaves the store as it was"
    );
    rig.start("", false);
    wait_until("withdrawn by the successor", Duration::from_secs(5), || {
        !rig.announced()
    });
    eprintln!(
        "route: stuck probed -> withdrawn by its successor {:?} after it stopped",
        stuck.elapsed()
    );
    rig.restore_backends();
    wait_until("announced again", Duration::from_secs(5), || rig.announced());
}

/// Review L1: a restart that changes `kernel_table` takes over the kept device and its route,
/// announces in the new table and leaves nothing in the old one (before, the old table's route
/// stayed as long as the device did); the store then holds the device under its new name.
#[test]
fn a_restart_into_another_table_leaves_no_route_in_the_old_one() {
    let mut rig = Rig::new(None);
    rig.announce_then_stop_kept();
    rig.start("kernel_table = 202\n", false);
    wait_until("announced in table 202", Duration::from_secs(5), || {
        rig.announced_in(202)
    });
    wait_until("gone from table 201", Duration::from_secs(5), || !rig.announced_in(201));
    rig.manager.collect();
    assert!(
        rig.manager.store.contains_key("route-probed-vip.202.201") && !rig.manager.store.contains_key(STORED),
        "stored under its new table: {:?}",
        rig.manager.store.keys().collect::<Vec<_>>()
    );
}

/// Review L1: a persistent TUN device of the sink's name, made by someone before probed, is
/// not attached to (its routes would outlive probed): the sink says so and announces nothing
/// until the device is gone, then makes its own.
#[test]
fn a_persistent_device_of_the_same_name_is_not_taken() {
    let mut rig = Rig::new(None);
    rig.topo.prober.ip(&["tuntap", "add", "probed-vip", "mode", "tun"]);
    rig.start("", false);
    std::thread::sleep(Duration::from_secs(2));
    assert!(!rig.announced(), "no route through a device that outlives probed");
    rig.topo.prober.ip(&["link", "del", "probed-vip"]);
    wait_until("announced through its own device", Duration::from_secs(15), || {
        rig.announced()
    });
}
