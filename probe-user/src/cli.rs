//! Command-line interface: one clap enum, one function per subcommand.
use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use aya::programs::XdpMode;
use clap::{Parser, Subcommand, ValueEnum};
use probed::kernel::{pin::PinDir, rx::RxProgram};

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
    /// Probe one target now, print one line per probe; exit 0 only if every probe was healthy.
    Check(CheckArgs),
}

/// The target and settings of a one-shot check.
#[derive(clap::Args)]
struct CheckArgs {
    /// What to probe: udp://HOST:PORT (HOST may be a name, an IPv4 address or [IPv6]).
    url: String,
    /// UDP: the request payload (may be empty).
    #[arg(long, default_value = "")]
    send: String,
    /// UDP: a reply must contain this string (request/response mode); without it, silence
    /// is success and only an ICMP error fails (plain mode).
    #[arg(long)]
    expect: Option<String>,
    /// Number of probes.
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// Pause between the end of one probe and the start of the next, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    interval: u64,
    /// How long each probe waits, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    timeout: u64,
    /// Print JSON lines instead of text.
    #[arg(long)]
    json: bool,
    /// Interface for the kernel engine (plain UDP); default: the one holding the source
    /// address the routing table picks for the target.
    #[arg(long)]
    iface: Option<String>,
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
        Command::Check(args) => check(&args),
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

/// Dispatches a one-shot check on the URL's scheme.
fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let (scheme, rest) = args
        .url
        .split_once("://")
        .with_context(|| format!("{}: write the target as a URL, e.g. udp://HOST:PORT", args.url))?;
    match scheme {
        "udp" => check_udp(rest, args),
        other => anyhow::bail!("{other}://: unsupported scheme (supported: udp://)"),
    }
}

/// Resolves `HOST:PORT` (a trailing slash allowed) to its first address.
fn resolve(authority: &str) -> anyhow::Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    let authority = authority.trim_end_matches('/');
    authority
        .to_socket_addrs()
        .with_context(|| format!("{authority}: expected HOST:PORT, with [brackets] around an IPv6 address"))?
        .next()
        .with_context(|| format!("{authority}: the name has no address"))
}

/// One probe's line of output: text or JSON with the same fields.
fn report(json: bool, target: std::net::SocketAddr, outcome: probed::probe::udp::UdpOutcome, elapsed: Duration) {
    let ms = elapsed.as_secs_f64() * 1000.0;
    let verdict = if outcome.healthy() { "healthy" } else { "unhealthy" };
    if json {
        // A struct, not json!(), so the fields keep the order of the text line.
        #[derive(serde::Serialize)]
        struct Line {
            target: String,
            healthy: bool,
            outcome: String,
            time_ms: f64,
        }
        let line = Line {
            target: target.to_string(),
            healthy: outcome.healthy(),
            outcome: outcome.to_string(),
            time_ms: (ms * 1000.0).round() / 1000.0,
        };
        let line = serde_json::to_string(&line).expect("a struct of strings and numbers serialises");
        println!("{line}");
    } else {
        println!("{target} {verdict} {outcome} {ms:.1}ms");
    }
}

/// `probed check udp://...`: plain mode through the kernel engine, request/response mode
/// through the socket prober.
fn check_udp(authority: &str, args: &CheckArgs) -> anyhow::Result<ExitCode> {
    use probed::probe::udp::{UdpOutcome, UdpProber, UdpRequest};
    let target = resolve(authority)?;
    let timeout = Duration::from_millis(args.timeout);
    let interval = Duration::from_millis(args.interval);
    let send: std::sync::Arc<[u8]> = std::sync::Arc::from(args.send.as_bytes());
    let mut all_healthy = true;
    let rt = runtime()?;
    if let Some(expect) = &args.expect {
        let prober = UdpProber::new(1);
        let req = UdpRequest {
            target,
            send,
            expect: std::sync::Arc::from(expect.as_bytes()),
            timeout,
            source: None,
        };
        rt.block_on(async {
            for i in 0..args.count {
                let r = prober.probe(&req).await;
                all_healthy &= r.outcome.healthy();
                report(args.json, target, r.outcome, r.elapsed);
                if i + 1 < args.count {
                    tokio::time::sleep(interval).await;
                }
            }
        });
    } else {
        use probed::engine::{source, EngineConfig, L4Engine, L4Proto, L4Request};
        let iface = match &args.iface {
            Some(i) => i.clone(),
            None => {
                let src = source::route_source(target.ip()).with_context(|| format!("no route to {}", target.ip()))?;
                source::iface_of(src).with_context(|| {
                    format!("no interface holds {src}, the source address for {target}; pass --iface")
                })?
            }
        };
        let pin_dir = PathBuf::from(format!("/sys/fs/bpf/probed-check-{}", std::process::id()));
        let (engine, mut results) = L4Engine::start(EngineConfig::new(&iface, &pin_dir))
            .with_context(|| format!("start the kernel engine on {iface} (needs root, and bpffs on /sys/fs/bpf)"))?;
        rt.block_on(async {
            for i in 0..args.count {
                let req = L4Request {
                    token: i as u64,
                    target,
                    proto: L4Proto::Udp { payload: send.clone() },
                    timeout,
                };
                engine.submit(vec![req]).context("hand the probe to the engine")?;
                // The engine answers every probe by its timeout; the margin covers a late claim.
                let r = tokio::time::timeout(timeout + Duration::from_secs(2), results.recv())
                    .await
                    .ok()
                    .flatten()
                    .context("the engine gave no result")?;
                let outcome = UdpOutcome::try_from(r.outcome)
                    .map_err(|o| anyhow::anyhow!("the engine reported a TCP outcome ({o}) for a UDP probe"))?;
                all_healthy &= outcome.healthy();
                report(args.json, target, outcome, r.elapsed);
                if i + 1 < args.count {
                    tokio::time::sleep(interval).await;
                }
            }
            anyhow::Ok(())
        })?;
        drop(engine);
    }
    Ok(if all_healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
