//! `probed events`: a running daemon's recent endpoint changes, one line each, and with
//! `--follow` every new one as it happens (`GET /v1/events`).
use std::{
    io::{ErrorKind, Write},
    process::ExitCode,
};

use probed::{
    api::client::{Client, Followed},
    changes::ChangeKind,
    daemon::events::Event,
    render::paint,
};

use super::logging::rfc3339;

/// What to show and how.
pub struct Options<'a> {
    pub profile: Option<&'a str>,
    pub lines: u64,
    pub follow: bool,
    pub json: bool,
    pub colour: bool,
}

/// The API path that asks for `o`.
pub fn path(o: &Options<'_>) -> String {
    let mut path = format!("/v1/events?lines={}", o.lines);
    if o.follow {
        path.push_str("&follow=1");
    }
    if let Some(p) = o.profile {
        path.push_str("&profile=");
        path.push_str(&super::percent_encode(p));
    }
    path
}

/// Prints what the daemon sends until it ends the stream (without `--follow`, at once), the
/// reader of our output goes away, or Ctrl-C.
pub fn run(client: &Client, o: &Options<'_>) -> Result<ExitCode, probed::api::client::ClientError> {
    let mut out = std::io::stdout().lock();
    let mut write_failed = None;
    let ended = client.follow(&path(o), |line| {
        let text = if o.json {
            line.to_string()
        } else {
            render_line(line, o.colour)
        };
        // Flushed per line: a pipe (`| grep`) sees each change as it happens.
        match writeln!(out, "{text}").and_then(|()| out.flush()) {
            Ok(()) => true,
            Err(e) => {
                write_failed = Some(e);
                false
            }
        }
    })?;
    match (ended, write_failed) {
        (Followed::Refused(resp), _) => {
            eprintln!("probed: {}", super::api_error(&resp.body));
            Ok(ExitCode::FAILURE)
        }
        // `probed events -f | head`: the reader had enough.
        (Followed::Ended, Some(e)) if e.kind() == ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        (Followed::Ended, Some(e)) => {
            eprintln!("probed: write the events: {e}");
            Ok(ExitCode::FAILURE)
        }
        (Followed::Ended, None) => {
            if o.follow {
                eprintln!("probed: the daemon stopped; no more events");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// One line of the API's stream as text: an event, the notice of lost ones, or (from a
/// newer daemon) the line as it came.
fn render_line(line: &str, colour: bool) -> String {
    if let Ok(e) = serde_json::from_str::<Event>(line) {
        return render(&e, colour);
    }
    match serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v.get("lost").and_then(serde_json::Value::as_u64))
    {
        Some(n) => format!("({n} changes were not delivered here: this client or the daemon's feed fell behind)"),
        None => line.to_string(),
    }
}

/// `TIME PROFILE/ENDPOINT TARGET FROM -> TO, serving|not serving (cause)`.
pub fn render(e: &Event, colour: bool) -> String {
    let status = |s: Option<probed::status::EndpointStatus>| s.map_or("none", |s| s.as_str());
    let painted = |s: probed::status::EndpointStatus| paint(s, s.to_string(), colour);
    let change = match (e.from, e.to) {
        (None, Some(now)) => format!("added as {}", painted(now)),
        (Some(_), None) => format!("removed (was {})", status(e.from)),
        (_, Some(now)) => format!("{} -> {}", status(e.from), painted(now)),
        (None, None) => "none".to_string(),
    };
    let serving = if e.eligible { "serving" } else { "not serving" };
    let cause = match e.kind {
        ChangeKind::Health => health_cause(e),
        // The reason says "passive: N failed client handshakes ...".
        ChangeKind::Passive => e
            .results
            .first()
            .map_or_else(|| "passive".to_string(), |r| r.reason.to_string()),
        ChangeKind::Admin => "set by an operator".to_string(),
        ChangeKind::Agent => "its agent's answer".to_string(),
        ChangeKind::Config => "by a reload".to_string(),
        ChangeKind::FailOpen => "the profile's fail-open".to_string(),
        ChangeKind::Cluster => "the cluster's verdicts".to_string(),
        ChangeKind::SlowStart => "a slow start's step".to_string(),
        ChangeKind::CertExpiring => {
            let when = e.cert_not_after_unix.map_or_else(
                || "soon".to_string(),
                |t| rfc3339(u64::try_from(t).unwrap_or(0).saturating_mul(1000)),
            );
            return format!(
                "{} {}/{} {} TLS certificate expires {when}, {serving}",
                rfc3339(e.at_unix_ms),
                e.profile,
                e.endpoint,
                e.target
            );
        }
    };
    format!(
        "{} {}/{} {} {change}, {serving} ({cause})",
        rfc3339(e.at_unix_ms),
        e.profile,
        e.endpoint,
        e.target
    )
}

/// `health: timeout, refused, refused in 2003 ms (formula 2000 ms)`.
fn health_cause(e: &Event) -> String {
    if e.results.is_empty() {
        return "health".to_string();
    }
    let results: Vec<String> = e
        .results
        .iter()
        .map(|r| {
            let what = if r.reason.is_empty() {
                serde_json::to_value(r.outcome)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            } else {
                r.reason.to_string()
            };
            if r.ok {
                format!("{what} {:.1} ms", r.rtt_ms())
            } else {
                what
            }
        })
        .collect();
    format!(
        "health: {} in {:.0} ms (formula {:.0} ms)",
        results.join(", "),
        e.measured_window_ms,
        e.formula_window_ms
    )
}

#[cfg(test)]
mod tests {
    use probed::{changes::RunResult, outcome::Outcome, status::EndpointStatus};

    use super::*;

    fn event(kind: ChangeKind, from: Option<EndpointStatus>, to: Option<EndpointStatus>) -> Event {
        Event {
            at_unix_ms: 1_796_173_323_456,
            at_ns: 5,
            kind,
            target: "198.18.0.2:80/tcp".into(),
            profile: "web".into(),
            endpoint: "b".into(),
            from,
            to,
            eligible: to == Some(EndpointStatus::Online),
            results: Vec::new(),
            measured_window_ms: 0.0,
            formula_window_ms: 0.0,
            cert_not_after_unix: None,
        }
    }

    fn result(ok: bool, outcome: Outcome, reason: &str) -> RunResult {
        RunResult {
            ok,
            outcome,
            reason: reason.into(),
            rtt_us: 250,
            started_ns: 1,
            finished_ns: 2,
        }
    }

    #[test]
    fn a_health_change_says_which_results_and_windows_decided_it() {
        let mut e = event(
            ChangeKind::Health,
            Some(EndpointStatus::Online),
            Some(EndpointStatus::Degraded),
        );
        e.results = vec![
            result(false, Outcome::Timeout, "no SYN+ACK within 1000 ms"),
            result(false, Outcome::Refused, ""),
        ];
        e.measured_window_ms = 2003.4;
        e.formula_window_ms = 2000.0;
        assert_eq!(
            render(&e, false),
            "2026-12-02T01:02:03.456Z web/b 198.18.0.2:80/tcp Online -> Degraded, not serving \
             (health: no SYN+ACK within 1000 ms, refused in 2003 ms (formula 2000 ms))"
        );
        e.to = Some(EndpointStatus::Online);
        e.eligible = true;
        e.results = vec![result(true, Outcome::Open, "")];
        let line = render(&e, true);
        assert!(
            line.contains("-> \x1b[32mOnline\x1b[0m, serving (health: open 0.2 ms in"),
            "{line}"
        );
    }

    #[test]
    fn other_causes_and_reload_additions_and_removals() {
        let on = Some(EndpointStatus::Online);
        let line = |kind, from, to| render(&event(kind, from, to), false);
        assert!(line(ChangeKind::Admin, on, Some(EndpointStatus::Disabled))
            .ends_with("Online -> Disabled, not serving (set by an operator)"));
        assert!(line(ChangeKind::Config, None, Some(EndpointStatus::CheckingEndpoint))
            .ends_with("added as CheckingEndpoint, not serving (by a reload)"));
        assert!(line(ChangeKind::Config, on, None).ends_with("removed (was Online), not serving (by a reload)"));
        assert!(line(ChangeKind::FailOpen, on, on).ends_with("(the profile's fail-open)"));
        let mut notice = event(ChangeKind::CertExpiring, on, on);
        notice.cert_not_after_unix = Some(1_797_206_400);
        assert!(
            render(&notice, false).ends_with("TLS certificate expires 2026-12-14T00:00:00.000Z, serving"),
            "{}",
            render(&notice, false)
        );
    }

    #[test]
    fn stream_lines_that_are_not_events() {
        assert!(render_line("{\"lost\":3}", false).starts_with("(3 changes were not delivered"));
        assert_eq!(render_line("{\"new\":1}", false), "{\"new\":1}");
        let e = event(ChangeKind::Admin, None, Some(EndpointStatus::Online));
        assert_eq!(
            render_line(&serde_json::to_string(&e).unwrap(), false),
            render(&e, false)
        );
    }

    #[test]
    fn the_path_asks_for_what_the_options_say() {
        let mut o = Options {
            profile: Some("a b"),
            lines: 10,
            follow: true,
            json: false,
            colour: false,
        };
        assert_eq!(path(&o), "/v1/events?lines=10&follow=1&profile=a%20b");
        o.follow = false;
        o.profile = None;
        assert_eq!(path(&o), "/v1/events?lines=10");
    }
}
