//! `probed status` and `probed status --watch`.
#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn status(profile: Option<&str>, api: &ApiArgs, json: bool) -> anyhow::Result<ExitCode> {
    let (body, views) = fetch_status(profile, api)?;
    if json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", probed::render::render_table(&views, colour_out()));
    Ok(ExitCode::SUCCESS)
}

/// Colours when standard output is a terminal and NO_COLOR is unset.
pub(super) fn colour_out() -> bool {
    let tty = probed::kernel::term::is_tty(1);
    tty && std::env::var_os("NO_COLOR").is_none()
}

/// The status of every profile, or of one: the API's JSON and its views.
pub(super) fn fetch_status(
    profile: Option<&str>,
    api: &ApiArgs,
) -> anyhow::Result<(String, Vec<probed::daemon::ProfileView>)> {
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
pub(super) fn watch(profile: Option<&str>, api: &ApiArgs, every: Duration) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let terminal = probed::kernel::term::RawTerminal::enter();
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
                let summary = probed::render::WatchSummary {
                    probes_per_s,
                    lag_ms: lag.map(|l| l * 1000.0),
                    keys: "q quits",
                };
                probed::render::render_watch(&views, &summary, colour)
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
pub(super) fn watch_figures(metrics: &str) -> (Option<f64>, Option<f64>) {
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
