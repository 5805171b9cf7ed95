//! `cargo xtask`: set-up, build, test, demo, bench and inspection for probed.
//!
//! xtask itself depends on nothing that needs the eBPF toolchain, so `cargo xtask setup`
//! works on a machine that has none of it yet.
mod bench;
mod build;
mod cycles;
mod deb;
mod demo;
mod fuzz;
mod inspect;
mod lint;
mod setup;
mod test;
mod util;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask", about = "Build, test and run probed")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Install what is missing: Debian packages, bpf-linker, bpffs mount.
    Setup,
    /// Build the eBPF object and the userspace that embeds it.
    Build {
        #[arg(long)]
        release: bool,
    },
    /// Set up, build, then run the unit and the privileged integration tests.
    Test {
        /// Only run tests whose name contains this; the integration tests' names start with
        /// their layer (`kernel::`, `probes::`, `daemon::`, `api::`, `sinks::`, `dns::`,
        /// `cluster::`, `package::`), so `cargo xtask test -- kernel::` runs one layer.
        filter: Option<String>,
    },
    /// Build a demo fleet in network namespaces and run probed against it.
    Demo {
        /// Stop by itself after this many seconds (default: run until Ctrl-C).
        #[arg(long)]
        seconds: Option<u64>,
        /// Three probed nodes sharing verdicts (`[cluster]`) instead of one.
        #[arg(long)]
        cluster: bool,
    },
    /// Build the Debian package target/debian/probed_VERSION_ARCH.deb from the release build.
    Deb,
    /// Benchmarks (not tests), the bench crate's binaries: `l4`, `http`, `schedule`, `sinks`,
    /// `peers`, `dns`, `million`, `cluster`.
    Bench {
        which: String,
        /// Passed to the benchmark (`peers`: --sizes, --kinds, --seconds, --only; `dns`: --seconds,
        /// --outstanding, --steps, --only; `cluster`: --nodes, --targets, --seconds).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        extra: Vec<String>,
    },
    /// Runs the cargo-fuzz targets in fuzz/ for N seconds each (all, or TARGET).
    Fuzz {
        #[arg(long)]
        seconds: u64,
        target: Option<String>,
    },
    /// cargo fmt --check and clippy -D warnings, probe-ebpf included (CI runs it first).
    Lint,
    /// Show loaded probe programs and pinned maps with bpftool.
    Inspect {
        /// Pin directory to dump.
        #[arg(long, default_value = "/sys/fs/bpf/probed")]
        pin_dir: String,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Setup => setup::run(),
        Command::Build { release } => build::run(release),
        Command::Test { filter } => test::run(filter.as_deref()),
        Command::Demo { seconds, cluster } => demo::run(seconds, cluster),
        Command::Deb => deb::run(),
        Command::Bench { which, extra } => bench::run(&which, &extra),
        Command::Inspect { pin_dir } => inspect::run(&pin_dir),
        Command::Lint => lint::run(),
        Command::Fuzz { seconds, target } => fuzz::run(seconds, target.as_deref()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
