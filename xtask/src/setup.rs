//! `cargo xtask setup`: installs only what is missing, and says what it did.
use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context};

use crate::util::{output, sh};

/// Debian packages the build, the tests and the demo need.
const PACKAGES: &[&str] = &[
    "rustc-web",    // rustc 1.96 with the source of core, for -Z build-std (eBPF)
    "cargo-web",    // its cargo
    "rust-web-src", // that source
    "llvm-22-dev",  // bpf-linker links against LLVM 22
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
    "bpftool",  // inspection
    "iproute2", // ip netns, veth
    "nftables", // drop/reject rules in tests, backend rules
    "ethtool",  // GRO on veth (needed for XDP_TX on veth)
    "iputils-ping",
    "procps",         // sysctl inside test namespaces
    "prometheus",     // promtool: the tests lint the metrics exposition with it
    "haproxy",        // the haproxy sink's tests drive a real HAProxy through its admin socket
    "nginx",          // `bench peers`: the web fleet both checkers probe; the HTTP conformance zoo
    "apache2",        // the HTTP conformance zoo: each check's verdict against curl's
    "lighttpd",       // the HTTP conformance zoo
    "curl",           // the HTTP conformance zoo's reference client
    "python3",        // http.server in the zoo; the forwarded-flow client and the local user in kernel::node_trust
    "python3-venv",   // the gRPC tests' virtual environment (grpcio from PyPI: Debian has no health service)
    "openssl",        // `bench peers`: the fleet's TLS certificate
    "bind9-dnsutils", // dig: the DNS tests ask the daemon with a real client
    "dnsperf",        // `bench dns`: the load generator
    "gdnsd",          // `bench dns`: the established failover DNS server probed is measured against
    "knot",           // knotd: the reference authoritative server dns::reference compares answers with
    "bird2",          // the route sink's tests: BIRD on the LB nodes and on the router, peering by BGP
    "frr",            // the route sink's tests: FRR (zebra, bgpd) as one node's routing daemon
    "faketime",       // cluster::chaos: a node whose clock is 20 s off
    "tmux",           // `probed status --watch` is tested in a tmux pane
    "dpkg-dev",       // `xtask deb`: dpkg-deb, dpkg-shlibdeps, dpkg-parsechangelog
    "binutils",       // `xtask deb`: strip; the package test: objdump, readelf
    "lintian",        // the package test checks the .deb with it
    "debootstrap",    // the package test installs the .deb into a throwaway Debian root
    // The keys debootstrap checks the mirror's signatures with.
    "debian-archive-keyring",
    "systemd", // systemd-analyze verify on the packaged unit (nothing is started)
];
const BPF_LINKER_VERSION: &str = "0.13.0";
/// The gRPC tests' servers and reference client: grpcio and its standard health service, from
/// PyPI into a virtual environment under target/ (`GRPC_VENV`), pinned.
const GRPC_PYTHON: &[&str] = &["grpcio==1.85.3", "grpcio-health-checking==1.85.1"];
/// Where that environment lives, under the target directory.
const GRPC_VENV: &str = "grpc-venv";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

pub fn run() -> anyhow::Result<()> {
    crate::util::require_root("setup")?;
    let started = std::time::Instant::now();
    let mut did = Vec::new();
    let missing: Vec<&str> = PACKAGES.iter().copied().filter(|p| !package_installed(p)).collect();
    if !missing.is_empty() {
        install_packages(&missing)?;
        did.push(format!("installed {}", missing.join(" ")));
    }
    if !bpf_linker_ok() {
        install_bpf_linker()?;
        did.push(format!("built bpf-linker {BPF_LINKER_VERSION}"));
    }
    if !grpc_venv_ok() {
        make_grpc_venv()?;
        did.push(format!("made the gRPC test environment ({})", GRPC_PYTHON.join(" ")));
    }
    if mount_bpffs()? {
        did.push("mounted bpffs on /sys/fs/bpf".into());
    }
    if did.is_empty() {
        eprintln!(
            "setup: everything is already in place ({:.1}s)",
            started.elapsed().as_secs_f64()
        );
    } else {
        eprintln!("setup: {} ({:.0}s)", did.join("; "), started.elapsed().as_secs_f64());
    }
    Ok(())
}

fn package_installed(name: &str) -> bool {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", name]))
        .is_some_and(|s| s.contains("install ok installed"))
}

fn install_packages(pkgs: &[&str]) -> anyhow::Result<()> {
    sh(Command::new("apt-get").arg("update").arg("-q"))
        .context("apt-get update failed: check that the Debian package mirror is reachable")?;
    // Servers (nginx, apache2, lighttpd, haproxy) are installed to be started by the tests in their own
    // namespaces, never as services on the machine: policy-rc.d tells the maintainer scripts
    // not to start them, for the time of the install (only if the machine has none of its own).
    let policy = PathBuf::from("/usr/sbin/policy-rc.d");
    let ours = !policy.exists();
    if ours {
        std::fs::write(
            &policy,
            "#!/bin/sh\n# cargo xtask setup: start no service while installing\nexit 101\n",
        )
        .context("write /usr/sbin/policy-rc.d")?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o755)).context("chmod policy-rc.d")?;
    }
    let installed = sh(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(pkgs)
        .env("DEBIAN_FRONTEND", "noninteractive"));
    if ours {
        let _ = std::fs::remove_file(&policy);
    }
    installed.with_context(|| {
        format!(
            "could not install {}: install them by hand with apt-get",
            pkgs.join(" ")
        )
    })
}

fn cargo_bin() -> PathBuf {
    let home = std::env::var("CARGO_HOME").map_or_else(
        |_| PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cargo"),
        PathBuf::from,
    );
    home.join("bin")
}

fn bpf_linker_ok() -> bool {
    output(Command::new(cargo_bin().join("bpf-linker")).arg("--version"))
        .is_some_and(|v| v.contains(BPF_LINKER_VERSION))
}

fn install_bpf_linker() -> anyhow::Result<()> {
    if !PathBuf::from(LLVM_PREFIX).join("bin/llvm-config").exists() {
        bail!("{LLVM_PREFIX}/bin/llvm-config is missing: install llvm-22-dev");
    }
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["install", "bpf-linker", "--locked", "--version", BPF_LINKER_VERSION])
        .args(["--no-default-features", "--features", "llvm-22"])
        .env("LLVM_PREFIX", LLVM_PREFIX);
    sh(&mut cmd).context("building bpf-linker failed; it needs llvm-22-dev and a reachable crates registry")
}

fn grpc_python() -> PathBuf {
    crate::util::target_dir().join(GRPC_VENV).join("bin/python")
}

/// Whether the environment has the pinned grpcio (a version marker written after the install).
fn grpc_venv_ok() -> bool {
    let marker = crate::util::target_dir().join(GRPC_VENV).join("pinned");
    std::fs::read_to_string(marker).is_ok_and(|s| s == GRPC_PYTHON.join(" ")) && grpc_python().exists()
}

fn make_grpc_venv() -> anyhow::Result<()> {
    let dir = crate::util::target_dir().join(GRPC_VENV);
    let _ = std::fs::remove_dir_all(&dir);
    sh(Command::new("/usr/bin/python3").arg("-m").arg("venv").arg(&dir))
        .context("python3 -m venv failed: install python3-venv")?;
    sh(Command::new(grpc_python())
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
        .args(GRPC_PYTHON))
    .context("pip could not install grpcio: check that PyPI is reachable")?;
    std::fs::write(dir.join("pinned"), GRPC_PYTHON.join(" ")).context("write the environment's marker")
}

/// Mounts bpffs on /sys/fs/bpf when it is not mounted; returns whether it did.
fn mount_bpffs() -> anyhow::Result<bool> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").context("read /proc/self/mounts")?;
    if mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/bpf") && l.starts_with("bpf "))
    {
        return Ok(false);
    }
    sh(Command::new("mount").args(["-t", "bpf", "bpf", "/sys/fs/bpf"]))
        .context("mount bpffs on /sys/fs/bpf (needs root)")?;
    Ok(true)
}
