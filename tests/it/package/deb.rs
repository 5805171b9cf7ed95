//! The Debian package (`cargo xtask deb`), as an operator gets it: its contents, control files
//! and lintian's verdict; then installed into a throwaway Debian root, where its binary is
//! started, reloaded and stopped the way the unit says, upgraded, removed and purged; and its
//! maintainer scripts driven as if systemd were running. Nothing happens outside the root.
//!
//! These need the built .deb (`PROBED_DEB`) and debootstrap: `cargo xtask test` builds the
//! package after the other integration tests and runs them then, with `--ignored`.
use std::{
    collections::BTreeSet,
    io::Read,
    os::{
        fd::AsRawFd,
        unix::{fs::MetadataExt, net::UnixDatagram, process::CommandExt},
    },
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use probed_tests::{
    chroot::Chroot,
    run,
    topo::{Topology, BACKEND_V4},
    Netns,
};

/// Every file the package must hold, besides the manual pages (checked against the binary).
const FILES: &[&str] = &[
    "etc/probed/probed.toml",
    "lib/systemd/system/probed.service",
    "usr/bin/probed",
    "usr/share/bash-completion/completions/probed",
    "usr/share/doc/probed/README.md.gz",
    "usr/share/doc/probed/changelog.Debian.gz",
    "usr/share/doc/probed/copyright",
    "usr/share/doc/probed/examples/backend-nftables.nft",
    "usr/share/doc/probed/examples/probed.toml",
    "usr/share/doc/probed/operations/README.md.gz",
    "usr/share/doc/probed/operations/api.md.gz",
    "usr/share/doc/probed/operations/backends.md.gz",
    "usr/share/doc/probed/operations/cluster.md.gz",
    "usr/share/doc/probed/operations/configuration.md.gz",
    "usr/share/doc/probed/operations/dns.md.gz",
    "usr/share/doc/probed/operations/events.md.gz",
    "usr/share/doc/probed/operations/install.md.gz",
    "usr/share/doc/probed/operations/metrics.md.gz",
    "usr/share/doc/probed/operations/node.md.gz",
    "usr/share/doc/probed/operations/running.md.gz",
    "usr/share/doc/probed/operations/security.md.gz",
    "usr/share/doc/probed/operations/sinks.md.gz",
    "usr/share/doc/probed/operations/sizing.md.gz",
    "usr/share/doc/probed/spec.md.gz",
    "usr/share/doc/probed/udp.md.gz",
    "usr/share/fish/vendor_completions.d/probed.fish",
    "usr/share/lintian/overrides/probed",
    "usr/share/zsh/vendor-completions/_probed",
];

const CONFFILE: &str = "/etc/probed/probed.toml";
const UNIT: &str = "/lib/systemd/system/probed.service";
const WANTS_LINK: &str = "/etc/systemd/system/multi-user.target.wants/probed.service";
/// What deb-systemd-helper records about the links it made (removed on purge).
const HELPER_STATE: &[&str] = &[
    "/var/lib/systemd/deb-systemd-helper-enabled/probed.service.dsh-also",
    "/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/probed.service",
];

fn deb() -> PathBuf {
    let Some(path) = std::env::var_os("PROBED_DEB").map(PathBuf::from) else {
        panic!(
            "PROBED_DEB is not set: build the package with `cargo xtask deb` and set PROBED_DEB to the path it prints"
        );
    };
    assert!(path.exists(), "PROBED_DEB={} does not exist", path.display());
    path
}

fn field(deb: &Path, name: &str) -> String {
    run("dpkg-deb", &["-f", deb.to_str().unwrap(), name]).trim().to_string()
}

/// The package names of a Depends field, without versions or alternatives.
fn dependency_names(depends: &str) -> Vec<String> {
    depends
        .split(',')
        .map(|d| {
            let first = d.split('|').next().unwrap();
            first.split(['(', ' ']).find(|w| !w.is_empty()).unwrap().to_string()
        })
        .collect()
}

/// What the throwaway root holds besides minbase: the package's dependencies (`dpkg -i` does
/// not fetch them), systemd, for `systemd-analyze verify` and a systemctl that knows the unit,
/// and man-db, with which verify opens the unit's `Documentation=man:` pages.
fn root_for(deb: &Path) -> Chroot {
    let mut include = dependency_names(&field(deb, "Depends"));
    include.extend(["systemd".into(), "man-db".into()]);
    let include: Vec<&str> = include.iter().map(String::as_str).collect();
    let mut root = Chroot::new(&include);
    root.mount("proc", "/proc");
    std::fs::copy(deb, root.path("/tmp/probed.deb")).expect("copy the .deb into the root");
    root
}

/// A copy of the package with a higher version, as the next release would be.
fn next_version(root: &Chroot, deb: &Path) -> (String, &'static str) {
    let tree = root.path("/tmp/next");
    run("dpkg-deb", &["-R", deb.to_str().unwrap(), tree.to_str().unwrap()]);
    let control_path = tree.join("DEBIAN/control");
    let control = std::fs::read_to_string(&control_path).unwrap();
    let version = field(deb, "Version");
    let next = format!("{version}+next1");
    let control = control.replace(&format!("\nVersion: {version}\n"), &format!("\nVersion: {next}\n"));
    assert!(control.contains(&next), "no Version line in {control}");
    std::fs::write(&control_path, control).unwrap();
    run(
        "dpkg-deb",
        &[
            "--build",
            "--root-owner-group",
            tree.to_str().unwrap(),
            root.path("/tmp/probed-next.deb").to_str().unwrap(),
        ],
    );
    run("dpkg", &["--compare-versions", &next, "gt", &version]);
    (next, "/tmp/probed-next.deb")
}

/// (uid, gid) of an account in the root.
fn account(root: &Chroot, name: &str) -> (u32, u32) {
    let line = root.ok(&["getent", "passwd", name]);
    let f: Vec<&str> = line.trim().split(':').collect();
    (f[2].parse().unwrap(), f[3].parse().unwrap())
}

fn mode(path: &Path) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (m.uid(), m.gid(), m.mode() & 0o7777)
}

/// `dpkg-query`'s two-letter state of the package, or None when dpkg knows nothing of it.
fn dpkg_state(root: &Chroot) -> Option<String> {
    let out = root.output(&["dpkg-query", "-W", "-f=${db:Status-Abbrev}", "probed"]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
#[ignore = "needs the built .deb and debootstrap: cargo xtask test runs it after building the package"]
fn package_contents_control_files_and_lintian() {
    let deb = deb();
    let deb_s = deb.to_str().unwrap();

    // Every path, owner and mode.
    let listing = run("dpkg-deb", &["-c", deb_s]);
    let mut files = BTreeSet::new();
    for line in listing.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (perms, owner, path) = (cols[0], cols[1], cols[5].trim_start_matches("./"));
        assert_eq!(owner, "root/root", "{line}");
        match perms.chars().next() {
            Some('d') => assert_eq!(perms, "drwxr-xr-x", "{line}"),
            Some('-') => {
                let want = if path == "usr/bin/probed" {
                    "-rwxr-xr-x"
                } else {
                    "-rw-r--r--"
                };
                assert_eq!(perms, want, "{line}");
                files.insert(path.to_string());
            }
            _ => panic!("neither a file nor a directory: {line}"),
        }
    }
    let tree = std::env::temp_dir().join(probed_tests::unique_name("probed-deb-"));
    let _cleanup = RemoveDir(tree.clone());
    run("dpkg-deb", &["-R", deb_s, tree.to_str().unwrap()]);

    // The manual pages are what the packaged binary generates, one per visible subcommand.
    let generated = tree.join("generated");
    run(
        tree.join("usr/bin/probed").to_str().unwrap(),
        &["generate", "man", generated.to_str().unwrap()],
    );
    let mut expected: BTreeSet<String> = FILES.iter().map(ToString::to_string).collect();
    for page in std::fs::read_dir(&generated).unwrap() {
        let page = page.unwrap().path();
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        // The section is the name's last part: 8 for the commands, 5 for probed.toml.5.
        let section = name.rsplit('.').next().unwrap();
        let packaged = format!("usr/share/man/man{section}/{name}.gz");
        let text = run("zcat", &[tree.join(&packaged).to_str().unwrap()]);
        assert_eq!(
            text,
            std::fs::read_to_string(&page).unwrap(),
            "{packaged} differs from the binary's page"
        );
        expected.insert(packaged);
    }
    assert!(
        expected.contains("usr/share/man/man8/probed.8.gz")
            && expected.contains("usr/share/man/man8/probed-run.8.gz")
            && expected.contains("usr/share/man/man5/probed.toml.5.gz")
    );
    let stray: Vec<_> = files.difference(&expected).collect();
    let missing: Vec<_> = expected.difference(&files).collect();
    assert!(
        stray.is_empty() && missing.is_empty(),
        "the package holds files it should not: {stray:?}; and lacks: {missing:?}"
    );

    // Control files.
    let control = tree.join("DEBIAN");
    let mut names: Vec<String> = std::fs::read_dir(&control)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["conffiles", "control", "md5sums", "postinst", "postrm", "prerm"]
    );
    assert_eq!(
        std::fs::read_to_string(control.join("conffiles")).unwrap(),
        format!("{CONFFILE}\n")
    );
    for script in ["postinst", "prerm", "postrm"] {
        let path = control.join(script);
        assert_eq!(mode(&path).2, 0o755, "{script} is not executable");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("#!/bin/sh\n") && text.contains("set -e"),
            "{script}: {text}"
        );
        run("sh", &["-n", path.to_str().unwrap()]);
    }
    // md5sums covers every file but the conffile, and every sum is right.
    let sums = std::fs::read_to_string(control.join("md5sums")).unwrap();
    let summed: BTreeSet<String> = sums.lines().map(|l| l[34..].to_string()).collect();
    let mut want = files.clone();
    want.remove(CONFFILE.trim_start_matches('/'));
    assert_eq!(
        summed, want,
        "md5sums lists other files than the package's (the conffile excluded)"
    );
    let mut check = Command::new("md5sum");
    check.args(["--check", "--quiet", "--strict"]).current_dir(&tree);
    check.stdin(std::fs::File::open(control.join("md5sums")).unwrap());
    assert!(check.status().unwrap().success(), "md5sums does not match the files");

    // The fields, and a Depends that covers every library the binary loads.
    let arch = run("dpkg", &["--print-architecture"]).trim().to_string();
    assert_eq!(field(&deb, "Package"), "probed");
    assert_eq!(field(&deb, "Architecture"), arch);
    let version = field(&deb, "Version");
    assert!(
        deb.file_name().unwrap().to_string_lossy() == format!("probed_{version}_{arch}.deb"),
        "{} is not named probed_{version}_{arch}.deb",
        deb.display()
    );
    let crate_version = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../probe-user/Cargo.toml"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("version = ").map(|v| v.trim_matches('"').to_string()))
        .unwrap();
    assert!(
        version.starts_with(&format!("{crate_version}-")),
        "{version} is not {crate_version}-REVISION"
    );
    let depends = field(&deb, "Depends");
    let depends_names = dependency_names(&depends);
    for needed in ["adduser", "procps"] {
        assert!(
            depends_names.iter().any(|d| d == needed),
            "Depends: {depends} lacks {needed}"
        );
    }
    let objdump = run("objdump", &["-p", tree.join("usr/bin/probed").to_str().unwrap()]);
    for lib in objdump
        .lines()
        .filter_map(|l| l.trim().strip_prefix("NEEDED"))
        .map(str::trim)
    {
        let owner = run("dpkg", &["-S", &format!("*/{lib}")]);
        let package = owner.lines().next().unwrap().split([':', ',']).next().unwrap();
        assert!(
            depends_names.iter().any(|d| d == package),
            "{lib} comes from {package}, which Depends ({depends}) does not name"
        );
    }
    assert!(depends.contains("libc6 (>= "), "Depends: {depends}");
    let installed_kib: u64 = field(&deb, "Installed-Size").parse().unwrap();
    let binary_kib = std::fs::metadata(tree.join("usr/bin/probed")).unwrap().len() / 1024;
    assert!(
        installed_kib > binary_kib,
        "Installed-Size {installed_kib} KiB, the binary alone {binary_kib} KiB"
    );

    // Stripped; the copyright file lists the crates linked in.
    let sections = run("readelf", &["-S", "-W", tree.join("usr/bin/probed").to_str().unwrap()]);
    assert!(
        !sections.contains(".debug_info") && !sections.contains(".symtab"),
        "not stripped"
    );
    let copyright = std::fs::read_to_string(tree.join("usr/share/doc/probed/copyright")).unwrap();
    assert!(
        !copyright.contains("@CRATES@") && copyright.contains("\n tokio "),
        "{copyright}"
    );

    // lintian, every level: nothing but what the package's overrides explain.
    let out = Command::new("lintian")
        .args(["--pedantic", "-I", "-E", "--no-tag-display-limit", deb_s])
        .output()
        .expect("run lintian (cargo xtask setup installs it)");
    let report = String::from_utf8_lossy(&out.stdout);
    // The spelling override covers byte noise in the binary, which a given build may not have.
    let allowed = ["I: probed: unused-override spelling-error-in-binary "];
    let tags: Vec<&str> = report
        .lines()
        .filter(|l| ["E:", "W:", "I:", "P:", "X:"].iter().any(|p| l.starts_with(p)))
        .filter(|l| !allowed.iter().any(|a| l.starts_with(a)))
        .collect();
    assert!(
        tags.is_empty(),
        "lintian tags (fix them, or override with a reason in dist/debian/lintian-overrides):\n{}",
        tags.join("\n")
    );
    assert!(
        out.status.success(),
        "lintian failed ({}): {report}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The packaged binary is stripped: its embedded eBPF object must still load, attach and match
/// replies (`probed check` over the kernel engine, in the harness's prober namespace).
#[test]
#[ignore = "needs the built .deb and debootstrap: cargo xtask test runs it after building the package"]
fn package_binary_probes_with_its_embedded_xdp_program() {
    let deb = deb();
    let tree = std::env::temp_dir().join(probed_tests::unique_name("probed-deb-"));
    let _cleanup = RemoveDir(tree.clone());
    run("dpkg-deb", &["-x", deb.to_str().unwrap(), tree.to_str().unwrap()]);
    let topo = Topology::new();
    let _listener = topo.backend.tcp_listen(&format!("{BACKEND_V4}:8080"));
    let bin = tree.join("usr/bin/probed");
    let target = format!("tcp://{BACKEND_V4}:8080");
    let out = run(
        "ip",
        &[
            "netns",
            "exec",
            &topo.prober.name,
            bin.to_str().unwrap(),
            "check",
            &target,
            "--count",
            "2",
            "--interval",
            "10",
        ],
    );
    assert_eq!(out.lines().filter(|l| l.contains(" healthy open ")).count(), 2, "{out}");
}

/// The unit's `[Service]` settings, in order.
struct Unit(Vec<(String, String)>);

impl Unit {
    fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut section = "";
        let mut settings = Vec::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line;
            } else if section == "[Service]" && !line.is_empty() && !line.starts_with('#') {
                let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("unit line {line:?}"));
                settings.push((k.to_string(), v.to_string()));
            }
        }
        Unit(settings)
    }

    fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn one(&self, key: &str) -> &str {
        match self.all(key)[..] {
            [v] => v,
            ref other => panic!("the unit has {} {key}= lines", other.len()),
        }
    }
}

/// A command line of the unit, split as systemd would for these simple lines.
fn argv(line: &str) -> Vec<String> {
    assert!(
        !line.contains(['"', '\'', '\\', ';']),
        "the test splits only plain command lines: {line}"
    );
    line.split_whitespace().map(str::to_string).collect()
}

/// The service manager's end of the readiness protocol, bound inside the root.
struct Notify(UnixDatagram);

impl Notify {
    fn new(root: &Chroot, at: &str) -> Self {
        let path = root.path(at);
        let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
        // The service user must be able to send to it.
        run("chmod", &["0666", path.to_str().unwrap()]);
        Notify(sock)
    }

    /// Waits for a datagram that contains `want`; panics with the daemon's log otherwise.
    fn expect(&self, want: &str, log: &Path) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            self.0.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
            let mut buf = [0u8; 512];
            if let Ok(n) = self.0.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                if msg.contains(want) {
                    return;
                }
                seen.push(msg);
            }
        }
        panic!(
            "no {want} from the daemon in 20 s (got {seen:?}); its log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

/// Waits until the daemon's log has `want` (lines written after `from` bytes).
fn wait_log(log: &Path, from: usize, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.get(from..).is_some_and(|t| t.contains(want)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {want:?} in the daemon's log in 20 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn log_len(log: &Path) -> usize {
    std::fs::metadata(log).map_or(0, |m| usize::try_from(m.len()).unwrap())
}

/// Uncomments the setting lines of the shipped example profile (as the file tells operators to).
fn enable_example_profile(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let uncommented = line.strip_prefix("# ").filter(|rest| {
            rest.starts_with('[')
                || rest
                    .split_once(" = ")
                    .is_some_and(|(k, _)| k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        });
        out += uncommented.unwrap_or(line);
        out.push('\n');
    }
    out
}

#[test]
#[ignore = "needs the built .deb and debootstrap: cargo xtask test runs it after building the package"]
fn package_installs_runs_reloads_upgrades_removes_and_purges() {
    let deb = deb();
    let mut root = root_for(&deb);

    // Install, with no systemd running in the root: nothing may be started.
    root.ok(&["dpkg", "-i", "/tmp/probed.deb"]);
    assert_eq!(dpkg_state(&root).as_deref(), Some("ii"));
    let passwd = root.ok(&["getent", "passwd", "probed"]);
    let (uid, gid) = account(&root, "probed");
    assert!(uid < 1000, "probed is not a system account: {passwd}");
    assert!(
        passwd.trim().ends_with(":/var/lib/probed:/usr/sbin/nologin"),
        "{passwd}"
    );
    let group = root.ok(&["getent", "group", "probed"]);
    assert!(group.starts_with(&format!("probed:x:{gid}:")), "{group}");
    assert_eq!(mode(&root.path("/var/lib/probed")), (uid, gid, 0o750));
    // The config: readable by the service's group only, and dpkg keeps that on upgrades.
    assert_eq!(mode(&root.path(CONFFILE)), (0, gid, 0o640));
    assert_eq!(
        root.ok(&["dpkg-statoverride", "--list", CONFFILE]).trim(),
        format!("root probed 640 {CONFFILE}")
    );
    let validated = root.ok(&["probed", "validate", CONFFILE]);
    assert_eq!(validated.trim(), "ok: 0 profiles, 0 endpoints");
    // ExecStartPre runs validate as the service user: it must be able to read the file.
    let as_user = root
        .command(Some((uid, gid)), &["probed", "validate", CONFFILE], &[])
        .output()
        .unwrap();
    assert!(as_user.status.success(), "validate as probed: {as_user:?}");
    for page in [
        "probed.8.gz",
        "probed-run.8.gz",
        "probed-status.8.gz",
        "probed-validate.8.gz",
    ] {
        assert!(root.path("/usr/share/man/man8").join(page).is_file(), "{page} missing");
    }
    assert!(
        root.path("/usr/share/man/man5/probed.toml.5.gz").is_file(),
        "probed.toml.5.gz missing"
    );
    for completion in [
        "/usr/share/bash-completion/completions/probed",
        "/usr/share/zsh/vendor-completions/_probed",
        "/usr/share/fish/vendor_completions.d/probed.fish",
    ] {
        assert!(root.path(completion).is_file(), "{completion} missing");
    }
    // Enabled for the first boot (the links systemd reads), started by nothing.
    assert!(
        !root.path("/run/probed").exists(),
        "something ran the daemon during the install"
    );
    let link = std::fs::read_link(root.path(WANTS_LINK)).expect("the unit is not enabled");
    assert_eq!(link, Path::new(UNIT));
    // systemd-analyze in the root, where every program the unit names exists as installed.
    let verify = root.output(&["systemd-analyze", "verify", UNIT]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(
        verify.status.success() && said.trim().is_empty(),
        "systemd-analyze verify {UNIT}:\n{said}"
    );

    run_as_the_unit_does(&mut root, uid, gid);

    // An upgrade keeps the operator's edits, the account, the state.
    let edited = std::fs::read_to_string(root.path(CONFFILE)).unwrap();
    assert!(
        edited.contains("\n[[profile]]\n"),
        "the run left the example profile enabled"
    );
    let (next, next_deb) = next_version(&root, &deb);
    root.ok(&["dpkg", "-i", next_deb]);
    assert_eq!(root.ok(&["dpkg-query", "-W", "-f=${Version}", "probed"]), next);
    assert_eq!(std::fs::read_to_string(root.path(CONFFILE)).unwrap(), edited);
    assert!(!root.path("/etc/probed/probed.toml.dpkg-dist").exists());
    assert_eq!(mode(&root.path(CONFFILE)), (0, gid, 0o640));
    assert_eq!(account(&root, "probed"), (uid, gid));
    assert!(root.path("/var/lib/probed/state.json").is_file());
    // Installing the same version again works too.
    root.ok(&["dpkg", "-i", next_deb]);
    assert_eq!(dpkg_state(&root).as_deref(), Some("ii"));

    // Remove: the program goes; configuration, state and account stay.
    root.ok(&["dpkg", "--remove", "probed"]);
    assert_eq!(dpkg_state(&root).as_deref(), Some("rc"));
    assert!(!root.path("/usr/bin/probed").exists() && !root.path(UNIT).exists());
    assert_eq!(std::fs::read_to_string(root.path(CONFFILE)).unwrap(), edited);
    assert!(root.path("/var/lib/probed/state.json").is_file());
    assert_eq!(account(&root, "probed"), (uid, gid));

    // Purge: configuration, state, the override, the links and their record go; dpkg forgets
    // the package. The account stays (see postrm).
    root.ok(&["dpkg", "--purge", "probed"]);
    assert_eq!(dpkg_state(&root), None, "dpkg still knows probed");
    let listed = root.output(&["dpkg", "-l", "probed"]);
    assert!(!listed.status.success(), "dpkg -l probed: {listed:?}");
    for gone in ["/etc/probed", "/var/lib/probed", WANTS_LINK]
        .iter()
        .chain(HELPER_STATE)
    {
        assert!(
            std::fs::symlink_metadata(root.path(gone)).is_err(),
            "{gone} is still there after purge"
        );
    }
    // (It exits 1 when it lists nothing.)
    let overrides = root.output(&["dpkg-statoverride", "--list"]);
    assert_eq!(
        String::from_utf8_lossy(&overrides.stdout).trim(),
        "",
        "statoverrides left"
    );
    assert_eq!(account(&root, "probed"), (uid, gid));
}

/// Starts the installed binary as the unit does, without systemd: the unit's user and group,
/// RuntimeDirectory, ExecStartPre, ExecStart, UMask, the readiness protocol, ExecReload and
/// KillSignal, in a network namespace of its own. Not applied: capabilities and sandboxing
/// (the shipped config probes nothing, and the HTTP profile enabled later needs neither).
fn run_as_the_unit_does(root: &mut Chroot, uid: u32, gid: u32) {
    let unit = Unit::read(&root.path(UNIT));
    assert_eq!((unit.one("User"), unit.one("Group")), ("probed", "probed"));
    assert_eq!(unit.one("Type"), "notify");
    root.mount("bpf", "/sys/fs/bpf");
    let runtime = format!("/run/{}", unit.one("RuntimeDirectory"));
    let runtime_mode = unit.one("RuntimeDirectoryMode");
    let (u, g) = (uid.to_string(), gid.to_string());
    root.ok(&["install", "-d", "-o", &u, "-g", &g, "-m", runtime_mode, &runtime]);
    for pre in unit.all("ExecStartPre") {
        let (privileged, line) = pre.strip_prefix('+').map_or((false, pre), |l| (true, l));
        let argv = argv(line);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = root
            .command((!privileged).then_some((uid, gid)), &argv, &[])
            .output()
            .unwrap();
        assert!(out.status.success(), "ExecStartPre={pre}: {out:?}");
    }
    assert_eq!(mode(&root.path("/sys/fs/bpf/probed")), (uid, gid, 0o700));

    let notify = Notify::new(root, "/run/test-notify.sock");
    let log = root.path("/tmp/probed.log");
    let events = root.path("/tmp/probed.events");
    let start = argv(unit.one("ExecStart"));
    let start: Vec<&str> = start.iter().map(String::as_str).collect();
    let mut cmd = root.command(
        Some((uid, gid)),
        &start,
        &[("NOTIFY_SOCKET", "/run/test-notify.sock"), ("JOURNAL_STREAM", "8:4242")],
    );
    cmd.stdout(std::fs::File::create(&events).unwrap())
        .stderr(std::fs::File::create(&log).unwrap());
    let umask = u32::from_str_radix(unit.one("UMask"), 8).expect("UMask in octal");
    let ns = Netns::new("pkg");
    let netns = std::fs::File::open(ns.path()).expect("open the namespace");
    // SAFETY: setns(2) and umask(2) are async-signal-safe; the namespace's fd stays open in the
    // child until exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::umask(umask);
            Ok(())
        });
    }
    // chroot and env exec the daemon in turn, so this is its PID: $MAINPID.
    let pid = root.adopt(cmd.spawn().expect("start probed run in the root"));
    notify.expect("READY=1", &log);
    let sock = root.path(&format!("{runtime}/api.sock"));
    assert_eq!(mode(&sock), (uid, gid, 0o660), "the API socket");
    let status = root.ok(&["probed", "status", "--json"]);
    assert_eq!(status.trim(), "[]", "status of a daemon that probes nothing");

    // ExecReload, as systemctl reload runs it.
    let reload = |root: &Chroot| {
        let line = unit.one("ExecReload").replace("$MAINPID", &pid.to_string());
        let argv = argv(&line);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = root.command(Some((uid, gid)), &argv, &[]).output().unwrap();
        assert!(out.status.success(), "ExecReload: {out:?}");
    };
    let from = log_len(&log);
    reload(root);
    notify.expect("RELOADING=1", &log);
    notify.expect("READY=1", &log);
    wait_log(&log, from, "reloaded: 0 kept, 0 added, 0 removed");

    // The operator enables the example profile and reloads.
    let text = std::fs::read_to_string(root.path(CONFFILE)).unwrap();
    std::fs::write(root.path(CONFFILE), enable_example_profile(&text)).unwrap();
    let from = log_len(&log);
    reload(root);
    wait_log(&log, from, "reloaded: 0 kept, 3 added, 0 removed");
    let status = root.ok(&["probed", "status", "web", "--json"]);
    for endpoint in ["web-1", "web-2", "web-3"] {
        assert!(
            status.contains(&format!("\"{endpoint}\"")),
            "{endpoint} not in {status}"
        );
    }

    // KillSignal, and a clean stop within TimeoutStopSec.
    assert_eq!(unit.one("KillSignal"), "SIGTERM");
    let stop_s: u64 = unit.one("TimeoutStopSec").parse().unwrap();
    run("kill", &["-TERM", &pid.to_string()]);
    let exit = root.wait_exit(pid, Duration::from_secs(stop_s));
    let mut text = String::new();
    std::fs::File::open(&log).unwrap().read_to_string(&mut text).unwrap();
    assert!(
        exit.is_some_and(|s| s.success()),
        "probed did not stop cleanly ({exit:?}):\n{text}"
    );
    notify.expect("STOPPING=1", &log);
    assert!(!sock.exists(), "the API socket outlived the daemon");
    assert!(
        !root.path("/sys/fs/bpf/probed").exists(),
        "the pin directory outlived the daemon"
    );
    let state = root.path("/var/lib/probed/state.json");
    assert_eq!(mode(&state), (uid, gid, 0o600), "the state file");
    assert!(!text.contains("<3>"), "errors in the log:\n{text}");
}

/// Removes a directory on drop.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A systemctl for the root that behaves as if systemd were running: it records each call,
/// answers `is-active` from a file the start and stop calls keep, and passes the rest (enable,
/// disable, is-enabled, preset: files only) to the real one, told to work on the files (with
/// /run/systemd/system present it would ask the manager over D-Bus). PATH finds it first.
const FAKE_SYSTEMCTL: &str = r#"#!/bin/sh
echo "$*" >> /var/log/systemctl.calls
verb=
for arg in "$@"; do
    case "$arg" in -*) ;; *) if [ -z "$verb" ]; then verb=$arg; fi ;; esac
done
case "$verb" in
daemon-reload) exit 0 ;;
start|restart) touch /run/probed.active; exit 0 ;;
stop) rm -f /run/probed.active; exit 0 ;;
is-active) if [ -e /run/probed.active ]; then exit 0; else exit 3; fi ;;
*) SYSTEMD_OFFLINE=1 exec /usr/bin/systemctl "$@" ;;
esac
"#;

/// The verbs and units the maintainer scripts asked systemctl for since the last call, options
/// left out (`is-enabled probed.service`, `start probed.service`, `daemon-reload`).
fn systemctl_calls(root: &Chroot) -> Vec<String> {
    let path = root.path("/var/log/systemctl.calls");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    text.lines()
        .map(|l| {
            l.split_whitespace()
                .filter(|w| !w.starts_with('-'))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn has(calls: &[String], call: &str) -> bool {
    calls.iter().any(|c| c == call)
}

#[test]
#[ignore = "needs the built .deb and debootstrap: cargo xtask test runs it after building the package"]
fn package_scripts_drive_a_running_systemd() {
    let deb = deb();
    let root = root_for(&deb);
    std::fs::create_dir_all(root.path("/run/systemd/system")).unwrap();
    let fake = root.path("/usr/local/sbin/systemctl");
    std::fs::create_dir_all(fake.parent().unwrap()).unwrap();
    std::fs::write(&fake, FAKE_SYSTEMCTL).unwrap();
    run("chmod", &["0755", fake.to_str().unwrap()]);
    let active = root.path("/run/probed.active");

    // First install: systemd reloads its units, the service is enabled and started.
    root.ok(&["dpkg", "-i", "/tmp/probed.deb"]);
    let calls = systemctl_calls(&root);
    assert!(
        has(&calls, "daemon-reload") && has(&calls, "start probed.service"),
        "{calls:?}"
    );
    assert!(!has(&calls, "restart probed.service"), "{calls:?}");
    assert!(active.exists() && root.path(WANTS_LINK).is_symlink());

    // Upgrade: restarted, never stopped first (probing pauses for the restart only).
    let (_, next_deb) = next_version(&root, &deb);
    root.ok(&["dpkg", "-i", next_deb]);
    let calls = systemctl_calls(&root);
    assert!(has(&calls, "restart probed.service"), "{calls:?}");
    assert!(
        !has(&calls, "stop probed.service") && !has(&calls, "start probed.service"),
        "{calls:?}"
    );

    // The operator disables and stops it: an upgrade neither starts it nor enables it again.
    root.ok(&["systemctl", "disable", "probed.service"]);
    root.ok(&["systemctl", "stop", "probed.service"]);
    let _ = systemctl_calls(&root);
    root.ok(&["dpkg", "-i", next_deb]);
    let calls = systemctl_calls(&root);
    assert!(
        !has(&calls, "start probed.service") && !has(&calls, "restart probed.service"),
        "{calls:?}"
    );
    assert!(!active.exists() && !root.path(WANTS_LINK).exists(), "{calls:?}");

    // Enabled and running again, then removed: prerm stops it, postrm reloads systemd.
    root.ok(&["systemctl", "enable", "probed.service"]);
    root.ok(&["systemctl", "start", "probed.service"]);
    let _ = systemctl_calls(&root);
    root.ok(&["dpkg", "--remove", "probed"]);
    let calls = systemctl_calls(&root);
    assert!(
        has(&calls, "stop probed.service") && has(&calls, "daemon-reload"),
        "{calls:?}"
    );
    assert!(!active.exists());

    // Purge: the links go with the record of them.
    root.ok(&["dpkg", "--purge", "probed"]);
    assert!(!root.path(WANTS_LINK).exists());
    for state in HELPER_STATE {
        assert!(!root.path(state).exists(), "{state} is still there after purge");
    }
}
