//! What a terminal shows of the daemon's views: the status table (`probed status`, the
//! demo), its watch mode, and the cluster view, with ANSI colours when asked. The views are
//! the API's (`daemon::views`); this is only their rendering.
use crate::{
    changes::ChangeKind,
    daemon::views::{ClusterView, ProfileView},
    status::{EndpointStatus, ProfileStatus},
};

/// `probed cluster`: this node's share, the members, what each node gossips.
pub fn render_cluster(v: &ClusterView) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let k = match v.probers_per_target {
        0 => "every node probes every endpoint".to_string(),
        k => format!("{k} nodes probe each endpoint"),
    };
    let _ = writeln!(
        out,
        "node {} (region {}): probes {} of {} endpoints; {k}",
        v.node, v.region, v.probed_here, v.endpoints
    );
    let _ = writeln!(out, "members: {}", v.members.join(" "));
    let _ = writeln!(
        out,
        "{:<20} {:<12} {:<5} {:>9} {:>9}",
        "NODE", "REGION", "LIVE", "SILENT", "VERDICTS"
    );
    for n in &v.nodes {
        let silent = if n.live {
            "-".to_string()
        } else {
            format!("{:.1}s", n.silent_ms as f64 / 1000.0)
        };
        let _ = writeln!(
            out,
            "{:<20} {:<12} {:<5} {:>9} {:>9}",
            n.name,
            n.region,
            if n.live { "yes" } else { "NO" },
            silent,
            n.verdicts
        );
    }
    // Which node announces which prefix (route sinks), this node first.
    let announced = std::iter::once((&v.node, &v.routes)).chain(v.nodes.iter().map(|n| (&n.name, &n.routes)));
    for (node, routes) in announced.filter(|(_, r)| !r.is_empty()) {
        let list: Vec<String> = routes.iter().map(|r| format!("{} {}", r.prefix, r.state)).collect();
        let _ = writeln!(out, "routes of {node}: {}", list.join(", "));
    }
    let d = &v.datagrams;
    let _ = writeln!(
        out,
        "gossip: {:.1} KiB sent, {:.1} KiB received; datagrams {} accepted, dropped {} forged, {} stale, {} replayed, {} malformed, {} misdirected",
        d.bytes_sent as f64 / 1024.0,
        d.bytes_received as f64 / 1024.0,
        d.accepted,
        d.forged,
        d.stale,
        d.replayed,
        d.malformed,
        d.misdirected
    );
    out
}

/// How a status looks on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Good,
    Bad,
    Waiting,
    Unwatched,
    Quiet,
}

impl From<EndpointStatus> for Tone {
    fn from(s: EndpointStatus) -> Tone {
        match s {
            EndpointStatus::Online => Tone::Good,
            EndpointStatus::Degraded => Tone::Bad,
            EndpointStatus::CheckingEndpoint => Tone::Waiting,
            EndpointStatus::Unmonitored => Tone::Unwatched,
            EndpointStatus::Inactive | EndpointStatus::Disabled | EndpointStatus::Stopped => Tone::Quiet,
        }
    }
}

impl From<ProfileStatus> for Tone {
    fn from(s: ProfileStatus) -> Tone {
        match s {
            ProfileStatus::Online => Tone::Good,
            ProfileStatus::Degraded => Tone::Bad,
            ProfileStatus::CheckingEndpoints => Tone::Waiting,
            ProfileStatus::Inactive | ProfileStatus::Disabled => Tone::Quiet,
        }
    }
}

/// `text` in the colour of `tone` when `colour`.
pub fn paint(tone: impl Into<Tone>, text: String, colour: bool) -> String {
    if !colour {
        return text;
    }
    let code = match tone.into() {
        Tone::Good => "32",
        Tone::Bad => "31",
        Tone::Waiting => "33",
        Tone::Unwatched => "36",
        Tone::Quiet => "2",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// The status table `probed status` and the demo print; ANSI colours when `colour`.
pub fn render_table(profiles: &[ProfileView], colour: bool) -> String {
    use std::fmt::Write;
    let paint = |tone: Tone, text: String| paint(tone, text, colour);
    let mut out = String::new();
    for p in profiles {
        let status = if p.fail_open {
            format!("{} (fail-open)", p.status)
        } else {
            p.status.to_string()
        };
        let _ = writeln!(
            out,
            "{}  [{} {}]  {}",
            p.name,
            p.dialect,
            p.routing,
            paint(p.status.into(), status)
        );
        let _ = writeln!(
            out,
            "  {:<18} {:<24} {:<5} {:<17} {:<4} {:<22} {:>9}  LAST CHANGE",
            "ENDPOINT", "ADDRESS", "PROTO", "STATUS", "ELIG", "LAST RESULT", "RTT ms"
        );
        for e in &p.endpoints {
            let addr = if e.address.contains(':') {
                format!("[{}]:{}", e.address, e.port)
            } else {
                format!("{}:{}", e.address, e.port)
            };
            let (last, rtt) = match &e.last_result {
                Some(r) => (
                    format!("{} {}", if r.ok { "ok" } else { "fail" }, r.reason),
                    format!("{:.2}", r.rtt_ms()),
                ),
                None => ("-".to_string(), "-".to_string()),
            };
            let change = match &e.last_change {
                Some(c) => {
                    let from = c.from.map_or("new", EndpointStatus::as_str);
                    if c.kind == ChangeKind::Health {
                        format!(
                            "{from} -> {} in {:.0} ms (formula {:.0} ms)",
                            c.to,
                            c.measured_window_ms(),
                            c.formula_window_ms()
                        )
                    } else if c.kind == ChangeKind::Passive {
                        // From the first failed client handshake of the run; the formula is
                        // what the active check alone would have taken.
                        format!(
                            "{from} -> {} by passive detection in {:.0} ms (checks alone {:.0} ms)",
                            c.to,
                            c.measured_window_ms(),
                            c.formula_window_ms()
                        )
                    } else {
                        format!("{from} -> {} ({})", c.to, c.kind)
                    }
                }
                None => "-".to_string(),
            };
            // A certificate within its warning: said at the end, where nothing else is.
            let change = match &e.tls_cert {
                Some(c) if c.expiring && c.days_left < 0 => format!("{change}  CERTIFICATE EXPIRED"),
                Some(c) if c.expiring => format!("{change}  certificate expires in {} days", c.days_left),
                _ => change,
            };
            // An agent's last word, at the end too (what it holds shows in the status and
            // eligibility).
            let change = match &e.agent {
                Some(a) => format!("{change}  agent: {}", a.said.as_deref().unwrap_or("not asked yet")),
                None => change,
            };
            // A check through a tunnel: the road, at the end (the address is the backend's).
            let change = match &e.tunnel {
                Some(t) => format!("{change}  {}", tunnel_words(t)),
                None => change,
            };
            // In transition: results toward a change so far (down toward Degraded, up toward
            // Online).
            let status = match (e.pending, e.status) {
                (0, s) => format!("{s:<17}"),
                (n, EndpointStatus::Degraded) => format!("{:<17}", format!("{} ^{n}", e.status)),
                (n, s) => format!("{:<17}", format!("{s} v{n}")),
            };
            let _ = writeln!(
                out,
                "  {:<18} {:<24} {:<5} {} {:<4} {:<22} {:>9}  {}",
                truncate(&e.name, 18),
                addr,
                e.protocol.as_str(),
                paint(e.status.into(), status),
                if e.eligible { "yes" } else { "no" },
                truncate(&last, 22),
                rtt,
                change
            );
        }
        for n in &p.nested {
            let status = format!("{:<17}", n.status);
            let last = nested_count(n.available_child_endpoints, n.min_child_endpoints);
            let change = n.last_change.as_ref().map_or_else(
                || "-".to_string(),
                |c| format!("{} -> {}", c.from.map_or("new", EndpointStatus::as_str), c.to),
            );
            let _ = writeln!(
                out,
                "  {:<18} {:<24} {:<5} {} {:<4} {:<22} {:>9}  {}",
                truncate(&n.name, 18),
                truncate(&format!("profile {}", n.profile), 24),
                "-",
                paint(n.status.into(), status),
                if n.eligible { "yes" } else { "no" },
                truncate(&last, 22),
                "-",
                change
            );
        }
    }
    out
}

/// What `probed status --watch` shows above the table, from the daemon's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WatchSummary {
    /// Probes sent per second since the previous frame.
    pub probes_per_s: Option<f64>,
    /// The worst start lateness among the endpoints' last probes.
    pub lag_ms: Option<f64>,
    /// What the keys do, at the end of the line (the CLI's watch: "q quits").
    pub keys: &'static str,
}

/// The watch view: a summary line, then the table with problems first (profiles and their
/// endpoints by severity: Degraded, then in transition or checking, then the rest).
pub fn render_watch(profiles: &[ProfileView], summary: &WatchSummary, colour: bool) -> String {
    use std::fmt::Write;
    let mut sorted = profiles.to_vec();
    sorted.sort_by_key(|p| (profile_rank(p.status), p.name.clone()));
    for p in &mut sorted {
        p.endpoints
            .sort_by_key(|e| (endpoint_rank(e.status), e.pending == 0, e.name.clone()));
    }
    let mut counts: Vec<(EndpointStatus, usize)> = Vec::new();
    for e in sorted.iter().flat_map(|p| &p.endpoints) {
        match counts.iter_mut().find(|(s, _)| *s == e.status) {
            Some((_, n)) => *n += 1,
            None => counts.push((e.status, 1)),
        }
    }
    counts.sort_by_key(|(s, _)| endpoint_rank(*s));
    let by_status: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let mut out = String::new();
    let _ = write!(
        out,
        "probed: {} profiles, endpoints: {}",
        sorted.len(),
        if by_status.is_empty() {
            "none".to_string()
        } else {
            by_status.join(", ")
        }
    );
    if let Some(r) = summary.probes_per_s {
        let _ = write!(out, "; {r:.0} probes/s");
    }
    if let Some(l) = summary.lag_ms {
        let _ = write!(out, "; lateness {l:.0} ms");
    }
    if !summary.keys.is_empty() {
        let _ = write!(out, "   ({})", summary.keys);
    }
    out.push_str("\n\n");
    out.push_str(&render_table(&sorted, colour));
    out
}

fn profile_rank(s: ProfileStatus) -> u8 {
    match s {
        ProfileStatus::Degraded => 0,
        ProfileStatus::CheckingEndpoints => 1,
        ProfileStatus::Inactive => 2,
        ProfileStatus::Online => 3,
        ProfileStatus::Disabled => 4,
    }
}

fn endpoint_rank(s: EndpointStatus) -> u8 {
    match s {
        EndpointStatus::Degraded => 0,
        EndpointStatus::Stopped => 1,
        EndpointStatus::CheckingEndpoint => 2,
        EndpointStatus::Online => 3,
        EndpointStatus::Unmonitored => 4,
        EndpointStatus::Disabled => 5,
        EndpointStatus::Inactive => 6,
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('~');
        t
    }
}

/// A nested endpoint's children as the table says them: how many are up and how many its
/// profile needs ("2 up, 1 needed"), never "2 of 1 up", which reads as a share.
fn nested_count(up: impl std::fmt::Display, needed: impl std::fmt::Display) -> String {
    format!("{up} up, {needed} needed")
}

/// How the status table names a tunnelled check's road.
fn tunnel_words(t: &crate::probe::tunnel::TunnelTo) -> String {
    let from = t.source.map(|s| format!(" from {s}")).unwrap_or_default();
    let road = match t.encap {
        crate::engine::Encap::Ipip => format!("via ipip{from} to {}", t.vip),
        crate::engine::Encap::Gue { port } => format!("via gue:{port}{from} to {}", t.vip),
    };
    match t.mtu {
        Some(mtu) => format!("{road}, full-size {mtu}"),
        None => road,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_nested_endpoint_says_how_many_are_up_and_how_many_are_needed() {
        assert_eq!(super::nested_count(2, 1), "2 up, 1 needed");
        assert_eq!(super::nested_count(0, 3), "0 up, 3 needed");
        // The widest a profile of 65,536 endpoints gives still fits its 22-column cell.
        assert!(super::nested_count(65_536, 65_536).len() <= 22);
    }

    #[test]
    fn a_tunnelled_check_says_its_road() {
        use crate::{engine::Encap, probe::tunnel::TunnelTo};
        let ipip = TunnelTo {
            vip: "198.51.100.10".parse().unwrap(),
            encap: Encap::Ipip,
            mtu: None,
            source: None,
        };
        assert_eq!(super::tunnel_words(&ipip), "via ipip to 198.51.100.10");
        let gue = TunnelTo {
            vip: "2001:db8::10".parse().unwrap(),
            encap: Encap::Gue { port: 6080 },
            mtu: Some(1500),
            source: Some("2001:db8::1".parse().unwrap()),
        };
        assert_eq!(
            super::tunnel_words(&gue),
            "via gue:6080 from 2001:db8::1 to 2001:db8::10, full-size 1500"
        );
    }
}
