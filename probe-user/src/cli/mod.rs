//! Command-line interface: one clap enum here, a file per subcommand beside it (`run`,
//! `validate`, `status` with its watch, `sinks`, `admin` for enable/disable/always-serve,
//! `cluster`, `reload`, `events`, `check`, `generate`), and `api` for what the API
//! subcommands share.
use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use probed::kernel::{pin::PinDir, rx::RxProgram, AttachMode};
use probed::status::AdminAction;

mod admin;
mod api;
mod check;
mod cluster;
mod endpoints;
mod events;
mod generate;
mod logging;
mod reload;
mod run;
mod sinks;
mod status;

mod validate;

use admin::admin;
use api::{api_client, api_error, api_failure, api_get, percent_encode};
use cluster::cluster;
use reload::reload;
use run::{attach, block_signals, run, runtime, unblock_signals};
use sinks::sinks;
#[cfg(test)]
use status::watch_figures;
use status::{colour_out, status, watch};
use validate::validate;

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
    /// Drain an endpoint: still probed, but no new traffic goes to it (HAProxy keeps its
    /// sessions; nft and BPF slot tables give its slots to the others, whose flows conntrack
    /// or the load balancer keep). `probed enable` ends it. Kept across restarts.
    Drain(AdminArgs),
    /// Change the endpoints of a profile the fleet API owns (endpoints_from = "api") in a
    /// running daemon, without a reload: kept across restarts and reloads.
    #[command(subcommand)]
    Endpoints(endpoints::EndpointsCommand),
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
        Command::Endpoints(command) => endpoints::endpoints(command),
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
        Command::Enable(a) => admin(&a, AdminAction::Enable),
        Command::Disable(a) => admin(&a, AdminAction::Disable),
        Command::AlwaysServe(a) => admin(&a, AdminAction::AlwaysServe),
        Command::Drain(a) => admin(&a, AdminAction::Drain),
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
