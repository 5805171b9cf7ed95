//! The probe ports' reservation in `ip_local_reserved_ports` (a list per network namespace):
//! when probed stops it takes out only the ports it put in, so ranges reserved before it started
//! (even inside the probe range) and ranges someone reserved while it ran are still there.
use std::time::Duration;

use probed::{kernel::ports::Reservation, status::EndpointStatus as S};
use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    topo::*,
    Netns,
};

const RESERVED: &str = "/proc/sys/net/ipv4/ip_local_reserved_ports";

fn reserved(ns: &Netns) -> String {
    ns.exec("cat", &[RESERVED]).trim().to_string()
}

fn reserve(ns: &Netns, list: &str) {
    ns.sysctl("net.ipv4.ip_local_reserved_ports", list);
}

#[test]
fn stopping_takes_out_only_the_ports_probed_reserved() {
    let topo = Topology::new();
    let _a = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8080"));
    // Longer than 32 characters (the list must be read in one call to come back whole), and
    // 61000-61009 already reserved inside the default probe range 61000-65095.
    let before = "1000-1005,2000,3000-3010,4000,61000-61009";
    reserve(&topo.prober, before);
    assert_eq!(reserved(&topo.prober), before);

    let files = DaemonFiles::new();
    let text = files.tcp_profiles(PROBER_IF, BACKEND_V4, &[("web", &[8080])]);
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start");
    daemon.wait_status("web", "web-1", S::Online, Duration::from_secs(5));
    assert_eq!(reserved(&topo.prober), "1000-1005,2000,3000-3010,4000,61000-65095");

    // Another program reserves ports while probed runs, one range touching the probe range.
    reserve(
        &topo.prober,
        "1000-1005,2000,3000-3010,4000,7000-7010,61000-65095,65096-65100",
    );
    daemon.stop();
    assert_eq!(
        reserved(&topo.prober),
        "1000-1005,2000,3000-3010,4000,7000-7010,61000-61009,65096-65100",
        "what was there before and what others added stay; probed's own ports go"
    );
}

/// The reservation is given back in the namespace it was taken in, whichever thread drops it.
#[test]
fn a_reservation_is_given_back_in_its_own_namespace() {
    let (here, elsewhere) = (Netns::new("pdr"), Netns::new("pdr"));
    reserve(&elsewhere, "9000");
    let r = here.enter(|| Reservation::take(61000, 65095).expect("reserve"));
    assert_eq!(reserved(&here), "61000-65095");
    assert_eq!(reserved(&elsewhere), "9000");
    elsewhere.enter(move || drop(r));
    assert_eq!(reserved(&here), "");
    assert_eq!(reserved(&elsewhere), "9000", "another namespace's list is not touched");
}
