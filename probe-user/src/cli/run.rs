//! `probed run` (the daemon, its signals) and `probed attach` (probe_rx alone, for inspection).
#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")
}

pub(super) fn attach(
    iface: &str,
    pin_dir: PathBuf,
    mode: Mode,
    every_ms: u64,
    duration_s: u64,
) -> anyhow::Result<ExitCode> {
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

pub(super) fn run(path: &std::path::Path) -> anyhow::Result<ExitCode> {
    use probed::daemon::{Daemon, Options};
    use tokio::signal::unix::{signal, SignalKind};
    // From the first instant (`main` blocked SERVED_SIGNALS before anything else) until tokio's
    // handlers exist: a signal that arrives while the daemon starts (systemd's reload, an
    // impatient stop) waits for them instead of killing the process with a clean-looking exit.
    let blocked = SERVED_SIGNALS.to_vec();
    // What the service manager kept for this process (a route sink's device across a
    // restart), taken before anything else opens a descriptor.
    probed::service::take_inherited();
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
        let mut daemon = match Daemon::start(config, options).await {
            Ok(daemon) => daemon,
            Err(e) => {
                // What the service manager kept for this process (a route sink's device) goes:
                // a node that cannot start cannot check, and must not keep its VIP announced
                // while the manager restarts it.
                let released = probed::service::release_unclaimed();
                if !released.is_empty() {
                    log::warn!("the start failed: let go of {} and their routes", released.join(", "));
                }
                return Err(anyhow::Error::new(e)
                    .context("start the daemon (run as root, or with the capabilities of dist/probed.service)"));
            }
        };
        let api = match probed::api::Server::start(&api_listen, daemon.control()).await {
            Ok(api) => api,
            Err(e) => {
                let _ = daemon.abort().await;
                probed::service::release_unclaimed();
                return Err(anyhow::Error::new(e).context("start the API"));
            }
        };
        let released = probed::service::release_unclaimed();
        if !released.is_empty() {
            log::info!(
                "let go of what the service manager kept for sinks this configuration no longer has: {}",
                released.join(", ")
            );
        }
        log::info!("probed running; API on {}", api.addr());
        probed::service::notify("READY=1");
        let control = daemon.control();
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    probed::service::notify("RELOADING=1");
                    match control.reload(None).await {
                        Ok(r) => log::info!("reloaded: {} kept, {} added, {} removed{}", r.kept, r.added, r.removed,
                            if r.restart_needed.is_empty() { String::new() } else {
                                format!("; restart to apply {}", r.restart_needed.join(", "))
                            }),
                        Err(e) => log::error!("{e}"),
                    }
                    probed::service::notify("READY=1");
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
        probed::service::notify("STOPPING=1");
        log::info!("stopping: saving state, detaching programs, removing pins");
        api.stop().await;
        daemon.shutdown().await.context("stop the daemon")?;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Blocks `signals` for this thread (and the threads it starts); returns them for
/// `unblock_signals`.
pub(super) fn block_signals(signals: &[libc::c_int]) -> Vec<libc::c_int> {
    probed::kernel::process::mask_signals(true, signals);
    signals.to_vec()
}

/// Delivers what arrived meanwhile to the handlers now installed.
pub(super) fn unblock_signals(signals: &[libc::c_int]) {
    probed::kernel::process::mask_signals(false, signals);
}
