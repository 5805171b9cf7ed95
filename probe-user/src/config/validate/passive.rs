//! `[profile.passive]`: when the node's forwarded handshakes eject an endpoint, where they are
//! watched, and the cap on ejections (`crate::passive` applies them).
use std::time::Duration;

use toml::de::DeValue;

use super::cluster::bounded_duration;
use crate::config::{
    model::{FailureRatio, HealthCheck, Passive},
    read::{Reader, Table},
    reference,
};
use crate::rules::Protocol;

pub(super) fn passive(
    r: &mut Reader<'_>,
    v: &toml::Spanned<DeValue<'_>>,
    path: String,
    health: Option<&HealthCheck>,
) -> Option<Passive> {
    let t = r.table(v, path, &reference::PASSIVE)?;
    let interfaces = interfaces(r, &t);
    let consecutive = bounded_int(r, &t, "consecutive_failures", 1, 10_000);
    let percent = bounded_int(r, &t, "failure_ratio", 1, 100);
    let min_attempts = bounded_int(r, &t, "min_attempts", 1, 1_000_000);
    let window = bounded_duration(
        r,
        &t,
        "window",
        Duration::from_secs(10),
        (Duration::from_secs(1), Duration::from_secs(600)),
    );
    let ratio = match percent? {
        None => {
            for key in ["min_attempts", "window"] {
                if let Some(item) = r.string(&t, key).map(|i| i.span) {
                    r.error(
                        item,
                        &t.child(key),
                        None,
                        "min_attempts and window go with failure_ratio",
                    );
                    return None;
                }
            }
            None
        }
        Some(p) => Some(FailureRatio {
            percent: u8::try_from(p).ok()?,
            min_attempts: min_attempts?.unwrap_or(10),
            window: window?,
        }),
    };
    // Neither rule written: five in a row, Envoy's and NGINX's habit.
    let consecutive = match (consecutive?, ratio) {
        (None, None) => Some(5),
        (c, _) => c,
    };
    let default_timeout = health.map_or(Duration::from_secs(1), |h| h.timeout);
    let timeout = bounded_duration(
        r,
        &t,
        "timeout",
        default_timeout.clamp(Duration::from_millis(100), Duration::from_secs(60)),
        (Duration::from_millis(100), Duration::from_secs(60)),
    );
    let cap = bounded_int(r, &t, "max_ejection_percent", 0, 100);
    if let Some(h) = health {
        if h.protocol() == Protocol::Udp {
            r.error(
                v.span(),
                &t.child(""),
                None,
                format!(
                    "passive detection watches TCP handshakes: a profile with protocol = \"{}\" has none to watch",
                    h.protocol().as_str()
                ),
            );
            return None;
        }
    }
    Some(Passive {
        interfaces: interfaces?,
        consecutive,
        ratio,
        timeout: timeout?,
        max_ejection_percent: u8::try_from(cap?.unwrap_or(10)).ok()?,
    })
}

/// An integer key within `min..=max`: Some(None) when it is not written.
fn bounded_int(r: &mut Reader<'_>, t: &Table<'_, '_>, key: &str, min: i64, max: i64) -> Option<Option<u32>> {
    let Some(item) = r.int(t, key) else {
        return Some(None);
    };
    if (min..=max).contains(&item.v) {
        Some(Some(u32::try_from(item.v).ok()?))
    } else {
        r.bad(&item, format!("expected a whole number from {min} to {max}"));
        None
    }
}

fn interfaces(r: &mut Reader<'_>, t: &Table<'_, '_>) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut ok = true;
    for item in r.strings(t, "interfaces").map(|l| l.v).unwrap_or_default() {
        if super::source::interface_name_ok(&item.v) {
            out.push(item.v.clone());
        } else {
            r.bad(&item, super::source::INTERFACE_RULE);
            ok = false;
        }
    }
    ok.then_some(out)
}
