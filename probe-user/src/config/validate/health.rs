//! `[profile.health]`: protocol, port, interval and timeout, thresholds and pacing, by the
//! profile's dialect; the keys of one protocol are refused on another. TCP and UDP checks are
//! read here, HTTP(S) ones in `http.rs`.
use std::time::Duration;

use toml::de::DeValue;

use super::{broke, names, port_value};
use crate::config::{
    model::*,
    read::{parse_duration, Item, Reader, Table},
    reference,
};
use crate::rules::{limits::MAX_PACING_MS, ThresholdError};

pub(super) fn health(
    r: &mut Reader<'_>,
    v: &toml::Spanned<DeValue<'_>>,
    path: &str,
    d: Dialect,
) -> Option<HealthCheck> {
    let t = r.table(v, path.to_string(), &reference::HEALTH)?;
    let errors_before = r.errors.len();
    let protocol = match r.string(&t, "protocol") {
        None => {
            r.missing(&t, "protocol", "a health check needs a protocol");
            None
        }
        Some(item) => match item.v.parse::<Protocol>().ok() {
            Some(p) if crate::probe::kinds::offered(d, p) => Some(p),
            Some(_) => {
                r.bad(
                    &item,
                    format!("{} allows {}", d.name(), names(&Probe::protocols(d), Protocol::as_str)),
                );
                None
            }
            None => {
                r.bad(&item, format!("expected {}", Protocol::NAMES.join(", ")));
                None
            }
        },
    };
    let port = r.int(&t, "port").and_then(|item| port_value(r, &item));
    let (interval, timeout) = interval_timeout(r, &t, d);
    let thresholds = thresholds(r, &t, d);
    let pacing = pacing(r, &t);
    let probe = protocol.and_then(|p| probe(r, &t, d, p));
    let agent = match (interval, timeout) {
        (Some(i), Some(to)) => crate::probe::agent::read(r, &t, i, to).ok()?,
        _ => None,
    };
    (r.errors.len() == errors_before).then_some(())?;
    Some(HealthCheck {
        probe: probe?,
        port,
        interval: interval?,
        timeout: timeout?,
        thresholds: thresholds?,
        pacing,
        agent,
    })
}

/// The longest any pacing interval or jitter may be.
const MAX_PACING: Duration = Duration::from_millis(MAX_PACING_MS);

/// fast_interval, down_interval, initial_jitter (durations) and jitter_percent; all optional
/// and the same for every dialect, since none of the seeds has them.
fn pacing(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Pacing {
    let gap = |r: &mut Reader<'_>, key: &str, zero_ok: bool| -> Option<Duration> {
        let item = r.string(t, key)?;
        let v = duration(r, &item)?;
        if (v.is_zero() && !zero_ok) || v > MAX_PACING {
            let low = if zero_ok { "0s" } else { "more than 0s" };
            r.bad(&item, format!("{key} allows {low} up to 300s"));
            return None;
        }
        Some(v)
    };
    let fast_interval = gap(r, "fast_interval", false);
    let down_interval = gap(r, "down_interval", false);
    let initial_jitter = gap(r, "initial_jitter", true).unwrap_or_default();
    let jitter_percent = match r.int(t, "jitter_percent") {
        None => 0,
        Some(item) => match u8::try_from(item.v).ok().filter(|p| *p <= 100) {
            Some(p) => p,
            None => {
                r.bad(&item, "jitter_percent allows 0 to 100");
                0
            }
        },
    };
    Pacing {
        fast_interval,
        down_interval,
        initial_jitter,
        jitter_percent,
    }
}

fn duration(r: &mut Reader<'_>, item: &Item<String>) -> Option<Duration> {
    let d = parse_duration(&item.v);
    if d.is_none() {
        r.bad(item, "expected a duration like \"2s\" or \"500ms\"");
    }
    d
}

fn interval_timeout(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect) -> (Option<Duration>, Option<Duration>) {
    let interval = match r.string(t, "interval") {
        None => Some(d.default_interval()),
        Some(item) => duration(r, &item).and_then(|v| match d.check_interval(v) {
            Ok(()) => Some(v),
            Err(e) => {
                broke(r, &item, e);
                None
            }
        }),
    };
    let timeout_item = r.string(t, "timeout");
    // tm's timeout range follows the interval; with a bad interval there is nothing to check against.
    let Some(interval) = interval else {
        return (None, None);
    };
    let timeout = match timeout_item {
        None => Some(d.default_timeout(interval)),
        Some(item) => duration(r, &item).and_then(|v| match d.check_timeout(interval, v) {
            Ok(()) => Some(v),
            Err(e) => {
                broke(r, &item, e);
                None
            }
        }),
    };
    (Some(interval), timeout)
}

/// Every threshold key of any dialect; each dialect reads only its own.
const THRESHOLD_KEYS: [&str; 4] = [
    "healthy_threshold",
    "unhealthy_threshold",
    "tolerated_failures",
    "threshold",
];

fn thresholds(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect) -> Option<Thresholds> {
    let mut ok = true;
    let mine = d.threshold_keys();
    for key in THRESHOLD_KEYS
        .into_iter()
        .filter(|k| !mine.iter().any(|m| m.name == *k))
    {
        if let Some(item) = r.int(t, key) {
            r.bad(
                &item,
                format!("{d} does not use {key}; it uses {}", d.threshold_key_names()),
            );
            ok = false;
        }
    }
    let mut values = Vec::with_capacity(mine.len());
    for key in mine {
        let value = match r.int(t, key.name) {
            None => key.default,
            Some(item) => key.check(d, item.v).unwrap_or_else(|e| {
                let problem = match e {
                    ThresholdError::OutOfRange { min, max, .. } => format!("{d} allows {min} to {max}"),
                    other => other.to_string(),
                };
                r.bad(&item, problem);
                ok = false;
                key.default
            }),
        };
        values.push(value);
    }
    ok.then_some(())?;
    match d.thresholds(&values) {
        Ok(thresholds) => Some(thresholds),
        Err(e) => {
            r.missing(t, mine[0].name, e.to_string());
            None
        }
    }
}

fn probe(r: &mut Reader<'_>, t: &Table<'_, '_>, d: Dialect, p: Protocol) -> Option<Probe> {
    // Every key of another protocol's, as the reference has it.
    let clean = super::refuse_foreign(
        r,
        t,
        &reference::HEALTH,
        |only| only.admits_protocol(p),
        &format!("the protocol is {p}"),
    );
    let probe = Probe::read(r, t, d, p);
    clean.then_some(())?;
    probe
}
