//! The API over loopback TCP counts each local user as one peer, whatever address of
//! 127.0.0.0/8 it connects from (issue 46, M3): a user that opens forty follows of the event
//! stream from eight loopback addresses holds four of them and is refused the rest, while root's
//! follow, the metrics scrape and the token holder's change are served. Before, each address was
//! a peer of its own and the user held every follower place.
use std::{
    io::{BufRead, BufReader},
    os::unix::fs::PermissionsExt,
    process::{Command, Stdio},
};

use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    Netns,
};

const TOKEN: &str = "dG9rZW4tZm9yLXRoZS1wZWVyLXRlc3Rz";

/// Opens `n` connections to 127.0.0.1:9180 from 127.0.0.2-.9 in turn, sends a follow of the
/// event stream on each and prints the status code each got (0: closed with none), then holds
/// them all open, reading nothing, until its stdin closes (at most 60 s).
const HOG: &str = r#"
import socket, sys, select, time
n = int(sys.argv[1])
socks, codes = [], []
for i in range(n):
    s = socket.socket()
    s.bind(("127.0.0.%d" % (2 + i % 8), 0))
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", 9180))
        s.sendall(b"GET /v1/events?follow=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        head = s.recv(64)
        codes.append(int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else 0)
    except OSError:
        codes.append(0)
    socks.append(s)
print(" ".join(map(str, codes)), flush=True)
select.select([sys.stdin], [], [], 60)
"#;

/// The hog's process, ended by its PID when the test ends, passed or not.
struct Hog(std::process::Child);

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn curl(ns: &Netns, args: &[&str]) -> (u16, String) {
    let mut argv = vec![
        "netns",
        "exec",
        &ns.name,
        "curl",
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
    ];
    argv.extend_from_slice(args);
    let out = Command::new("ip").args(&argv).output().unwrap();
    let code = String::from_utf8_lossy(&out.stdout);
    (
        code.trim().parse().unwrap_or(0),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn one_local_user_is_one_peer_from_any_loopback_address_and_cannot_crowd_out_others() {
    let ns = Netns::new("peers");
    ns.ip(&["addr", "add", "127.0.0.2/8", "dev", "lo"]);
    let files = DaemonFiles::new();
    let token_file = files.dir.join("api.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = format!(
        "[daemon]\napi_listen = \"127.0.0.1:9180\"\napi_token_file = \"{}\"\nevents = \"{}\"\npin_dir = \"{}\"\n\
         state_file = \"{}\"\n\n[[profile]]\nname = \"web\"\ndialect = \"lb\"\n\n[profile.health]\n\
         protocol = \"http\"\npath = \"/health\"\ninterval = \"2s\"\ntimeout = \"1s\"\n\n\
         [[profile.endpoint]]\nname = \"web-1\"\naddress = \"198.18.0.2\"\nport = 8080\n",
        token_file.display(),
        files.events().display(),
        files.pins.path.display(),
        files.state().display()
    );
    let cfg = files.write_config(&config);
    let _daemon = RunningDaemon::start(&ns, cfg, None).expect("daemon starts");

    let mut hog = Hog(Command::new("ip")
        .args([
            "netns",
            "exec",
            &ns.name,
            "setpriv",
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
        ])
        .args(["/usr/bin/python3", "-c", HOG, "40"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap());
    let mut line = String::new();
    BufReader::new(hog.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let codes: Vec<u16> = line.split_whitespace().map(|c| c.parse().unwrap()).collect();
    assert_eq!(codes.len(), 40, "{line}");
    let served = codes.iter().filter(|c| **c == 200).count();
    let refused = codes.iter().filter(|c| **c == 429).count();
    eprintln!(
        "uid 65534's 40 follows from 8 loopback addresses: {served} served, {refused} refused (429), the rest closed"
    );
    assert_eq!(served, 4, "one user holds MAX_STREAMS_PER_PEER streams: {line}");

    // Everyone else is served while the hog holds its streams.
    let (code, err) = curl(&ns, &["--max-time", "2", "http://127.0.0.1:9180/v1/events?follow=1"]);
    assert_eq!(code, 200, "root's follow: {err}");
    let (code, err) = curl(&ns, &["--max-time", "5", "http://127.0.0.1:9180/metrics"]);
    assert_eq!(code, 200, "the scrape: {err}");
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let (code, err) = curl(
        &ns,
        &[
            "--max-time",
            "5",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-H",
            &bearer,
            "http://127.0.0.1:9180/v1/endpoints/web/web-1/disable",
        ],
    );
    assert_eq!(code, 200, "the token holder's change: {err}");
    drop(hog);
}
