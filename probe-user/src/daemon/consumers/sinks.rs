//! The `[[sink]]`s: opened (and so checked) before a configuration goes live, started from
//! their profile's state right after it did, stopped when a reload drops or changes them.
use std::path::Path;

use super::take_joined;
use crate::{
    changes::{Follower, Join, Joined},
    config::{Sink as SinkConfig, SinkKind},
    daemon::DaemonError,
    sinks::{self, RouteReport, Running, Sink},
};

/// What every route sink announces, kept together and sent to the runner whole whenever one
/// of them changes: the cluster gossips it (`probed cluster`).
pub(super) struct RouteBoard {
    by_sink: std::sync::Mutex<std::collections::BTreeMap<String, Vec<crate::cluster::routes::Announcement>>>,
    announce: Announce,
}

/// Where the route board sends every route sink's announcements, whole, each time one of them
/// changes (called on the sink's thread).
pub(in crate::daemon) type Announce = Box<dyn Fn(Vec<crate::cluster::routes::Announcement>) + Send + Sync>;

impl RouteBoard {
    /// A board that passes what they announce to `announce`: the report each route sink calls.
    pub(super) fn report_to(announce: Announce) -> RouteReport {
        let board = std::sync::Arc::new(RouteBoard {
            by_sink: std::sync::Mutex::default(),
            announce,
        });
        std::sync::Arc::new(move |sink: &str, routes: &[sinks::RouteView]| board.report(sink, routes))
    }

    /// Called on the sink's own thread, never on a runtime's.
    fn report(&self, sink: &str, routes: &[sinks::RouteView]) {
        let all = {
            let mut by_sink = self.by_sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let list = routes
                .iter()
                .map(|r| crate::cluster::routes::Announcement {
                    prefix: r.prefix.clone(),
                    state: r.state.as_str().to_string(),
                })
                .collect();
            by_sink.insert(sink.to_string(), list);
            by_sink.values().flatten().cloned().collect()
        };
        (self.announce)(all);
    }
}

/// A sink's queue holds at most one change per endpoint of its profile; this bounds it far
/// beyond any profile, so that it never loses a change.
const SINK_QUEUE: usize = 1 << 20;

/// Sinks a configuration needs that are not running as they are: opened and checked, not yet
/// started.
#[derive(Default)]
pub(super) struct PreparedSinks(Vec<(SinkConfig, Box<dyn Sink>)>);

/// Opens every sink of `wanted` that is not already running with the same settings. Fails on
/// the first that cannot be used (missing table or map, wrong type): nothing changes.
pub(super) fn prepare(
    running: &[Running],
    wanted: &[SinkConfig],
    pin_dir: &Path,
) -> Result<PreparedSinks, DaemonError> {
    let mut out = Vec::new();
    for cfg in wanted {
        if running.iter().any(|r| r.cfg == *cfg) {
            continue;
        }
        let sink = sinks::open(cfg, pin_dir).map_err(|source| DaemonError::Sink {
            name: cfg.name.clone(),
            source,
        })?;
        out.push((cfg.clone(), sink));
    }
    Ok(PreparedSinks(out))
}

fn follower(cfg: &SinkConfig) -> Follower {
    Follower::Sink(cfg.name.as_str().into())
}

impl PreparedSinks {
    /// How each joins the stream: from its profile's state. A sink that runs with other
    /// settings under the same name is replaced at that point.
    pub(super) fn joins(&self) -> impl Iterator<Item = Join> + '_ {
        self.0.iter().map(|(cfg, _)| Join {
            follower: follower(cfg),
            capacity: SINK_QUEUE,
            profile: Some(cfg.profile.as_str().into()),
            snapshot: true,
        })
    }

    /// Starts each on its thread, from what it joined with and what its predecessor of the
    /// same name handed over (`handed`); route sinks tell `report` what they announce.
    pub(super) fn start(
        self,
        running: &mut Vec<Running>,
        joined: &mut Vec<Joined>,
        report: Option<&RouteReport>,
        mut handed: Handed,
    ) {
        for (cfg, mut sink) in self.0 {
            let Some(joined) = take_joined(joined, &follower(&cfg)) else {
                log::error!("sink {}: the runner did not take it on; it does not run", cfg.name);
                continue;
            };
            if let Some(from) = handed.remove(&cfg.name) {
                log::info!("sink {}: new settings, taking over the same structure", cfg.name);
                sink.take_over(from);
            }
            log::info!("sink {}: {} follows profile {}", cfg.name, sink.describe(), cfg.profile);
            let report = matches!(cfg.kind, SinkKind::Route(_))
                .then(|| report.cloned())
                .flatten();
            running.push(Running::start(cfg, sink, &joined.snapshot, joined.changes, report));
        }
    }
}

/// The followers of the running sinks that `wanted` does not name: a reload ends their streams.
pub(super) fn gone(running: &[Running], wanted: &[SinkConfig]) -> Vec<Follower> {
    running
        .iter()
        .filter(|r| !wanted.iter().any(|w| w.name == r.cfg.name))
        .map(|r| follower(&r.cfg))
        .collect()
}

/// What sinks whose settings a reload changed handed over, by name.
pub(super) type Handed = std::collections::HashMap<String, sinks::Handover>;

/// The running sinks whose successor under `wanted` writes the same structure (the same
/// name, other settings): marked (or, with `yes` false after a refused reload, unmarked) to
/// hand over instead of clearing when the reload ends their streams.
pub(super) fn mark_handovers(running: &[Running], wanted: &[SinkConfig], yes: bool) {
    for r in running {
        let next = wanted.iter().find(|w| w.name == r.cfg.name);
        if next.is_some_and(|w| *w != r.cfg && sinks::same_structure(&r.cfg, w)) {
            r.set_handing_over(yes);
        }
    }
}

/// Waits for the running sinks that `wanted` no longer has as they are, whose streams the
/// reload ended (closed, or replaced by their new settings'), to take what was queued and
/// stop; keeps the rest. What those marked by `mark_handovers` handed over, by name.
pub(super) fn stop_unwanted(running: &mut Vec<Running>, wanted: &[SinkConfig]) -> Handed {
    let (keep, stop): (Vec<Running>, Vec<Running>) = std::mem::take(running)
        .into_iter()
        .partition(|r| wanted.contains(&r.cfg));
    let mut handed = Handed::new();
    for mut r in stop {
        let from = r.join();
        // Only a sink marked to hand over did; one whose structure changed stopped as its
        // `on_stop` says, and its successor starts from nothing.
        if r.handing_over() {
            handed.insert(r.cfg.name.clone(), from);
        }
    }
    *running = keep;
    handed
}
