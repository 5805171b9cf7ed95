//! `cargo xtask fuzz --seconds N [TARGET]`: runs the cargo-fuzz targets of fuzz/ (all, or one)
//! for N seconds each and prints executions and crashes per target. Installs cargo-fuzz when
//! it is missing. The machine's stable toolchain builds the sanitizer flags with
//! RUSTC_BOOTSTRAP=1, as the eBPF build does. Never part of `cargo xtask test`.
use std::{path::Path, process::Command};

use anyhow::{bail, Context};

use crate::util::{output, render, root};

/// A fixed cargo-fuzz release, installed with its lock file.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

pub fn run(seconds: u64, target: Option<&str>) -> anyhow::Result<()> {
    if seconds == 0 {
        bail!("--seconds 0: give each target at least 1 second");
    }
    ensure_cargo_fuzz()?;
    let fuzz_dir = root().join("fuzz");
    let listed = output(cargo_fuzz(&fuzz_dir).arg("list")).context("`cargo fuzz list` failed in fuzz/")?;
    let all: Vec<&str> = listed.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let chosen: Vec<&str> = match target {
        Some(t) if all.contains(&t) => vec![t],
        Some(t) => bail!("no fuzz target {t:?}: the targets are {}", all.join(", ")),
        None => all.clone(),
    };
    let mut summary = Vec::new();
    for t in &chosen {
        summary.push((t.to_string(), run_target(&fuzz_dir, t, seconds)?));
    }
    eprintln!("\nfuzz summary ({seconds} s per target):");
    let mut crashed = false;
    for (t, r) in &summary {
        eprintln!(
            "  {t:<16} {:>12} executions  {:>6} exec/s  corpus {:>5}  crashes {}",
            r.execs,
            r.execs / seconds.max(1),
            r.corpus,
            r.crashes.len()
        );
        for c in &r.crashes {
            eprintln!("      {c}");
        }
        crashed |= !r.crashes.is_empty();
    }
    if crashed {
        bail!("crashes found: reproduce with `cargo fuzz run TARGET ARTIFACT` in fuzz/");
    }
    Ok(())
}

#[derive(Default)]
struct Run {
    execs: u64,
    corpus: u64,
    crashes: Vec<String>,
}

fn cargo_fuzz(fuzz_dir: &Path) -> Command {
    let mut c = Command::new("cargo");
    c.arg("fuzz").current_dir(fuzz_dir).env("RUSTC_BOOTSTRAP", "1");
    c
}

fn ensure_cargo_fuzz() -> anyhow::Result<()> {
    if output(Command::new("cargo").args(["fuzz", "--version"])).is_some() {
        return Ok(());
    }
    eprintln!("cargo-fuzz is missing: installing {CARGO_FUZZ_VERSION} from crates.io");
    crate::util::sh(Command::new("cargo").args(["install", "cargo-fuzz", "--locked", "--version", CARGO_FUZZ_VERSION]))
}

/// Runs one target with the committed seeds (fuzz/seeds/TARGET) beside its working corpus.
fn run_target(fuzz_dir: &Path, target: &str, seconds: u64) -> anyhow::Result<Run> {
    let corpus = fuzz_dir.join("corpus").join(target);
    std::fs::create_dir_all(&corpus).with_context(|| format!("create {}", corpus.display()))?;
    let artifacts = fuzz_dir.join("artifacts").join(target);
    let before = list(&artifacts);
    let mut cmd = cargo_fuzz(fuzz_dir);
    // Optimised, with debug assertions and overflow checks: an overflow is a finding too.
    cmd.args(["run", "-O", "-a", target]).arg(&corpus);
    let seeds = fuzz_dir.join("seeds").join(target);
    if seeds.is_dir() {
        cmd.arg(&seeds);
    }
    let dict = fuzz_dir.join("dict").join(format!("{target}.dict"));
    cmd.arg("--");
    if dict.is_file() {
        cmd.arg(format!("-dict={}", dict.display()));
    }
    cmd.args([format!("-max_total_time={seconds}"), "-print_final_stats=1".into()]);
    eprintln!("+ {}", render(&cmd));
    let out = cmd
        .output()
        .with_context(|| format!("could not start {}", render(&cmd)))?;
    let log = String::from_utf8_lossy(&out.stderr);
    // libFuzzer's own report stays readable: its last lines and any crash report.
    for line in log
        .lines()
        .filter(|l| l.starts_with("stat::") || l.contains("ERROR") || l.contains("panicked") || l.starts_with("Done "))
    {
        eprintln!("  {line}");
    }
    let stat = |name: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(&format!("stat::{name}:")))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let crashes: Vec<String> = list(&artifacts).into_iter().filter(|a| !before.contains(a)).collect();
    if !out.status.success() && crashes.is_empty() {
        eprintln!(
            "{}",
            log.lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        );
        bail!(
            "cargo fuzz run {target} failed ({}) without leaving a crash artifact",
            out.status
        );
    }
    Ok(Run {
        execs: stat("number_of_executed_units"),
        corpus: list(&corpus).len() as u64,
        crashes,
    })
}

fn list(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path().display().to_string())
                .collect()
        })
        .unwrap_or_default()
}
