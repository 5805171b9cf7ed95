//! Command-line interface: one clap enum, one function per subcommand.
use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use probed::kernel::{pin::PinDir, rx::RxProgram, AttachMode};

mod check;
mod events;
mod generate;
mod logging;
mod notify;
mod term;

#[derive(Parser)]
#[command(
    name = "probed",
    version,
    about = "Kernel-accelerated health checks for load-balancer backends"
)]
struct Cli {
    /// How log lines look: `auto` is `journal` under systemd (priority prefixes, no
    /// timestamps: journald adds its own), else `text`; `json` is one object per line.
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Auto)]
    log_format: logging::LogFormat,
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
        #[arg(long, value_enum, default_value_t = Mode::Auto)]
        mode: Mode,
        /// How often to print the counters, in milliseconds: 10 to 3600000.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
        every_ms: u64,
        /// Stop by itself after this many seconds (0 = run until signalled): at most 31536000
        /// (a year).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_ATTACH_S))]
        duration_s: u64,
    },
    /// Check a configuration file and report every problem in it; nothing is applied.
    Validate {
        /// The TOML configuration file.
        file: PathBuf,
    },
    /// Run the daemon: probe every endpoint of the configuration, serve the API, write events.
    ///
    /// SIGHUP re-reads the file and applies it whole (a bad file is refused and the running
    /// configuration stays). SIGTERM or Ctrl-C saves the last known health, detaches the
    /// programs and removes the pins.
    Run {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Show endpoint and profile monitor status from a running daemon, as a table.
    Status {
        /// Only this profile.
        profile: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
        /// Print the API's JSON instead of a table.
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Redraw the table in place until q or Ctrl-C: problems first, endpoints in
        /// transition marked with their results so far, a summary line on top.
        #[arg(long)]
        watch: bool,
        /// How often --watch redraws, in milliseconds: 100 to 60000.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
        every_ms: u64,
    },
    /// Show each sink of a running daemon: what it follows, what its structure holds, whether
    /// that is what it should hold, and its errors.
    Sinks {
        #[command(flatten)]
        api: ApiArgs,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show a running daemon's recent endpoint changes, one line each (it keeps the last
    /// 1000); with --follow, keep printing new ones as they happen until Ctrl-C.
    Events {
        /// Only this profile.
        profile: Option<String>,
        #[command(flatten)]
        api: ApiArgs,
        /// Keep printing changes as they happen.
        #[arg(long, short)]
        follow: bool,
        /// How many recent changes to print first: 0 to 1000.
        #[arg(long, short = 'n', default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=1000))]
        lines: u64,
        /// Print each change as the JSON line the events file has, instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show a running daemon's cluster: its share of the probing, the members, and what each
    /// node gossips (`[cluster]`).
    Cluster {
        #[command(flatten)]
        api: ApiArgs,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Ask a running daemon to re-read its configuration file and apply it (like SIGHUP).
    Reload {
        #[command(flatten)]
        api: ApiArgs,
    },
    /// Enable an endpoint in a running daemon (undoes disable and always-serve; it starts over
    /// in CheckingEndpoint), or without ENDPOINT the whole profile. Kept across restarts.
    Enable(AdminArgs),
    /// Disable an endpoint in a running daemon: not probed, not eligible; without ENDPOINT the
    /// whole profile (its DNS name answers NXDOMAIN). Kept across restarts.
    Disable(AdminArgs),
    /// Serve an endpoint whatever its health (health checks off). Kept across restarts.
    AlwaysServe(AdminArgs),
    /// Probe one target now: one line per probe; exit 0 only if every probe was healthy.
    Check(Box<check::CheckArgs>),
    /// Write the manual pages or the shell completions into a directory (for packages).
    #[command(hide = true)]
    Generate {
        #[arg(value_enum)]
        what: Generated,
        dir: PathBuf,
    },
}

/// What `probed generate` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Generated {
    /// probed.8 and probed-SUBCOMMAND.8.
    Man,
    /// probed.bash, _probed (zsh), probed.fish.
    Completions,
}

/// How to reach the daemon's API.
#[derive(clap::Args, Clone)]
struct ApiArgs {
    /// The daemon's API: `unix:/path` or loopback `HOST:PORT`, as daemon.api_listen says.
    #[arg(long, default_value = probed::api::client::DEFAULT_API)]
    api: String,
    /// A file holding the bearer token (daemon.api_token_file), which changes over TCP need.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

/// One endpoint of one profile (or the profile itself), in a running daemon.
#[derive(clap::Args)]
struct AdminArgs {
    profile: String,
    endpoint: Option<String>,
    #[command(flatten)]
    api: ApiArgs,
}

/// `attach --duration-s` at most: a year.
const MAX_ATTACH_S: u64 = 365 * 86_400;

/// XDP attach mode, as the operator names it.
#[derive(Clone, Copy, ValueEnum)]
pub enum Mode {
    /// Generic XDP: works on every device.
    Skb,
    /// Native XDP in the driver.
    Driver,
    /// Native when the driver takes it, else generic.
    Auto,
}

impl From<Mode> for AttachMode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Skb => AttachMode::Skb,
            Mode::Driver => AttachMode::Driver,
            Mode::Auto => AttachMode::Auto,
        }
    }
}

/// The signals `probed run` serves; blocked from the first line of `main`, before argument
/// parsing, so one sent while the process starts waits for the handlers instead of killing it
/// with a clean-looking exit. Other commands get the default actions back at once.
const SERVED_SIGNALS: [libc::c_int; 4] = [libc::SIGHUP, libc::SIGTERM, libc::SIGINT, libc::SIGUSR1];

pub fn main() -> ExitCode {
    let blocked = block_signals(&SERVED_SIGNALS);
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run { .. }) {
        unblock_signals(&blocked);
    }
    logging::install(cli.log_format);
    let result = match cli.command {
        Command::Attach {
            iface,
            pin_dir,
            mode,
            every_ms,
            duration_s,
        } => attach(&iface, pin_dir, mode, every_ms, duration_s),
        Command::Validate { file } => Ok(validate(&file)),
        Command::Run { config } => run(&config),
        Command::Status {
            profile,
            api,
            watch: true,
            every_ms,
            ..
        } => watch(profile.as_deref(), &api, Duration::from_millis(every_ms)),
        Command::Status { profile, api, json, .. } => status(profile.as_deref(), &api, json),
        Command::Reload { api } => reload(&api),
        Command::Sinks { api, json } => sinks(&api, json),
        Command::Cluster { api, json } => cluster(&api, json),
        Command::Events {
            profile,
            api,
            follow,
            lines,
            json,
        } => {
            let options = events::Options {
                profile: profile.as_deref(),
                lines,
                follow,
                json,
                colour: colour_out(),
            };
            api_client(&api).and_then(|c| events::run(&c, &options).map_err(|e| api_failure(e, &api.api)))
        }
        Command::Enable(a) => admin(&a, "enable"),
        Command::Disable(a) => admin(&a, "disable"),
        Command::AlwaysServe(a) => admin(&a, "always-serve"),
        Command::Check(args) => check::run(*args),
        Command::Generate { what, dir } => {
            let written = match what {
                Generated::Man => generate::man(&dir),
                Generated::Completions => generate::completions(&dir),
            };
            written.map(|files| {
                for f in files {
                    println!("{}", f.display());
                }
                ExitCode::SUCCESS
            })
        }
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
        "probe_rx attached to {} in {} mode (maps pinned in {})",
        rx.iface(),
        rx.mode(),
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

fn run(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    use probed::daemon::{Daemon, Options};
    use tokio::signal::unix::{signal, SignalKind};
    // From the first instant (`main` blocked SERVED_SIGNALS before anything else) until tokio's
    // handlers exist: a signal that arrives while the daemon starts (systemd's reload, an
    // impatient stop) waits for them instead of killing the process with a clean-looking exit.
    let blocked = SERVED_SIGNALS.to_vec();
    let rt = runtime()?;
    let _guard = rt.enter();
    let mut hup = signal(SignalKind::hangup()).context("install SIGHUP handler")?;
    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("install SIGINT handler")?;
    let mut usr1 = signal(SignalKind::user_defined1()).context("install SIGUSR1 handler")?;
    unblock_signals(&blocked);
    let config = probed::config::Config::load(path)
        .map_err(|errors| anyhow::anyhow!("{errors}"))
        .with_context(|| format!("{} is not valid; `probed validate` lists every problem", path.display()))?;
    rt.block_on(async {
        let options = Options {
            config_path: Some(path.to_path_buf()),
        };
        let api_listen = config.daemon.api.clone();
        let mut daemon = Daemon::start(config, options)
            .await
            .context("start the daemon (run as root, or with the capabilities of dist/probed.service)")?;
        let api = match probed::api::Server::start(&api_listen, daemon.control()).await {
            Ok(api) => api,
            Err(e) => {
                let _ = daemon.shutdown().await;
                return Err(anyhow::Error::new(e).context("start the API"));
            }
        };
        log::info!("probed running; API on {}", api.addr());
        notify::notify("READY=1");
        let control = daemon.control();
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    notify::notify("RELOADING=1");
                    match control.reload(None).await {
                        Ok(r) => log::info!("reloaded: {} kept, {} added, {} removed{}", r.kept, r.added, r.removed,
                            if r.restart_needed.is_empty() { String::new() } else {
                                format!("; restart to apply {}", r.restart_needed.join(", "))
                            }),
                        Err(e) => log::error!("{e}"),
                    }
                    notify::notify("READY=1");
                }
                // logrotate moved the events file away: write a new one at the configured path.
                _ = usr1.recv() => if let Err(e) = control.reopen_events().await {
                    log::error!("cannot reopen the events file: {e}");
                },
                _ = term.recv() => break,
                _ = int.recv() => break,
                r = daemon.wait() => {
                    r.context("the daemon stopped")?;
                    anyhow::bail!("the daemon stopped unexpectedly");
                }
            }
        }
        notify::notify("STOPPING=1");
        log::info!("stopping: saving state, detaching programs, removing pins");
        api.stop().await;
        daemon.shutdown().await.context("stop the daemon")?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Blocks `signals` for this thread (and the threads it starts); returns them for
/// `unblock_signals`.
fn block_signals(signals: &[libc::c_int]) -> Vec<libc::c_int> {
    set_signal_mask(libc::SIG_BLOCK, signals);
    signals.to_vec()
}

/// Delivers what arrived meanwhile to the handlers now installed.
fn unblock_signals(signals: &[libc::c_int]) {
    set_signal_mask(libc::SIG_UNBLOCK, signals);
}

fn set_signal_mask(how: libc::c_int, signals: &[libc::c_int]) {
    // SAFETY: a zeroed sigset_t is a valid argument to sigemptyset, which initialises it;
    // sigaddset and pthread_sigmask only read and write that set and this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        for s in signals {
            libc::sigaddset(&raw mut set, *s);
        }
        libc::pthread_sigmask(how, &raw const set, std::ptr::null_mut());
    }
}

fn api_get(api: &ApiArgs, method: &str, path: &str) -> anyhow::Result<probed::api::client::Response> {
    api_client(api)?
        .request(method, path)
        .map_err(|e| api_failure(e, &api.api))
}

/// A client for the daemon `api` names, with its token when given.
fn api_client(api: &ApiArgs) -> anyhow::Result<probed::api::client::Client> {
    let client = probed::api::client::Client::new(&api.api);
    Ok(match &api.token_file {
        Some(f) => client.with_token_file(f)?,
        None => client,
    })
}

/// A failure to talk to the API at `addr`, with what the operator should look at.
fn api_failure(e: probed::api::client::ClientError, addr: &str) -> anyhow::Error {
    use probed::api::client::ClientError;
    let hint = match &e {
        ClientError::Connect { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            format!("the socket {addr} is for root and the members of daemon.api_socket_group (default probed)")
        }
        ClientError::Timeout { .. } => "the daemon accepted but did not answer; is it stuck?".to_string(),
        _ => format!("is `probed run` up, with daemon.api_listen = {addr:?}? (--api sets the address)"),
    };
    anyhow::Error::new(e).context(hint)
}

fn api_error(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| body.to_string())
}

fn status(profile: Option<&str>, api: &ApiArgs, json: bool) -> anyhow::Result<ExitCode> {
    let (body, views) = fetch_status(profile, api)?;
    if json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", probed::daemon::views::render_table(&views, colour_out()));
    Ok(ExitCode::SUCCESS)
}

/// Colours when standard output is a terminal and NO_COLOR is unset.
fn colour_out() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    let tty = unsafe { libc::isatty(1) } == 1;
    tty && std::env::var_os("NO_COLOR").is_none()
}

/// The status of every profile, or of one: the API's JSON and its views.
fn fetch_status(profile: Option<&str>, api: &ApiArgs) -> anyhow::Result<(String, Vec<probed::daemon::ProfileView>)> {
    let path = match profile {
        Some(p) => format!("/v1/status/{p}"),
        None => "/v1/status".to_string(),
    };
    let resp = api_get(api, "GET", &path)?;
    if resp.status != 200 {
        anyhow::bail!("{}", api_error(&resp.body));
    }
    // One profile comes as the object itself, every profile as a list.
    let views = match profile {
        Some(_) => serde_json::from_str(&resp.body).map(|v| vec![v]),
        None => serde_json::from_str(&resp.body),
    }
    .context("decode the status (is the daemon the same version?)")?;
    Ok((resp.body, views))
}

/// `probed status --watch`: one frame per `every` until q, Q or Ctrl-C; a daemon that does not
/// answer is said so in the frame, and the watch goes on.
fn watch(profile: Option<&str>, api: &ApiArgs, every: Duration) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let terminal = term::RawTerminal::enter();
    let colour = colour_out();
    let mut last: Option<(std::time::Instant, f64)> = None;
    loop {
        let frame = match fetch_status(profile, api) {
            Ok((_, views)) => {
                let (sent, lag) = api_get(api, "GET", "/metrics").map_or((None, None), |r| watch_figures(&r.body));
                let now = std::time::Instant::now();
                let probes_per_s = match (last, sent) {
                    (Some((then, before)), Some(total)) => {
                        Some((total - before).max(0.0) / now.duration_since(then).as_secs_f64().max(1e-3))
                    }
                    _ => None,
                };
                last = sent.map(|s| (now, s));
                let summary = probed::daemon::views::WatchSummary {
                    probes_per_s,
                    lag_ms: lag.map(|l| l * 1000.0),
                    keys: "q quits",
                };
                probed::daemon::views::render_watch(&views, &summary, colour)
            }
            Err(e) => format!("probed: {e:#}\n(retrying every {} ms; q quits)\n", every.as_millis()),
        };
        let mut out = std::io::stdout().lock();
        // Home and clear, then the frame: redrawn in place, never scrolled.
        let _ = write!(out, "\x1b[H\x1b[2J{frame}");
        let _ = out.flush();
        drop(out);
        match &terminal {
            Some(t) => {
                if matches!(t.key(every), Some(b'q' | b'Q' | 3)) {
                    break;
                }
            }
            None => std::thread::sleep(every),
        }
    }
    drop(terminal);
    Ok(ExitCode::SUCCESS)
}

/// From a metrics scrape: every probe sent so far, and the scheduler's worst lag in seconds.
fn watch_figures(metrics: &str) -> (Option<f64>, Option<f64>) {
    let value = |l: &str| l.rsplit_once(' ').and_then(|(_, v)| v.trim().parse::<f64>().ok());
    let sent: Vec<f64> = metrics
        .lines()
        .filter(|l| l.starts_with("probed_probes_sent_total{"))
        .filter_map(value)
        .collect();
    let lag = metrics
        .lines()
        .find(|l| l.starts_with("probed_schedule_lag_seconds "))
        .and_then(value);
    ((!sent.is_empty()).then(|| sent.iter().sum()), lag)
}

fn sinks(api: &ApiArgs, json: bool) -> anyhow::Result<ExitCode> {
    let resp = api_get(api, "GET", "/v1/sinks")?;
    if resp.status != 200 {
        anyhow::bail!("{}", api_error(&resp.body));
    }
    if json {
        println!("{}", resp.body);
        return Ok(ExitCode::SUCCESS);
    }
    let views: Vec<probed::sinks::SinkView> = serde_json::from_str(&resp.body).context("decode the sinks")?;
    println!(
        "{:<16} {:<12} {:>6} {:>8} {:<8} {:>7}  TARGET / LAST ERROR",
        "SINK", "PROFILE", "GEN", "ENTRIES", "IN SYNC", "ERRORS"
    );
    for v in &views {
        println!(
            "{:<16} {:<12} {:>6} {:>8} {:<8} {:>7}  {}{}",
            v.name,
            v.profile,
            v.generation,
            v.entries,
            if v.in_sync { "yes" } else { "NO" },
            v.errors_total,
            v.target,
            v.last_error.as_ref().map(|e| format!("; {e}")).unwrap_or_default()
        );
    }
    // Exit 1 when any sink does not hold what it should, for scripts and monitoring.
    Ok(if views.iter().all(|v| v.in_sync) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `probed enable|disable|always-serve PROFILE ENDPOINT`.
fn admin(a: &AdminArgs, action: &str) -> anyhow::Result<ExitCode> {
    let path = match &a.endpoint {
        Some(endpoint) => format!(
            "/v1/endpoints/{}/{}/{action}",
            percent_encode(&a.profile),
            percent_encode(endpoint)
        ),
        None if action == "always-serve" => anyhow::bail!("always-serve applies to one endpoint: name it"),
        None => format!("/v1/profiles/{}/{action}", percent_encode(&a.profile)),
    };
    let resp = api_get(&a.api, "POST", &path)?;
    if resp.status != 200 {
        eprintln!("probed: {}", api_error(&resp.body));
        return Ok(ExitCode::FAILURE);
    }
    let v = serde_json::from_str::<serde_json::Value>(&resp.body).ok();
    let field = |key: &str| v.as_ref().and_then(|v| v.get(key)).map(ToString::to_string);
    match &a.endpoint {
        Some(endpoint) => {
            let admin = field("admin").map_or_else(|| action.to_string(), |s| s.trim_matches('"').to_string());
            println!("{}/{endpoint}: {admin}", a.profile);
        }
        None => {
            let status = field("status").map_or_else(|| action.to_string(), |s| s.trim_matches('"').to_string());
            println!("{}: {status}", a.profile);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Escapes what a path segment cannot hold as is (endpoint names like `[2001:db8::1]:80`).
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn cluster(api: &ApiArgs, json: bool) -> anyhow::Result<ExitCode> {
    let resp = api_get(api, "GET", "/v1/cluster")?;
    if resp.status != 200 {
        anyhow::bail!("{}", api_error(&resp.body));
    }
    if json {
        println!("{}", resp.body);
        return Ok(ExitCode::SUCCESS);
    }
    let view: probed::daemon::views::ClusterView = serde_json::from_str(&resp.body).context("decode the cluster")?;
    print!("{}", probed::daemon::views::render_cluster(&view));
    Ok(ExitCode::SUCCESS)
}

fn reload(api: &ApiArgs) -> anyhow::Result<ExitCode> {
    let resp = api_get(api, "POST", "/v1/reload")?;
    if resp.status != 200 {
        eprintln!("probed: {}", api_error(&resp.body));
        return Ok(ExitCode::FAILURE);
    }
    let r: probed::daemon::ReloadReport = serde_json::from_str(&resp.body).context("decode the reload report")?;
    println!(
        "reloaded: {} endpoints kept their state, {} added, {} removed",
        r.kept, r.added, r.removed
    );
    if !r.restart_needed.is_empty() {
        println!("restart to apply: {}", r.restart_needed.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, String> {
        Cli::try_parse_from(std::iter::once("probed").chain(args.iter().copied())).map_err(|e| e.to_string())
    }

    #[test]
    fn the_watch_reads_its_figures_from_a_scrape() {
        let scrape = "# TYPE probed_probes_sent_total counter\n\
                      probed_probes_sent_total{kind=\"tcp\",profile=\"a\"} 10\n\
                      probed_probes_sent_total{kind=\"http\",profile=\"b\"} 5\n\
                      probed_schedule_lag_seconds 0.012\n";
        assert_eq!(watch_figures(scrape), (Some(15.0), Some(0.012)));
        assert_eq!(watch_figures(""), (None, None));
        assert!(
            parse(&["status", "--watch", "--json"]).is_err(),
            "a watch prints no JSON"
        );
        assert!(parse(&["status", "--watch", "--every-ms", "50"]).is_err());
    }

    #[test]
    fn attach_bounds() {
        let e = parse(&["attach", "--iface", "eth0", "--duration-s", "18446744073709551615"])
            .err()
            .expect("a duration that overflows an Instant is refused");
        assert!(e.contains("--duration-s") && e.contains("0..=31536000"), "{e}");
        let e = parse(&["attach", "--iface", "eth0", "--every-ms", "0"]).err().unwrap();
        assert!(e.contains("--every-ms") && e.contains("10..=3600000"), "{e}");
        assert!(parse(&["attach", "--iface", "eth0", "--duration-s", "31536000"]).is_ok());
    }

    #[test]
    fn api_commands_use_the_unix_socket_by_default() {
        let Ok(Cli {
            command: Command::Status { api, .. },
            ..
        }) = parse(&["status"])
        else {
            panic!("status parses");
        };
        assert_eq!(api.api, "unix:/run/probed/api.sock");
        assert!(api.token_file.is_none());
        let Ok(Cli {
            command: Command::Disable(a),
            ..
        }) = parse(&[
            "disable",
            "web",
            "web-1",
            "--api",
            "127.0.0.1:9180",
            "--token-file",
            "/etc/probed/t",
        ])
        else {
            panic!("disable parses");
        };
        assert_eq!((a.profile.as_str(), a.endpoint.as_deref()), ("web", Some("web-1")));

        assert_eq!(a.api.token_file.as_deref(), Some(std::path::Path::new("/etc/probed/t")));
        assert_eq!(percent_encode("[2001:db8::1]:80"), "%5B2001%3Adb8%3A%3A1%5D%3A80");
        let Ok(Cli {
            command: Command::Enable(whole),
            ..
        }) = parse(&["enable", "web"])
        else {
            panic!("enable of a profile parses");
        };
        assert_eq!(whole.endpoint, None, "no endpoint: the whole profile");
        let cli = parse(&["status", "--log-format", "json"]).unwrap();
        assert_eq!(
            cli.log_format,
            logging::LogFormat::Json,
            "a global flag, after the subcommand too"
        );
        assert_eq!(parse(&["status"]).unwrap().log_format, logging::LogFormat::Auto);
    }
}
