//! Sinks: the node's data path, told about health. Each `[[sink]]` follows the daemon's change
//! stream for one profile on a thread of its own and keeps one forwarding structure (an nft
//! map or set, a pinned BPF slot table, a HAProxy backend's servers, a program's stdin) equal
//! to what the profile's eligible set asks for.
//!
//! - Start: a sink checks its structure exists (a missing table or map stops the start, and
//!   refuses a reload), then syncs from the resumed state, writing only what differs: a
//!   restart with the same health rewrites nothing.
//! - Changes: every batch from the stream is one sync, and one sync is one transaction.
//! - Failure (the table deleted, the library missing): the sink retries with backoff, from a
//!   fresh read of the data path; probing and other sinks never wait for it. Every few
//!   seconds it also reads the data path back, so that someone else's edit is undone.
//! - Stop: the structure is left as it is (fail-static), or emptied with `on_stop = "clear"`.
//!
//! Each kind is a folder: `<kind>/mod.rs` is its runtime (`impl Sink`), `<kind>/config.rs` its
//! settings, keys and reader; `config.rs` here is the one list of kinds (`SinkKind`).
pub mod config;
pub(crate) mod names;

use config::{OnStop, Sink as SinkConfig, SinkKind};
pub mod bpf;
pub mod exec;
pub mod haproxy;
pub mod model;
pub mod nftables;
pub mod route;
pub mod slots;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use crate::changes::{EndpointState, Snapshot, Subscription};
use model::ProfileModel;

/// A sink reads its structure back this often, and after every failed sync.
const VERIFY_EVERY: Duration = Duration::from_secs(5);
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
/// Capped at the read-back interval: a structure that comes back (HAProxy restarted after a
/// long outage) is found within seconds either way.
const BACKOFF_MAX: Duration = Duration::from_secs(5);

crate::wire_enum::wire_enum! {
    /// What kind of trouble a sink has with its structure.
    #[derive(Debug)]
    pub enum SinkFault {
        /// The sink could not set itself up (a directory, a library, a program to start).
        Setup = "setup",
        /// The structure it writes is not there (table, map, pin, socket, backend, program).
        Missing = "missing",
        /// It is there, but not of a kind the sink can write.
        WrongType = "wrong-type",
        /// What it read back made no sense.
        Data = "data",
        /// A write failed.
        Write = "write",
    }
}

/// Why a sink could not do what it was asked: the kind, what it was doing, and the error
/// underneath when there is one (`crate::errors::chain` prints them all).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}{}", if *.kind == SinkFault::Write { "write: " } else { "" }, .what)]
pub struct SinkError {
    pub kind: SinkFault,
    what: String,
    #[source]
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

impl SinkError {
    pub fn new(kind: SinkFault, what: impl Into<String>) -> Self {
        SinkError {
            kind,
            what: what.into(),
            source: None,
        }
    }

    /// The same, caused by `source`.
    #[must_use]
    pub fn because(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(std::sync::Arc::new(source));
        self
    }
}

/// What one sync did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Elements written (changed slots, added or removed addresses).
    pub written: usize,
    /// Elements the structure holds now.
    pub entries: usize,
    /// The structure holds what the sink decided, but the sink has to decide again then
    /// (a route sink's damping): the loop syncs at that time even without a change.
    pub again_at: Option<Instant>,
}

pub use route::RouteView;

/// Told a sink's name and its prefixes whenever what a route sink says of them changes (the
/// cluster gossips them); told an empty list when a reload removes the sink.
pub type RouteReport = Arc<dyn Fn(&str, &[RouteView]) + Send + Sync>;

/// One forwarding structure. Calls block; each sink runs on its own thread.
pub trait Sink: Send {
    /// `nftables map ip lb web_slots (64 slots)`.
    fn describe(&self) -> String;
    /// The structure exists and holds what probed writes.
    fn check(&mut self) -> Result<(), SinkError>;
    /// Makes the structure hold what `model` asks for, in one transaction, writing only what
    /// differs from what it holds.
    fn sync(&mut self, model: &ProfileModel) -> Result<SyncReport, SinkError>;
    /// Reads the structure back: does it hold what `model` asks for?
    fn verify(&mut self, model: &ProfileModel) -> Result<bool, SinkError>;
    /// Empties the structure.
    fn clear(&mut self) -> Result<(), SinkError>;
    /// As `clear`, when the whole daemon stops (a reload that removes or changes the sink
    /// calls `clear`): a route sink whose device the service manager keeps leaves its routes
    /// to it, so that a restart does not withdraw them.
    fn clear_at_stop(&mut self) -> Result<(), SinkError> {
        self.clear()
    }
    /// A route sink's prefixes, for its view; other sinks have none.
    fn routes(&self) -> Vec<RouteView> {
        Vec::new()
    }
    /// Gives up what it holds beyond the structure itself, for its successor: a reload changed
    /// its settings but not the structure it writes (`same_structure`).
    fn hand_over(&mut self) -> Handover {
        Handover::Nothing
    }
    /// Goes on from what its predecessor handed over, before its first sync.
    fn take_over(&mut self, _from: Handover) {}
}

/// What a sink whose settings a reload changed hands to its successor, which writes the same
/// structure: the successor goes on from there, and its first sync writes only what the new
/// settings change. Nothing is cleared in between.
pub enum Handover {
    /// The structure holds it all (an nft map or set, a BPF slot table, HAProxy's servers, a
    /// program's input).
    Nothing,
    /// A route sink's device, with its routes, and its damping.
    Route(Box<route::Held>),
}

/// An nft sink's structure within its table: a map or a set, and its name.
fn nft_target(t: &nftables::config::NftTarget) -> (&'static str, &str) {
    match t {
        nftables::config::NftTarget::Map { name, .. } => ("map", name),
        nftables::config::NftTarget::Set { name } => ("set", name),
    }
}

/// Whether a sink under settings `next` writes the very structure it writes under `was`, so
/// that a reload hands it over in place (`Handover`) instead of clearing it and starting the
/// new one from nothing. Route sinks always do: the device and its routes move to the new
/// settings, and only the prefixes and metrics that differ change at the router.
pub fn same_structure(was: &SinkConfig, next: &SinkConfig) -> bool {
    match (&was.kind, &next.kind) {
        (SinkKind::Nftables(a), SinkKind::Nftables(b)) => {
            a.family == b.family && a.table == b.table && nft_target(&a.target) == nft_target(&b.target)
        }
        (SinkKind::Bpf(a), SinkKind::Bpf(b)) => a.map == b.map,
        (SinkKind::Haproxy(a), SinkKind::Haproxy(b)) => a.socket == b.socket && a.backend == b.backend,
        (SinkKind::Exec(a), SinkKind::Exec(b)) => a.command == b.command,
        (SinkKind::Route(_), SinkKind::Route(_)) => true,
        _ => false,
    }
}

/// The slot table a profile asks for: its eligible endpoints that `fits` (the structure's
/// address family), by weight, moved as little as possible from `held` (what the structure
/// holds now, as `key`s of endpoints; see `slots::rebalance`). Costs one hash lookup per slot.
pub fn desired_slots<'m, K: std::hash::Hash + Eq + Copy>(
    model: &'m ProfileModel,
    slots: u32,
    fits: impl Fn(&EndpointState) -> bool,
    key: impl Fn(&EndpointState) -> K,
    held: &[Option<K>],
) -> Vec<Option<&'m EndpointState>> {
    let chosen: Vec<(&str, &EndpointState)> = model.eligible().filter(|(_, s)| fits(s)).collect();
    // While one of them is in a slow start, every weight is taken in thousandths so that its
    // share is exact; outside one, the configured weights as they are (the same shares, and
    // the same tables as before slow starts existed).
    let ramping = chosen.iter().any(|(_, s)| s.ramp < crate::status::ramp::FULL);
    let candidates: Vec<slots::Candidate<'_>> = chosen
        .iter()
        .map(|(name, s)| slots::Candidate {
            name,
            weight: if ramping { s.fine_weight() } else { s.weight },
        })
        .collect();
    let index: crate::hash::FastMap<K, usize> = chosen.iter().enumerate().map(|(i, (_, s))| (key(s), i)).collect();
    let held: Vec<Option<usize>> = held.iter().map(|k| k.and_then(|k| index.get(&k).copied())).collect();
    slots::rebalance_held(&held, &candidates, slots)
        .into_iter()
        .map(|i| i.map(|i| chosen[i].1))
        .collect()
}

/// Opens the sink a config names: fails when its structure is missing or of the wrong type.
/// bpf sinks pin under `pin_dir`.
pub fn open(cfg: &SinkConfig, pin_dir: &std::path::Path) -> Result<Box<dyn Sink>, SinkError> {
    match &cfg.kind {
        SinkKind::Nftables(n) => Ok(Box::new(nftables::NftablesSink::open(n)?)),
        SinkKind::Bpf(b) => Ok(Box::new(bpf::BpfSink::open(b, pin_dir)?)),
        SinkKind::Haproxy(h) => Ok(Box::new(haproxy::HaproxySink::open(h)?)),
        SinkKind::Exec(e) => Ok(Box::new(exec::ExecSink::open(e)?)),
        SinkKind::Route(r) => Ok(Box::new(route::RouteSink::open(r)?)),
    }
}

/// What `/v1/sinks` and the metrics show of one sink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SinkView {
    pub name: String,
    pub profile: String,
    pub target: String,
    /// Successful syncs so far; the data path holds generation `generation`'s set.
    pub generation: u64,
    /// Elements held after the last sync, and elements written by it.
    pub entries: usize,
    pub last_written: usize,
    /// The data path held what it should at the last read-back.
    pub in_sync: bool,
    pub syncs_total: u64,
    pub errors_total: u64,
    /// Read-backs that found someone else's edit (undone by the next sync).
    pub drift_total: u64,
    pub last_error: Option<String>,
    /// Change stream sequence number the last successful sync reflects.
    pub seq: u64,
    /// From the newest change in a batch to the end of its sync, for the last sync.
    pub last_latency_ms: f64,
    /// A route sink's prefixes and what it says of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteView>,
}

/// A running sink: its thread, and its view shared with the runner.
pub struct Running {
    pub cfg: SinkConfig,
    pub view: Arc<Mutex<SinkView>>,
    /// Set before a reload ends its stream when its successor writes the same structure: it
    /// then stops without clearing and hands over what it holds.
    handing_over: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Handover>>,
}

impl Running {
    /// Starts following `changes` (which begin after `snapshot`) on a thread of its own; the
    /// first sync brings the structure to the snapshot's state.
    pub fn start(
        cfg: SinkConfig,
        sink: Box<dyn Sink>,
        snapshot: &Snapshot,
        changes: Subscription,
        report: Option<RouteReport>,
    ) -> Running {
        let model = ProfileModel::from_snapshot(&cfg.profile, snapshot);
        let view = Arc::new(Mutex::new(SinkView {
            name: cfg.name.clone(),
            profile: cfg.profile.clone(),
            target: sink.describe(),
            generation: 0,
            entries: 0,
            last_written: 0,
            in_sync: false,
            syncs_total: 0,
            errors_total: 0,
            drift_total: 0,
            last_error: None,
            seq: 0,
            last_latency_ms: 0.0,
            routes: sink.routes(),
        }));
        let shared = view.clone();
        let handing_over = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = Stop {
            on_stop: cfg.on_stop,
            handing_over: handing_over.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("probed-sink-{}", cfg.name))
            .spawn(move || follow(sink, model, &changes, &shared, &stop, report.as_ref()))
            .map_err(|e| log::error!("cannot start a thread for sink {}: {e}", cfg.name))
            .ok();
        Running {
            cfg,
            view,
            handing_over,
            thread,
        }
    }

    pub fn view(&self) -> SinkView {
        lock(&self.view).clone()
    }

    /// Whether it will hand over to its successor when its stream ends (set before a reload
    /// that changes its settings, reset if that reload is refused).
    pub fn set_handing_over(&self, yes: bool) {
        self.handing_over.store(yes, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn handing_over(&self) -> bool {
        self.handing_over.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits for the thread, which ends once its subscription is closed; what it handed over.
    pub fn join(&mut self) -> Handover {
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or(Handover::Nothing)
    }
}

/// How a sink's loop ends.
struct Stop {
    on_stop: OnStop,
    handing_over: Arc<std::sync::atomic::AtomicBool>,
}

fn lock(view: &Mutex<SinkView>) -> std::sync::MutexGuard<'_, SinkView> {
    // The view is plain data written field by field: a panic mid-update leaves it usable.
    view.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The sink's loop: sync on every batch, retry with backoff, read back every few seconds.
fn follow(
    mut sink: Box<dyn Sink>,
    mut model: ProfileModel,
    changes: &Subscription,
    view: &Mutex<SinkView>,
    stop: &Stop,
    report: Option<&RouteReport>,
) -> Handover {
    let mut dirty = true;
    let mut backoff = BACKOFF_FIRST;
    let mut retry_at = Instant::now();
    let mut verify_at = Instant::now() + VERIFY_EVERY;
    let mut newest_change: Option<Instant> = None;
    // The last sync succeeded but asked to be made again later: a change before then is
    // synced at once (it may end the wait), unlike a retry after a failure.
    let mut waiting = false;
    loop {
        let now = Instant::now();
        if dirty && now >= retry_at {
            match sink.sync(&model) {
                Ok(done) => {
                    // A sink that has to decide again later (damping) stays due until then.
                    dirty = done.again_at.is_some();
                    waiting = dirty;
                    retry_at = done.again_at.unwrap_or(now);
                    backoff = BACKOFF_FIRST;
                    let routes = sink.routes();
                    let mut v = lock(view);
                    // Told outside the lock: the report may wait for the runner.
                    let changed = (routes != v.routes).then(|| (v.name.clone(), routes.clone()));
                    v.routes = routes;
                    v.generation += 1;
                    v.syncs_total += 1;
                    v.entries = done.entries;
                    v.last_written = done.written;
                    v.in_sync = true;
                    v.last_error = None;
                    v.seq = model.seq;
                    if let Some(t) = newest_change.take() {
                        v.last_latency_ms = t.elapsed().as_secs_f64() * 1e3;
                    }
                    drop(v);
                    if let (Some(report), Some((name, routes))) = (report, changed) {
                        report(&name, &routes);
                    }
                }
                Err(e) => {
                    waiting = false;
                    let e = crate::errors::chain(&e);
                    log::warn!("sink {}: {e}; retrying in {backoff:?}", lock(view).name);
                    let mut v = lock(view);
                    v.errors_total += 1;
                    v.in_sync = false;
                    v.last_error = Some(e);
                    retry_at = now + backoff;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
        if now >= verify_at && !dirty {
            match sink.verify(&model) {
                Ok(true) => {}
                Ok(false) => {
                    dirty = true;
                    let mut v = lock(view);
                    v.drift_total += 1;
                    v.in_sync = false;
                }
                Err(e) => {
                    dirty = true;
                    let mut v = lock(view);
                    v.errors_total += 1;
                    v.in_sync = false;
                    v.last_error = Some(crate::errors::chain(&e));
                }
            }
            verify_at = now + VERIFY_EVERY;
        }
        let until = if dirty { retry_at.min(verify_at) } else { verify_at };
        let Some(batch) = changes.recv_blocking(until.saturating_duration_since(Instant::now())) else {
            break;
        };
        let received = Instant::now();
        if batch.lost > 0 {
            // The queue holds one change per endpoint of the profile and is sized beyond any
            // profile; if it ever overflows, the next read-back finds the difference.
            log::error!(
                "sink {}: {} changes lost; reading the data path back",
                lock(view).name,
                batch.lost
            );
            verify_at = received;
        }
        for c in &batch.changes {
            if model.apply(c) {
                dirty = true;
                newest_change = Some(received);
                if waiting {
                    retry_at = received;
                }
            }
        }
    }
    // A reload changed its settings, not its structure: the successor goes on from here.
    if stop.handing_over.load(std::sync::atomic::Ordering::SeqCst) && !changes.runner_stopped() {
        return sink.hand_over();
    }
    // A reload removed or changed the sink: it announces nothing any more (its successor,
    // if any, says what it does).
    if let Some(report) = report.filter(|_| !changes.runner_stopped()) {
        report(&lock(view).name, &[]);
    }
    if stop.on_stop == OnStop::Clear {
        // Only a stop that was asked for leaves anything to the service manager: after a
        // failure the node cannot check, and what it announced goes.
        let cleared = if changes.runner_stopped() && changes.stop_asked() {
            sink.clear_at_stop()
        } else {
            sink.clear()
        };
        if let Err(e) = cleared {
            log::warn!(
                "sink {}: could not clear on stop: {}",
                lock(view).name,
                crate::errors::chain(&e)
            );
        }
    }
    Handover::Nothing
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::ramp::FULL;

    fn model(endpoints: &[(&str, u32, u16)]) -> ProfileModel {
        ProfileModel {
            profile: "web".into(),
            endpoints: endpoints
                .iter()
                .enumerate()
                .map(|(i, (n, weight, ramp))| {
                    let mut s = EndpointState::tcp(format!("198.18.1.{}", i + 1).parse().unwrap(), 80, true);
                    (s.weight, s.ramp) = (*weight, *ramp);
                    (std::sync::Arc::from(*n), s)
                })
                .collect(),
            seq: 1,
        }
    }

    /// How many of the slots each endpoint takes, by its address's last byte.
    fn shares(model: &ProfileModel, slots: u32, held: &[Option<u8>]) -> (Vec<Option<u8>>, [u32; 4]) {
        let key = |s: &EndpointState| match s.address {
            std::net::IpAddr::V4(a) => a.octets()[3],
            std::net::IpAddr::V6(_) => unreachable!(),
        };
        let table: Vec<Option<u8>> = desired_slots(model, slots, |_| true, key, held)
            .into_iter()
            .map(|s| s.map(key))
            .collect();
        let mut counts = [0; 4];
        for k in table.iter().flatten() {
            counts[usize::from(*k)] += 1;
        }
        (table, counts)
    }

    #[test]
    fn a_ramping_endpoint_takes_its_share_of_its_weight_and_the_others_keep_their_slots() {
        let full = model(&[("a", 2, FULL), ("b", 1, FULL), ("c", 1, FULL)]);
        let (before, counts) = shares(&full, 1000, &[]);
        assert_eq!(counts, [0, 500, 250, 250]);
        // c at 10%: 0.1 of 1 against 2 and 1, so 1000 * 0.1 / 3.1 slots.
        let ramping = model(&[("a", 2, FULL), ("b", 1, FULL), ("c", 1, 100)]);
        let (during, counts) = shares(&ramping, 1000, &before);
        assert_eq!(counts, [0, 645, 323, 32]);
        // Only slots c gave up moved, and they went to the others.
        for (was, is) in before.iter().zip(&during) {
            if was != is {
                assert_eq!(*was, Some(3), "a slot of a or b moved");
            }
        }
        // Whole again: back to the configured shares, c taking slots from a and b only.
        let (after, counts) = shares(&full, 1000, &during);
        assert_eq!(counts, [0, 500, 250, 250]);
        for (was, is) in during.iter().zip(&after) {
            if was != is {
                assert_eq!(*is, Some(3), "only c takes slots back");
            }
        }
    }
}
