//! Who may change state through the API (issue 13, point 1): real clients (curl, the probed
//! CLI) as root, as an unprivileged uid and as a member of the socket group, on the unix socket
//! and over TCP with a bearer token; browser-shaped requests; how the socket appears.
use std::{
    os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt},
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use probed_tests::{
    daemon::{DaemonFiles, RunningDaemon},
    probed_bin, Netns,
};

/// The socket group of these tests: a gid no account has, so only `setpriv --groups` gives it.
const GROUP: u32 = 4242;
/// What `setpriv` turns the client into.
const NOBODY: &str = "65534";
const TOKEN: &str = "c2VjcmV0LXRva2VuLWZvci1wcm9iZWQtdGVzdHM";

/// One HTTP profile whose endpoint does not answer: the API is what is tested, not probing.
fn config(files: &DaemonFiles, api: &str) -> String {
    // Unprivileged clients must reach the socket's directory; the socket's mode is the gate.
    std::fs::set_permissions(&files.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "[daemon]\n{api}\nevents = \"{}\"\npin_dir = \"{}\"\nstate_file = \"{}\"\n\n\
         [[profile]]\nname = \"web\"\ndialect = \"lb\"\n\n[profile.health]\nprotocol = \"http\"\n\
         path = \"/health\"\ninterval = \"2s\"\ntimeout = \"1s\"\n\n\
         [[profile.endpoint]]\nname = \"web-1\"\naddress = \"198.18.0.2\"\nport = 8080\n",
        files.events().display(),
        files.pins.path.display(),
        files.state().display()
    )
}

fn socket(files: &DaemonFiles) -> PathBuf {
    files.dir.join("api.sock")
}

fn unix_api(files: &DaemonFiles, mode: &str) -> String {
    format!(
        "api_listen = \"unix:{}\"\napi_socket_group = \"{GROUP}\"\napi_socket_mode = {mode}",
        socket(files).display()
    )
}

fn start(ns: &Netns, files: &DaemonFiles, api: &str) -> RunningDaemon {
    let cfg = files.write_config(&config(files, api));
    RunningDaemon::start(ns, cfg, None).unwrap_or_else(|e| panic!("start the daemon: {e}"))
}

/// `setpriv` as uid/gid 65534, with no supplementary group or with `group`.
fn unprivileged(group: Option<u32>) -> Vec<String> {
    let groups = match group {
        None => vec!["--clear-groups".to_string()],
        Some(g) => vec!["--groups".to_string(), g.to_string()],
    };
    let mut v = vec![
        "setpriv".to_string(),
        "--reuid".into(),
        NOBODY.into(),
        "--regid".into(),
        NOBODY.into(),
    ];
    v.extend(groups);
    v
}

/// Runs `argv` (with `prefix` in front), bounded by curl's and the CLI's own timeouts.
fn run(prefix: &[String], argv: &[&str]) -> Output {
    let mut all: Vec<String> = prefix.to_vec();
    all.extend(argv.iter().map(|s| (*s).to_string()));
    Command::new(&all[0])
        .args(&all[1..])
        .output()
        .unwrap_or_else(|e| panic!("spawn {all:?}: {e}"))
}

/// curl: HTTP status (0 when it could not connect) and body.
fn curl(prefix: &[String], target: &[&str], extra: &[&str]) -> (u16, String) {
    let mut argv = vec!["curl", "-sS", "--max-time", "10", "-w", "\n%{http_code}"];
    argv.extend_from_slice(target);
    argv.extend_from_slice(extra);
    let out = run(prefix, &argv);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (
        code.trim().parse().unwrap_or(0),
        format!("{body}{}", String::from_utf8_lossy(&out.stderr)),
    )
}

fn over_socket<'a>(path: &'a str, url: &'a str) -> [&'a str; 3] {
    ["--unix-socket", path, url]
}

const JSON: [&str; 2] = ["-H", "Content-Type: application/json"];

fn admin(daemon: &RunningDaemon) -> String {
    daemon.get("/v1/status/web/web-1")["admin"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The daemon's loopback is the namespace's: TCP clients run there (`ip netns exec`).
fn in_ns(ns: &Netns) -> Vec<String> {
    ["ip", "netns", "exec", &ns.name]
        .iter()
        .map(|s| (*s).to_string())
        .collect()
}

/// The endpoint's admin state, read over TCP inside `ns`.
fn tcp_admin(ns: &Netns) -> String {
    let (code, body) = curl(&in_ns(ns), &["http://127.0.0.1:9180/v1/status/web/web-1"], &[]);
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["admin"].as_str().unwrap().to_string()
}

#[test]
fn unix_socket_changes_need_root_or_the_group() {
    let ns = Netns::new("auth");
    let files = DaemonFiles::new();
    let daemon = start(&ns, &files, &unix_api(&files, "0o660"));
    let path = socket(&files);
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(
        (meta.mode() & 0o777, meta.gid()),
        (0o660, GROUP),
        "socket mode and group"
    );
    let p = path.to_str().unwrap();
    let disable = over_socket(p, "http://probed/v1/endpoints/web/web-1/disable");
    let status = over_socket(p, "http://probed/v1/status");

    // Outside the group, the file mode keeps an unprivileged uid out altogether.
    let (code, body) = curl(&unprivileged(None), &status, &[]);
    assert_eq!(code, 0, "connect must fail with EACCES: {body}");
    let (code, body) = curl(&unprivileged(None), &disable, &["-X", "POST", JSON[0], JSON[1]]);
    assert_eq!(code, 0, "{body}");
    // The CLI says what is wrong.
    let out = run(
        &unprivileged(None),
        &[
            probed_bin().to_str().unwrap(),
            "disable",
            "web",
            "web-1",
            "--api",
            &format!("unix:{p}"),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("api_socket_group"), "{err}");
    assert_eq!(admin(&daemon), "enabled");

    // A member of the group (supplementary, as SO_PEERGROUPS reports it) may read and change.
    let (code, body) = curl(&unprivileged(Some(GROUP)), &status, &[]);
    assert_eq!(code, 200, "{body}");
    let out = run(
        &unprivileged(Some(GROUP)),
        &[
            probed_bin().to_str().unwrap(),
            "disable",
            "web",
            "web-1",
            "--api",
            &format!("unix:{p}"),
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(admin(&daemon), "disabled");

    // Root may.
    let (code, body) = curl(
        &[],
        &over_socket(p, "http://probed/v1/endpoints/web/web-1/enable"),
        &["-X", "POST", JSON[0], JSON[1]],
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(admin(&daemon), "enabled");
    daemon.stop();
    assert!(!path.exists(), "the socket is removed on stop");
}

#[test]
fn a_permissive_socket_mode_still_checks_the_peer() {
    let ns = Netns::new("auth");
    let files = DaemonFiles::new();
    let daemon = start(&ns, &files, &unix_api(&files, "0o666"));
    let p = socket(&files);
    let p = p.to_str().unwrap();
    assert_eq!(std::fs::symlink_metadata(p).unwrap().mode() & 0o777, 0o666);

    // Anyone can connect and read ...
    let (code, body) = curl(
        &unprivileged(None),
        &over_socket(p, "http://probed/v1/status/web/web-1"),
        &[],
    );
    assert_eq!(code, 200, "{body}");
    // ... but SO_PEERCRED refuses a change, and says why.
    for action in ["disable", "always-serve", "enable"] {
        let url = format!("http://probed/v1/endpoints/web/web-1/{action}");
        let (code, body) = curl(
            &unprivileged(None),
            &over_socket(p, &url),
            &["-X", "POST", JSON[0], JSON[1]],
        );
        assert_eq!(code, 403, "{action}: {body}");
        assert!(
            body.contains("uid 65534") && body.contains(&GROUP.to_string()),
            "{body}"
        );
    }
    let (code, body) = curl(
        &unprivileged(None),
        &over_socket(p, "http://probed/v1/reload"),
        &["-X", "POST", JSON[0], JSON[1]],
    );
    assert_eq!(code, 403, "{body}");
    assert_eq!(admin(&daemon), "enabled");
    // The group still may.
    let url = "http://probed/v1/endpoints/web/web-1/disable";
    let (code, body) = curl(
        &unprivileged(Some(GROUP)),
        &over_socket(p, url),
        &["-X", "POST", JSON[0], JSON[1]],
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(admin(&daemon), "disabled");
}

#[test]
fn browser_shaped_requests_are_refused_even_for_root() {
    let ns = Netns::new("auth");
    let files = DaemonFiles::new();
    let daemon = start(&ns, &files, &unix_api(&files, "0o660"));
    let p = socket(&files);
    let p = p.to_str().unwrap();
    let disable = over_socket(p, "http://probed/v1/endpoints/web/web-1/disable");
    let cases: [(&[&str], u16, &str); 6] = [
        (&["-X", "POST"], 415, "Content-Type none"),
        (
            &["-X", "POST", "-H", "Content-Type: text/plain", "--data", "x"],
            415,
            "text/plain",
        ),
        (&["--data", "a=b"], 415, "application/x-www-form-urlencoded"),
        (&["-F", "a=b"], 415, "multipart/form-data"),
        (
            &["-X", "POST", JSON[0], JSON[1], "-H", "Origin: http://evil.example"],
            403,
            "Origin",
        ),
        (
            &["-X", "POST", JSON[0], JSON[1], "-H", "Sec-Fetch-Site: cross-site"],
            403,
            "cross-site",
        ),
    ];
    for (extra, want, says) in cases {
        let (code, body) = curl(&[], &disable, extra);
        assert_eq!(code, want, "{extra:?}: {body}");
        assert!(body.contains(says), "{extra:?}: {body}");
    }
    assert_eq!(admin(&daemon), "enabled", "no refused request changed anything");
    let (code, body) = curl(
        &[],
        &disable,
        &["-X", "POST", JSON[0], JSON[1], "-H", "Sec-Fetch-Site: same-origin"],
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(admin(&daemon), "disabled");
}

#[test]
fn tcp_changes_need_the_bearer_token() {
    let ns = Netns::new("auth");
    let files = DaemonFiles::new();
    let token_file = files.dir.join("api.token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let api = format!(
        "api_listen = \"127.0.0.1:9180\"\napi_token_file = \"{}\"",
        token_file.display()
    );
    let daemon = start(&ns, &files, &api);
    assert_eq!(daemon.api, "127.0.0.1:9180");
    let in_ns = in_ns(&ns);
    let url = ["http://127.0.0.1:9180/v1/endpoints/web/web-1/disable"];
    let bearer = |t: &str| format!("Authorization: Bearer {t}");

    let (code, body) = curl(&in_ns, &["http://127.0.0.1:9180/v1/status"], &[]);
    assert_eq!(code, 200, "reads need no token: {body}");
    let (code, body) = curl(&in_ns, &url, &["-X", "POST", JSON[0], JSON[1]]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("Bearer"), "{body}");
    let wrong = bearer("c2VjcmV0LXRva2VuLWZvci1wcm9iZWQtdGVzdHN");
    let (code, body) = curl(&in_ns, &url, &["-X", "POST", JSON[0], JSON[1], "-H", &wrong]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("wrong"), "{body}");
    // The right token, but shaped like a form: still refused.
    let right = bearer(TOKEN);
    let (code, body) = curl(&in_ns, &url, &["--data", "a=b", "-H", &right]);
    assert_eq!(code, 415, "{body}");
    assert_eq!(tcp_admin(&ns), "enabled");

    let (code, body) = curl(&in_ns, &url, &["-X", "POST", JSON[0], JSON[1], "-H", &right]);
    assert_eq!(code, 200, "{body}");
    assert_eq!(tcp_admin(&ns), "disabled");

    // The CLI over TCP: refused without --token-file, done with it.
    let bin = probed_bin();
    let cli = |extra: &[&str]| {
        let mut argv = vec![
            bin.to_str().unwrap(),
            "enable",
            "web",
            "web-1",
            "--api",
            "127.0.0.1:9180",
        ];
        argv.extend_from_slice(extra);
        run(&in_ns, &argv)
    };
    let out = cli(&[]);
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Bearer"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&["--token-file", token_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(tcp_admin(&ns), "enabled");
}

#[test]
fn tcp_without_a_token_file_refuses_every_change_and_says_how() {
    let ns = Netns::new("auth");
    let files = DaemonFiles::new();
    let _daemon = start(&ns, &files, "api_listen = \"127.0.0.1:9180\"");
    let url = ["http://127.0.0.1:9180/v1/reload"];
    let (code, body) = curl(&in_ns(&ns), &url, &["-X", "POST", JSON[0], JSON[1]]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("api_token_file"), "{body}");
    let (code, body) = curl(&in_ns(&ns), &["http://127.0.0.1:9180/v1/status"], &[]);
    assert_eq!(code, 200, "{body}");
}

#[test]
fn an_open_token_file_stops_the_start() {
    let ns = Netns::new("auth");
    let files = DaemonFiles::new();
    let token_file = files.dir.join("api.token");
    std::fs::write(&token_file, TOKEN).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let api = format!(
        "api_listen = \"127.0.0.1:9180\"\napi_token_file = \"{}\"",
        token_file.display()
    );
    let cfg = files.write_config(&config(&files, &api));
    let Err(e) = RunningDaemon::start(&ns, cfg, None) else {
        panic!("a world-readable token file was accepted");
    };
    assert!(e.contains("mode 0644") && e.contains("chmod 600"), "{e}");
}

#[test]
fn only_a_stale_socket_is_replaced() {
    let ns = Netns::new("auth");
    let files = DaemonFiles::new();
    let path = socket(&files);
    // A regular file where the socket goes: the start fails and the file stays.
    std::fs::write(&path, "not a socket").unwrap();
    let cfg = files.write_config(&config(&files, &unix_api(&files, "0o660")));
    let Err(e) = RunningDaemon::start(&ns, cfg.clone(), None) else {
        panic!("started over a regular file");
    };
    assert!(e.contains("a regular file, not a socket"), "{e}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a socket");
    std::fs::remove_file(&path).unwrap();
    // A socket nobody serves (a crash left it): replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let daemon = RunningDaemon::start(&ns, cfg, None).expect("start over a stale socket");
    assert_eq!(daemon.get("/v1/status").as_array().map(Vec::len), Some(1));
}

/// The socket must never exist at its path with other permissions than configured: it is
/// made elsewhere and moved in whole. inotify sees every name that appears in the directory.
#[test]
fn the_socket_appears_with_its_final_mode() {
    let ns = Netns::new("auth");
    let files = DaemonFiles::new();
    let path = socket(&files);
    let cfg = files.write_config(&config(&files, &unix_api(&files, "0o640")));
    let watch = Inotify::new(&files.dir);
    for round in 0..5 {
        let daemon = RunningDaemon::start(&ns, cfg.clone(), None).expect("start the daemon");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!((meta.mode() & 0o777, meta.gid()), (0o640, GROUP), "round {round}");
        daemon.stop();
    }
    let events = watch.events(Duration::from_millis(200));
    let name = "api.sock";
    let created: Vec<_> = events
        .iter()
        .filter(|(mask, n)| n == name && mask & libc::IN_CREATE != 0)
        .collect();
    assert!(
        created.is_empty(),
        "the socket was created in place (a window before its chmod): {events:?}"
    );
    let moved = events
        .iter()
        .filter(|(mask, n)| n == name && mask & libc::IN_MOVED_TO != 0)
        .count();
    assert_eq!(moved, 5, "{events:?}");
    // No staging directory is left behind.
    let left: Vec<_> = std::fs::read_dir(&files.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".api.sock"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// An inotify watch on one directory, closed on drop.
struct Inotify(i32);

impl Inotify {
    fn new(dir: &Path) -> Self {
        // SAFETY: plain syscalls on a descriptor this struct owns; the path is a valid C string.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            assert!(fd >= 0, "inotify_init1: {}", std::io::Error::last_os_error());
            let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
            let wd = libc::inotify_add_watch(fd, c.as_ptr(), libc::IN_CREATE | libc::IN_MOVED_TO);
            assert!(wd >= 0, "inotify_add_watch: {}", std::io::Error::last_os_error());
            Self(fd)
        }
    }

    /// Every (mask, name) queued, reading until nothing comes for `quiet`.
    fn events(&self, quiet: Duration) -> Vec<(u32, String)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut last = Instant::now();
        while last.elapsed() < quiet {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), buf.len()) };
            let Ok(n) = usize::try_from(n) else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            last = Instant::now();
            let mut off = 0;
            while off + 16 <= n {
                let mask = u32::from_ne_bytes(buf[off + 4..off + 8].try_into().unwrap());
                let len = u32::from_ne_bytes(buf[off + 12..off + 16].try_into().unwrap()) as usize;
                let name = &buf[off + 16..off + 16 + len];
                let name = String::from_utf8_lossy(name.split(|b| *b == 0).next().unwrap()).into_owned();
                out.push((mask, name));
                off += 16 + len;
            }
        }
        out
    }
}

impl Drop for Inotify {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this struct owns.
        unsafe { libc::close(self.0) };
    }
}
