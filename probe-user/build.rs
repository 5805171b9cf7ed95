//! Builds the eBPF object (probe-ebpf) so the daemon embeds it and ships as one binary, and,
//! with the `fixtures` feature (the tests crate's), the fixtures' object beside it.
//!
//! The eBPF crate needs `-Z build-std=core` for `bpfel-unknown-none`, which needs the source
//! of `core`: Debian's rustc-web toolchain ships it, the machine's rustup toolchain does not.
//! `cargo xtask setup` installs that toolchain and bpf-linker.
use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
/// probe_rx, embedded by the daemon as `BPF_OBJECT`.
const OBJECT: &str = "probe.bpf.o";
/// The passive observers, embedded as `PASSIVE_OBJECT`.
const PASSIVE_OBJECT: &str = "passive.bpf.o";
/// test_reflector, embedded as `FIXTURE_OBJECT` with the `fixtures` feature only.
const FIXTURES_OBJECT: &str = "fixtures.bpf.o";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    let ebpf_dir = root.join("probe-ebpf");
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    for dir in ["probe-ebpf/src", "probe-common/src"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-changed={}", ebpf_dir.join("Cargo.toml").display());
    println!("cargo:rerun-if-env-changed=PROBED_EBPF_OBJ");
    println!("cargo:rerun-if-env-changed=PROBED_EBPF_PASSIVE_OBJ");
    println!("cargo:rerun-if-env-changed=PROBED_EBPF_FIXTURES_OBJ");
    // The fixtures' object is built only when a crate that loads it (the tests) asks.
    let fixtures = env::var_os("CARGO_FEATURE_FIXTURES").is_some();

    // Objects built elsewhere may be handed in (packaging, cross builds).
    if let Ok(prebuilt) = env::var("PROBED_EBPF_OBJ") {
        copy(Path::new(&prebuilt), &out_dir.join(OBJECT), "PROBED_EBPF_OBJ");
        let Ok(passive) = env::var("PROBED_EBPF_PASSIVE_OBJ") else {
            panic!("PROBED_EBPF_OBJ is set: set PROBED_EBPF_PASSIVE_OBJ too");
        };
        copy(
            Path::new(&passive),
            &out_dir.join(PASSIVE_OBJECT),
            "PROBED_EBPF_PASSIVE_OBJ",
        );
        if fixtures {
            let Ok(prebuilt) = env::var("PROBED_EBPF_FIXTURES_OBJ") else {
                panic!("PROBED_EBPF_OBJ is set and the `fixtures` feature is on: set PROBED_EBPF_FIXTURES_OBJ too");
            };
            copy(
                Path::new(&prebuilt),
                &out_dir.join(FIXTURES_OBJECT),
                "PROBED_EBPF_FIXTURES_OBJ",
            );
        }
        return;
    }
    for tool in [DEBIAN_RUSTC, DEBIAN_CARGO] {
        if !Path::new(tool).exists() {
            panic!("{tool} is missing: the eBPF build needs Debian's rustc-web toolchain; run `cargo xtask setup`");
        }
    }
    let cargo_home = env::var("CARGO_HOME").map_or_else(
        |_| PathBuf::from(env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cargo"),
        PathBuf::from,
    );
    let linker_dir = cargo_home.join("bin");
    if !linker_dir.join("bpf-linker").exists() {
        panic!(
            "bpf-linker is missing from {}: run `cargo xtask setup`",
            linker_dir.display()
        );
    }
    let path = format!("{}:{}", linker_dir.display(), env::var("PATH").unwrap_or_default());
    let target_dir = root.join("target").join("ebpf");

    let mut cmd = Command::new(DEBIAN_CARGO);
    // The outer cargo exports its own toolchain and flags to build scripts; none of them may
    // leak into the nested build, which uses a different compiler and target.
    for (key, _) in env::vars() {
        if key.starts_with("CARGO_") && key != "CARGO_HOME"
            || key.starts_with("RUSTC")
            || key == "RUSTFLAGS"
            || key == "RUSTDOC"
        {
            cmd.env_remove(key);
        }
    }
    cmd.current_dir(&ebpf_dir)
        .env("PATH", path)
        .env("RUSTC", DEBIAN_RUSTC)
        .env("RUSTC_BOOTSTRAP", "1")
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            ["-C", "debuginfo=2", "-C", "link-arg=--btf"].join("\u{1f}"),
        )
        .args([
            "build",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--bin",
            "probe",
            "--bin",
            "passive",
            "--target-dir",
        ])
        .arg(&target_dir);
    if fixtures {
        // Same invocation, so core and the shared parsers are compiled once for both.
        cmd.args(["--bin", "probe-fixtures"]);
    }
    let status = cmd.status().unwrap_or_else(|e| panic!("run {DEBIAN_CARGO}: {e}"));
    if !status.success() {
        panic!("building probe-ebpf failed ({status}); see the compiler output above");
    }
    let built = target_dir.join("bpfel-unknown-none/release");
    copy(&built.join("probe"), &out_dir.join(OBJECT), "the built probe object");
    copy(
        &built.join("passive"),
        &out_dir.join(PASSIVE_OBJECT),
        "the built passive object",
    );
    if fixtures {
        copy(
            &built.join("probe-fixtures"),
            &out_dir.join(FIXTURES_OBJECT),
            "the built fixtures object",
        );
    }
}

fn copy(from: &Path, to: &Path, what: &str) {
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {what} ({}): {e}", from.display()));
}
