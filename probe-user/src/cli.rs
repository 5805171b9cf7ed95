//! Command-line interface: one clap enum, one function per subcommand.
use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use aya::programs::XdpMode;
use clap::{Parser, Subcommand, ValueEnum};
use probed::kernel::{pin::PinDir, rx::RxProgram};

mod check;
mod check_l4;

#[derive(Parser)]
#[command(
    name = "probed",
    version,
    about = "Kernel-accelerated health checks for load-balancer backends"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Attach the reply matcher to an interface and print its counters until Ctrl-C / SIGTERM.
    Attach {
        /// Interface to attach probe_rx to (in the current network namespace).
        #[arg(long)]
        iface: String,
        /// Where to pin the maps, on bpffs.
        #[arg(long, default_value = "/sys/fs/bpf/probed")]
        pin_dir: PathBuf,
        /// XDP attach mode.
        #[arg(long, value_enum, default_value_t = Mode::Skb)]
        mode: Mode,
        /// How often to print the counters, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        every_ms: u64,
        /// Stop by itself after this many seconds (0 = run until signalled).
        #[arg(long, default_value_t = 0)]
        duration_s: u64,
    },
    /// Check a configuration file and report every problem in it; nothing is applied.
    Validate {
        /// The TOML configuration file.
        file: PathBuf,
    },
    /// Probe one target now: one line per probe; exit 0 only if every probe was healthy.
    Check(check::CheckArgs),
}

/// XDP attach mode, as the operator names it.
#[derive(Clone, Copy, ValueEnum)]
pub enum Mode {
    /// Generic XDP: works on every device.
    Skb,
    /// Native XDP in the driver.
    Driver,
    /// Let the kernel choose.
    Auto,
}

impl From<Mode> for XdpMode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Skb => XdpMode::Skb,
            Mode::Driver => XdpMode::Driver,
            Mode::Auto => XdpMode::Default,
        }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Attach {
            iface,
            pin_dir,
            mode,
            every_ms,
            duration_s,
        } => attach(&iface, pin_dir, mode, every_ms, duration_s),
        Command::Validate { file } => Ok(validate(&file)),
        Command::Check(args) => check::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("probed: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Exit 0 with a summary, or 2 with one error per line.
fn validate(file: &std::path::Path) -> ExitCode {
    match probed::config::Config::load(file) {
        Ok(config) => {
            println!(
                "ok: {} profiles, {} endpoints",
                config.profiles.len(),
                config.endpoint_count()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in errors.iter() {
                println!("{e}");
            }
            ExitCode::from(2)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")
}

fn attach(iface: &str, pin_dir: PathBuf, mode: Mode, every_ms: u64, duration_s: u64) -> anyhow::Result<ExitCode> {
    let pins = PinDir::create(&pin_dir).with_context(|| format!("prepare pin directory {}", pin_dir.display()))?;
    let rx = RxProgram::attach(iface, mode.into(), pins).with_context(|| format!("attach probe_rx to {iface}"))?;
    println!(
        "probe_rx attached to {} (maps pinned in {})",
        rx.iface(),
        rx.pin_dir().display()
    );
    runtime()?.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("install SIGTERM handler")?;
        let mut tick = tokio::time::interval(Duration::from_millis(every_ms.max(10)));
        let deadline = (duration_s > 0).then(|| tokio::time::Instant::now() + Duration::from_secs(duration_s));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let c = rx.counters()?;
                    println!("syn_ack={} rst={} icmp_unreach={} other={}", c.syn_ack, c.rst, c.icmp_unreach, c.other);
                    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                        break;
                    }
                }
                _ = tokio::signal::ctrl_c() => break,
                _ = term.recv() => break,
            }
        }
        anyhow::Ok(())
    })?;
    drop(rx);
    println!("probe_rx detached, pins removed");
    Ok(ExitCode::SUCCESS)
}
