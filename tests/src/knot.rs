//! Knot DNS (Debian's knotd) in a namespace, as a reference server and as the resolver a
//! discovery asks: one zone from a file, everything it writes in a directory of its own, both
//! removed on drop (the process first). Dynamic updates (RFC 2136, `nsupdate`) are taken from
//! the addresses given.
use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::{procs::Proc, unique_name, Netns};

pub const KNOTD: &str = "/usr/sbin/knotd";

/// How a Knot serves its zone.
pub struct KnotZone<'a> {
    /// The zone's name, with its final dot.
    pub name: &'a str,
    /// The zone file's text.
    pub text: &'a str,
    /// The addresses it listens on (IPv6 bare) and its port.
    pub listen: &'a [&'a str],
    pub port: u16,
    /// A prefix whose addresses may send dynamic updates; None: none may.
    pub updates_from: Option<&'a str>,
}

pub struct Knot {
    proc: Option<Proc>,
    pub dir: PathBuf,
}

impl Knot {
    /// Starts Knot in `ns` and waits (10 s at most) until `ready` says it answers.
    pub fn start(ns: &Netns, zone: &KnotZone<'_>, mut ready: impl FnMut() -> bool) -> Knot {
        let dir = std::env::temp_dir().join(unique_name("probed-knot-"));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display();
        std::fs::write(dir.join("zone"), zone.text).unwrap();
        let listen: Vec<String> = zone.listen.iter().map(|a| format!("{a}@{}", zone.port)).collect();
        let (acl, zone_acl) = match zone.updates_from {
            Some(net) => (
                format!("acl:\n  - id: updates\n    address: {net}\n    action: update\n\n"),
                "    acl: updates\n",
            ),
            None => (String::new(), ""),
        };
        // A plain authoritative server: no NSID, no CHAOS identity or version, stable record
        // order, no transfers, no modules (no cookies, no rate limiting), the control socket and
        // every database in `dir`; updates kept in its journal, the zone file left as written.
        let conf = format!(
            "server:\n    rundir: \"{d}\"\n    pidfile: \"{d}/knot.pid\"\n\
             \x20   listen: [ {} ]\n\
             \x20   nsid: \"\"\n    identity: \"\"\n    version: \"\"\n\
             \x20   udp-max-payload: 1232\n    edns-client-subnet: off\n    answer-rotation: off\n\
             \x20   automatic-acl: off\n    udp-workers: 1\n    tcp-workers: 1\n    background-workers: 1\n\n\
             control:\n    listen: \"{d}/knot.sock\"\n\n\
             log:\n  - target: stdout\n    any: info\n\n\
             database:\n    storage: \"{d}\"\n    journal-db: \"{d}/journal\"\n    kasp-db: \"{d}/keys\"\n\
             \x20   timer-db: \"{d}/timers\"\n    catalog-db: \"{d}/catalog\"\n\n\
             {acl}\
             zone:\n  - domain: {}\n    file: \"{d}/zone\"\n    storage: \"{d}\"\n\
             \x20   zonefile-load: whole\n    zonefile-sync: -1\n    journal-content: changes\n\
             \x20   semantic-checks: on\n    dnssec-signing: off\n{zone_acl}",
            listen.join(", "),
            zone.name
        );
        std::fs::write(dir.join("knot.conf"), conf).unwrap();
        let conf_path = dir.join("knot.conf");
        assert!(
            std::path::Path::new(KNOTD).exists(),
            "{KNOTD} is missing: install knot (cargo xtask setup does)"
        );
        let proc = Proc::spawn(
            ns,
            None,
            &[KNOTD, "-c", conf_path.to_str().unwrap()],
            &dir.join("knotd.log"),
            "knotd",
        );
        let mut knot = Knot { proc: Some(proc), dir };
        // Knot binds before it loads the zone.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready() {
            let p = knot.proc.as_mut().unwrap();
            if let Err(e) = p.check_alive("before answering") {
                panic!("{e}");
            }
            assert!(
                Instant::now() < deadline,
                "knotd did not answer within 10 s:\n{}",
                p.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        knot
    }

    /// Stops Knot (the directory stays until drop).
    pub fn stop(&mut self) {
        drop(self.proc.take());
    }
}

impl Drop for Knot {
    fn drop(&mut self) {
        drop(self.proc.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends one dynamic update from `ns` with nsupdate: `commands` are its lines (`update add
/// web.svc.example. 1 A 198.18.0.3`), between the server and zone lines and `send`.
pub fn nsupdate(ns: &Netns, server: &str, port: u16, zone: &str, commands: &[&str]) {
    let mut script = format!("server {server} {port}\nzone {zone}\n");
    for c in commands {
        script.push_str(c);
        script.push('\n');
    }
    script.push_str("send\n");
    if let Err(e) = ns.exec_input("nsupdate", &["-t", "3"], &script) {
        panic!("nsupdate:\n{script}\n{e}");
    }
}
